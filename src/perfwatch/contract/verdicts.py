"""Change-of-belief diffing and deterministic verdict ids (pure: no I/O, no clock).

A series' change points are compared with the ones last *published* for it:

- a change point at a run that had none published is **detected**;
- one published before and still found is silent unless its evidence changed
  materially (see `VerdictPolicy.materially_different`), then **updated**;
- one published before whose run no longer carries a change point is paired
  with an unmatched new change point at most `max_move` runs away with the same
  sign of change: it **moved** (an **updated** verdict with `previous`);
  otherwise it is **retracted**.

Because the comparison is against what was published, small drifts accumulate
until they are material, then one verdict reports them.

A verdict id hashes the kind, the series key and the evidence (change point
runs, rounded statistics, and the series length the belief is based on). It
does not depend on the clock or on which processor or delivery produced it, so
reprocessing a record from the same state yields the same id, and the store's
unique key on the id stops a second publication.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any, Final, Literal

import orjson

from perfwatch.contract.models import ChangePointEvidence, SeriesRef, Verdict

DETECTED: Final = "change_point.detected"
UPDATED: Final = "change_point.updated"
RETRACTED: Final = "change_point.retracted"
ChangeKind = Literal["change_point.detected", "change_point.updated", "change_point.retracted"]

_SIGNIFICANT_DIGITS = 6  # evidence is rounded so the id survives float formatting noise


@dataclass(frozen=True)
class VerdictPolicy:
    """What counts as a change of belief about a change point that is still there."""

    # A published change point found again within this many runs, with the same
    # sign of change, has moved (updated); further away it is retracted + detected.
    max_move: int = 5
    # The forward change differs materially when it moved by more than this
    # fraction of the published value and by more than change_abs_tolerance_pct.
    change_rel_tolerance: float = 0.25
    change_abs_tolerance_pct: float = 1.0
    # ... or the p-value moved by at least this many orders of magnitude, where
    # everything below pvalue_floor counts as pvalue_floor (certain is certain).
    pvalue_decades: float = 3.0
    pvalue_floor: float = 1e-9

    def materially_different(self, old: ChangePointEvidence, new: ChangePointEvidence) -> bool:
        change_delta = abs(new.forward_change_percent - old.forward_change_percent)
        if (
            change_delta > self.change_abs_tolerance_pct
            and change_delta > self.change_rel_tolerance * abs(old.forward_change_percent)
        ):
            return True
        if new.direction != old.direction:
            return True
        old_log = math.log10(max(old.pvalue, self.pvalue_floor))
        new_log = math.log10(max(new.pvalue, self.pvalue_floor))
        return abs(new_log - old_log) >= self.pvalue_decades


@dataclass(frozen=True)
class BeliefChange:
    """One verdict to emit: `current` is absent for a retraction, `previous` for a detection."""

    kind: ChangeKind
    current: ChangePointEvidence | None
    previous: ChangePointEvidence | None

    @property
    def index(self) -> int:
        located = self.current if self.current is not None else self.previous
        assert located is not None
        return located.index


def shift_after_insert(
    published: Sequence[ChangePointEvidence], position: int
) -> list[ChangePointEvidence]:
    """Published change points re-indexed after a run was inserted at `position`.

    Change point `index` is the first run after the change, so a run inserted
    at or before it pushes it one place on.
    """
    return [cp if cp.index < position else replace(cp, index=cp.index + 1) for cp in published]


def _sign(value: float) -> int:
    return (value > 0) - (value < 0)


def diff_change_points(
    published: Sequence[ChangePointEvidence],
    current: Sequence[ChangePointEvidence],
    policy: VerdictPolicy,
) -> tuple[list[BeliefChange], list[ChangePointEvidence]]:
    """The belief changes from `published` to `current`, and the new published list.

    Both lists must be indexed in the current series. In the new published
    list a change point that did not change materially keeps its published
    evidence (at its current index), so later drift is measured from it.
    """
    current_by_run = {cp.run_id: cp for cp in current}
    changes: list[BeliefChange] = []
    kept: dict[str, ChangePointEvidence] = {}
    unmatched_published = []
    for old in published:
        new = current_by_run.get(old.run_id)
        if new is None:
            unmatched_published.append(old)
        elif policy.materially_different(old, new):
            changes.append(BeliefChange(UPDATED, new, old))
            kept[new.run_id] = new
        else:
            kept[new.run_id] = replace(old, index=new.index)
    unmatched_current = [cp for cp in current if cp.run_id not in kept]

    # Pair moved change points, nearest first; ties broken by position for determinism.
    candidates = sorted(
        (abs(old.index - new.index), old.index, new.index, i, j)
        for i, old in enumerate(unmatched_published)
        for j, new in enumerate(unmatched_current)
        if abs(old.index - new.index) <= policy.max_move
        and _sign(old.forward_change_percent) == _sign(new.forward_change_percent)
    )
    paired_old: set[int] = set()
    paired_new: set[int] = set()
    for _, _, _, i, j in candidates:
        if i in paired_old or j in paired_new:
            continue
        paired_old.add(i)
        paired_new.add(j)
        new = unmatched_current[j]
        changes.append(BeliefChange(UPDATED, new, unmatched_published[i]))
        kept[new.run_id] = new
    for i, old in enumerate(unmatched_published):
        if i not in paired_old:
            changes.append(BeliefChange(RETRACTED, None, old))
    for j, new in enumerate(unmatched_current):
        if j not in paired_new:
            changes.append(BeliefChange(DETECTED, new, None))
            kept[new.run_id] = new

    changes.sort(key=lambda change: (change.index, change.kind))
    new_published = sorted(kept.values(), key=lambda cp: cp.index)
    return changes, new_published


def _rounded(value: float) -> float:
    return float(f"{value:.{_SIGNIFICANT_DIGITS}g}")


def _evidence(cp: ChangePointEvidence | None) -> list[Any] | None:
    if cp is None:
        return None
    return [
        cp.run_id,
        cp.index,
        cp.direction,
        _rounded(cp.forward_change_percent),
        _rounded(cp.pvalue),
        _rounded(cp.mean_before),
        _rounded(cp.mean_after),
    ]


def verdict_id(change: BeliefChange, series_key: str, series_length: int) -> str:
    """Hash of kind, series key and evidence; 32 hex digits."""
    payload = orjson.dumps(
        [
            change.kind,
            series_key,
            series_length,
            _evidence(change.current),
            _evidence(change.previous),
        ]
    )
    return hashlib.sha256(payload).hexdigest()[:32]


def make_verdict(
    change: BeliefChange,
    *,
    series: SeriesRef,
    series_key: str,
    series_length: int,
    record_run_id: str,
    parameters: Mapping[str, Any],
    emitted_at: datetime,
) -> Verdict:
    """The verdict document for one belief change."""
    return Verdict(
        verdict_id=verdict_id(change, series_key, series_length),
        kind=change.kind,
        emitted_at=emitted_at,
        series=series,
        record_run_id=record_run_id,
        parameters=dict(parameters),
        change_point=change.current,
        previous=change.previous,
    )
