"""The state-store interface shared by the SQLite and PostgreSQL backends.

What the processor keeps between records: each series' points (ordered by
timestamp, then arrival), its analyzer state, the change points last published
for it, every verdict it produced (the outbox: committed with the record's
changes, published afterwards) and small keyed blobs for other per-test state.
All writes for one record happen inside one `transaction()`.
"""

from __future__ import annotations

import functools
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import orjson

from perfwatch.contract.validation import json_path

# Blob namespaces, keyed by outbox owner: the id of its last published message,
# and what is added to its outbox numbers to make its Pulsar sequence ids.
CURSOR_NAMESPACE = "outbox-cursor"
SEQUENCE_OFFSET_NAMESPACE = "sequence-offset"


class StoreError(RuntimeError):
    """The state store cannot be opened or its data is inconsistent."""


class StoreUnavailable(StoreError):
    """The database cannot be reached or is busy: retrying the same work may succeed."""


class RunConflict(ValueError):
    """A run id is stored in a series already, with another value, time or commit.

    `path` locates the first differing field in the record (``$.metrics.p99.value``).
    """

    def __init__(self, key: SeriesKey, stored: Point, offered: Point) -> None:
        differing = [
            (path, shown_stored, shown_offered)
            for path, same, shown_stored, shown_offered in (
                (
                    json_path(["metrics", key.metric, "value"]),
                    stored.value == offered.value,
                    stored.value,
                    offered.value,
                ),
                ("$.timestamp", stored.timestamp == offered.timestamp, stored.time, offered.time),
                ("$.commit", stored.commit == offered.commit, stored.commit, offered.commit),
            )
            if not same
        ]
        self.path = differing[0][0] if differing else "$.run_id"
        described = "; ".join(
            f"{path}: stored {old!r}, now {new!r}" for path, old, new in differing
        )
        super().__init__(
            f"run_id {stored.run_id!r} is stored for test {key.test!r} metric {key.metric!r} "
            f"with other values ({described}); the record is not applied"
        )
        self.key = key
        self.stored = stored
        self.offered = offered


@dataclass(frozen=True, order=True)
class SeriesKey:
    """Test + metric + identifying attributes (sorted name/value pairs)."""

    test: str
    metric: str
    attributes: tuple[tuple[str, str], ...] = ()

    @classmethod
    def of(cls, test: str, metric: str, attributes: Mapping[str, str] | None = None) -> SeriesKey:
        return cls(test, metric, tuple(sorted((attributes or {}).items())))

    @functools.cached_property
    def canonical(self) -> str:
        """A stable text form, used as the database key and in verdict ids."""
        return orjson.dumps(
            [self.test, self.metric, dict(self.attributes)], option=orjson.OPT_SORT_KEYS
        ).decode()

    @classmethod
    def from_canonical(cls, text: str) -> SeriesKey:
        test, metric, attributes = orjson.loads(text)
        return cls.of(test, metric, attributes)

    def to_dict(self) -> dict[str, Any]:
        return {"test": self.test, "metric": self.metric, "attributes": dict(self.attributes)}


@dataclass(frozen=True)
class Point:
    """One run's value in a series. `timestamp` is epoch seconds (the ordering key)."""

    run_id: str
    value: float
    timestamp: float
    commit: str | None = None
    time: str | None = None  # the record's timestamp as written (RFC 3339)


@dataclass
class SeriesState:
    """A series row, locked for the current transaction.

    `published` holds the change points last published (JSON-ready dicts with
    at least `index` and `run_id`); `version` increases on every save so a
    processor may cache the decoded analyzer between records.
    """

    series_id: int
    key: SeriesKey
    length: int = 0
    max_timestamp: float | None = None
    next_arrival: int = 0
    version: int = 0
    analyzer_params: dict[str, Any] | None = None
    published: list[dict[str, Any]] = field(default_factory=list)


@dataclass(frozen=True)
class OutboxEntry:
    """A committed verdict; `published_at` None means not yet on the verdicts topic."""

    seq: int
    verdict_id: str
    owner: str
    kind: str
    series_key: str
    partition_key: str
    document: bytes
    created_at: float
    published_at: float | None = None


class StoreTransaction(ABC):
    """The operations available inside one transaction."""

    def __init__(self) -> None:
        self._after_commit: list[Callable[[], None]] = []

    def after_commit(self, callback: Callable[[], None]) -> None:
        """Run `callback` once the transaction has committed (never after a rollback),
        e.g. to keep an in-memory cache in step with what is durable."""
        self._after_commit.append(callback)

    def run_after_commit(self) -> None:
        for callback in self._after_commit:
            callback()
        self._after_commit.clear()

    @abstractmethod
    def lock_series(self, keys: Sequence[SeriesKey]) -> dict[SeriesKey, SeriesState]:
        """Create missing series rows and lock all of them (in key order) until commit.

        A series locked earlier in the same transaction is not read again: the
        same in-memory state is returned, with every change made to it since.
        """

    @abstractmethod
    def add_points(self, items: Sequence[tuple[SeriesState, Point]]) -> list[int | None]:
        """Insert one point into each of several series (one statement), skipping run
        ids already in their series with the same value, timestamp and commit (a
        redelivered record); RunConflict for one stored with others.

        Returns, per item, the point's position in its series (0-based, order =
        timestamp then arrival) or None for a run id seen before. Updates the
        series in memory; `save_series` writes them.
        """

    @abstractmethod
    def points(self, series_id: int, start: int = 0, stop: int | None = None) -> list[Point]:
        """Points at positions [start, stop) in series order."""

    @abstractmethod
    def series_values(self, series_ids: Sequence[int]) -> dict[int, np.ndarray]:
        """Each series' values in series order (a series without points is absent)."""

    @abstractmethod
    def analyzer_states(self, series_ids: Sequence[int]) -> dict[int, bytes]:
        """The serialised analyzers saved with these series (absent: none saved)."""

    @abstractmethod
    def save_series(self, items: Sequence[tuple[SeriesState, bytes | None]]) -> None:
        """Write series rows (length, params, published change points) with their
        analyzer states. Each series' version goes up at once; the rows may be
        written later in the transaction (at the latest before it commits), with
        the state the series has then and the last analyzer state given."""

    @abstractmethod
    def add_verdicts(self, entries: Sequence[OutboxEntry]) -> list[int | None]:
        """Queue verdicts in the outbox (one statement; the entries' `seq` and
        `published_at` are ignored). Per entry: its outbox number (increasing in
        the order given and in commit order per owner), or None (nothing written)
        if its id exists already or came earlier in `entries`."""

    def add_verdict(
        self,
        verdict_id: str,
        kind: str,
        document: bytes,
        owner: str,
        partition_key: str,
        series_key: str = "",
    ) -> int | None:
        """`add_verdicts` for one verdict."""
        entry = OutboxEntry(
            seq=0,
            verdict_id=verdict_id,
            owner=owner,
            kind=kind,
            series_key=series_key,
            partition_key=partition_key,
            document=document,
            created_at=time.time(),
        )
        return self.add_verdicts([entry])[0]

    @abstractmethod
    def get_blob(self, namespace: str, key: str) -> bytes | None: ...

    @abstractmethod
    def put_blob(self, namespace: str, key: str, value: bytes) -> None: ...


class StateStore(ABC):
    """A state store; open one with `perfwatch.state.open_store(url)`."""

    url: str

    @abstractmethod
    def transaction(self) -> AbstractContextManager[StoreTransaction]:
        """Commit on normal exit, roll back on an exception."""

    @abstractmethod
    def unpublished(
        self, owner: str | None = None, created_before: float | None = None, limit: int = 10_000
    ) -> list[OutboxEntry]:
        """Outbox entries not yet published, oldest first, optionally of one owner."""

    @abstractmethod
    def max_verdict_seq(self, owner: str) -> int:
        """The largest outbox number the owner was ever given (0 if none)."""

    @abstractmethod
    def mark_published(
        self, verdict_ids: Sequence[str], cursor: tuple[str, bytes] | None = None
    ) -> None:
        """Record verdicts as published and, atomically, the owner's last message id."""

    @abstractmethod
    def verdicts(
        self, series_key: SeriesKey | None = None, kind: str | None = None
    ) -> Iterator[OutboxEntry]:
        """Verdict history, oldest first."""

    @abstractmethod
    def series_keys(self) -> list[SeriesKey]: ...

    @abstractmethod
    def series_count(self) -> int: ...

    @abstractmethod
    def series_points(self, key: SeriesKey) -> list[Point]:
        """All points of a series in order (empty for an unknown series)."""

    @abstractmethod
    def published_change_points(self, key: SeriesKey) -> list[dict[str, Any]]:
        """The change points last published for a series (empty for an unknown series)."""

    @abstractmethod
    def get_blob(self, namespace: str, key: str) -> bytes | None: ...

    @abstractmethod
    def close(self) -> None: ...

    def __enter__(self) -> StateStore:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
