"""State stores: SQLite (default, one processor) and PostgreSQL (shared)."""

from __future__ import annotations

from perfwatch.state.base import (
    CURSOR_NAMESPACE,
    SEQUENCE_OFFSET_NAMESPACE,
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

__all__ = [
    "CURSOR_NAMESPACE",
    "SEQUENCE_OFFSET_NAMESPACE",
    "OutboxEntry",
    "Point",
    "RunConflict",
    "SeriesKey",
    "SeriesState",
    "StateStore",
    "StoreError",
    "StoreTransaction",
    "StoreUnavailable",
    "open_store",
]


def open_store(url: str) -> StateStore:
    """Open (creating or migrating the schema) the store at `url`."""
    if url.startswith("sqlite:"):
        from perfwatch.state.sqlite import SqliteStore

        return SqliteStore(url)
    if url.startswith(("postgresql:", "postgres:")):
        from perfwatch._optional import require

        require("psycopg", "postgres", feature="a PostgreSQL state store")
        from perfwatch.state.postgres import PostgresStore

        return PostgresStore(url)
    raise StoreError(f"{url}: unsupported state store URL (sqlite:///PATH or postgresql://...)")
