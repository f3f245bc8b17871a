"""The life of a change point on the stream, and deterministic verdict ids (pure: no I/O, no clock).

A series' change points are compared with the *findings* last published for
it. A finding is a change point with an id that follows it as it moves, and a
state (docs/verdicts.md draws the machine):

- a change point at a run that had no finding is **detected** (state
  `detected`: on the full stream, not yet an alert);
- a detected finding that has stayed at its run for `confirm_runs` further runs
  and whose p-value is at most `confirm_max_pvalue` is **confirmed** (state
  `confirmed`: alerting consumers act on it), with its current evidence;
- a finding whose evidence differs materially from the last published
  (`VerdictPolicy.differences`: size, direction or p-value) is **updated**
  with the current evidence, naming what changed;
- a finding whose run no longer carries a change point is paired with an
  unmatched new change point at most `max_move` runs away with the same sign
  of change: it **moved** (an **updated** verdict with `previous`; a detected
  finding starts counting its stable runs again); otherwise it is
  **retracted**.

Because the comparison is against what was published, small drifts accumulate
until they are material, then one verdict reports them: the last published
evidence of every finding is never materially different from what an offline
analysis of the same history gives.

A verdict id hashes the kind, the series key and the evidence (change point
runs, rounded statistics, and the series length the belief is based on). It
does not depend on the clock or on which processor or delivery produced it, so
reprocessing a record from the same state yields the same id, and the store's
unique key on the id stops a second publication. A finding id hashes the
series key, the run and the series length at its detection.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any, Final, Literal

import orjson

from perfwatch.contract.episodes import FIX_SHARE, regression_fixes
from perfwatch.contract.models import ChangePointEvidence, SeriesRef, Verdict

INCIDENT_OPENED: Final = "incident.opened"
INCIDENT_UPDATED: Final = "incident.updated"
DETECTED: Final = "change_point.detected"
CONFIRMED: Final = "change_point.confirmed"
UPDATED: Final = "change_point.updated"
RETRACTED: Final = "change_point.retracted"
ChangeKind = Literal[
    "change_point.detected",
    "change_point.confirmed",
    "change_point.updated",
    "change_point.retracted",
]
IncidentKind = Literal["incident.opened", "incident.updated"]
FindingState = Literal["detected", "confirmed"]
# What an update changed: the run (moved), or the evidence materially.
Difference = Literal["moved", "size", "direction", "pvalue"]

_SIGNIFICANT_DIGITS = 6  # evidence is rounded so the id survives float formatting noise


@dataclass(frozen=True)
class VerdictPolicy:
    """When a finding is confirmed, and what counts as a change of belief about it."""

    # A published change point found again within this many runs, with the same
    # sign of change, has moved (updated); further away it is retracted + detected.
    max_move: int = 5
    # A detected finding is confirmed once it has stayed at its run for this many
    # further runs and its p-value is at most confirm_max_pvalue.
    confirm_runs: int = 5
    confirm_max_pvalue: float = 1e-6
    # The forward change differs materially when it moved by more than this
    # fraction of the published value and by more than change_abs_tolerance_pct.
    change_rel_tolerance: float = 0.1
    change_abs_tolerance_pct: float = 0.5
    # ... or the p-value moved by at least this many orders of magnitude, where
    # everything below pvalue_floor counts as pvalue_floor (certain is certain).
    pvalue_decades: float = 1.0
    pvalue_floor: float = 1e-9
    # An improvement after a regression that brings the level back to within this
    # share of the regression's step (and the noise) fixes it: one episode
    # (contract.episodes).
    fix_share: float = FIX_SHARE

    def differences(
        self, old: ChangePointEvidence, new: ChangePointEvidence
    ) -> tuple[Difference, ...]:
        """What differs materially from `old` to `new` ("size", "direction", "pvalue")."""
        found: list[Difference] = []
        change_delta = abs(new.forward_change_percent - old.forward_change_percent)
        if (
            change_delta > self.change_abs_tolerance_pct
            and change_delta > self.change_rel_tolerance * abs(old.forward_change_percent)
        ):
            found.append("size")
        if new.direction != old.direction:
            found.append("direction")
        old_log = math.log10(max(old.pvalue, self.pvalue_floor))
        new_log = math.log10(max(new.pvalue, self.pvalue_floor))
        if abs(new_log - old_log) >= self.pvalue_decades:
            found.append("pvalue")
        return tuple(found)

    def confirmable(self, finding: Finding, current: ChangePointEvidence, length: int) -> bool:
        return (
            length - finding.since >= self.confirm_runs
            and current.pvalue <= self.confirm_max_pvalue
        )


@dataclass(frozen=True)
class Finding:
    """A change point as last published, with its id and place in the lifecycle.

    `since` is the series length when it was detected or last moved: the runs
    it has been stable for are counted from there.
    """

    evidence: ChangePointEvidence
    finding_id: str
    state: FindingState
    since: int

    @property
    def index(self) -> int:
        return self.evidence.index

    def to_json(self) -> dict[str, Any]:
        return {
            **self.evidence.to_json(),
            "finding_id": self.finding_id,
            "state": self.state,
            "since": self.since,
        }

    @classmethod
    def from_json(cls, doc: Mapping[str, Any], series_key: str) -> Finding:
        evidence = ChangePointEvidence.from_json(doc)
        if "finding_id" not in doc:
            # Saved before findings had a lifecycle: it was alerted on as it was.
            return cls(evidence, finding_id(series_key, evidence.run_id, 0), "confirmed", 0)
        return cls(evidence, doc["finding_id"], doc["state"], doc["since"])


def finding_id(series_key: str, run_id: str, length: int) -> str:
    """Hash of the series key, the run and the series length at detection; 32 hex digits."""
    return hashlib.sha256(orjson.dumps(["finding", series_key, run_id, length])).hexdigest()[:32]


@dataclass(frozen=True)
class BeliefChange:
    """One verdict to emit: `current` is absent for a retraction, `previous` for a detection.

    `finding` is the finding after the change (as it was, for a retraction).
    """

    kind: ChangeKind
    current: ChangePointEvidence | None
    previous: ChangePointEvidence | None
    finding: Finding | None = None
    changed: tuple[Difference, ...] = ()  # of an update

    @property
    def index(self) -> int:
        located = self.current if self.current is not None else self.previous
        assert located is not None
        return located.index


def shift_after_insert(findings: Sequence[Finding], position: int) -> list[Finding]:
    """Findings re-indexed after a run was inserted at `position`.

    Change point `index` is the first run after the change, so a run inserted
    at or before it pushes it one place on.
    """
    return [
        f if f.index < position else replace(f, evidence=replace(f.evidence, index=f.index + 1))
        for f in findings
    ]


def _moved(moved: bool) -> tuple[Difference, ...]:
    return ("moved",) if moved else ()


def _sign(value: float) -> int:
    return (value > 0) - (value < 0)


def advance_findings(
    findings: Sequence[Finding],
    current: Sequence[ChangePointEvidence],
    policy: VerdictPolicy,
    *,
    series_key: str,
    length: int,
) -> tuple[list[BeliefChange], list[Finding]]:
    """The belief changes from `findings` to the change points `current` of a
    series of `length` runs, and the new findings.

    Both lists must be indexed in the current series. A finding whose change
    point did not change materially keeps its published evidence (at its
    current index), so later drift is measured from it.
    """
    current_by_run = {cp.run_id: cp for cp in current}
    changes: list[BeliefChange] = []
    kept: dict[str, Finding] = {}
    unmatched: list[Finding] = []

    def stays(old: Finding, new: ChangePointEvidence, moved: bool) -> None:
        since = length if moved and old.state == "detected" else old.since
        finding = replace(old, since=since)
        if old.state == "detected" and not moved and policy.confirmable(finding, new, length):
            finding = replace(finding, evidence=new, state="confirmed")
            changes.append(BeliefChange(CONFIRMED, new, old.evidence, finding))
        elif changed := _moved(moved) + policy.differences(old.evidence, new):
            finding = replace(finding, evidence=new)
            changes.append(BeliefChange(UPDATED, new, old.evidence, finding, changed))
        else:
            finding = replace(finding, evidence=replace(old.evidence, index=new.index))
        kept[new.run_id] = finding

    for old in findings:
        new = current_by_run.get(old.evidence.run_id)
        if new is None:
            unmatched.append(old)
        else:
            stays(old, new, moved=False)
    unmatched_current = [cp for cp in current if cp.run_id not in kept]

    # Pair moved change points, nearest first; ties broken by position for determinism.
    candidates = sorted(
        (abs(old.index - new.index), old.index, new.index, i, j)
        for i, old in enumerate(unmatched)
        for j, new in enumerate(unmatched_current)
        if abs(old.index - new.index) <= policy.max_move
        and _sign(old.evidence.forward_change_percent) == _sign(new.forward_change_percent)
    )
    paired_old: set[int] = set()
    paired_new: set[int] = set()
    for _, _, _, i, j in candidates:
        if i in paired_old or j in paired_new:
            continue
        paired_old.add(i)
        paired_new.add(j)
        stays(unmatched[i], unmatched_current[j], moved=True)
    for i, old in enumerate(unmatched):
        if i not in paired_old:
            changes.append(BeliefChange(RETRACTED, None, old.evidence, old))
    for j, new in enumerate(unmatched_current):
        if j not in paired_new:
            finding = Finding(new, finding_id(series_key, new.run_id, length), "detected", length)
            if policy.confirm_runs == 0 and new.pvalue <= policy.confirm_max_pvalue:
                finding = replace(finding, state="confirmed")
            changes.append(BeliefChange(DETECTED, new, None, finding))
            kept[new.run_id] = finding

    changes.sort(key=lambda change: (change.index, change.kind))
    return changes, sorted(kept.values(), key=lambda f: f.index)


@dataclass(frozen=True)
class Episodes:
    """A series' regression episodes: each regression finding and the finding that
    brought the level back, if one did; and the series' status from them."""

    by_finding: dict[str, dict[str, Any]]  # finding id -> its episode block
    status: dict[str, Any]


def _place(finding: Finding) -> dict[str, Any]:
    e = finding.evidence
    return {
        "finding_id": finding.finding_id,
        "index": e.index,
        "run_id": e.run_id,
        **({"commit": e.commit} if e.commit else {}),
        "forward_change_percent": e.forward_change_percent,
    }


def episodes_of(findings: Sequence[Finding], policy: VerdictPolicy) -> Episodes:
    """A regression and the later improvement that brings the level back are one
    episode, fixed, by the episode rule (`contract.episodes`); a regression
    without one is open. The status is the worst (largest) open regression, not
    the latest change. A fix that closes stacked regressions carries the episode
    of the oldest."""
    ordered = sorted(findings, key=lambda f: f.index)
    fixed_by = regression_fixes([f.evidence for f in ordered], policy.fix_share)
    by_finding: dict[str, dict[str, Any]] = {}
    open_regressions = []
    for position, fix in fixed_by.items():
        finding = ordered[position]
        episode: dict[str, Any] = {"state": "open", "regression": _place(finding)}
        if fix is None:
            open_regressions.append(finding)
        else:
            episode = {**episode, "state": "fixed", "fix": _place(ordered[fix])}
            by_finding.setdefault(ordered[fix].finding_id, episode)
        by_finding[finding.finding_id] = episode
    if not open_regressions:
        return Episodes(by_finding, {"state": "clear"})
    worst = max(open_regressions, key=lambda f: (abs(f.evidence.forward_change_percent), f.index))
    return Episodes(by_finding, {"state": "regressed", "worst": _place(worst)})


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
    episodes: Episodes | None = None,
) -> Verdict:
    """The verdict document for one belief change; `episodes`: the series' after it."""
    finding = change.finding
    episode = None
    if episodes is not None and finding is not None and change.kind != RETRACTED:
        episode = episodes.by_finding.get(finding.finding_id)
    return Verdict(
        verdict_id=verdict_id(change, series_key, series_length),
        kind=change.kind,
        emitted_at=emitted_at,
        series=series,
        record_run_id=record_run_id,
        parameters=dict(parameters),
        change_point=change.current,
        previous=change.previous,
        finding=None if finding is None else _finding_block(change, series_length),
        episode=episode,
        series_status=None if episodes is None else episodes.status,
    )


def _finding_block(change: BeliefChange, series_length: int) -> dict[str, Any]:
    """The finding's id and state after the change; `confirmed`: alerting consumers show it."""
    finding = change.finding
    assert finding is not None
    block: dict[str, Any] = {
        "id": finding.finding_id,
        "state": "retracted" if change.kind == RETRACTED else finding.state,
        "confirmed": finding.state == "confirmed",
        "stable_runs": series_length - finding.since,
    }
    if change.changed:
        block["changed"] = list(change.changed)
    commit = finding.evidence.commit
    if finding.state == "confirmed" and commit:
        block["incident"] = incident_id(commit)
    return block


def incident_id(commit: str) -> str:
    """The incident of every confirmed finding at a commit; 32 hex digits."""
    return hashlib.sha256(orjson.dumps(["incident", commit])).hexdigest()[:32]


def joins_incident(change: BeliefChange) -> ChangePointEvidence | None:
    """The evidence a change brings into its commit's incident: a finding confirmed
    now, or a confirmed one that moved (to another run, so maybe another commit)."""
    finding = change.finding
    if finding is None or finding.state != "confirmed" or change.current is None:
        return None
    if change.kind in (DETECTED, CONFIRMED) or "moved" in change.changed:
        return change.current
    return None


def leaves_incident(change: BeliefChange) -> ChangePointEvidence | None:
    """The evidence a change takes out of its commit's incident: a confirmed
    finding retracted or moved away."""
    finding = change.finding
    confirmed_before = (
        finding is not None
        and finding.state == "confirmed"
        and (change.kind == RETRACTED or "moved" in change.changed)
    )
    return change.previous if confirmed_before else None


def commit_line(attributes: Mapping[str, str]) -> str | None:
    """The line of commits a series' runs are placed on by time: its `branch`, within
    its `repository` when the series names one (an identifying attribute then), so
    that repositories publishing to one topic do not share a "main"."""
    branch = attributes.get("branch")
    repository = attributes.get("repository")
    if repository is None:
        return branch
    return f"{repository} {branch or ''}"  # a git branch name holds no space


@dataclass(frozen=True)
class CommitRange:
    """The commits a finding's change may have come in: those after `after`, the
    commit of the series' last run before the change, up to and including `last`,
    the commit of its first changed run (git's `after..last`).

    Commits have no order of their own: a commit is placed by the runs that
    carry it, at their timestamps (`after_time`, `last_time`: epoch seconds of
    the series' two runs). A series that skipped commits has a range spanning
    them. Time places commits on one branch only (`branch`, the series' `commit_line`;
    None when series name none): runs of two branches, or of two repositories, in
    the same hour are no neighbours in any history.
    """

    last: str
    last_time: float
    after: str | None = None
    after_time: float | None = None
    branch: str | None = None

    def holds(self, commit: str, time: float, branch: str | None = None) -> bool:
        """Whether a commit, run at `time` on `branch`, lies in the range: `last` does,
        `after` does not, and any other commit run on the range's branch after the run
        before the change and no later than the first changed run."""
        if commit == self.last:
            return True
        if commit == self.after or self.after_time is None or branch != self.branch:
            return False
        return self.after_time < time <= self.last_time

    def overlaps(self, other: CommitRange) -> bool:
        # Two ranges share a commit when the last commit of one lies in the other.
        return self.holds(other.last, other.last_time, other.branch) or other.holds(
            self.last, self.last_time, self.branch
        )

    def to_json(self) -> dict[str, str]:
        """The range a verdict shows: `{"after": ..., "last": ...}`."""
        return {"after": self.after, "last": self.last} if self.after else {"last": self.last}

    def to_state(self) -> list[Any]:
        return [self.last, self.last_time, self.after, self.after_time, self.branch]

    @classmethod
    def from_state(cls, state: Sequence[Any]) -> CommitRange:
        # stored before branches: four items, and no branch
        last, last_time, after, after_time, *branch = state
        return cls(last, last_time, after, after_time, branch[0] if branch else None)


def overlapping_groups(ranges: Mapping[str, CommitRange], seeds: Iterable[str]) -> list[list[str]]:
    """The groups of `ranges` (finding id -> range) joined by overlaps, directly or
    through other ranges, that hold a seed; each sorted, in order of their first id."""
    seen: set[str] = set()
    groups = []
    for seed in sorted(seeds):
        if seed in seen or seed not in ranges:
            continue
        seen.add(seed)
        group = [seed]
        for member in group:  # grows while it is walked
            for other, span in ranges.items():
                if other not in seen and ranges[member].overlaps(span):
                    seen.add(other)
                    group.append(other)
        groups.append(sorted(group))
    return groups


def incident_commit(ranges: Iterable[CommitRange]) -> str:
    """The commit an incident is named after: the earliest `last` of its members
    (by the time of its run, then by name)."""
    return min((span.last_time, span.last) for span in ranges)[1]


def spanned(ranges: Iterable[CommitRange]) -> dict[str, str]:
    """The range covering every member's range: the earliest `after`, the latest `last`."""
    spans = list(ranges)
    last = max((span.last_time, span.last) for span in spans)[1]
    afters = [(span.after_time, span.after) for span in spans if span.after_time is not None]
    after = min(afters)[1] if afters else None
    return {"after": after, "last": last} if after else {"last": last}


@dataclass(frozen=True)
class Incident:
    """The confirmed findings whose commit ranges overlap: one alert, not one per series.

    `commit` names it (`incident_commit`); `members` maps a finding id to its
    member block (series, run, commit range, change, direction); `commit_range`
    covers the members' ranges.
    """

    commit: str
    members: dict[str, dict[str, Any]]
    commit_range: dict[str, str] | None = None

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> Incident:
        return cls(doc["commit"], dict(doc["members"]), doc.get("commit_range"))

    def to_json(self) -> dict[str, Any]:
        doc: dict[str, Any] = {"commit": self.commit, "members": self.members}
        if self.commit_range is not None:
            doc["commit_range"] = self.commit_range
        return doc

    @staticmethod
    def member(
        series: SeriesRef,
        finding_id: str,
        cp: ChangePointEvidence,
        episode: Mapping[str, Any] | None = None,
        commit_range: CommitRange | None = None,
    ) -> dict[str, Any]:
        """A member's block; `fixes`: the regression it fixes, from its episode."""
        fixed = episode is not None and episode.get("fix", {}).get("finding_id") == finding_id
        return {
            **series.to_json(),
            "finding_id": finding_id,
            "run_id": cp.run_id,
            **({"commit_range": commit_range.to_json()} if commit_range is not None else {}),
            "forward_change_percent": cp.forward_change_percent,
            "direction": cp.direction,
            **({"fixes": episode["regression"]} if fixed and episode is not None else {}),
        }

    def block(
        self, joined: Sequence[str], left: Sequence[str], merged_into: Incident | None = None
    ) -> dict[str, Any]:
        ordered = sorted(
            self.members.values(),
            key=lambda m: (m["test"], m.get("metric", ""), sorted(m["attributes"].items())),
        )
        into = None
        if merged_into is not None:
            into = {"id": incident_id(merged_into.commit), "commit": merged_into.commit}
        return {
            "id": incident_id(self.commit),
            "commit": self.commit,
            **({"commit_range": self.commit_range} if self.commit_range else {}),
            "members": ordered,
            **({"joined": sorted(joined)} if joined else {}),
            **({"left": sorted(left)} if left else {}),
            **({"merged_into": into} if into else {}),
        }


def incident_verdict(
    incident: Incident,
    *,
    opened: bool,
    joined: Sequence[str],
    left: Sequence[str],
    series: SeriesRef,
    record_run_id: str,
    emitted_at: datetime,
    merged_into: Incident | None = None,
) -> Verdict:
    """The incident event after findings joined or left it (or it was merged into
    another); its id hashes the kind, the incident, its members' findings and
    rounded changes, the incident it was merged into, and the record and series
    that caused it (a finding that flaps between two incidents repeats an event,
    which must not look like a redelivery)."""
    block = incident.block(joined, left, merged_into)
    kind: IncidentKind = INCIDENT_OPENED if opened else INCIDENT_UPDATED
    evidence = [
        [m["finding_id"], m["direction"], _rounded(m["forward_change_percent"])]
        for m in block["members"]
    ]
    hashed = [
        kind,
        block["id"],
        evidence,
        block.get("joined"),
        block.get("left"),
        block.get("merged_into"),
        record_run_id,
        series.to_json(),
    ]
    return Verdict(
        verdict_id=hashlib.sha256(orjson.dumps(hashed)).hexdigest()[:32],
        kind=kind,
        emitted_at=emitted_at,
        series=series,
        record_run_id=record_run_id,
        parameters={},
        incident=block,
    )


SUSPECTED: Final = "change_point.suspected"
WITHDRAWN: Final = "change_point.withdrawn"
SuspicionKind = Literal["change_point.suspected", "change_point.withdrawn"]


def suspicion_id(series_key: str, run_id: str, length: int) -> str:
    """Hash of the series key, the run that opened the suspicion and the series
    length then; 32 hex digits."""
    return hashlib.sha256(orjson.dumps(["suspicion", series_key, run_id, length])).hexdigest()[:32]


def suspicion_verdict_id(kind: SuspicionKind, series_key: str, suspicion: str, length: int) -> str:
    """Hash of the kind, the series key, the suspicion's id and the series length;
    32 hex digits."""
    payload = orjson.dumps([kind, series_key, suspicion, length])
    return hashlib.sha256(payload).hexdigest()[:32]
