"""PostgreSQL's dialect: ON CONFLICT DO NOTHING, the poll as one UPDATE … FROM … RETURNING,
lists bound as arrays (the direct path has no expanding IN). Its variants of the rooms'
statements are in this package's module of each room (STATEMENTS gathers them); here, how
they run, the sessions' settings and bounds, and what its SQLSTATEs mean."""

from __future__ import annotations

import hashlib
from collections import Counter
from collections.abc import Callable, Hashable, Sequence
from typing import Any, ClassVar, TypeVar

import psycopg
from psycopg.types.array import ListBinaryDumper
from sqlalchemy import event
from sqlalchemy.dialects.postgresql.psycopg import dialect as postgresql_dialect
from sqlalchemy.engine import Engine, make_url
from sqlalchemy.exc import DBAPIError
from sqlalchemy.sql.dml import Insert

from app.domain.messages import Offer
from app.storage import claims
from app.storage.connection import Connection
from app.storage.dialects.base import (
    CONNECT_TIMEOUT_SECONDS,
    KEEPALIVE_IDLE_SECONDS,
    KEEPALIVE_INTERVAL_SECONDS,
    KEEPALIVE_PROBES,
    UNACKNOWLEDGED_SECONDS,
    Dialect,
    LockAcknowledgement,
    PeerEvents,
    PeerLink,
    first_line,
    first_of_each,
)
from app.storage.dialects.postgresql import (
    cron,
    groups,
    leases,
    lists,
    messages,
    removals,
    table_health,
)
from app.storage.dialects.postgresql.direct import DirectConnection, DirectPool
from app.storage.dialects.postgresql.peers import PostgresPeers
from app.storage.statements import Variants, resolved
from app.storage.statements.common import Removal

# Its variants of the rooms' statements, by room, each from its module beside this one.
STATEMENTS: Variants = {
    "groups": groups.VARIANTS,
    "messages": messages.VARIANTS,
    "leases": leases.VARIANTS,
    "cron": cron.VARIANTS,
    "lists": lists.VARIANTS,
    # The statistics of the tables and what holds back their vacuum.
    "table_health": table_health.VARIANTS,
}

# Plan every execution for its own parameters. psycopg prepares a statement after
# five runs, and PostgreSQL may then switch to a generic plan built from the
# table's statistics at that moment: planned while a queue was empty, the
# existing-keys lookup became a sequential scan, and batch offers into a growing
# table ran at a fifth of their speed until the next ANALYZE. A queue table goes
# from empty to millions of rows and back, so no plan made for one size is safe for
# another; planning these small statements costs microseconds (statistics gone
# stale under a bulk load: docs/decisions/0008-batch-offers-insert-first.md).
SESSION_OPTIONS = "-c plan_cache_mode=force_custom_plan"

# SQLSTATEs worth running the transaction again for: serialization failure, deadlock.
_RETRYABLE_SQLSTATES = {"40001", "40P01"}
# A bound of the session was reached (503): lock_not_available (lock_timeout),
# query_canceled (statement_timeout), idle_in_transaction_session_timeout.
_BOUND_REACHED_SQLSTATES = {"55P03", "57014", "25P03"}
_STATEMENT_BOUNDS = {"55P03", "57014"}
_UNDEFINED_TABLE = "42P01"
_UNIQUE_VIOLATION = "23505"
_INSUFFICIENT_PRIVILEGE = "42501"


class PostgreSQLDialect(Dialect):
    name = "postgresql"
    statements = resolved(STATEMENTS)
    removes_keys_in_one_statement = True
    shares_one_statement = True
    single_statement_options: ClassVar[dict[str, Any]] = {"isolation_level": "AUTOCOMMIT"}
    read_options: ClassVar[dict[str, Any]] = {"isolation_level": "AUTOCOMMIT"}
    claims_in_one_statement = True
    bulk_rows = messages.BULK_ROWS

    def payload_digest(self, payload: bytes) -> bytes:
        return hashlib.sha256(payload).digest()

    def session_settings(self, *, statements: bool = True) -> dict[str, float]:
        bounds = self.bounds
        # A transaction left idle this long belongs to a client that went silent mid-way:
        # the server ends the session (25P03), and its row locks and snapshot go with it.
        settings: dict[str, float] = {
            "idle_in_transaction_session_timeout": _ms(bounds.answer_deadline)
        }
        if statements:
            settings |= {
                "lock_timeout": _ms(bounds.lock_wait),
                "statement_timeout": _ms(bounds.statement),
            }
        return settings

    def engine_options(self, *, statements: bool = True, url: str | None = None) -> dict[str, Any]:
        # The pool's and the peers' sessions (connect_arguments) and the engines': libpq
        # sends the options in its start-up packet, so no statement runs before them. A
        # URL's own `options` (`?options=-c search_path=…`) come first: a `connect_args`
        # value replaces the URL's, and where a setting is given twice the last one holds.
        bounds = self.session_settings(statements=statements)
        own = make_url(url).query.get("options") if url is not None else None
        options = f"{SESSION_OPTIONS} {server_options(bounds)}"
        return {
            "connect_args": {
                "connect_timeout": CONNECT_TIMEOUT_SECONDS,
                "options": f"{own} {options}" if isinstance(own, str) and own else options,
                "keepalives": 1,
                "keepalives_idle": KEEPALIVE_IDLE_SECONDS,
                "keepalives_interval": KEEPALIVE_INTERVAL_SECONDS,
                "keepalives_count": KEEPALIVE_PROBES,
                "tcp_user_timeout": UNACKNOWLEDGED_SECONDS * 1000,
            }
        }

    def configure_engine(self, engine: Engine) -> None:
        # A SQLAlchemy engine of this dialect is the start-up check's and the tests': send
        # list parameters in binary there too, as DirectPool does.
        @event.listens_for(engine, "connect")
        def _on_connect(dbapi_connection: Any, _record: object) -> None:
            connection = getattr(dbapi_connection, "driver_connection", dbapi_connection)
            connection.adapters.register_dumper(list, ListBinaryDumper)

    def connect_arguments(self, url: str) -> dict[str, Any]:
        """psycopg's keyword arguments for a connection to `url`, with the session's settings
        and bounds (engine_options)."""
        _, from_url = postgresql_dialect().create_connect_args(make_url(url))
        return {**from_url, **self.engine_options(url=url)["connect_args"]}

    def connections(self, url: str, size: int) -> DirectPool:
        """psycopg's asyncio connections, awaited directly (direct.py, beside this module)."""
        return DirectPool(
            self.connect_arguments(url), size, self, connect_wait=self.bounds.lock_wait
        )

    def peers(self, url: str, woken: Callable[[str | None], None], events: PeerEvents) -> PeerLink:
        """LISTEN/NOTIFY on connections of their own, opened as the pool's are (decision 19)."""
        return PostgresPeers(self.connect_arguments(url), woken, events)

    async def insert_many(
        self, connection: Connection, insert_one: Insert, rows: list[dict[str, Any]]
    ) -> Sequence[str]:
        parameters = {
            "keys": [row["pKey"] for row in rows],
            "payloads": [row["payload"] for row in rows],
            "scheduled_ats": [row["scheduledAt"] for row in rows],
            "priorities": [row["priority"] for row in rows],
            "groups": [row["messageGroup"] for row in rows],
            "expires_ats": [row["expiresAt"] for row in rows],
            "traces": [row["trace"] for row in rows],
            "queue": rows[0]["pKind"],
            "now": rows[0]["createdAt"],
        }
        return (await connection.execute(messages.insert_rows, parameters)).scalars().all()

    async def insert_offers(
        self, connection: Connection, insert_one: Insert, rows: Sequence[dict[str, Any]]
    ) -> list[bool]:
        parameters = {
            "keys": [row["pKey"] for row in rows],
            "queues": [row["pKind"] for row in rows],
            "payloads": [row["payload"] for row in rows],
            "scheduled_ats": [row["scheduledAt"] for row in rows],
            "nows": [row["createdAt"] for row in rows],
            "priorities": [row["priority"] for row in rows],
            "expires_ats": [row["expiresAt"] for row in rows],
            "traces": [row["trace"] for row in rows],
        }
        inserted = await connection.execute(messages.insert_offers, parameters)
        return first_of_each(rows, {(row.pKind, row.pKey) for row in inserted})

    async def acknowledge_locks(
        self, connection: Connection, acknowledgements: Sequence[LockAcknowledgement], record: bool
    ) -> list[list[str]]:
        keyed = [each for each in acknowledgements if each.keys is not None]
        # Each lock (of each key) once, the first caller's: see _firsts.
        whole = _firsts(
            acknowledgements,
            lambda each: (each.queue, each.lock_id) if each.keys is None else None,
        )
        gone: list[tuple[str, str, str]] = []
        if whole:
            parameters = {
                "queues": [each.queue for each in whole],
                "lock_ids": [each.lock_id for each in whole],
                "nows": [each.now for each in whole],
            }
            rows = await connection.execute(
                leases.ACKNOWLEDGING[False, record], {**parameters, **leases.ACKNOWLEDGED}
            )
            gone += [(row.pKind, row.lockUuid, row.pKey) for row in rows]
        if keyed:
            named = _firsts(
                [(each, key) for each in keyed for key in each.keys or ()],
                lambda named: (named[0].queue, named[0].lock_id, named[1]),
            )
            parameters = {
                "queues": [each.queue for each, _ in named],
                "lock_ids": [each.lock_id for each, _ in named],
                "keys": [key for _, key in named],
                "nows": [each.now for each, _ in named],
            }
            rows = await connection.execute(
                leases.ACKNOWLEDGING[True, record], {**parameters, **leases.ACKNOWLEDGED}
            )
            gone += [(row.pKind, row.lockUuid, row.pKey) for row in rows]
        return _deleted_by_each(acknowledgements, gone)

    async def release_locks(
        self, connection: Connection, releases: Sequence[tuple[str, str, int]]
    ) -> list[int]:
        firsts = _firsts(releases, lambda release: release[:2])  # see _firsts
        parameters = {
            "queues": [queue for queue, _, _ in firsts],
            "lock_ids": [lock_id for _, lock_id, _ in firsts],
            "nows": [at for _, _, at in firsts],
        }
        rows = await connection.execute(leases.release_locks, parameters)
        released = Counter((row.pKind, row.lockUuid) for row in rows)
        counts = []
        for queue, lock_id, _ in releases:
            counts.append(released.pop((queue, lock_id), 0))  # a lock twice: the first
        return counts

    async def insert_bulk(
        self, connection: Connection, queue: str, offers: Sequence[Offer], now: int
    ) -> Sequence[str]:
        await connection.execute(messages.create_staging, {})
        assert isinstance(connection, DirectConnection)  # PostgreSQL's connections are
        rows = [
            (
                offer.key,
                offer.payload,
                offer.scheduled_at,
                offer.stored_priority,
                offer.group,
                offer.expires_at,
                None if offer.trace is None else offer.trace.stored(),
            )
            for offer in offers
        ]
        await connection.copy_rows(messages.copy_staging, messages.STAGING_TYPES, rows)
        inserted = await connection.execute(messages.insert_staged, {"queue": queue, "now": now})
        return inserted.scalars().all()

    async def claim(self, connection: Connection, parameters: dict) -> list[claims.ClaimedRow]:
        claim = self.statements.leases.claims
        statement = claim["max_deliveries" in parameters, parameters["limit"] > 1]
        return [
            claims.ClaimedRow(
                id=row.id,
                key=row.pKey,
                payload=row.payload,
                payload_bytes=row.payload_bytes,
                previous_scheduled_at=row.previous_scheduled_at,
                scheduled_at_initially=row.scheduledAtInitially,
                created_at=row.createdAt,
                previous_lock_id=row.previous_lock_id,
                previous_deliveries=row.previous_deliveries,
                previous_first_delivered_at=row.previous_first_delivered_at,
                previous_last_delivered_at=row.previous_last_delivered_at,
                dead_lettered_from=row.deadLetteredFrom,
                priority=row.priority,
                group=row.messageGroup,
                expires_at=row.expiresAt,
                trace=row.trace,
            )
            for row in await connection.execute(statement, parameters)
        ]

    def recorded_delete(self, removal: Removal) -> Insert:
        return removals.recorded_delete(removal)

    async def removed_keys(
        self, connection: Connection, removal: Removal, parameters: dict, *, record: bool
    ) -> list[str]:
        removed = await connection.execute(removals.removed_keys(removal, record), parameters)
        return list(removed.scalars())

    async def release_due(
        self, connection: Connection, parameters: dict, due: dict[int, int]
    ) -> None:
        if due:
            ids, ats = zip(*due.items(), strict=True)
            await connection.execute(
                leases.release_due, {**parameters, "ids": list(ids), "ats": list(ats)}
            )

    async def remove_in_pages(
        self, connection: Connection, removal: Removal, parameters: dict, *, record: bool
    ) -> int:
        # Rows offered meanwhile are not among the cursor's: they stay.
        await connection.execute(removals.removal_cursor(removal), parameters)
        removed = 0
        while ids := (await connection.execute(removals.fetch_page, {})).scalars().all():
            page = {**parameters, "ids": ids}
            removed += (
                await connection.execute(removals.removal_page(removal, record), page)
            ).scalar() or 0
        await connection.execute(removals.close_cursor, {})
        return removed

    def is_unique_violation(self, error: BaseException) -> bool:
        return getattr(error, "sqlstate", None) == _UNIQUE_VIOLATION

    def is_retryable(self, error: BaseException) -> bool:
        return getattr(error, "sqlstate", None) in _RETRYABLE_SQLSTATES

    def is_unavailable(self, error: BaseException, disconnected: bool) -> bool:
        # Connection failures, admin shutdown, cancelled statements: all OperationalError.
        if disconnected:
            return True
        if getattr(error, "sqlstate", None) in _BOUND_REACHED_SQLSTATES:
            return True
        driver_error = (psycopg.OperationalError, psycopg.InterfaceError)
        return isinstance(error, driver_error) and not self.is_retryable(error)

    def is_schema_missing(self, error: BaseException) -> bool:
        return getattr(error, "sqlstate", None) == _UNDEFINED_TABLE

    def is_bound_reached(self, error: BaseException) -> bool:
        # lock_timeout and statement_timeout; an idle transaction's timeout ends the session.
        return getattr(error, "sqlstate", None) in _STATEMENT_BOUNDS

    def is_refused(self, error: BaseException) -> bool:
        return getattr(error, "sqlstate", None) == _INSUFFICIENT_PRIVILEGE

    def connect_failure(self, error: DBAPIError) -> tuple[bool, str]:
        # psycopg gives no SQLSTATE for a failed connection, only libpq's text: `connection
        # failed: connection to server at "h", port 5432 failed: FATAL:  role "x" does not
        # exist` when the server said no, `… failed: Connection refused` when none answered.
        text = first_line(error.orig)
        reason = text.rpartition(" failed: ")[2] or text
        answered = reason.startswith("FATAL:")
        reason = reason.removeprefix("FATAL:").strip()
        return (not answered or reason.startswith(_NOT_YET_ACCEPTING)), reason


T = TypeVar("T")

# What a server says while it cannot take connections for a while (starting, recovering,
# full): waiting for it helps.
_NOT_YET_ACCEPTING = (
    "the database system is starting up",
    "the database system is not yet accepting connections",
    "the database system is in recovery mode",
    "the database system is shutting down",
    "sorry, too many clients already",
)


def _firsts(items: Sequence[T], identity: Callable[[T], Hashable | None]) -> list[T]:
    """The first item of each identity, in order (those whose identity is None left out).

    A row that two callers' elements of a shared statement name (one lock released or
    acknowledged twice, one key of a lock twice) joins both, and PostgreSQL changes it
    once, with the values of whichever joined row it meets first (under the hash join
    of a small table, the later caller's). The row would then be due at the later release's time, or recorded at
    the later acknowledgement's, while the answer gives it to the first. The later
    elements can change nothing the first does not, so only the first goes in."""
    seen: set[Hashable] = set()
    firsts = []
    for item in items:
        key = identity(item)
        if key is not None and key not in seen:
            seen.add(key)
            firsts.append(item)
    return firsts


def _deleted_by_each(
    acknowledgements: Sequence[LockAcknowledgement], gone: Sequence[tuple[str, str, str]]
) -> list[list[str]]:
    """For each acknowledgement, in order, the keys of `gone` (queue, lock, key: the rows
    deleted) that it asked for; a row two of them asked for is the first's."""
    left = set(gone)
    held: dict[tuple[str, str], list[str]] = {}
    for queue, lock_id, key in gone:
        held.setdefault((queue, lock_id), []).append(key)
    deleted = []
    for each in acknowledgements:
        asked = held.get((each.queue, each.lock_id), []) if each.keys is None else each.keys
        mine = [key for key in dict.fromkeys(asked) if (each.queue, each.lock_id, key) in left]
        left.difference_update((each.queue, each.lock_id, key) for key in mine)
        deleted.append(mine)
    return deleted


def server_options(settings: dict[str, float]) -> str:
    """Settings as libpq's `options` (and pgJDBC's): `-c name=value` each."""
    return " ".join(f"-c {name}={value}" for name, value in settings.items())


def _ms(seconds: float) -> int:
    """A duration setting's value: whole milliseconds, at least one (0 turns a bound off)."""
    return max(1, round(seconds * 1000))
