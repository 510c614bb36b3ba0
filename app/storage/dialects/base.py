"""The dialect interface, with the behaviour most databases share."""

from __future__ import annotations

import os
import socket
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol

from sqlalchemy.engine import Engine
from sqlalchemy.exc import DBAPIError
from sqlalchemy.sql.dml import Insert

from app.config import DEFAULT_LOCK_TIMEOUT, DEFAULT_STATEMENT_TIMEOUT
from app.domain.errors import StorageUnavailable
from app.domain.messages import Finish, Offer
from app.storage import claims
from app.storage.connection import (
    BoundReached,
    Connection,
    Connections,
    KeyTaken,
    SchemaMissing,
    TransientConflict,
)
from app.storage.statements import Statements, resolved
from app.storage.statements.common import Removal

# Opening a connection gives up after this long (a server that accepts TCP but never
# answers, say).
CONNECT_TIMEOUT_SECONDS = 5
# A statement the database has not answered this long after its own statement bound
# would have cancelled it is given up: the database, or the network to it, went silent.
ANSWER_GRACE_SECONDS = 2.0
# A pooled connection idle for longer than this is pinged before use: a proxy or the
# network may have dropped it meanwhile (PostgreSQL's pool and SQLAlchemy's engines alike).
PING_AFTER_IDLE_SECONDS = 1.0
# TCP keepalives: a connection silent for 5 s is probed every 2 s, and the kernel
# closes one whose probes or data go unacknowledged for 10 s (TCP_USER_TIMEOUT), so a
# peer lost without a reset is noticed within about 15 s even between statements.
KEEPALIVE_IDLE_SECONDS = 5
KEEPALIVE_INTERVAL_SECONDS = 2
KEEPALIVE_PROBES = 3
UNACKNOWLEDGED_SECONDS = 10


@dataclass(frozen=True, slots=True)
class Bounds:
    """How long storage waits on the database, in seconds (Settings.lock_timeout and
    statement_timeout)."""

    # For a lock another transaction holds (and, in StorageCalls, for a connection).
    lock_wait: float = DEFAULT_LOCK_TIMEOUT
    # For one statement to finish; the database cancels it after this.
    statement: float = DEFAULT_STATEMENT_TIMEOUT

    @property
    def answer_deadline(self) -> float:
        """Seconds after which the client gives up on a statement without an answer."""
        return self.statement + ANSWER_GRACE_SECONDS


def first_line(error: BaseException | None) -> str:
    """An error's first line of text (a driver's messages may run to several)."""
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__


def keep_alive(descriptor: int) -> None:
    """Turn on the keepalives above for a connected TCP socket (not for a Unix socket)."""
    options = (
        (socket.SOL_SOCKET, "SO_KEEPALIVE", 1),
        (socket.IPPROTO_TCP, "TCP_KEEPIDLE", KEEPALIVE_IDLE_SECONDS),
        (socket.IPPROTO_TCP, "TCP_KEEPINTVL", KEEPALIVE_INTERVAL_SECONDS),
        (socket.IPPROTO_TCP, "TCP_KEEPCNT", KEEPALIVE_PROBES),
        (socket.IPPROTO_TCP, "TCP_USER_TIMEOUT", UNACKNOWLEDGED_SECONDS * 1000),
    )
    with socket.socket(fileno=os.dup(descriptor)) as connected:
        if connected.family not in (socket.AF_INET, socket.AF_INET6):
            return
        for level, name, value in options:
            if hasattr(socket, name):  # Linux has them all
                connected.setsockopt(level, getattr(socket, name), value)


@dataclass(frozen=True, slots=True)
class LockAcknowledgement:
    """One caller's acknowledgement: what `lock_id` holds in `queue` (of `keys`, or all of it)."""

    queue: str
    lock_id: str
    now: int
    keys: tuple[str, ...] | None = None


def first_of_each(rows: Sequence[dict[str, Any]], inserted: set[tuple[str, str]]) -> list[bool]:
    """For each row, in order, whether it went in: its (queue, key) did, and no row before
    it had them (a key offered twice went in once, as the first)."""
    went_in = []
    seen: set[tuple[str, str]] = set()
    for row in rows:
        pair = (row["pKind"], row["pKey"])
        went_in.append(pair in inserted and pair not in seen)
        seen.add(pair)
    return went_in


class PeerEvents(Protocol):
    """What a process's link to its peers reports (the app's metrics listen)."""

    def listener_connected(self, connected: bool) -> None: ...

    def listener_reconnected(self) -> None: ...

    def peers_told(self, names: int) -> None: ...


class PeerLink(Protocol):
    """How a process tells the other processes on its database which queues may have news,
    and hears theirs (the queue service's `Peers`, with its start and stop)."""

    def tell(self, queue: str | None) -> None: ...

    def start(self) -> None: ...

    async def stop(self) -> None: ...


class Dialect:
    """What one database does differently; defaults fit databases without `UPDATE … RETURNING`."""

    name = "generic"
    # Execution options for a read or a single-statement write that needs no
    # explicit transaction (one round trip where the driver supports it).
    single_statement_options: ClassVar[dict[str, Any]] = {}
    # Execution options for a transaction that only reads.
    read_options: ClassVar[dict[str, Any]] = {}
    # Every room's statements, a dialect's variants in place of the shared ones: each
    # dialect module's STATEMENTS, resolved (app/storage/statements/__init__.py).
    statements: ClassVar[Statements] = resolved({})
    # The largest statement the server takes, where it has a limit (bytes, roughly).
    max_statement_bytes: int | None = None
    # Whether `claim` is one statement, which can then run without BEGIN/COMMIT.
    claims_in_one_statement = False
    # Whether `removed_keys` is one statement, likewise.
    removes_keys_in_one_statement = False
    # Whether the calls shared by many callers (`insert_offers`, `acknowledge_locks`,
    # `release_locks`) are one statement each, likewise.
    shares_one_statement = False
    # First occurrences per transaction of `insert_bulk`, where the dialect has that
    # bulk path for offer_bulk; None: offer_bulk is offer_many.
    bulk_rows: int | None = None

    def __init__(self, bounds: Bounds | None = None) -> None:
        self.bounds = bounds or Bounds()

    def session_settings(self, *, statements: bool = True) -> dict[str, float]:
        """The server's settings that bound a session of the service, by their names, set as
        each connection opens: how long a transaction may stay idle (the statement bound +
        2 s: only a client gone silent mid-transaction leaves one idle that long; the server
        then ends the session, and its locks and snapshot go) and, unless `statements` is
        False, how long a statement may run and wait for a lock. Every connection the
        service opens takes its bounds from here (decision 12; README, "Operations"); empty
        where the database has no sessions to bound (SQLite)."""
        return {}

    def engine_options(self, *, statements: bool = True, url: str | None = None) -> dict[str, Any]:
        """Extra keyword arguments for `create_engine`: its connections' `connect_args` set
        `session_settings(statements=statements)` as they open, after what the database
        URL `url` itself sets for a session, if it does. `statements=False` is for work
        whose statements may run long (the migrations, the report's reads): the service
        sets no bound on a statement's time then (the server's or the role's own applies)."""
        return {}

    def configure_engine(self, engine: Engine) -> None:
        """Install per-connection set-up (pragmas, transaction modes) on a new engine."""

    def connections(self, url: str, size: int) -> Connections | None:
        """The connections storage runs its work on, at most `size` at once, to the database
        at `url`, where the dialect has its own; None: a SQLAlchemy engine's, each call on a
        thread (app/storage/engine.py)."""
        return None

    def peers(
        self, url: str, woken: Callable[[str | None], None], events: PeerEvents
    ) -> PeerLink | None:
        """The link to the other processes on the database, calling `woken(queue)` (None:
        every queue) when they tell of news; None where the database has no way (their
        long polls rely on re-checks)."""
        return None

    def ping(self, engine: Engine) -> Callable[[Any], object]:
        """The ping of a pooled connection in doubt at checkout (see engine.py): the
        driver's own here, within its read timeout."""
        return engine.dialect.do_ping

    async def insert_many(
        self, connection: Connection, insert_one: Insert, rows: list[dict[str, Any]]
    ) -> Sequence[str]:
        """Insert rows of one queue whose keys are free, in one statement; the keys that went in.

        `insert_one` is the single-row INSERT that skips duplicates, with RETURNING
        the key (messages' offer_insert); SQLAlchemy sends it for many rows as
        multi-row VALUES.
        """
        return (await connection.execute(insert_one, rows)).scalars().all()

    async def insert_offers(
        self, connection: Connection, insert_one: Insert, rows: Sequence[dict[str, Any]]
    ) -> list[bool]:
        """Insert the rows (of one queue or several, a key perhaps twice) whose keys are
        free, in the caller's transaction; for each, in order, whether it went in (a key
        twice: the first). Callers' offers that arrived together
        (app/storage/coalescing.py); here one `insert_many` per queue."""
        inserted: set[tuple[str, str]] = set()
        by_queue: dict[str, list[dict[str, Any]]] = {}
        for row in rows:
            by_queue.setdefault(row["pKind"], []).append(row)
        for queue, of_queue in by_queue.items():
            keys = await self.insert_many(connection, insert_one, of_queue)
            inserted.update((queue, key) for key in keys)
        return first_of_each(rows, inserted)

    async def acknowledge_locks(
        self, connection: Connection, acknowledgements: Sequence[LockAcknowledgement], record: bool
    ) -> list[list[str]]:
        """Delete what each lock still holds (of its keys, where it names some), recorded in
        the history as acknowledged when `record`, in the caller's transaction; for each,
        in order, the keys it deleted. Callers' acknowledgements that arrived together
        (app/storage/coalescing.py); here one removal each, in order."""
        deleted = []
        for acknowledgement in acknowledgements:
            removal, parameters = self.acknowledging(acknowledgement)
            if record:
                parameters |= {"outcome": Finish.ACKNOWLEDGED.value, "now": acknowledgement.now}
            deleted.append(await self.removed_keys(connection, removal, parameters, record=record))
        return deleted

    def acknowledging(self, acknowledgement: LockAcknowledgement) -> tuple[Removal, dict[str, Any]]:
        """The removal of what `acknowledgement` names (its lock's messages, or those of its
        keys), and its parameters, the history's outcome and time aside."""
        parameters: dict[str, Any] = {
            "queue": acknowledgement.queue,
            "lock_id": acknowledgement.lock_id,
        }
        if acknowledgement.keys is None:
            return self.statements.leases.lock_acknowledge, parameters
        parameters["keys"] = list(acknowledgement.keys)
        return self.statements.leases.keyed_locks.acknowledge, parameters

    async def release_locks(
        self, connection: Connection, releases: Sequence[tuple[str, str, int]]
    ) -> list[int]:
        """Give back what each lock (queue, lock id, due time) holds, due again at its time,
        in the caller's transaction; for each, in order, how many messages. Callers'
        releases that arrived together; here one statement each, in order."""
        released = []
        for queue, lock_id, at in releases:
            parameters = {"queue": queue, "lock_id": lock_id, "at": at}
            release = self.statements.leases.lock_release
            released.append((await connection.execute(release, parameters)).rowcount)
        return released

    async def insert_bulk(
        self, connection: Connection, queue: str, offers: Sequence[Offer], now: int
    ) -> Sequence[str]:
        """Insert `offers` (distinct keys, at most `bulk_rows`) whose keys are free, in the
        caller's transaction, in input order; the keys that went in. Only where
        `bulk_rows` is set."""
        raise NotImplementedError

    async def claim(self, connection: Connection, parameters: dict) -> list[claims.ClaimedRow]:
        """Lease up to `limit` due rows of `queue` to `lock_id` until `lease_until`, while
        their answer fits in `max_bytes` (claims.answer_length); each with its payload, or
        None where it was too large to read here (see leases' claimed_payloads)."""
        return await claims.claim_select_then_update(connection, self.statements.leases, parameters)

    def recorded_delete(self, removal: Removal) -> Insert | None:
        """One statement that records `removal`'s rows in the history and deletes them, or
        None: then the store runs its INSERT and its DELETE in one transaction."""
        return None

    async def remove_recorded(
        self, connection: Connection, removal: Removal, parameters: dict
    ) -> int:
        """Record `removal`'s rows in the history and delete them, in the caller's
        transaction (when `recorded_delete` gave no single statement); how many.

        Here the INSERT … SELECT, then the DELETE: right where writers are serialized
        (SQLite). A database where another transaction can change the rows between
        the two reads must do better."""
        await connection.execute(removal.record, parameters)
        return (await connection.execute(removal.delete, parameters)).rowcount

    async def removed_keys(
        self, connection: Connection, removal: Removal, parameters: dict, *, record: bool
    ) -> list[str]:
        """Remove what `removal` matches (at most the 1000 keys it names, one row each), in
        the caller's transaction, recording it in the history when `record`; the keys
        removed.

        Here the keys are read, then the rows removed: right where writers are
        serialized (SQLite). A database where another transaction can change the rows
        between the two must remove and read in one statement."""
        keys = list((await connection.execute(removal.keys, parameters)).scalars())
        if record:
            await self.remove_recorded(connection, removal, parameters)
        else:
            await connection.execute(removal.delete, parameters)
        return keys

    async def release_due(
        self, connection: Connection, parameters: dict, due: dict[int, int]
    ) -> None:
        """Release the rows `due` maps (id → due time; locked and read in this transaction)
        that the lock ("queue", "lock_id") holds, each due at its time.

        Here with leases' keyed_locks.release_rows, one statement per distinct due time:
        one for a release with a fixed delay, one per delivery count for a policy
        without jitter."""
        by_time: dict[int, list[int]] = {}
        for row_id, at in due.items():
            by_time.setdefault(at, []).append(row_id)
        release_rows = self.statements.leases.keyed_locks.release_rows
        for at, ids in by_time.items():
            await connection.execute(release_rows, {**parameters, "at": at, "ids": ids})

    async def remove_in_pages(
        self, connection: Connection, removal: Removal, parameters: dict, *, record: bool
    ) -> int:
        """Remove every row `removal` matches, however many (a purge), in the caller's
        transaction, recording them in the history when `record`; how many.

        No statement may outlast the statement bound, so a database that has one
        removes page by page. Here in one go: right for SQLite, which has none."""
        if record:
            return await self.remove_recorded(connection, removal, parameters)
        return (await connection.execute(removal.delete, parameters)).rowcount

    def check_payload(self, payload: bytes) -> None:
        """Raise PayloadTooLarge for a stored payload the database cannot take."""

    def payload_digest(self, payload: bytes) -> bytes | str:
        """What messages' stored_offers' "digest" holds for a row storing `payload`: here the
        payload itself."""
        return payload

    def translated(self, error: BaseException, disconnected: bool) -> BaseException:
        """What a driver's `error` (of a statement, or of opening or ending a connection)
        means to storage, decided here once: the runner's TransientConflict or KeyTaken,
        the domain's StorageUnavailable (SchemaMissing, for a database never migrated), or
        the error itself, a bug. `disconnected`: the connection was lost with it."""
        if self.is_retryable(error):
            return TransientConflict(first_line(error))
        if self.is_unique_violation(error):
            return KeyTaken(first_line(error))
        if self.is_schema_missing(error):
            return SchemaMissing("the database schema is not migrated: run `hourglass migrate`")
        if not disconnected and self.is_bound_reached(error):
            return BoundReached("the database is busy: a lock or statement bound was reached")
        if self.is_unavailable(error, disconnected):
            return StorageUnavailable("the database is unavailable; retry shortly")
        return error

    def is_unique_violation(self, error: BaseException) -> bool:
        """The statement would have written a unique key that exists."""
        return False

    def is_retryable(self, error: BaseException) -> bool:
        """A transient conflict (deadlock, serialization failure): run the transaction again."""
        return False

    def is_unavailable(self, error: BaseException, disconnected: bool) -> bool:
        """The database cannot be reached or cannot serve now: the client should retry later."""
        return disconnected

    def is_schema_missing(self, error: BaseException) -> bool:
        """The message table does not exist: the database was never migrated."""
        return False

    def is_bound_reached(self, error: BaseException) -> bool:
        """A lock or statement bound of the session was reached, and only the statement (or
        its transaction) was given up: the connection serves on."""
        return False

    def is_refused(self, error: BaseException) -> bool:
        """The session's user may not read what the statement reads (a view of the server's
        own state that needs a privilege the service's user need not have)."""
        return False

    def connect_failure(self, error: DBAPIError) -> tuple[bool, str]:
        """Why opening a connection failed, in the driver's words, and whether nothing
        answered (nothing listens, an unknown host, a server starting up: worth waiting
        for) rather than the database saying no (a password, a database name: not)."""
        return error.connection_invalidated, first_line(error.orig)
