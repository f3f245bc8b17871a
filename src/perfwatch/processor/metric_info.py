"""What records declare about their metrics, kept per series for readers such as the dashboard.

A record may give a metric's unit and direction; the series' points keep only
values. This handler stores, per series, the unit and the direction last
declared (each field separately, as `perfwatch analyze` reads them from record
files; the unit, once declared, stays) in the blob namespace `metric-info`, key = the series key:
`{"unit": "ms", "direction": "lower_is_better"}`. It writes only when they
change, so a steady stream costs a dictionary lookup per metric.

A record that gives a series' metric in another unit than the one stored is a
`UnitConflict`: its values are no continuation of the series' (a benchmark moved
from ns to us would be a step of 1000x), so the processor dead-letters it, as
`perfwatch analyze` refuses such a file.
"""

from __future__ import annotations

import functools
from collections import OrderedDict
from collections.abc import Sequence
from datetime import datetime
from typing import Any

import orjson

from perfwatch.config import Config
from perfwatch.contract.models import Record, Verdict
from perfwatch.contract.validation import json_path
from perfwatch.processor.changepoints import series_key
from perfwatch.state import SeriesKey, StoreTransaction

METRIC_INFO_NAMESPACE = "metric-info"
# Series whose stored information this processor knows, at most this many (the first
# remembered are forgotten first).
MAX_KNOWN_SERIES = 50_000


class UnitConflict(ValueError):
    """A record gives a metric in another unit than its series' stored one.

    `path` locates the unit in the record (``$.metrics.latency.unit``).
    """

    def __init__(self, key: SeriesKey, run_id: str, stored: str, offered: str) -> None:
        self.path = json_path(["metrics", key.metric, "unit"])
        super().__init__(
            f"{self.path}: run {run_id!r} gives series {key.canonical!r} in {offered!r}, its "
            f"earlier runs are in {stored!r}: values in two units are no history; convert "
            "the values to the stored unit, or record the metric under a new name from "
            "this run on"
        )


def merged(info: dict[str, Any], unit: str | None, direction: str | None) -> dict[str, Any]:
    """`info` with the fields a record declares replaced."""
    return {
        "unit": info["unit"] if unit is None else unit,
        "direction": info["direction"] if direction is None else direction,
    }


def stored_info(stored: bytes | None) -> dict[str, Any]:
    """A series' blob decoded (None: nothing stored, so nothing known)."""
    info: dict[str, Any] = {"unit": None, "direction": None}
    if stored is not None:
        info.update(orjson.loads(stored))
    return info


class MetricInfoHandler:
    def __init__(self, config: Config) -> None:
        self._identifying = config.series.identifying_attributes
        self._known: OrderedDict[SeriesKey, dict[str, Any]] = OrderedDict()

    def prepare(self, records: Sequence[Record], tx: StoreTransaction) -> None:
        """Nothing to lock: a series' blob is written only under the lock the change-point
        handler holds on the series."""

    def handle(
        self,
        record: Record,
        tx: StoreTransaction,
        emitted_at: datetime,
        earlier: Sequence[Verdict] = (),
    ) -> list[Verdict]:
        for metric, value in record.metrics.items():
            if value.unit is None and value.direction is None:
                continue
            key = series_key(record, metric, self._identifying)
            known = self._known.get(key)
            if known is not None and merged(known, value.unit, value.direction) == known:
                continue  # the common case: what is stored already
            if known is None:
                stored = tx.get_blob(METRIC_INFO_NAMESPACE, key.canonical)
                known = stored_info(stored)
            if value.unit is not None and known["unit"] not in (None, value.unit):
                raise UnitConflict(key, record.run_id, known["unit"], value.unit)
            info = merged(known, value.unit, value.direction)
            if info != known:
                tx.put_blob(METRIC_INFO_NAMESPACE, key.canonical, orjson.dumps(info))
            tx.after_commit(functools.partial(self._remember, key, info))
        return []

    def _remember(self, key: SeriesKey, info: dict[str, Any]) -> None:
        self._known[key] = info
        self._known.move_to_end(key)
        if len(self._known) > MAX_KNOWN_SERIES:
            self._known.popitem(last=False)
