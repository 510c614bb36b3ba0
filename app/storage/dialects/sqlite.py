"""SQLite: no row locks, so every write transaction starts with BEGIN IMMEDIATE; its
variants of the rooms' statements (STATEMENTS)."""

from __future__ import annotations

import sqlite3
from typing import Any, ClassVar

from sqlalchemy import bindparam, event
from sqlalchemy.dialects.sqlite import insert
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.sql.elements import UnaryExpression
from sqlalchemy.sql.operators import custom_op

from app.storage.dialects.base import Dialect
from app.storage.statements import Variants, resolved
from app.storage.statements.common import columns
from app.storage.statements.cron import build_entry_runs
from app.storage.statements.lists import ListReads
from app.storage.tables import delayed_queue as queue_table
from app.storage.tables import message_groups

# Primary result codes that mean "cannot serve now", not "this SQL is wrong":
# BUSY, LOCKED, READONLY, IOERR, CORRUPT, FULL, CANTOPEN, PROTOCOL, NOTADB.
_UNAVAILABLE_CODES = {5, 6, 8, 10, 11, 13, 14, 15, 26}
# Extended result codes: SQLITE_CONSTRAINT_UNIQUE, SQLITE_CONSTRAINT_PRIMARYKEY.
_UNIQUE_CODES = {2067, 1555}
_BUSY = 5


STATEMENTS: Variants = {
    "groups": {
        # The keeper's row of a group, unless it exists.
        "group_enlist": insert(message_groups)
        .values(queue=bindparam("queue"), messageGroup=bindparam("group"))
        .on_conflict_do_nothing(index_elements=["queue", "messageGroup"]),
    },
    "messages": {
        # The INSERT that skips taken keys, and fails on any other error.
        "offer_insert": insert(queue_table)
        .on_conflict_do_nothing(index_elements=["pKey", "pKind"])
        .returning(columns.pKey),
    },
    "cron": {
        # A cron entry's runs: SQLite compares keys byte by byte (BINARY), so they are a
        # range of the unique (pKey, pKind) index. Without statistics (no ANALYZE) the
        # planner would rather read the whole queue through its (pKind, scheduledAt)
        # index, or every message no worker holds through (lockUuid, id): a unary + on
        # those columns keeps their indexes out (SQLite's documented way to disqualify a
        # term).
        "entry_runs": build_entry_runs(
            unindexed=lambda column: UnaryExpression(
                column, operator=custom_op("+"), type_=column.type
            )
        ),
    },
    "lists": {
        # Lists: a page after a cursor read as two ranges (ListReads.split): a row
        # comparison is sought by its first column only, and a page from the middle of
        # 200,000 messages due in one millisecond read 150,000 of them first (decision 13).
        "list_reads": ListReads(split=True),
    },
}


class SQLiteDialect(Dialect):
    name = "sqlite"
    statements = resolved(STATEMENTS)
    read_options: ClassVar[dict[str, Any]] = {"sqlite_read_only": True}

    def engine_options(self, *, statements: bool = True, url: str | None = None) -> dict[str, Any]:
        # A writer waits for another to finish for the lock bound, then reports "database
        # is locked" (503). SQLite has no bound on a statement's time, and no sessions to
        # bound an idle transaction of (session_settings).
        return {"connect_args": {"check_same_thread": False, "timeout": self.bounds.lock_wait}}

    def configure_engine(self, engine: Engine) -> None:
        @event.listens_for(engine, "connect")
        def _on_connect(dbapi_connection: sqlite3.Connection, _record: object) -> None:
            # Take transaction control away from the sqlite3 module (it would only
            # BEGIN before DML, deferred), and let the "begin" hook below do it.
            dbapi_connection.isolation_level = None
            cursor = dbapi_connection.cursor()
            cursor.execute("PRAGMA journal_mode=WAL")
            cursor.execute("PRAGMA synchronous=NORMAL")
            cursor.execute(f"PRAGMA busy_timeout={round(self.bounds.lock_wait * 1000)}")
            cursor.close()

        @event.listens_for(engine, "begin")
        def _on_begin(connection: Connection) -> None:
            # Writers serialise at BEGIN, so a claim's select and update see no
            # other writer in between. Readers in WAL mode block nobody.
            read_only = connection.get_execution_options().get("sqlite_read_only", False)
            connection.exec_driver_sql("BEGIN" if read_only else "BEGIN IMMEDIATE")

    def is_unique_violation(self, error: BaseException) -> bool:
        return getattr(error, "sqlite_errorcode", None) in _UNIQUE_CODES

    def is_unavailable(self, error: BaseException, disconnected: bool) -> bool:
        # "database is locked" after the busy timeout, disk I/O errors, unopenable files.
        code = getattr(error, "sqlite_errorcode", None)
        return disconnected or (code is not None and code & 0xFF in _UNAVAILABLE_CODES)

    def is_bound_reached(self, error: BaseException) -> bool:
        # "database is locked" after the busy timeout: another writer held it.
        code = getattr(error, "sqlite_errorcode", None)
        return code is not None and code & 0xFF == _BUSY

    def is_schema_missing(self, error: BaseException) -> bool:
        return isinstance(error, sqlite3.OperationalError) and "no such table" in str(error)
