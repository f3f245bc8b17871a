"""The episode rule: which later improvement fixes a regression (pure: numbers only).

A regression and the later improvement that brings the metric back to its old
level are one episode, fixed. "Back to its old level" means the level after
the improvement is no worse than the level before the regression by more than
the noise (the larger stddev of the segment before the regression and the
segment after the improvement) nor by more than `fix_share` of the
regression's step; a better level counts too. One improvement can close
several stacked regressions: the oldest open one whose level it restores and
every regression opened after it.

The dashboard (`dashboard.analysis`) and the verdict lifecycle
(`contract.verdicts.episodes_of`, hence `watch` and the webhook) both call
`regression_fixes`, so they tell the same episode story for the same change
points.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from perfwatch.contract.models import ChangePointEvidence

# An improvement back to within the noise and this share of a regression's step fixes it.
FIX_SHARE: Final = 0.5


@dataclass(frozen=True, slots=True)
class Level:
    """The numbers of a change point the rule reads, from its JSON fields
    (`ChangePointEvidence` has them as they are)."""

    index: int
    direction: str
    mean_before: float
    mean_after: float
    stddev_before: float
    stddev_after: float

    @classmethod
    def of(cls, change: Mapping[str, Any]) -> Level:
        return cls(
            int(change["index"]),
            str(change["direction"]),
            change["mean_before"],
            change["mean_after"],
            change["stddev_before"],
            change["stddev_after"],
        )


# A change point as the rule reads it.
LevelChange = Level | ChangePointEvidence


def _returns_to(regression: LevelChange, change: LevelChange, fix_share: float | None) -> bool:
    """Whether `change` brings the metric back to the level before `regression`
    (`fix_share` None: within the noise alone)."""
    old = regression.mean_before
    step = regression.mean_after - old
    worse_by = (change.mean_after - old) * (1.0 if step > 0 else -1.0)
    allowed = max(regression.stddev_before, change.stddev_after)
    if fix_share is not None:
        allowed = min(allowed, fix_share * abs(step))
    return worse_by <= allowed


def regression_fixes(
    changes: Sequence[LevelChange], fix_share: float | None = FIX_SHARE
) -> dict[int, int | None]:
    """Each regression's position in `changes` -> the position of the improvement
    that fixed it, or None while it is open; keys in the order of the runs."""
    fixed_by: dict[int, int | None] = {}
    opened: list[int] = []
    for position in sorted(range(len(changes)), key=lambda p: changes[p].index):
        change = changes[position]
        if change.direction == "regression":
            fixed_by[position] = None
            opened.append(position)
        elif change.direction == "improvement":
            first = next(
                (k for k, r in enumerate(opened) if _returns_to(changes[r], change, fix_share)),
                None,
            )
            if first is not None:
                for regression in opened[first:]:
                    fixed_by[regression] = position
                del opened[first:]
    return fixed_by
