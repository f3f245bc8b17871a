"""Per-record handlers: the one place where the processor learns what to do with a record.

A handler looks at one valid record inside the record's store transaction,
updates whatever state it keeps there (all of it commits or rolls back with
the record) and returns the verdicts the record caused. It must be
idempotent: a redelivered record reaches it again and must change nothing.
Handlers run in order; each also receives the verdicts the handlers before it
produced for the record (the counter check keeps a run with a change-point
regression out of its baseline).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Protocol

from perfwatch.config import Config
from perfwatch.contract.models import Record, Verdict
from perfwatch.processor.changepoints import series_key
from perfwatch.state import SeriesKey, StoreTransaction


class RecordHandler(Protocol):
    def prepare(self, records: Sequence[Record], tx: StoreTransaction) -> None:
        """Take every lock `handle` will need for `records` at the start of their
        transaction (one transaction may handle a batch of records), each handler
        after the one before it and in key order: two processors' transactions
        then never wait for each other in a cycle."""
        ...

    def handle(
        self,
        record: Record,
        tx: StoreTransaction,
        emitted_at: datetime,
        earlier: Sequence[Verdict] = (),
    ) -> list[Verdict]:
        """Update state for `record` within `tx`; the verdicts to publish. `earlier`:
        the verdicts of the handlers before this one for the same record."""
        ...


def baseline_key(test: str, attributes: Mapping[str, str]) -> str:
    """The blob key of a test's baselines (inputs, counters): its series key without a metric."""
    return SeriesKey.of(test, "", dict(attributes)).canonical


def record_baseline(record: Record, identifying: tuple[str, ...]) -> tuple[str, dict[str, str]]:
    """The baseline a record belongs to: its blob key (as `baseline_key` gives it) and
    the identifying attributes it has."""
    key = series_key(record, "", identifying)
    return key.canonical, dict(key.attributes)


def build_handlers(config: Config) -> list[RecordHandler]:
    """Every handler a processor runs, in order: the counter check comes after the
    change points, whose regression verdicts keep a run out of its baseline; the
    metrics' units and directions are kept under the change-point handler's series locks."""
    from perfwatch.processor.changepoints import ChangePointHandler
    from perfwatch.processor.counterchecks import CounterCheckHandler
    from perfwatch.processor.metric_info import MetricInfoHandler
    from perfwatch.processor.recommendations import InputsHandler

    return [
        ChangePointHandler(config),
        MetricInfoHandler(config),
        InputsHandler(config),
        CounterCheckHandler(config),
    ]
