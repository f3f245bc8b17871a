"""The metric-info handler keeps each series' declared unit and direction, through a real store."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import orjson
import pytest

from perfwatch.config import Config
from perfwatch.contract.models import MetricValue, Record
from perfwatch.processor.handlers import build_handlers
from perfwatch.processor.metric_info import (
    METRIC_INFO_NAMESPACE,
    MetricInfoHandler,
    UnitConflict,
)
from perfwatch.state import SeriesKey, StateStore, open_store

T0 = datetime(2024, 5, 1, tzinfo=UTC)
KEY = SeriesKey.of("api", "latency", {"branch": "main"})


def record(i: int, metric: MetricValue) -> Record:
    return Record(
        test="api",
        run_id=f"api-{i}",
        timestamp=T0 + timedelta(days=i),
        metrics={"latency": metric},
        branch="main",
    )


def run(store: StateStore, handler: MetricInfoHandler, rec: Record) -> None:
    """The handler inside a committed transaction."""
    with store.transaction() as tx:
        handler.handle(rec, tx, T0)


def stored(store: StateStore) -> dict[str, str | None] | None:
    blob = store.get_blob(METRIC_INFO_NAMESPACE, KEY.canonical)
    return None if blob is None else orjson.loads(blob)


def test_each_field_is_the_latest_declared(tmp_path: Path) -> None:
    with open_store(f"sqlite:///{tmp_path / 'state.db'}") as store:
        handler = MetricInfoHandler(Config())
        run(store, handler, record(0, MetricValue(1.0)))
        assert stored(store) is None  # nothing declared, nothing kept
        run(store, handler, record(1, MetricValue(1.0, "ms")))
        assert stored(store) == {"unit": "ms", "direction": None}
        run(store, handler, record(2, MetricValue(1.0, None, "lower_is_better")))
        assert stored(store) == {"unit": "ms", "direction": "lower_is_better"}
        run(store, handler, record(3, MetricValue(1.0, None, "higher_is_better")))
        assert stored(store) == {"unit": "ms", "direction": "higher_is_better"}


def test_a_metric_given_in_another_unit_is_a_conflict_and_stores_nothing(tmp_path: Path) -> None:
    with open_store(f"sqlite:///{tmp_path / 'state.db'}") as store:
        handler = MetricInfoHandler(Config())
        run(store, handler, record(0, MetricValue(1.0, "ms")))
        for fresh in (False, True):  # the unit remembered, then read from the store
            if fresh:
                handler = MetricInfoHandler(Config())
            with pytest.raises(UnitConflict) as raised:
                run(store, handler, record(1, MetricValue(1000.0, "us", "lower_is_better")))
            assert raised.value.path == "$.metrics.latency.unit"
            assert "'api-1'" in str(raised.value) and "in 'us'" in str(raised.value)
            assert "in 'ms'" in str(raised.value)
            assert stored(store) == {"unit": "ms", "direction": None}
        run(store, handler, record(2, MetricValue(1.0, "ms", "lower_is_better")))
        assert stored(store) == {"unit": "ms", "direction": "lower_is_better"}


def test_a_rolled_back_change_is_not_remembered(tmp_path: Path) -> None:
    with open_store(f"sqlite:///{tmp_path / 'state.db'}") as store:
        handler = MetricInfoHandler(Config())
        run(store, handler, record(0, MetricValue(1.0, None, "lower_is_better")))
        with pytest.raises(RuntimeError), store.transaction() as tx:
            handler.handle(record(1, MetricValue(1.0, "s")), tx, T0)
            raise RuntimeError("the batch failed")
        assert stored(store) == {"unit": None, "direction": "lower_is_better"}
        # the same declaration again must be written: the cache did not take the lost one
        run(store, handler, record(2, MetricValue(1.0, "s")))
        assert stored(store) == {"unit": "s", "direction": "lower_is_better"}


def test_another_processors_handler_reads_what_is_stored(tmp_path: Path) -> None:
    with open_store(f"sqlite:///{tmp_path / 'state.db'}") as store:
        run(store, MetricInfoHandler(Config()), record(0, MetricValue(1.0, "ms")))
        run(
            store, MetricInfoHandler(Config()), record(1, MetricValue(1.0, None, "lower_is_better"))
        )
        assert stored(store) == {"unit": "ms", "direction": "lower_is_better"}


def test_the_processor_runs_it_after_the_change_point_handler() -> None:
    names = [type(handler).__name__ for handler in build_handlers(Config())]
    assert names.index("MetricInfoHandler") == names.index("ChangePointHandler") + 1
