"""MariaDB (10.6+), through mysqlclient: what differs from the generic statements (its
variants of the rooms' statements in STATEMENTS, and how they run).

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
from collections.abc import Sequence
from functools import cache
from typing import Any, ClassVar

from sqlalchemy import (
    Select,
    bindparam,
    column,
    delete,
    event,
    func,
    literal,
    literal_column,
    null,
    select,
    table,
)
from sqlalchemy.dialects.mysql import insert
from sqlalchemy.engine import Engine
from sqlalchemy.exc import DBAPIError
from sqlalchemy.sql.dml import ReturningDelete

from app.domain.errors import PayloadTooLarge
from app.storage.connection import Connection
from app.storage.dialects.base import CONNECT_TIMEOUT_SECONDS, Dialect, first_line, keep_alive
from app.storage.statements import Variants, leases, resolved
from app.storage.statements.common import (
    HISTORY_COLUMNS,
    HISTORY_SOURCE,
    Removal,
    columns,
    keys_in_queue,
)
from app.storage.statements.cron import build_entry_runs
from app.storage.statements.groups import build_waiting
from app.storage.statements.lists import ListReads
from app.storage.tables import (
    GROUP_INDEX,
    LOCK_INDEX,
    POLL_INDEX,
    delivery_history,
    message_groups,
)
from app.storage.tables import delayed_queue as queue_table

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
# Rows per DELETE … RETURNING of a removal (a purge may remove millions).
_REMOVAL_BATCH = 1000
# Set on every connection, with the bounds (session_settings). SHOW WARNINGS lists at
# most max_error_count rows (64 by default), fewer than a 200-row INSERT IGNORE over
# existing keys raises: every one must be seen.
_SESSION = {"max_error_count": 65535}

_innodb_transactions = table(
    "INNODB_TRX",
    column("trx_started"),
    column("trx_mysql_thread_id"),
    schema="information_schema",
)
_innodb_metrics = table(
    "INNODB_METRICS", column("NAME"), column("COUNT"), schema="information_schema"
)
# What holds back InnoDB's purge: the oldest transaction open (its read view keeps the
# undo log of every later one), this read's own left out. One row even when none is open;
# InnoDB counts no transaction ages (a read-only transaction's id is made up).
_vacuum_holders = select(
    literal("transaction").label("kind"),
    func.coalesce(
        func.max(
            func.timestampdiff(
                literal_column("SECOND"), _innodb_transactions.c.trx_started, func.now()
            )
        ),
        0,
    ).label("seconds"),
    null().label("transactions"),
    null().label("horizon"),
).where(_innodb_transactions.c.trx_mysql_thread_id != func.connection_id())
# Purge's lag: committed transactions whose undo log is not yet purged, one per
# transaction that wrote however many rows (the history list), which grows while an old
# read view holds them.
_undo_history = select(_innodb_metrics.c.COUNT).where(
    _innodb_metrics.c.NAME == "trx_rseg_history_len"
)

STATEMENTS: Variants = {
    "groups": {
        # The keeper's row of a group, unless it exists (a no-op update: INSERT IGNORE
        # would hide any other error too).
        "group_enlist": insert(message_groups)
        .values(queue=bindparam("queue"), messageGroup=bindparam("group"))
        .on_duplicate_key_update(queue=message_groups.c.queue),
        # A group's waiting messages from the group index, named: given a priority, the
        # optimizer may walk the poll's index instead, every group's waiting messages of it.
        "group_waiting": build_waiting(f"FORCE INDEX ({GROUP_INDEX})"),
    },
    "messages": {
        # INSERT IGNORE, the warnings read after it (the module's docstring).
        "offer_insert": insert(queue_table).prefix_with("IGNORE").returning(columns.pKey),
        # The payload's SHA-256 (hex), not the payload: a re-sent key costs 64 bytes of
        # answer, not up to the payload limit.
        "stored_offers": keys_in_queue(
            columns.pKey,
            func.sha2(columns.payload, 256).label("digest"),
            columns.scheduledAtInitially,
            columns.priority,
            columns.messageGroup,
            columns.expiresAt,
        ),
    },
    "leases": {
        # A poll reads the ten ranges of `priority IN (9, …, 0)` of the poll's index, in
        # its order (no sort), and stops at the LIMIT; named, since the optimizer may
        # otherwise read the queue through ("pKind", "scheduledAt", "id") and sort every
        # due row when the ranges look as large as the queue (as lists did: decision 13).
        "claim_candidates": leases.claim_candidates.with_hint(
            queue_table, f"FORCE INDEX ({POLL_INDEX})"
        ),
        # No partial index of leased messages (revision 0013): a claim in a queue with
        # `max_leased` reads the messages some lock holds, of every queue, through the
        # lock index, rather than every message of its queue not yet due through the
        # poll's (docs/decisions/0026-concurrency-and-rate-limits.md).
        "limits_leased": leases.limits_leased.with_hint(queue_table, f"FORCE INDEX ({LOCK_INDEX})"),
    },
    "cron": {
        # A cron entry's runs: one range of the unique ("pKey", "pKind") index, as issue
        # 14 measured. Given "pKind" as it is, the optimizer takes the list index
        # ("pKind", "pKey") by "pKind" alone (ref, not range: every key of the queue
        # read), so the other columns it compares are wrapped, which keeps their indexes
        # out of the plan.
        "entry_runs": build_entry_runs(unindexed=func.concat),
    },
    "lists": {
        # Lists: cursors written out and indexes named (ListReads): on 1,000,000 messages
        # a page after a cursor in the middle read 500,000 rows, and a page of scheduled
        # messages read every ready one first (decision 13).
        "list_reads": ListReads(expanded=True, forced=True),
    },
    # InnoDB's purge: what holds it back, and how far behind it is.
    "table_health": {"vacuum_holders": _vacuum_holders, "undo_history": _undo_history},
}


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
        # DELETE … RETURNING, then the history rows of exactly what it deleted: at READ
        # COMMITTED an INSERT … SELECT first would read without locking, and a row
        # leased again in between would be recorded but not deleted. An acknowledgement
        # (at most a poll's 1000 messages) takes one DELETE. A larger removal (a purge)
        # goes on in pages of ids, locked in id order, up to the greatest id there was
        # when it began: memory stays bounded, and each page starts where the last one
        # ended instead of stepping again over the rows this transaction deleted.
        return await self._remove_paged(connection, removal, parameters, record=True)

    async def removed_keys(
        self, connection: Connection, removal: Removal, parameters: dict, *, record: bool
    ) -> list[str]:
        # DELETE … RETURNING, then the history rows of exactly what it deleted (as in
        # remove_recorded): reading the keys first would not lock them at READ COMMITTED.
        # The keys a removal names (at most 1000) fit in one DELETE.
        gone = (await connection.execute(self._deleting(removal), parameters)).all()
        if record:
            await self._record(connection, gone, parameters)
        return [row.pKey for row in gone]

    async def remove_in_pages(
        self, connection: Connection, removal: Removal, parameters: dict, *, record: bool
    ) -> int:
        # Without the history too: a DELETE of a whole queue could outlast the
        # statement bound (max_statement_time).
        return await self._remove_paged(connection, removal, parameters, record=record)

    async def _remove_paged(
        self, connection: Connection, removal: Removal, parameters: dict, *, record: bool
    ) -> int:
        gone = (await connection.execute(self._deleting(removal), parameters)).all()
        if record:
            await self._record(connection, gone, parameters)
        removed = len(gone)
        if removed < _REMOVAL_BATCH:
            return removed
        if removal.keys_after is not None:
            return removed + await self._remove_in_key_pages(connection, removal, parameters)
        last = (await connection.execute(_LAST_ID, {})).scalar()
        after = 0
        while True:
            page = {**parameters, "after": after, "last": last}
            ids = (await connection.execute(self._page(removal), page)).scalars().all()
            if not ids:
                return removed
            gone = (
                await connection.execute(self._deleting_ids(removal), {**parameters, "ids": ids})
            ).all()
            if record:
                await self._record(connection, gone, parameters)
            removed += len(gone)
            after = ids[-1]

    async def _remove_in_key_pages(
        self, connection: Connection, removal: Removal, parameters: dict
    ) -> int:
        """The rest of a removal whose rows are one range of keys (a cron entry's runs), in
        pages of that range: paged by id, the optimizer at times read the whole table in
        id order for each page instead (4 s beside 1,000,000 messages, for no row)."""
        removed = 0
        parameters = dict(parameters)
        while True:
            page = (await connection.execute(self._key_page(removal), parameters)).all()
            if not page:
                return removed
            ids = [row.id for row in page]
            gone = (
                await connection.execute(self._deleting_ids(removal), {**parameters, "ids": ids})
            ).all()
            await self._record(connection, gone, parameters)
            removed += len(gone)
            if len(page) < _REMOVAL_BATCH:
                return removed
            parameters[removal.keys_after] = page[-1].pKey

    @staticmethod
    async def _record(connection: Connection, gone: Sequence[Any], parameters: dict) -> None:
        if gone:
            finish = (parameters["outcome"], parameters["now"])
            await connection.execute(
                _RECORD,
                [dict(zip(HISTORY_COLUMNS, (*row, *finish), strict=True)) for row in gone],
            )

    @staticmethod
    @cache
    def _deleting(removal: Removal) -> ReturningDelete[Any]:
        return removal.delete.with_dialect_options(
            mysql_limit=_REMOVAL_BATCH, mariadb_limit=_REMOVAL_BATCH
        ).returning(*(columns[name] for name in HISTORY_SOURCE))

    @staticmethod
    @cache
    def _page(removal: Removal) -> Select:
        """The next ids `removal` matches, in order, locked.

        Read along the primary key from where the last page ended, whatever the
        statistics say: the optimizer otherwise took the queue's own index at times
        and sorted what was left of the queue for every page (up to 0.9 s a page for
        300,000 rows, more with more), where the statement bound allows 10 s."""
        return (
            select(columns.id)
            .with_hint(queue_table, "FORCE INDEX (PRIMARY)")
            .where(
                removal.where,
                columns.id > bindparam("after"),
                columns.id <= bindparam("last"),
            )
            .order_by(columns.id)
            .limit(_REMOVAL_BATCH)
            .with_for_update()
        )

    @staticmethod
    @cache
    def _key_page(removal: Removal) -> Select:
        """The next ids and keys `removal` matches, in key order, locked."""
        return (
            select(columns.id, columns.pKey)
            .where(removal.where)
            .order_by(columns.pKey)
            .limit(_REMOVAL_BATCH)
            .with_for_update()
        )

    @staticmethod
    @cache
    def _deleting_ids(removal: Removal) -> ReturningDelete[Any]:
        """Deleting the rows of a page by id alone: the page's SELECT matched them and
        locks them until the transaction ends, so no other condition is needed, and
        one would let the optimizer read the queue by "pKind" (ref) instead of the ids
        by the primary key, at times (1-4 s a page of 1,000, past the statement bound)."""
        return (
            delete(queue_table)
            .where(columns.id.in_(bindparam("ids", expanding=True)))
            .returning(*(columns[name] for name in HISTORY_SOURCE))
        )

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


# The greatest id there is (a removal in pages goes no further).
_LAST_ID = select(func.max(columns.id))
# The history rows of what a removal deleted, from the rows it returned (executemany).
_RECORD = insert(delivery_history)


def _code(error: BaseException | None) -> int | None:
    """The server's (or the client library's) error number of a driver's error."""
    arguments = getattr(error, "args", ())
    return arguments[0] if arguments and isinstance(arguments[0], int) else None
