"""The E-Divisive record handler: series histories in, change-of-belief verdicts out.

For each metric of a record: insert the value into its series at its place
(timestamp, then arrival; a run id already there changes nothing), move the
series' incremental analyzer forward from its saved state, and advance the
series' findings (contract.verdicts: detected, confirmed, updated, retracted)
to the change points it now reports.  With `verdicts.early_warning`, a new run
far outside its segment (detectors.early_warning) is published at once as a
suspicion, withdrawn when the next run is back, or named by the detection that
settles it; the open suspicion is kept in the store with the series.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any, NamedTuple

import numpy as np
import orjson

from perfwatch.config import Config
from perfwatch.contract.models import ChangePointEvidence, Record, SeriesRef, Verdict
from perfwatch.contract.timestamps import format_rfc3339, parse_rfc3339
from perfwatch.contract.verdicts import (
    DETECTED,
    SUSPECTED,
    WITHDRAWN,
    BeliefChange,
    CommitRange,
    Finding,
    Incident,
    SuspicionKind,
    advance_findings,
    commit_line,
    episodes_of,
    incident_commit,
    incident_verdict,
    joins_incident,
    leaves_incident,
    make_verdict,
    overlapping_groups,
    shift_after_insert,
    spanned,
    suspicion_id,
    suspicion_verdict_id,
)
from perfwatch.detectors.analyzer import SeriesAnalyzer
from perfwatch.detectors.early_warning import EarlyWarning
from perfwatch.detectors.edivisive import ChangePoint, EDivisiveParams, classify_direction
from perfwatch.state import Point, SeriesKey, SeriesState, StoreTransaction

# An incident (JSON) by the commit it is named after.
INCIDENT_NAMESPACE = "incident"
# The confirmed findings' commit ranges and the incident each is in (one JSON
# document), for finding the incidents a range overlaps.
INCIDENT_RANGES_NAMESPACE = "incident-ranges"
RANGES_KEY = "confirmed"
# Closed incidents, out of the ranges document so it stays as small as the incidents
# still open: their members' ranges by incident commit, and each member's incident.
CLOSED_INCIDENT_NAMESPACE = "incident-closed"
CLOSED_FINDING_NAMESPACE = "incident-closed-finding"
# Written before the ranges are read: the row lock it takes (PostgreSQL) makes
# processors that change incidents take turns.
INCIDENT_LOCK_NAMESPACE = "incident-lock"
# A series' open suspicion (JSON), or empty when none is open.
SUSPICION_NAMESPACE = "suspicion"

# Decoded analyzers kept between records (LRU); a series' saved state is
# decoded again only when another processor changed it or it was evicted.
MAX_CACHED_ANALYZERS = 50_000


class RunInfo(NamedTuple):
    """The record's place in time, shared by all its metrics."""

    timestamp: float  # epoch seconds: the ordering key
    time: str  # RFC 3339


class IncidentMove(NamedTuple):
    """A belief change of a series, which may move its finding in or out of an incident."""

    series: SeriesRef
    series_id: int
    change: BeliefChange
    episode: dict[str, Any] | None  # the finding's regression episode, if any


class Added(NamedTuple):
    """A metric value that entered its series."""

    metric: str
    series: SeriesState
    position: int
    length_before: int


def _fresh(entry: tuple[int, SeriesAnalyzer] | None, series: SeriesState) -> bool:
    """Whether a cached analyzer is the one saved with the series' current version."""
    return entry is not None and entry[0] == series.version


def series_key(record: Record, metric: str, identifying: tuple[str, ...]) -> SeriesKey:
    """Test + metric + the identifying attributes the record has ("branch" is a field)."""
    attributes = {}
    for name in identifying:
        value = record.branch if name == "branch" else record.attributes.get(name)
        if value is not None:
            attributes[name] = value
    return SeriesKey.of(record.test, metric, attributes)


class ChangePointHandler:
    def __init__(self, config: Config) -> None:
        self._config = config
        self._policy = config.verdicts.policy()
        # configured setting -> parameters and their dict form (asdict is slow).
        self._params: dict[tuple[tuple[str, Any], ...], tuple[EDivisiveParams, dict[str, Any]]]
        self._params = {}
        self._params_by_series: dict[tuple[str, str], tuple[EDivisiveParams, dict[str, Any]]] = {}
        self._analyzers: dict[int, tuple[int, SeriesAnalyzer]] = {}
        self._incident_open_s = config.verdicts.incident_open_days * 86400.0

    def prepare(self, records: Sequence[Record], tx: StoreTransaction) -> None:
        identifying = self._config.series.identifying_attributes
        tx.lock_series(
            [
                series_key(record, metric, identifying)
                for record in records
                for metric in record.metrics
            ]
        )

    def handle(
        self,
        record: Record,
        tx: StoreTransaction,
        emitted_at: datetime,
        earlier: Sequence[Verdict] = (),
    ) -> list[Verdict]:
        identifying = self._config.series.identifying_attributes
        metrics = sorted(record.metrics)
        keys = {metric: series_key(record, metric, identifying) for metric in metrics}
        locked = tx.lock_series(list(keys.values()))
        run = RunInfo(record.timestamp.timestamp(), format_rfc3339(record.timestamp))
        items = [
            (
                locked[keys[metric]],
                Point(record.run_id, record.metrics[metric].value, run.timestamp,
                      record.commit, run.time),
            )
            for metric in metrics
        ]  # fmt: skip
        lengths_before = [series.length for series, _ in items]
        positions = tx.add_points(items)
        added = [
            Added(metric, series, position, length_before)
            for metric, (series, _), position, length_before in zip(
                metrics, items, positions, lengths_before, strict=True
            )
            if position is not None  # None: the run is there already (redelivery, replay)
        ]
        if not added:
            return []
        analyzers = self._advance(record, added, tx)
        verdicts: list[Verdict] = []
        moves: list[IncidentMove] = []
        pairs = list(zip(added, analyzers, strict=True))
        for change, analyzer in pairs:
            beliefs = self._beliefs(record, change, analyzer, tx, emitted_at, moves)
            if self._config.verdicts.early_warning:
                beliefs = self._suspicions(record, change, analyzer, tx, beliefs, emitted_at)
            verdicts.extend(beliefs)
        incidents, joined = self.incidents(record.run_id, moves, tx, emitted_at)
        verdicts = [_with_commit_range(verdict, joined) for verdict in verdicts]
        verdicts.extend(incidents)
        tx.save_series(
            [(change.series, analyzer.to_bytes(with_values=False)) for change, analyzer in pairs]
        )
        for change, analyzer in pairs:
            self._cache_after_commit(tx, change.series, analyzer)
        return verdicts

    def params_for(self, test: str, metric: str) -> tuple[EDivisiveParams, dict[str, Any]]:
        """The series' parameters and their dict form, built once per distinct setting."""
        known = self._params_by_series.get((test, metric))
        if known is not None:
            return known
        configured = self._config.analyzer_params_for(test, metric)
        setting = tuple(sorted(configured.items()))
        known = self._params.get(setting)
        if known is None:
            params = EDivisiveParams.from_dict(configured)
            known = self._params[setting] = (params, params.to_dict())
        if len(self._params_by_series) >= MAX_CACHED_ANALYZERS:
            self._params_by_series.clear()
        self._params_by_series[test, metric] = known
        return known

    def _advance(
        self, record: Record, added: list[Added], tx: StoreTransaction
    ) -> list[SeriesAnalyzer]:
        """Each touched series' analyzer with the record's value in place."""
        # Taken out of the cache: if the transaction rolls back, a mutated
        # analyzer must not be found again.
        cached = {a.series.series_id: self._analyzers.pop(a.series.series_id, None) for a in added}
        current = {a.metric: self.params_for(record.test, a.metric) for a in added}
        to_load = [
            a.series.series_id
            for a in added
            if a.series.analyzer_params == current[a.metric][1]
            and not _fresh(cached[a.series.series_id], a.series)
        ]
        states = tx.analyzer_states(to_load)
        # The values of every series analysed from its stored points: a state
        # is saved without them (the points table has them).
        to_read = [
            a.series.series_id
            for a in added
            if a.series.series_id in states or a.series.analyzer_params != current[a.metric][1]
        ]
        stored_values = tx.series_values(to_read)
        analyzers = []
        for a in added:
            params, params_dict = current[a.metric]
            series = a.series
            entry = cached[series.series_id]
            if series.analyzer_params != params_dict:
                # A new series, or its parameters changed in the configuration:
                # analyse its whole history (new point included) once.
                analyzer = SeriesAnalyzer(params)
                analyzer.append(stored_values[series.series_id])
            else:
                if entry is not None and _fresh(entry, series):
                    analyzer = entry[1]
                elif series.series_id in states:
                    # The points table already holds the new value: restore the
                    # state saved before it, then place the value as usual.
                    values = stored_values[series.series_id]
                    before = np.delete(values, a.position)
                    analyzer = SeriesAnalyzer.from_bytes(states[series.series_id], before)
                else:
                    raise RuntimeError(f"series {series.key.canonical} has parameters, no state")
                value = record.metrics[a.metric].value
                if a.position == series.length - 1:
                    analyzer.append([value])
                else:
                    analyzer.insert(a.position, [value])
            analyzers.append(analyzer)
        return analyzers

    def _beliefs(
        self,
        record: Record,
        added: Added,
        analyzer: SeriesAnalyzer,
        tx: StoreTransaction,
        emitted_at: datetime,
        moves: list[IncidentMove],
    ) -> list[Verdict]:
        """Advance the series' findings to the analyzer's change points; the verdicts."""
        series = added.series
        series.analyzer_params = self.params_for(record.test, added.metric)[1]
        if not series.published and not analyzer.change_points_:
            return []  # the common case: no change point before or now
        key = series.key.canonical
        findings = [Finding.from_json(doc, key) for doc in series.published]
        if added.position < added.length_before:
            findings = shift_after_insert(findings, added.position)
        direction = self._direction(record, added.metric)
        current = self._evidence(analyzer.change_points_, findings, series, tx, direction)
        changes, findings = advance_findings(
            findings, current, self._policy, series_key=key, length=series.length
        )
        series.published = [finding.to_json() for finding in findings]
        if not changes:
            return []  # the usual case for a series with change points: nothing new
        ref = SeriesRef(record.test, added.metric, dict(series.key.attributes))
        episodes = episodes_of(findings, self._policy)
        moves.extend(
            IncidentMove(
                ref, series.series_id, change, episodes.by_finding.get(change.finding.finding_id)
            )
            for change in changes
            if change.finding is not None
        )
        return [
            make_verdict(
                change,
                series=ref,
                series_key=key,
                series_length=series.length,
                record_run_id=record.run_id,
                parameters=series.analyzer_params,
                emitted_at=emitted_at,
                episodes=episodes,
            )
            for change in changes
        ]

    def _direction(self, record: Record, metric: str) -> str | None:
        """Whether the metric is better lower or higher: the record says, else the config."""
        return record.metrics[metric].direction or self._config.direction_for(metric)

    def _suspicions(
        self,
        record: Record,
        added: Added,
        analyzer: SeriesAnalyzer,
        tx: StoreTransaction,
        beliefs: list[Verdict],
        emitted_at: datetime,
    ) -> list[Verdict]:
        """Open, keep, settle or withdraw the series' suspicion at the new run.

        `beliefs` are the series' change-point verdicts of this record: a
        detection at most `max_move` runs from the suspected run settles it and
        names it (its `suspicion` block).
        """
        series = added.series
        key = series.key.canonical
        stored = tx.get_blob(SUSPICION_NAMESPACE, key)
        suspicion: dict[str, Any] | None = orjson.loads(stored) if stored else None
        values = analyzer.values_
        newest = values.shape[0] - 1
        if added.position != newest:
            # a late run: it is judged by E-Divisive only, and moves what follows it
            if suspicion is not None and added.position <= suspicion["start"]:
                suspicion["start"] += 1
                suspicion["index"] += 1
                tx.put_blob(SUSPICION_NAMESPACE, key, orjson.dumps(suspicion))
            return beliefs
        if suspicion is not None:
            max_move = self._config.verdicts.max_move
            settled = [
                i
                for i, verdict in enumerate(beliefs)
                if verdict.kind == DETECTED
                and verdict.change_point is not None
                and abs(verdict.change_point.index - suspicion["index"]) <= max_move
            ]
            if settled:
                tx.put_blob(SUSPICION_NAMESPACE, key, b"")
                i = settled[0]
                beliefs[i] = replace(beliefs[i], suspicion={**suspicion, "state": "settled"})
                return beliefs
        start = suspicion["start"] if suspicion is not None else max(newest - 1, 0)
        segment_start = max(
            (cp.index for cp in analyzer.change_points_ if cp.index <= start), default=0
        )
        detector = EarlyWarning(
            false_alarm_rate=self._config.verdicts.early_warning_false_alarm_rate
        )
        assessment = detector.fit(values[segment_start:start]).assess(values[start:])

        def verdict(kind: SuspicionKind, block: dict[str, Any]) -> Verdict:
            return Verdict(
                verdict_id=suspicion_verdict_id(kind, key, block["id"], series.length),
                kind=kind,
                emitted_at=emitted_at,
                series=SeriesRef(record.test, added.metric, dict(series.key.attributes)),
                record_run_id=record.run_id,
                parameters=dict(series.analyzer_params or {}),
                suspicion=block,
            )

        if suspicion is not None:
            if assessment.state == "suspected":
                return beliefs  # still out on its side
            tx.put_blob(SUSPICION_NAMESPACE, key, b"")
            block = {
                **suspicion,
                "state": "withdrawn",
                "withdrawn_run_id": record.run_id,
                "withdrawn_z": _finite(assessment.z[-1]),
            }
            return [*beliefs, verdict(WITHDRAWN, block)]
        if assessment.state != "suspected" or newest - start not in assessment.runs:
            return beliefs
        opened = start + assessment.runs[0]
        if opened == newest:
            run_id = record.run_id
        else:
            (point,) = tx.points(series.series_id, opened, opened + 1)
            run_id = point.run_id
        center = assessment.center
        percent = 100.0 * (float(values[newest]) - center) / abs(center) if center else math.nan
        block = {
            "id": suspicion_id(key, run_id, series.length),
            "state": "suspected",
            "start": opened,
            "index": opened,
            "run_id": run_id,
            "rule": assessment.rule,
            "change": assessment.direction,
            "direction": classify_direction(percent, self._direction(record, added.metric)),
            "forward_change_percent": _finite(percent),
            "z": [_finite(assessment.z[i]) for i in assessment.runs],
            "p": assessment.p,
            "segment": {
                "start": segment_start,
                "runs": assessment.n_segment,
                "center": assessment.center,
                "scale": assessment.scale,
                "scale_up": assessment.scale_up,
                "scale_down": assessment.scale_down,
                "tail_df_up": _finite(assessment.tail_df_up),
                "tail_df_down": _finite(assessment.tail_df_down),
            },
            "single_limit": assessment.single_limit,
            "pair_limit": assessment.pair_limit,
            "false_alarm_rate": detector.false_alarm_rate,
        }
        tx.put_blob(SUSPICION_NAMESPACE, key, orjson.dumps(block))
        return [*beliefs, verdict(SUSPECTED, block)]

    def incidents(
        self,
        record_run_id: str,
        moves: Sequence[IncidentMove],
        tx: StoreTransaction,
        emitted_at: datetime,
    ) -> tuple[list[Verdict], dict[str, CommitRange]]:
        """Confirmed findings join the incident of the findings their commit ranges
        overlap, retracted or moved ones leave theirs: one incident verdict per
        incident whose members changed, and the ranges of the findings that joined.

        The incidents touched are formed afresh from the confirmed findings'
        ranges (`overlapping_groups`), each named after its earliest commit, so
        they depend on the set of findings, not on the order they came in.
        """
        coming: dict[str, IncidentMove] = {}
        going: dict[str, str] = {}  # finding id -> the commit it was at
        causes: list[tuple[str, SeriesRef]] = []
        for move in moves:
            finding = move.change.finding
            assert finding is not None
            causes.append((finding.finding_id, move.series))
            gone = leaves_incident(move.change)
            if gone is not None and gone.commit:
                going[finding.finding_id] = gone.commit
            came = joins_incident(move.change)
            if came is not None and came.commit:
                coming[finding.finding_id] = move
        if not coming and not going:
            return [], {}
        tx.put_blob(INCIDENT_LOCK_NAMESPACE, RANGES_KEY, b"")
        stored = tx.get_blob(INCIDENT_RANGES_NAMESPACE, RANGES_KEY)
        saved = orjson.loads(stored) if stored else {}
        named = {finding_id: entry[0] for finding_id, entry in saved.items()}
        ranges = {f: CommitRange.from_state(entry[1:]) for f, entry in saved.items()}
        joining = {f: self._commit_range(move, tx) for f, move in coming.items()}
        for commit, reopened in _reopen(tx, going, joining).items():
            ranges.update(reopened)
            named.update(dict.fromkeys(reopened, commit))
        for finding_id in going.keys() | coming.keys():
            ranges.pop(finding_id, None)
        ranges.update(joining)
        commits = {named[f] for f in going.keys() | coming.keys() if f in named}
        commits |= set(going.values()) | {span.last for span in joining.values()}
        before = {commit: _stored_incident(tx, commit) for commit in commits}
        for commit, incident in before.items():
            for finding_id in incident.members.keys() - named.keys() - going.keys() - coming.keys():
                # a member of an incident stored before commit ranges: at its
                # commit only, placed before every run (it keeps the incident's name)
                ranges[finding_id] = CommitRange(commit, 0.0)
                named[finding_id] = commit
        seeds = {f for incident in before.values() for f in incident.members if f in ranges}
        groups = overlapping_groups(ranges, seeds | coming.keys())
        for commit in {named[f] for group in groups for f in group if f in named} - before.keys():
            before[commit] = _stored_incident(tx, commit)
        after: dict[str, Incident] = {}
        for group in groups:
            commit = incident_commit(ranges[f] for f in group)
            members = {}
            for finding_id in group:
                joiner = coming.get(finding_id)
                if joiner is None:
                    members[finding_id] = before[named[finding_id]].members[finding_id]
                else:
                    assert joiner.change.current is not None
                    members[finding_id] = Incident.member(
                        joiner.series, finding_id, joiner.change.current, joiner.episode,
                        ranges[finding_id],
                    )  # fmt: skip
            after[commit] = Incident(commit, members, spanned(ranges[f] for f in group))
            for finding_id in group:
                named[finding_id] = commit
        for commit in after.keys() - before.keys():
            before[commit] = _stored_incident(tx, commit)
        for commit, closing in self._closing(ranges, named).items():
            _close(tx, commit, {f: ranges.pop(f) for f in closing})
        tx.put_blob(
            INCIDENT_RANGES_NAMESPACE,
            RANGES_KEY,
            orjson.dumps({f: [named[f], *span.to_state()] for f, span in sorted(ranges.items())}),
        )
        verdicts = []
        for commit in sorted(before):
            old = before[commit]
            new = after.get(commit, Incident(commit, {}, old.commit_range))
            if new.members == old.members:
                continue
            tx.put_blob(INCIDENT_NAMESPACE, commit, orjson.dumps(new.to_json()))
            # emptied: its members that remain are all in one other incident
            targets = {named[f] for f in old.members if f in ranges}
            merged = after[targets.pop()] if not new.members and len(targets) == 1 else None
            involved = old.members.keys() | new.members.keys()
            cause = next((ref for f, ref in causes if f in involved), causes[0][1])
            verdicts.append(
                incident_verdict(
                    new,
                    opened=not old.members,
                    joined=[f for f in new.members if f not in old.members],
                    left=[f for f in old.members if f not in new.members],
                    series=cause,
                    record_run_id=record_run_id,
                    emitted_at=emitted_at,
                    merged_into=merged,
                )
            )
        return verdicts, joining

    def _closing(
        self, ranges: Mapping[str, CommitRange], named: Mapping[str, str]
    ) -> dict[str, list[str]]:
        """The incidents to close and their members: those whose newest member's first
        changed run came ``incident_open_days`` or more before the newest of all (run
        time, so the same history closes the same incidents)."""
        newest: dict[str, float] = {}
        members: dict[str, list[str]] = {}
        for finding_id in sorted(ranges):
            commit, time = named[finding_id], ranges[finding_id].last_time
            newest[commit] = max(newest.get(commit, time), time)
            members.setdefault(commit, []).append(finding_id)
        if not newest:
            return {}
        horizon = max(newest.values()) - self._incident_open_s
        return {c: members[c] for c in sorted(newest) if newest[c] <= horizon}

    @staticmethod
    def _commit_range(move: IncidentMove, tx: StoreTransaction) -> CommitRange:
        """The commits between the series' last run before the change and its first changed run."""
        current = move.change.current
        assert current is not None and current.commit is not None
        last_time = current.time.timestamp()
        branch = commit_line(move.series.attributes)
        if current.index == 0:
            return CommitRange(current.commit, last_time, branch=branch)
        (run_before,) = tx.points(move.series_id, current.index - 1, current.index)
        return CommitRange(
            current.commit, last_time, run_before.commit, run_before.timestamp, branch
        )

    def _cache_after_commit(
        self, tx: StoreTransaction, series: SeriesState, analyzer: SeriesAnalyzer
    ) -> None:
        entry = (series.version, analyzer)
        series_id = series.series_id

        def remember() -> None:
            self._analyzers[series_id] = entry
            if len(self._analyzers) > MAX_CACHED_ANALYZERS:
                del self._analyzers[next(iter(self._analyzers))]

        tx.after_commit(remember)

    @staticmethod
    def _evidence(
        change_points: list[ChangePoint],
        findings: list[Finding],
        series: SeriesState,
        tx: StoreTransaction,
        metric_direction: str | None,
    ) -> list[ChangePointEvidence]:
        """Change points located in the series: run id, commit and time of their first run."""
        known = {f.index: f.evidence for f in findings}
        evidence = []
        for cp in change_points:
            if cp.index in known:
                located = known[cp.index]
                run_id, commit, when = located.run_id, located.commit, located.time
            else:
                (point,) = tx.points(series.series_id, cp.index, cp.index + 1)
                run_id, commit = point.run_id, point.commit
                # a point stored without its timestamp text (the column is nullable) falls
                # back to its epoch timestamp: the evidence's time is required
                when = (
                    parse_rfc3339(point.time)
                    if point.time
                    else datetime.fromtimestamp(point.timestamp, tz=UTC)
                )
            evidence.append(
                ChangePointEvidence(
                    index=cp.index,
                    run_id=run_id,
                    commit=commit,
                    time=when,
                    forward_change_percent=cp.forward_change_percent,
                    magnitude=cp.magnitude,
                    mean_before=cp.mean_before,
                    stddev_before=cp.stddev_before,
                    mean_after=cp.mean_after,
                    stddev_after=cp.stddev_after,
                    pvalue=cp.pvalue,
                    direction=classify_direction(cp.forward_change_percent, metric_direction),
                )
            )
        return evidence


def _with_commit_range(verdict: Verdict, ranges: dict[str, CommitRange]) -> Verdict:
    """A confirmed finding's verdict naming the commit range it joined its incident with."""
    finding = verdict.finding
    if finding is None or "incident" not in finding or finding["id"] not in ranges:
        return verdict
    span = ranges[finding["id"]].to_json()
    return replace(verdict, finding={**finding, "commit_range": span})


def _close(tx: StoreTransaction, commit: str, members: Mapping[str, CommitRange]) -> None:
    """Store a closed incident's members' ranges apart, and each member's incident."""
    state = {finding_id: span.to_state() for finding_id, span in members.items()}
    tx.put_blob(CLOSED_INCIDENT_NAMESPACE, commit, orjson.dumps(state))
    for finding_id in members:
        tx.put_blob(CLOSED_FINDING_NAMESPACE, finding_id, commit.encode())


def _reopen(
    tx: StoreTransaction, going: Iterable[str], joining: Mapping[str, CommitRange]
) -> dict[str, dict[str, CommitRange]]:
    """The closed incidents a change touches, opened again (incident commit -> its
    members' ranges): those a leaving or joining finding is in, and those named after
    a joining finding's ``last``. Ranges with the same ``last`` overlap, so that finding
    belongs with them, and no open incident is ever named after a closed one."""
    touched = {span.last for span in joining.values()}
    for finding_id in {*going, *joining}:
        closed_in = tx.get_blob(CLOSED_FINDING_NAMESPACE, finding_id)
        if closed_in:
            touched.add(closed_in.decode())
    reopened = {}
    for commit in sorted(touched):
        stored = tx.get_blob(CLOSED_INCIDENT_NAMESPACE, commit)
        if not stored:
            continue
        members = {f: CommitRange.from_state(state) for f, state in orjson.loads(stored).items()}
        reopened[commit] = members
        # an empty value is no closed incident (the store keeps keys)
        tx.put_blob(CLOSED_INCIDENT_NAMESPACE, commit, b"")
        for finding_id in members:
            tx.put_blob(CLOSED_FINDING_NAMESPACE, finding_id, b"")
    return reopened


def _stored_incident(tx: StoreTransaction, commit: str) -> Incident:
    stored = tx.get_blob(INCIDENT_NAMESPACE, commit)
    return Incident(commit, {}) if stored is None else Incident.from_json(orjson.loads(stored))


def _finite(value: float) -> float | None:
    """A JSON-ready number: None for an infinite score (a constant segment)."""
    return float(value) if math.isfinite(value) else None
