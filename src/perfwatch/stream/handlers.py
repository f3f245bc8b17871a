"""Per-record handlers: the one place where the processor learns what to do with a record.

A handler looks at one valid record inside the record's store transaction,
updates whatever state it keeps there (all of it commits or rolls back with
the record) and returns the verdicts the record caused. It must be
idempotent: a redelivered record reaches it again and must change nothing.
"""

from __future__ import annotations

from datetime import datetime
from typing import Protocol

from perfwatch.config import Config
from perfwatch.records import Record, Verdict
from perfwatch.store import StoreTransaction


class RecordHandler(Protocol):
    def handle(self, record: Record, tx: StoreTransaction, emitted_at: datetime) -> list[Verdict]:
        """Update state for `record` within `tx`; the verdicts to publish."""
        ...


def build_handlers(config: Config) -> list[RecordHandler]:
    """Every handler a processor runs, in order. Handlers of the record's `counters`
    and `inputs` blocks are added here."""
    from perfwatch.stream.changepoints import ChangePointHandler
    from perfwatch.stream.recommendations import InputsHandler

    return [ChangePointHandler(config), InputsHandler(config)]
