"""MariaDB (10.6+), through mysqlclient: its dialect, how its statements run (its variants
of the rooms' statements are in statements.py, its removals in removals.py).

- Writes that skip existing keys are `INSERT IGNORE … RETURNING`. IGNORE would
  also turn other errors (a value too long, a NULL) into warnings and write a
  changed row; so after every INSERT IGNORE the warnings are read, and any but
  "duplicate entry" fails the statement, and its transaction rolls back.
- A poll selects `FOR UPDATE SKIP LOCKED`, then updates (MariaDB has no
  `UPDATE … RETURNING`): the generic claim, in one transaction.
- A removal deletes `… RETURNING` and records what it deleted in the history.
- Transactions run at READ COMMITTED: REPEATABLE READ's gap locks would make
  offers and polls of one queue wait on each other, and deadlock.
- Errors are told apart by their numbers, never by their text.
"""

from __future__ import annotations

import hashlib
import math
from typing import Any, ClassVar

from sqlalchemy import event
from sqlalchemy.engine import Engine
from sqlalchemy.exc import DBAPIError

from app.domain.errors import PayloadTooLarge
from app.storage.connection import Connection
from app.storage.dialects.base import CONNECT_TIMEOUT_SECONDS, Dialect, first_line, keep_alive
from app.storage.dialects.mariadb import removals
from app.storage.dialects.mariadb.statements import STATEMENTS
from app.storage.statements import resolved
from app.storage.statements.common import Removal

_DUPLICATE_ENTRY = 1062
_DUPLICATE_ENTRY_WITH_KEY_NAME = 1586
_LOCK_WAIT_TIMEOUT = 1205
_DEADLOCK = 1213
_NO_SUCH_TABLE = 1146
_STATEMENT_TIME = 1969
# The session's user lacks a privilege the statement needs (PROCESS, for the views of
# InnoDB's transactions and metrics), or may not read a table or a column.
_REFUSED = {1142, 1143, 1227}
# The server cannot serve now (503): access denied or no such database (a server
# being set up or moved), too many connections (in all, or for this user), the
# server shutting down or read-only, a statement or connection killed or timed
# out, aborted connections and network errors, and the client's "cannot connect",
# "connection lost" and SSL errors.
_UNAVAILABLE = {
    1040, 1044, 1045, 1049, 1053, 1152, 1158, 1159, 1160, 1161, 1203, 1226, 1290, 1317,
    1836, 1927, 1969, 2002, 2003, 2006, 2013, 2026, 2055, 4031,
}  # fmt: skip
# Opening a connection failed with no answer from a server that could take it: can't
# connect (2002, 2003), unknown host (2005), gone or lost (2006, 2013), too many
# connections (1040), a server shutting down (1053).
_NO_ANSWER = {1040, 1053, 2002, 2003, 2005, 2006, 2013}
# Set on every connection, with the bounds (session_settings). SHOW WARNINGS lists at
# most max_error_count rows (64 by default), fewer than a 200-row INSERT IGNORE over
# existing keys raises: every one must be seen.
_SESSION = {"max_error_count": 65535}


class MariaDBInsertError(RuntimeError):
    """INSERT IGNORE skipped something other than an existing key."""


class MariaDBDialect(Dialect):
    name = "mariadb"
    read_options: ClassVar[dict[str, Any]] = {}
    statements = resolved(STATEMENTS)
    # mysqlclient sends statements as text, values escaped: a 200-row INSERT of
    # large payloads must stay below max_allowed_packet (16 MiB by default). Read
    # from the server on each new connection; until then, its default.
    packet_bytes = 16 * 1024 * 1024
    max_statement_bytes = 4 * 1024 * 1024

    def check_payload(self, payload: bytes) -> None:
        # One row escaped (up to twice its bytes) with its other values must fit in
        # one packet; past that the server drops the connection, which would read
        # as an outage (503) to a client that then retries forever.
        largest = (self.packet_bytes - 4096) // 2
        if len(payload) > largest:
            raise PayloadTooLarge(
                f"payload is {len(payload)} bytes stored; this MariaDB server's "
                f"max_allowed_packet ({self.packet_bytes}) takes at most {largest}"
            )

    def payload_digest(self, payload: bytes) -> str:
        return hashlib.sha256(payload).hexdigest()

    def session_settings(self, *, statements: bool = True) -> dict[str, float]:
        bounds = self.bounds
        # A transaction left idle this long (whole seconds; MariaDB 10.3+) belongs to a
        # client that went silent mid-way: the server closes the connection, and the
        # transaction's row locks and read view go with it.
        settings: dict[str, float] = {"idle_transaction_timeout": math.ceil(bounds.answer_deadline)}
        if statements:
            # A wait for a row lock (InnoDB's, 50 s by default) or a table lock
            # (lock_wait_timeout, a day by default) gives up after the lock bound, in whole
            # seconds, and any statement after the statement bound (max_statement_time, off
            # by default): each answers 503.
            lock_wait = max(1, math.ceil(bounds.lock_wait))
            settings |= {
                "innodb_lock_wait_timeout": lock_wait,
                "lock_wait_timeout": lock_wait,
                "max_statement_time": bounds.statement,
            }
        return settings

    def engine_options(self, *, statements: bool = True, url: str | None = None) -> dict[str, Any]:
        # A URL's own `init_command` is replaced by this one (mysqlclient runs one).
        settings = {**_SESSION, **self.session_settings(statements=statements)}
        session = ", ".join(f"{name} = {value}" for name, value in settings.items())
        connect_args: dict[str, Any] = {
            "init_command": f"SET SESSION {session}",
            "charset": "utf8mb4",
            "connect_timeout": CONNECT_TIMEOUT_SECONDS,
            # Payloads go as _binary'…' literals, never read as utf8mb4 text.
            "binary_prefix": True,
        }
        if statements:
            # The client's own bound on waiting for an answer (the socket's, whole seconds):
            # past it, a server or network gone silent is given up, the connection closed.
            answer_deadline = math.ceil(self.bounds.answer_deadline)
            connect_args |= {"read_timeout": answer_deadline, "write_timeout": answer_deadline}
        return {
            "isolation_level": "READ COMMITTED",
            # The server closes connections idle for wait_timeout (8 hours by default).
            "pool_recycle": 3600,
            # No ROLLBACK when a connection goes back to the pool: the store ends every
            # transaction it begins (ThreadedConnections.open), so it would be a round trip per
            # call for nothing. A connection closed mid-transaction still rolls back.
            "pool_reset_on_return": None,
            "connect_args": connect_args,
        }

    def configure_engine(self, engine: Engine) -> None:
        @event.listens_for(engine, "connect")
        def _on_connect(dbapi_connection: Any, _record: object) -> None:
            keep_alive(dbapi_connection.fileno())  # mysqlclient has no option for it
            # Learn the packet size the batch statements must fit in.
            cursor = dbapi_connection.cursor()
            try:
                cursor.execute("SELECT @@max_allowed_packet")
                (self.packet_bytes,) = cursor.fetchone()
            finally:
                cursor.close()
            self.max_statement_bytes = min(4 * 1024 * 1024, self.packet_bytes // 4)

        @event.listens_for(engine, "after_cursor_execute")
        def _no_ignored_errors(_conn, cursor, statement: str, *_args: object) -> None:
            if not statement.startswith("INSERT IGNORE"):
                return
            connection = cursor.connection
            count = connection.warning_count()
            if not count:
                return
            # Another cursor: the RETURNING rows of this one are not read yet (they
            # are held client-side, as mysqlclient stores every result).
            warnings = connection.cursor()
            try:
                warnings.execute("SHOW WARNINGS")
                listed = warnings.fetchall()
                other = [row for row in listed if row[1] != _DUPLICATE_ENTRY]
            finally:
                warnings.close()
            if other or len(listed) < count:
                _level, code, message = other[0] if other else ("", "?", "unlisted warnings")
                raise MariaDBInsertError(f"INSERT IGNORE would have hidden {code}: {message}")

    async def remove_recorded(
        self, connection: Connection, removal: Removal, parameters: dict
    ) -> int:
        # DELETE … RETURNING, then the history rows of what it deleted (removals.py): at
        # READ COMMITTED an INSERT … SELECT first would read without locking.
        return await removals.remove_paged(connection, removal, parameters, record=True)

    async def removed_keys(
        self, connection: Connection, removal: Removal, parameters: dict, *, record: bool
    ) -> list[str]:
        # Likewise: reading the keys first would not lock them at READ COMMITTED.
        return await removals.removed_keys(connection, removal, parameters, record=record)

    async def remove_in_pages(
        self, connection: Connection, removal: Removal, parameters: dict, *, record: bool
    ) -> int:
        # Without the history too: a DELETE of a whole queue could outlast the
        # statement bound (max_statement_time).
        return await removals.remove_paged(connection, removal, parameters, record=record)

    def is_unique_violation(self, error: BaseException) -> bool:
        return _code(error) in (_DUPLICATE_ENTRY, _DUPLICATE_ENTRY_WITH_KEY_NAME)

    def is_retryable(self, error: BaseException) -> bool:
        # A deadlock is over once InnoDB has chosen its victim: run it again. A lock
        # wait that timed out (1205) means a row has been held for 5 s: 503, and the
        # client retries later, instead of a request waiting 5 s more per attempt.
        return _code(error) == _DEADLOCK

    def is_unavailable(self, error: BaseException, disconnected: bool) -> bool:
        code = _code(error)
        return disconnected or code in _UNAVAILABLE or code == _LOCK_WAIT_TIMEOUT

    def is_schema_missing(self, error: BaseException) -> bool:
        return _code(error) == _NO_SUCH_TABLE

    def is_bound_reached(self, error: BaseException) -> bool:
        # A row lock's wait, and max_statement_time.
        return _code(error) in (_LOCK_WAIT_TIMEOUT, _STATEMENT_TIME)

    def is_refused(self, error: BaseException) -> bool:
        return _code(error) in _REFUSED

    def connect_failure(self, error: DBAPIError) -> tuple[bool, str]:
        arguments: tuple[Any, ...] = getattr(error.orig, "args", ())
        reason = str(arguments[1]) if len(arguments) > 1 else first_line(error.orig)
        return error.connection_invalidated or _code(error.orig) in _NO_ANSWER, reason


def _code(error: BaseException | None) -> int | None:
    """The server's (or the client library's) error number of a driver's error."""
    arguments = getattr(error, "args", ())
    return arguments[0] if arguments and isinstance(arguments[0], int) else None
