"""SQLite state store: one file in WAL mode, for a single processor (the default)."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import ClassVar
from urllib.parse import parse_qs, urlsplit

from perfwatch.state._sql import SqlStore, SqlTransaction
from perfwatch.state.base import StoreError

SYNCHRONOUS_MODES = ("off", "normal", "full", "extra")


def sqlite_path(url: str) -> Path:
    """The file of a `sqlite:///PATH` URL, its options left out; a leading ``~/`` is the
    home folder, as in a shell (``./~/`` names a folder called ``~``)."""
    text = url.removeprefix("sqlite:///").split("?", 1)[0]
    return Path.home() / text[2:] if text.startswith("~/") else Path(text)


class SqliteStore(SqlStore):
    """`sqlite:///relative/path.db`, `sqlite:////absolute/path.db` or `sqlite:///~/path.db`.

    Option `?synchronous=normal|full` (default normal). In WAL mode `normal`
    keeps every commit across a crash of the process, but the last commits
    before a power failure or OS crash may be lost; `full` syncs each commit to
    disk (about 10 ms each on ordinary disks).
    """

    types: ClassVar[dict[str, str]] = {
        "serial": "INTEGER PRIMARY KEY AUTOINCREMENT",  # never reuses a sequence number
        "real": "REAL",
        "blob": "BLOB",
        "int": "INTEGER",
        "text": "TEXT",
    }
    begin_sql = "BEGIN IMMEDIATE"  # take the write lock up front: no upgrade deadlocks
    unavailable_errors = (sqlite3.OperationalError,)

    def _connect(self) -> sqlite3.Connection:
        parts = urlsplit(self.url)
        if parts.scheme != "sqlite" or not self.url.startswith("sqlite:///"):
            raise StoreError(f"{self.url}: expected sqlite:///PATH")
        path = sqlite_path(self.url)
        options = {key: values[-1] for key, values in parse_qs(parts.query).items()}
        synchronous = options.pop("synchronous", "normal").lower()
        if synchronous not in SYNCHRONOUS_MODES:
            raise StoreError(f"{self.url}: synchronous must be one of {SYNCHRONOUS_MODES}")
        if options:
            raise StoreError(f"{self.url}: unknown option(s) {', '.join(sorted(options))}")
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            connection = sqlite3.connect(
                path, isolation_level=None, check_same_thread=False, timeout=30.0
            )
            connection.execute("PRAGMA journal_mode = WAL")
            connection.execute(f"PRAGMA synchronous = {synchronous}")
            connection.execute("PRAGMA foreign_keys = ON")
        except (OSError, sqlite3.Error) as err:
            raise StoreError(f"{self.url}: cannot open the state store: {err}") from err
        return connection

    def _parameter_limit(self) -> int:
        return int(self._connection.getlimit(sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER))

    def _lock_migrations(self, tx: SqlTransaction) -> None:
        """BEGIN IMMEDIATE already holds the database's write lock."""

    def _connection_lost(self) -> bool:
        return False
