"""PostgreSQL state store (psycopg 3): shared by several processors.

Series rows are locked (SELECT ... FOR UPDATE, in key order) for the length of
a record's transaction, so two processors handed the same test during a
rebalance take turns instead of interleaving.
"""

from __future__ import annotations

from typing import ClassVar

import psycopg

from perfwatch.store._sql import SqlStore
from perfwatch.store.base import StoreError

# Arbitrary constant naming perfwatch's schema-migration advisory lock.
_MIGRATION_LOCK_ID = 0x70657266


class PostgresStore(SqlStore):
    """`postgresql://user:password@host:port/database` (libpq URL and options)."""

    placeholder = "%s"
    types: ClassVar[dict[str, str]] = {
        "serial": "BIGSERIAL PRIMARY KEY",
        "real": "DOUBLE PRECISION",
        "blob": "BYTEA",
    }
    lock_clause = " FOR UPDATE"
    unavailable_errors = (psycopg.OperationalError, psycopg.InterfaceError)

    def _connect(self) -> psycopg.Connection:
        try:
            return psycopg.connect(self.url, autocommit=True, connect_timeout=10)
        except psycopg.Error as err:
            raise StoreError(f"{_redacted(self.url)}: cannot connect: {err}") from err

    def _lock_migrations(self, cursor: psycopg.Cursor) -> None:
        cursor.execute("SELECT pg_advisory_xact_lock(%s)", (_MIGRATION_LOCK_ID,))

    def _connection_lost(self) -> bool:
        return bool(self._connection.closed or self._connection.broken)


def _redacted(url: str) -> str:
    """The URL without its password, for error messages."""
    info = psycopg.conninfo.conninfo_to_dict(url)
    if "password" in info:
        info["password"] = "***"
    return psycopg.conninfo.make_conninfo(**info)
