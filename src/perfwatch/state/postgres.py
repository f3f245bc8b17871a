"""PostgreSQL state store (psycopg 3): shared by several processors.

Series rows are locked (SELECT ... FOR UPDATE, in key order) for the length of
a batch's transaction, so two processors handed the same test during a
rebalance take turns instead of interleaving.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import AbstractContextManager
from typing import Any, ClassVar

import psycopg

from perfwatch.state._sql import SqlStore, SqlTransaction, one_line
from perfwatch.state.base import StoreError, StoreUnavailable

# Arbitrary constant naming perfwatch's schema-migration advisory lock.
_MIGRATION_LOCK_ID = 0x70657266


class PostgresStore(SqlStore):
    """`postgresql://user:password@host:port/database` (libpq URL and options)."""

    placeholder = "%s"
    types: ClassVar[dict[str, str]] = {
        "serial": "BIGSERIAL PRIMARY KEY",
        "real": "DOUBLE PRECISION",
        "blob": "BYTEA",
        "int": "BIGINT",
        "text": "TEXT",
    }
    lock_clause = " FOR UPDATE"
    ordered_values_aggregate = "array_agg(value ORDER BY ts, arrival)"
    binary_results = True
    # Analyzer states are float arrays: compressing them costs CPU and saves nothing.
    dialect_migrations: ClassVar[dict[int, tuple[str, ...]]] = {
        1: ("ALTER TABLE series ALTER COLUMN analyzer_state SET STORAGE EXTERNAL",)
    }
    unavailable_errors = (psycopg.OperationalError, psycopg.InterfaceError)

    def row_source(
        self, column_types: Sequence[str], rows: Sequence[Sequence[Any]]
    ) -> tuple[str, list[Any]]:
        """One array parameter per column, unnested: the statement text does not
        depend on the row count, so the driver and server can cache and prepare it."""
        arrays = ", ".join(f"CAST(%b AS {self.types[t]}[])" for t in column_types)
        names = ", ".join(f"column{i}" for i in range(1, len(column_types) + 1))
        return f"unnest({arrays}) AS v({names})", [
            list(column) for column in zip(*rows, strict=True)
        ]

    def _batched(self) -> AbstractContextManager[Any]:
        # Pipeline mode: BEGIN travels with the first query, and a statement
        # whose result is not read (the series update) with the next one that is
        # read or with COMMIT; an error still surfaces before the commit returns.
        return self._connection.pipeline()

    @property
    def shown_url(self) -> str:
        return _redacted(self.url)

    def _connect(self) -> psycopg.Connection:
        try:
            return psycopg.connect(self.url, autocommit=True, connect_timeout=10)
        except psycopg.OperationalError as err:  # server down, unreachable or refusing
            raise StoreUnavailable(f"{self.shown_url}: cannot connect: {one_line(err)}") from err
        except psycopg.Error as err:
            raise StoreError(f"{self.shown_url}: cannot connect: {one_line(err)}") from err

    def _lock_migrations(self, tx: SqlTransaction) -> None:
        tx.execute("SELECT pg_advisory_xact_lock(?)", (_MIGRATION_LOCK_ID,))

    def _connection_lost(self) -> bool:
        return bool(self._connection.closed or self._connection.broken)


def _redacted(url: str) -> str:
    """The URL without its password, for error messages."""
    info = psycopg.conninfo.conninfo_to_dict(url)
    if "password" in info:
        info["password"] = "***"
    return psycopg.conninfo.make_conninfo("", **info)
