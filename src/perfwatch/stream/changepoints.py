"""The E-Divisive record handler: series histories in, change-of-belief verdicts out.

For each metric of a record: insert the value into its series at its place
(timestamp, then arrival; a run id already there changes nothing), move the
series' incremental analyzer forward from its saved state, and diff the change
points it now reports against the ones last published.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from perfwatch.config import Config
from perfwatch.detectors.analyzer import SeriesAnalyzer
from perfwatch.detectors.edivisive import ChangePoint, EDivisiveParams, classify_direction
from perfwatch.records import (
    ChangePointEvidence,
    Record,
    SeriesRef,
    Verdict,
    format_rfc3339,
    parse_rfc3339,
)
from perfwatch.store import Point, SeriesKey, SeriesState, StoreTransaction
from perfwatch.stream.verdicts import diff_change_points, make_verdict, shift_after_insert

# Decoded analyzers kept between records (LRU); a series' saved state is
# decoded again only when another processor changed it or it was evicted.
MAX_CACHED_ANALYZERS = 50_000


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
        # (test, metric) -> parameters and their dict form (asdict is slow).
        self._params: dict[tuple[str, str], tuple[EDivisiveParams, dict[str, Any]]] = {}
        self._analyzers: dict[int, tuple[int, SeriesAnalyzer]] = {}

    def handle(self, record: Record, tx: StoreTransaction, emitted_at: datetime) -> list[Verdict]:
        identifying = self._config.series.identifying_attributes
        keys = {metric: series_key(record, metric, identifying) for metric in record.metrics}
        locked = tx.lock_series(list(keys.values()))
        verdicts: list[Verdict] = []
        for metric in sorted(record.metrics):
            verdicts.extend(self._update(record, metric, locked[keys[metric]], tx, emitted_at))
        return verdicts

    def params_for(self, test: str, metric: str) -> tuple[EDivisiveParams, dict[str, Any]]:
        known = self._params.get((test, metric))
        if known is None:
            params = EDivisiveParams.from_dict(self._config.analyzer_params_for(test, metric))
            known = self._params[(test, metric)] = (params, params.to_dict())
        return known

    def _update(
        self,
        record: Record,
        metric: str,
        series: SeriesState,
        tx: StoreTransaction,
        emitted_at: datetime,
    ) -> list[Verdict]:
        value = record.metrics[metric]
        time_text = format_rfc3339(record.timestamp)
        previous_length = series.length
        point = Point(
            record.run_id, value.value, record.timestamp.timestamp(), record.commit, time_text
        )
        position = tx.add_point(series, point)
        if position is None:
            return []  # this run is in the series already: redelivery or a replay
        params, params_dict = self.params_for(record.test, metric)
        analyzer = self._advance(series, params, params_dict, position, value.value, tx)

        published = [ChangePointEvidence.from_json(cp) for cp in series.published]
        if position < previous_length:
            published = shift_after_insert(published, position)
        direction = value.direction or self._config.direction_for(metric)
        current = self._evidence(analyzer.change_points_, published, series, tx, direction)
        changes, new_published = diff_change_points(published, current, self._config.verdicts)

        series.published = [cp.to_json() for cp in new_published]
        series.analyzer_params = params_dict
        tx.save_series(series, analyzer.to_bytes())
        self._cache_after_commit(tx, series, analyzer)

        ref = SeriesRef(record.test, metric, dict(series.key.attributes))
        return [
            make_verdict(
                change,
                series=ref,
                series_key=series.key.canonical,
                series_length=series.length,
                record_run_id=record.run_id,
                parameters=series.analyzer_params,
                emitted_at=emitted_at,
            )
            for change in changes
        ]

    def _advance(
        self,
        series: SeriesState,
        params: EDivisiveParams,
        params_dict: dict[str, Any],
        position: int,
        value: float,
        tx: StoreTransaction,
    ) -> SeriesAnalyzer:
        """The series' analyzer with the new value in place."""
        # Taken out of the cache: if the transaction rolls back, the mutated
        # analyzer must not be found again.
        cached = self._analyzers.pop(series.series_id, None)
        if series.analyzer_params != params_dict:
            # New series, or its parameters changed in the configuration:
            # analyse its whole history once with the current parameters.
            analyzer = SeriesAnalyzer(params)
            analyzer.append([p.value for p in tx.points(series.series_id)])
            return analyzer
        if cached is not None and cached[0] == series.version:
            analyzer = cached[1]
        else:
            state = tx.analyzer_state(series.series_id)
            if state is None:
                raise RuntimeError(f"series {series.key.canonical} has parameters but no state")
            analyzer = SeriesAnalyzer.from_bytes(state)
        if position == series.length - 1:
            analyzer.append([value])
        else:
            analyzer.insert(position, [value])
        return analyzer

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
        published: list[ChangePointEvidence],
        series: SeriesState,
        tx: StoreTransaction,
        metric_direction: str | None,
    ) -> list[ChangePointEvidence]:
        """Change points located in the series: run id, commit and time of their first run."""
        known = {cp.index: cp for cp in published}
        evidence = []
        for cp in change_points:
            if cp.index in known:
                located = known[cp.index]
                run_id, commit, when = located.run_id, located.commit, located.time
            else:
                (point,) = tx.points(series.series_id, cp.index, cp.index + 1)
                run_id, commit = point.run_id, point.commit
                when = parse_rfc3339(point.time) if point.time else None
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
