"""The SQL both backends share; subclasses supply the connection and the dialect.

Statements are written with `?` placeholders and `{blob}`/`{real}`/`{serial}`
type slots; a backend rewrites them once for its driver.
"""

from __future__ import annotations

import functools
import threading
import time
from abc import abstractmethod
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from typing import Any, ClassVar, TypeVar

import numpy as np
import orjson

from perfwatch.state.base import (
    CURSOR_NAMESPACE,
    OutboxEntry,
    Point,
    RunConflict,
    SeriesKey,
    SeriesState,
    StateStore,
    StoreError,
    StoreTransaction,
    StoreUnavailable,
)

_NO_LIMIT = 2**62  # both dialects accept a number; they disagree on "no limit"
_Item = TypeVar("_Item")

# Migrations in order; the schema version is the number applied.
MIGRATIONS: tuple[tuple[str, ...], ...] = (
    (
        """CREATE TABLE series (
            series_id {serial},
            series_key TEXT NOT NULL UNIQUE,
            test TEXT NOT NULL,
            metric TEXT NOT NULL,
            length BIGINT NOT NULL DEFAULT 0,
            max_timestamp {real},
            next_arrival BIGINT NOT NULL DEFAULT 0,
            version BIGINT NOT NULL DEFAULT 0,
            analyzer_params TEXT,
            analyzer_state {blob},
            published TEXT NOT NULL DEFAULT '[]'
        )""",
        """CREATE TABLE points (
            series_id BIGINT NOT NULL REFERENCES series (series_id),
            run_id TEXT NOT NULL,
            ts {real} NOT NULL,
            arrival BIGINT NOT NULL,
            value {real} NOT NULL,
            commit_id TEXT,
            time TEXT,
            PRIMARY KEY (series_id, run_id)
        )""",
        "CREATE INDEX points_order ON points (series_id, ts, arrival)",
        """CREATE TABLE verdicts (
            seq {serial},
            verdict_id TEXT NOT NULL UNIQUE,
            series_key TEXT NOT NULL,
            kind TEXT NOT NULL,
            owner TEXT NOT NULL,
            partition_key TEXT NOT NULL,
            document {blob} NOT NULL,
            created_at {real} NOT NULL,
            published_at {real}
        )""",
        "CREATE INDEX verdicts_outbox ON verdicts (owner, seq) WHERE published_at IS NULL",
        "CREATE INDEX verdicts_series ON verdicts (series_key, seq)",
        """CREATE TABLE blobs (
            namespace TEXT NOT NULL,
            key TEXT NOT NULL,
            value {blob} NOT NULL,
            updated_at {real} NOT NULL,
            PRIMARY KEY (namespace, key)
        )""",
    ),
)

_SERIES_COLUMNS = (
    "series_id, series_key, length, max_timestamp, next_arrival, version, "
    "analyzer_params, published"
)
_POINT_COLUMNS = "run_id, value, ts, commit_id, time"
_VERDICT_COLUMNS = (
    "seq, verdict_id, owner, kind, series_key, partition_key, document, created_at, published_at"
)


@functools.lru_cache(maxsize=256)  # most series share a few parameter settings
def _parsed_params(text: str) -> dict[str, Any]:
    return orjson.loads(text)


def _params_from_text(text: str) -> dict[str, Any]:
    return dict(_parsed_params(text))  # the caller's own copy: the cached one must not change


def _series_from_row(row: Sequence[Any], key: SeriesKey | None = None) -> SeriesState:
    """A series row; `key` saves parsing the row's key when the caller has it."""
    series_id, canonical, length, max_ts, next_arrival, version, params, published = row
    return SeriesState(
        series_id=series_id,
        key=key or SeriesKey.from_canonical(canonical),
        length=length,
        max_timestamp=max_ts,
        next_arrival=next_arrival,
        version=version,
        analyzer_params=_params_from_text(params) if params else None,
        published=orjson.loads(published),
    )


def _point_from_row(row: Sequence[Any]) -> Point:
    run_id, value, ts, commit, when = row
    return Point(run_id=run_id, value=value, timestamp=ts, commit=commit, time=when)


def _outbox_from_row(row: Sequence[Any]) -> OutboxEntry:
    seq, verdict_id, owner, kind, series_key, partition_key, document, created, published = row
    return OutboxEntry(
        seq=seq,
        verdict_id=verdict_id,
        owner=owner,
        kind=kind,
        series_key=series_key,
        partition_key=partition_key,
        document=bytes(document),
        created_at=created,
        published_at=published,
    )


class SqlTransaction(StoreTransaction):
    def __init__(self, store: SqlStore) -> None:
        super().__init__()
        self._store = store
        self._locked: dict[SeriesKey, SeriesState] = {}
        # series_id -> (series, its last analyzer state): rows `write_series` writes
        self._unsaved: dict[int, tuple[SeriesState, bytes | None]] = {}

    def execute(self, sql: str, params: Sequence[Any] = (), *, binary: bool = False) -> Any:
        """Run a statement; the cursor holding its result. `binary` asks for results in
        the driver's binary format where it has one (large numeric arrays decode much
        faster)."""
        # A cursor per statement: in pipeline mode, a cursor that also ran earlier
        # statements can receive their results after this one was sent, and a
        # fetch would then return one of those instead of this statement's.
        cursor = self._store.new_cursor()
        if binary and self._store.binary_results:
            cursor.execute(self._store.dialect(sql), params, binary=True)
        else:
            cursor.execute(self._store.dialect(sql), params)
        return cursor

    def _chunks(self, items: Sequence[_Item], parameters_each: int) -> Iterator[Sequence[_Item]]:
        """`items` in consecutive slices whose parameters fit in one statement
        (a batch of wide records can need more than the database takes)."""
        size = max(1, self._store.parameter_limit // parameters_each)
        for start in range(0, len(items), size):
            yield items[start : start + size]

    def lock_series(self, keys: Sequence[SeriesKey]) -> dict[SeriesKey, SeriesState]:
        # In key order, chunk by chunk: a chunk's existing rows are locked, then its
        # missing ones inserted; two processors cannot wait for each other in a cycle.
        ordered = sorted({k.canonical: k for k in keys if k not in self._locked}.items())
        for chunk in self._chunks(ordered, 3):  # the insert takes three per key
            states = self._select_for_update(dict(chunk))
            missing = [(canonical, key) for canonical, key in chunk if key not in states]
            if missing:
                rows = ", ".join("(?, ?, ?)" for _ in missing)
                self.execute(
                    f"INSERT INTO series (series_key, test, metric) VALUES {rows} "
                    "ON CONFLICT (series_key) DO NOTHING",
                    [
                        value
                        for canonical, key in missing
                        for value in (canonical, key.test, key.metric)
                    ],
                )
                states.update(self._select_for_update(dict(missing)))
            if len(states) != len(chunk):
                raise StoreError("series rows vanished while locking them")
            self._locked.update(states)
        return {key: self._locked[key] for key in keys}

    def _select_for_update(self, keys: dict[str, SeriesKey]) -> dict[SeriesKey, SeriesState]:
        """Lock the rows of these series (canonical form -> key) that exist."""
        marks = ", ".join("?" for _ in keys)
        rows = self.execute(
            f"SELECT {_SERIES_COLUMNS} FROM series WHERE series_key IN ({marks}) "
            f"ORDER BY series_key{self._store.lock_clause}",
            list(keys),
        ).fetchall()
        return {keys[row[1]]: _series_from_row(row, keys[row[1]]) for row in rows}

    def add_points(self, items: Sequence[tuple[SeriesState, Point]]) -> list[int | None]:
        inserted: set[int] = set()
        for chunk in self._chunks(items, 7):
            source, params = self._store.row_source(
                ("int", "text", "real", "int", "real", "text", "text"),
                [
                    (
                        series.series_id,
                        point.run_id,
                        point.timestamp,
                        series.next_arrival,
                        point.value,
                        point.commit,
                        point.time,
                    )
                    for series, point in chunk
                ],
            )
            # "WHERE true": SQLite needs it to tell ON CONFLICT from a join clause.
            inserted.update(
                row[0]
                for row in self.execute(
                    "INSERT INTO points (series_id, run_id, ts, arrival, value, commit_id, "
                    "time) SELECT v.column1, v.column2, v.column3, v.column4, v.column5, "
                    f"v.column6, v.column7 FROM {source} WHERE true "
                    "ON CONFLICT (series_id, run_id) DO NOTHING RETURNING series_id",
                    params,
                ).fetchall()
            )
        for series, point in items:
            if series.series_id not in inserted:
                self._check_same_run(series, point)
        return [
            self._place(series, point) if series.series_id in inserted else None
            for series, point in items
        ]

    def _check_same_run(self, series: SeriesState, point: Point) -> None:
        """RunConflict unless the stored point of the run has the point's value, time and
        commit (then the record is a copy of one applied before)."""
        row = self.execute(
            f"SELECT {_POINT_COLUMNS} FROM points WHERE series_id = ? AND run_id = ?",
            (series.series_id, point.run_id),
        ).fetchone()
        stored = _point_from_row(row)
        if (stored.value, stored.timestamp, stored.commit) != (
            point.value,
            point.timestamp,
            point.commit,
        ):
            raise RunConflict(series.key, stored, point)

    def _place(self, series: SeriesState, point: Point) -> int:
        """The position of a point just inserted; advances the series' counters."""
        if series.max_timestamp is None or point.timestamp >= series.max_timestamp:
            position = series.length  # the common case: the newest run goes last
            series.max_timestamp = point.timestamp
        else:
            # A late run: it follows every point with a timestamp not after its own
            # (equal timestamps arrived earlier), and precedes the rest.
            position = self.execute(
                "SELECT COUNT(*) FROM points WHERE series_id = ? AND ts <= ? AND run_id <> ?",
                (series.series_id, point.timestamp, point.run_id),
            ).fetchone()[0]
        series.length += 1
        series.next_arrival += 1
        return int(position)

    def points(self, series_id: int, start: int = 0, stop: int | None = None) -> list[Point]:
        limit = _NO_LIMIT if stop is None else max(stop - start, 0)
        rows = self.execute(
            f"SELECT {_POINT_COLUMNS} FROM points WHERE series_id = ? "
            "ORDER BY ts, arrival LIMIT ? OFFSET ?",
            (series_id, limit, start),
        ).fetchall()
        return [_point_from_row(row) for row in rows]

    def series_values(self, series_ids: Sequence[int]) -> dict[int, np.ndarray]:
        values: dict[int, np.ndarray] = {}
        for chunk in self._chunks(series_ids, 1):
            values.update(self._series_values(chunk))
        return values

    def _series_values(self, series_ids: Sequence[int]) -> dict[int, np.ndarray]:
        marks = ", ".join("?" for _ in series_ids)
        aggregate = self._store.ordered_values_aggregate
        if aggregate is not None:  # one row per series
            rows = self.execute(
                f"SELECT series_id, {aggregate} FROM points WHERE series_id IN ({marks}) "
                "GROUP BY series_id",
                list(series_ids),
                binary=True,
            ).fetchall()
            return {series_id: np.array(values, dtype=np.float64) for series_id, values in rows}
        rows = self.execute(
            f"SELECT series_id, value FROM points WHERE series_id IN ({marks}) "
            "ORDER BY series_id, ts, arrival",
            list(series_ids),
        ).fetchall()
        if not rows:
            return {}
        ids, values = (np.array(column) for column in zip(*rows, strict=True))
        starts = np.flatnonzero(np.r_[True, ids[1:] != ids[:-1]])
        return {
            int(ids[start]): values[start:stop].astype(np.float64)
            for start, stop in zip(starts, [*starts[1:], len(ids)], strict=True)
        }

    def analyzer_states(self, series_ids: Sequence[int]) -> dict[int, bytes]:
        if not series_ids:
            return {}
        self.write_series()  # a state saved earlier in this transaction is read back
        states: dict[int, bytes] = {}
        for chunk in self._chunks(series_ids, 1):
            marks = ", ".join("?" for _ in chunk)
            rows = self.execute(
                f"SELECT series_id, analyzer_state FROM series WHERE series_id IN ({marks}) "
                "AND analyzer_state IS NOT NULL",
                list(chunk),
            ).fetchall()
            states.update((series_id, bytes(state)) for series_id, state in rows)
        return states

    def save_series(self, items: Sequence[tuple[SeriesState, bytes | None]]) -> None:
        for series, analyzer_state in items:
            series.version += 1
            self._unsaved[series.series_id] = (series, analyzer_state)

    def write_series(self) -> None:
        """Write the rows `save_series` was given since the last call (one statement:
        a batch of records that touch a series many times writes it once)."""
        if not self._unsaved:
            return
        rows = []
        for series, analyzer_state in self._unsaved.values():
            analyzer_params = series.analyzer_params
            rows.append(
                (
                    series.series_id,
                    series.length,
                    series.max_timestamp,
                    series.next_arrival,
                    series.version,
                    None if analyzer_params is None else orjson.dumps(analyzer_params).decode(),
                    analyzer_state,
                    orjson.dumps(series.published).decode(),
                )
            )
        self._unsaved.clear()
        for chunk in self._chunks(rows, 8):
            source, params = self._store.row_source(
                ("int", "int", "real", "int", "int", "text", "blob", "text"), chunk
            )
            self.execute(
                "UPDATE series SET length = v.column2, max_timestamp = v.column3, "
                "next_arrival = v.column4, version = v.column5, analyzer_params = v.column6, "
                f"analyzer_state = v.column7, published = v.column8 FROM {source} "
                "WHERE series.series_id = v.column1",
                params,
            )

    def add_verdicts(self, entries: Sequence[OutboxEntry]) -> list[int | None]:
        inserted: dict[str, int] = {}
        for chunk in self._chunks(entries, 7):
            source, params = self._store.row_source(
                ("text", "text", "text", "text", "text", "blob", "real"),
                [
                    (
                        e.verdict_id,
                        e.series_key,
                        e.kind,
                        e.owner,
                        e.partition_key,
                        e.document,
                        e.created_at,
                    )
                    for e in chunk
                ],
            )
            # Rows are inserted (and numbered) in the order given; RETURNING's order
            # is not defined, so the numbers are matched by id.
            inserted.update(
                self.execute(
                    "INSERT INTO verdicts (verdict_id, series_key, kind, owner, partition_key, "
                    "document, created_at) SELECT v.column1, v.column2, v.column3, v.column4, "
                    f"v.column5, v.column6, v.column7 FROM {source} WHERE true "
                    "ON CONFLICT (verdict_id) DO NOTHING RETURNING verdict_id, seq",
                    params,
                ).fetchall()
            )
        return [
            None if (seq := inserted.pop(e.verdict_id, None)) is None else int(seq) for e in entries
        ]

    def mark_published(self, verdict_ids: Sequence[str], published_at: float) -> None:
        self._store.new_cursor().executemany(
            self._store.dialect(
                "UPDATE verdicts SET published_at = ? WHERE verdict_id = ? AND published_at IS NULL"
            ),
            [(published_at, verdict_id) for verdict_id in verdict_ids],
        )

    def get_blob(self, namespace: str, key: str) -> bytes | None:
        row = self.execute(
            "SELECT value FROM blobs WHERE namespace = ? AND key = ?", (namespace, key)
        ).fetchone()
        return None if row is None else bytes(row[0])

    def put_blob(self, namespace: str, key: str, value: bytes) -> None:
        self.execute(
            "INSERT INTO blobs (namespace, key, value, updated_at) VALUES (?, ?, ?, ?) "
            "ON CONFLICT (namespace, key) DO UPDATE SET value = excluded.value, "
            "updated_at = excluded.updated_at",
            (namespace, key, value, time.time()),
        )


class SqlStore(StateStore):
    """Shared implementation; a backend sets the class attributes and `_connect`."""

    placeholder = "?"
    types: ClassVar[dict[str, str]]
    unavailable_errors: tuple[type[BaseException], ...] = ()
    # schema version -> statements only this backend runs after that version's own
    dialect_migrations: ClassVar[dict[int, tuple[str, ...]]] = {}
    lock_clause = ""  # appended to the series SELECT to lock rows
    # An aggregate of a series' values in series order (None: rows are grouped here).
    ordered_values_aggregate: ClassVar[str | None] = None
    binary_results: ClassVar[bool] = False  # the driver's execute() takes binary=True
    begin_sql = "BEGIN"

    def __init__(self, url: str) -> None:
        self.url = url
        self._lock = threading.RLock()
        self._connection = self._connect()
        self.parameter_limit = self._parameter_limit()
        self._migrate()

    @property
    def shown_url(self) -> str:
        """The URL as error messages show it: without a password (see PostgresStore)."""
        return self.url

    @abstractmethod
    def _connect(self) -> Any: ...

    def _parameter_limit(self) -> int:
        """The most parameters one statement may have (PostgreSQL's protocol counts
        them in 16 bits)."""
        return 65_535

    @abstractmethod
    def _lock_migrations(self, tx: SqlTransaction) -> None:
        """Serialise concurrent migrations (runs inside the migration transaction)."""

    def row_source(
        self, column_types: Sequence[str], rows: Sequence[Sequence[Any]]
    ) -> tuple[str, list[Any]]:
        """`rows` as a table `v` (columns column1.., of `types` names) for one statement:
        SQL text and its parameters. Here: a VALUES list, one parameter per cell."""
        row = "(" + ", ".join(f"CAST(? AS {self.types[t]})" for t in column_types) + ")"
        return (
            "(VALUES " + ", ".join(row for _ in rows) + ") AS v",
            [cell for values in rows for cell in values],
        )

    def dialect(self, sql: str) -> str:
        return sql if self.placeholder == "?" else sql.replace("?", self.placeholder)

    def _batched(self) -> AbstractContextManager[Any]:
        """Where the driver can, send statements whose results nobody reads yet
        together with the next one that is read (one round trip instead of several)."""
        return nullcontext()

    def new_cursor(self) -> Any:
        return self._connection.cursor()

    @contextmanager
    def _sql_transaction(self) -> Iterator[SqlTransaction]:
        with self._lock, self._translate_errors():
            control = self._open_connection().cursor()
            try:
                with self._batched():
                    control.execute(self.begin_sql)
                    yield SqlTransaction(self)
                    control.execute("COMMIT")
            except BaseException:
                # Outside the batch: after an error a batch discards what follows.
                if not self._connection_lost():
                    control.execute("ROLLBACK")
                raise
            finally:
                control.close()

    def _open_connection(self) -> Any:
        """The connection, made again if the last one was lost (the database restarted):
        the call that lost it failed, and the next ones work once the database answers,
        so a dashboard or a processor left running recovers by itself."""
        if self._connection_lost():
            self._connection.close()
            self._connection = self._connect()
        return self._connection

    @contextmanager
    def _translate_errors(self) -> Iterator[None]:
        try:
            yield
        except self.unavailable_errors as err:
            raise StoreUnavailable(f"{self.shown_url}: {one_line(err)}") from err

    @abstractmethod
    def _connection_lost(self) -> bool: ...

    @contextmanager
    def transaction(self) -> Iterator[StoreTransaction]:
        with self._sql_transaction() as tx:
            yield tx
            tx.write_series()
        tx.run_after_commit()

    def _read(self, sql: str, params: Sequence[Any] = ()) -> list[Any]:
        with self._lock, self._translate_errors():
            cursor = self._open_connection().cursor()
            try:
                cursor.execute(self.dialect(sql), params)
                return cursor.fetchall()
            finally:
                cursor.close()

    def _migrate(self) -> None:
        with self._sql_transaction() as tx:
            self._lock_migrations(tx)
            tx.execute("CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT)")
            row = tx.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
            current = int(row[0]) if row else 0
            if current > len(MIGRATIONS):
                raise StoreError(
                    f"{self.shown_url}: schema version {current} is newer than this perfwatch "
                    f"understands ({len(MIGRATIONS)}); upgrade perfwatch"
                )
            for version, statements in enumerate(MIGRATIONS[current:], start=current + 1):
                for statement in (*statements, *self.dialect_migrations.get(version, ())):
                    tx.execute(statement.format(**self.types))
            if current < len(MIGRATIONS):
                tx.execute(
                    "INSERT INTO meta (key, value) VALUES ('schema_version', ?) "
                    "ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                    (str(len(MIGRATIONS)),),
                )

    def unpublished(
        self, owner: str | None = None, created_before: float | None = None, limit: int = 10_000
    ) -> list[OutboxEntry]:
        sql = f"SELECT {_VERDICT_COLUMNS} FROM verdicts WHERE published_at IS NULL"
        params: list[Any] = []
        if owner is not None:
            sql += " AND owner = ?"
            params.append(owner)
        if created_before is not None:
            sql += " AND created_at < ?"
            params.append(created_before)
        sql += " ORDER BY seq LIMIT ?"
        params.append(limit)
        return [_outbox_from_row(row) for row in self._read(sql, params)]

    def max_verdict_seq(self, owner: str) -> int:
        rows = self._read("SELECT MAX(seq) FROM verdicts WHERE owner = ?", (owner,))
        return int(rows[0][0] or 0)

    def mark_published(
        self, verdict_ids: Sequence[str], cursor: tuple[str, bytes] | None = None
    ) -> None:
        with self._sql_transaction() as tx:
            if verdict_ids:
                tx.mark_published(verdict_ids, time.time())
            if cursor is not None:
                owner, message_id = cursor
                tx.put_blob(CURSOR_NAMESPACE, owner, message_id)

    def verdicts(
        self, series_key: SeriesKey | None = None, kind: str | None = None
    ) -> Iterator[OutboxEntry]:
        sql = f"SELECT {_VERDICT_COLUMNS} FROM verdicts WHERE 1 = 1"
        params: list[Any] = []
        if series_key is not None:
            sql += " AND series_key = ?"
            params.append(series_key.canonical)
        if kind is not None:
            sql += " AND kind = ?"
            params.append(kind)
        sql += " ORDER BY seq"
        return iter([_outbox_from_row(row) for row in self._read(sql, params)])

    def series_keys(self) -> list[SeriesKey]:
        rows = self._read("SELECT series_key FROM series ORDER BY series_key")
        return [SeriesKey.from_canonical(row[0]) for row in rows]

    def series_count(self) -> int:
        return int(self._read("SELECT COUNT(*) FROM series")[0][0])

    def series_points(self, key: SeriesKey) -> list[Point]:
        rows = self._read(
            f"SELECT {_POINT_COLUMNS} FROM points JOIN series USING (series_id) "
            "WHERE series_key = ? ORDER BY ts, arrival",
            (key.canonical,),
        )
        return [_point_from_row(row) for row in rows]

    def published_change_points(self, key: SeriesKey) -> list[dict[str, Any]]:
        rows = self._read("SELECT published FROM series WHERE series_key = ?", (key.canonical,))
        return orjson.loads(rows[0][0]) if rows else []

    def get_blob(self, namespace: str, key: str) -> bytes | None:
        rows = self._read(
            "SELECT value FROM blobs WHERE namespace = ? AND key = ?", (namespace, key)
        )
        return bytes(rows[0][0]) if rows else None

    def close(self) -> None:
        with self._lock:
            self._connection.close()


def one_line(error: BaseException) -> str:
    """A driver's message on one line: libpq puts its hint ("Is the server running ...?",
    "This probably means ...") on lines of their own, and errors are reported as one line."""
    return " ".join(str(error).split())
