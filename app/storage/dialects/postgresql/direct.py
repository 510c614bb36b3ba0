"""PostgreSQL's connections: psycopg's asyncio connections in a pool of the service's own,
each statement awaited directly on the event loop (docs/decisions/0022-one-hop-per-request.md).

No SQLAlchemy engine, pool or greenlet stands between the storage rooms and psycopg: a
statement is a SQLAlchemy Core object compiled once (`DirectStatements`, decision 5) and
sent with `await cursor.execute(…)`. Profiles (bench/ARCHIVE.md) put SQLAlchemy's
execution layer over psycopg at ~200 µs of CPU per statement, and its pool checkout and
the greenlet hops of the earlier direct path at ~18% of an empty poll.

Results are rows as the driver returns them: no result processors run, which is
right for the column types the store reads (integers, strings, bytea, booleans); a
column type that needs converting on the way out would need it.

`DirectPool` is small on purpose: the storage calls' turns (app/storage/calls.py)
already keep the callers within its size, so a checkout takes an idle connection (the
most recently used first) or opens one in the caller's own task, and a database that
does not answer fails that caller at once (503), as it did before. A connection idle for
more than a second, or that the server wrote to while it sat idle (a restart or
pg_terminate_backend leaves a notice or EOF there, seen without a round trip), is
pinged first, and replaced when the ping fails; one that was lost, given up or left in a
transaction is closed instead of going back.

Every round trip has a deadline (`answered_within`): a database, or a network to it,
that goes silent without closing anything would otherwise keep the statement waiting
until the operating system gives up. Cancelling psycopg's coroutine is no way out (it
then sends a cancel request over a new connection and waits for the old one, ~10 s
more), so the socket is shut down instead: the statement fails at once as on a lost
connection, and the connection leaves the pool.

Driver errors are translated here, once, by the dialect (`Dialect.translated`).
"""

from __future__ import annotations

import asyncio
import os
import socket
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager, suppress
from dataclasses import dataclass
from select import POLLIN, poll
from typing import TYPE_CHECKING, Any, TypeVar

import psycopg
from psycopg import pq
from psycopg.rows import namedtuple_row
from psycopg.types.array import ListBinaryDumper
from sqlalchemy.dialects.postgresql.psycopg import dialect as psycopg_dialect
from sqlalchemy.sql import ClauseElement
from sqlalchemy.sql.dml import Insert

from app.domain.errors import StorageUnavailable
from app.storage.connection import Mode, Result
from app.storage.dialects.base import ANSWER_GRACE_SECONDS, PING_AFTER_IDLE_SECONDS

if TYPE_CHECKING:
    from app.storage.dialects.base import Dialect

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class _Compiled:
    statement: ClauseElement  # kept alive, so its id() is never reused while cached
    sql: str
    defaults: dict[str, Any]  # values of literal binds (a CASE's 1 and 0, say)
    processors: dict[str, Any]

    def values(self, parameters: dict[str, Any]) -> dict[str, Any]:
        if not self.defaults and not self.processors:
            return parameters
        values = {**self.defaults, **parameters}
        for name, process in self.processors.items():
            if name in values:
                values[name] = process(values[name])
        return values


class DirectStatements:
    """Core statements compiled once for psycopg; each is given up when it has no answer
    after `answer_deadline` seconds."""

    def __init__(self, answer_deadline: float) -> None:
        self.dialect = psycopg_dialect()
        self.answer_deadline = answer_deadline
        self._compiled: dict[tuple[int, tuple[str, ...]], _Compiled] = {}
        # Called after each statement, like SQLAlchemy's after_cursor_execute.
        self.listeners: list[Callable[[str], object]] = []

    def compiled(self, statement: ClauseElement, parameters: dict[str, Any]) -> _Compiled:
        # An INSERT without explicit values takes its columns from the parameters.
        columns = tuple(parameters) if _values_from_parameters(statement) else ()
        key = (id(statement), columns)
        found = self._compiled.get(key)
        if found is None:
            found = self._compiled[key] = self._compile(statement, columns)
        return found

    def _compile(self, statement: ClauseElement, columns: tuple[str, ...]) -> _Compiled:
        # A SQLCompiler: its attributes below are not on the Compiled it is typed as.
        compiled: Any = statement.compile(dialect=self.dialect, column_keys=list(columns) or None)
        # Refuse what this path does not do, so a test fails instead of a query going wrong.
        if compiled.positiontup is not None or compiled.escaped_bind_names:
            raise NotImplementedError("direct execution needs named parameters")
        if compiled.literal_execute_params or compiled.post_compile_params:
            raise NotImplementedError("direct execution has no expanding IN: bind a list instead")
        defaults = {
            name: bind.effective_value
            for name, bind in compiled.binds.items()
            if not bind.required and name not in columns
        }
        # Conversions the types ask for (bytes wrapped for the driver, say), as SQLAlchemy does.
        processors = dict(compiled._bind_processors)  # no public way to ask
        return _Compiled(statement, compiled.string, defaults, processors)


# The results that carry rows, as psycopg's `Cursor.description` tells them apart.
_ROW_STATUSES = frozenset(
    {pq.ExecStatus.TUPLES_OK, pq.ExecStatus.SINGLE_TUPLE, pq.ExecStatus.TUPLES_CHUNK}
)


def _has_rows(cursor: psycopg.AsyncCursor[Any]) -> bool:
    """Whether the statement answered with rows (even none), as `cursor.description is not
    None` would say without building a Column object per column on every statement
    (~5% of an empty poll's CPU, in a profile)."""
    result = cursor.pgresult
    return result is not None and (bool(result.nfields) or result.status in _ROW_STATUSES)


def _values_from_parameters(statement: ClauseElement) -> bool:
    return isinstance(statement, Insert) and not statement._values and statement.select is None


class _GivenUp:
    """Whether (and after how many seconds) a round trip on a connection was given up."""

    __slots__ = ("at",)

    def __init__(self) -> None:
        self.at: float | None = None


class _Pooled:
    """A connection of the pool, and what the pool knows of it."""

    __slots__ = ("driver", "given_up", "idle_since")

    def __init__(self, driver: psycopg.AsyncConnection[Any]) -> None:
        self.driver = driver
        self.given_up = _GivenUp()
        self.idle_since: float | None = None  # None: never used yet


class DirectConnection:
    """One pooled connection, in autocommit, for one piece of work: statements run as they
    come, and the pool wraps them in BEGIN … COMMIT for a transaction."""

    __slots__ = ("_dialect", "_driver", "_given_up", "_statements")

    def __init__(self, pooled: _Pooled, statements: DirectStatements, dialect: Dialect) -> None:
        self._driver = pooled.driver
        self._given_up = pooled.given_up
        self._statements = statements
        self._dialect = dialect

    async def execute(self, statement: Any, parameters: Any = None) -> Result:
        parameters = parameters or {}
        compiled = self._statements.compiled(statement, parameters)
        values = compiled.values(parameters)
        cursor = self._driver.cursor(row_factory=namedtuple_row)
        try:
            await answered_within(
                self._driver,
                self._statements.answer_deadline,
                cursor.execute(compiled.sql, values),
                self._given_up,
            )
            for listener in self._statements.listeners:
                listener(compiled.sql)
            rows = await cursor.fetchall() if _has_rows(cursor) else []
            return Result(rows, cursor.rowcount)
        except psycopg.Error as error:
            raise self._translated(error) from error
        finally:
            await cursor.close()

    @property
    def driver_connection(self) -> psycopg.AsyncConnection[Any]:
        """psycopg's own connection (the tests read its socket's options)."""
        return self._driver

    async def copy_rows(
        self, statement: str, types: Sequence[str], rows: Sequence[Sequence[Any]]
    ) -> None:
        """Run `statement`, a COPY … FROM STDIN (FORMAT BINARY) of columns of `types`,
        with `rows`."""

        async def copy() -> None:
            async with self._driver.cursor() as cursor, cursor.copy(statement) as copying:
                copying.set_types(types)
                for row in rows:
                    await copying.write_row(row)

        try:
            await answered_within(
                self._driver, self._statements.answer_deadline, copy(), self._given_up
            )
            for listener in self._statements.listeners:
                listener(statement)
        except psycopg.Error as error:
            raise self._translated(error) from error

    async def command(self, command: str) -> None:
        try:
            await answered_within(
                self._driver,
                self._statements.answer_deadline,
                self._driver.execute(command),
                self._given_up,
            )
        except psycopg.Error as error:
            raise self._translated(error) from error

    def _translated(self, error: psycopg.Error) -> BaseException:
        if self._given_up.at is not None:
            error = psycopg.OperationalError(
                f"no answer from the database within {self._given_up.at:g} s: "
                "the connection was closed"
            )
        return self._dialect.translated(error, _lost(self._driver) or self._given_up.at is not None)


def _lost(driver: psycopg.AsyncConnection[Any]) -> bool:
    return driver.closed or driver.broken


class DirectPool:
    """psycopg asyncio connections, at most `size` at once, opened with `connect_arguments`
    when needed and kept while they stay healthy (see the module's docstring)."""

    def __init__(
        self,
        connect_arguments: dict[str, Any],
        size: int,
        dialect: Dialect,
        *,
        connect_wait: float,
    ) -> None:
        self._arguments = {**connect_arguments, "autocommit": True}
        self._dialect = dialect
        self.statements = DirectStatements(dialect.bounds.answer_deadline)
        self._idle: list[_Pooled] = []  # the most recently used last
        self._free = asyncio.Semaphore(size)
        self._connect_wait = connect_wait
        self._closed = False

    @asynccontextmanager
    async def open(self, mode: Mode) -> AsyncIterator[DirectConnection]:
        await self._take_slot()
        try:
            pooled = await self._checkout()
            try:
                connection = DirectConnection(pooled, self.statements, self._dialect)
                if mode == "transaction":
                    await connection.command("BEGIN")
                    try:
                        yield connection
                    except BaseException:
                        if not _lost(pooled.driver):
                            # The first error is the one to tell.
                            with suppress(Exception):
                                await connection.command("ROLLBACK")
                        raise
                    await connection.command("COMMIT")
                else:
                    yield connection
            finally:
                await self._checkin(pooled)
        finally:
            self._free.release()

    async def _take_slot(self) -> None:
        # The storage calls' turns keep callers within the pool (app/storage/calls.py); this
        # is only a backstop for callers without turns (the blocking storage of scripts).
        if not self._free.locked():
            await self._free.acquire()  # free: at once
            return
        try:
            async with asyncio.timeout(self._connect_wait):
                await self._free.acquire()
        except TimeoutError:
            raise StorageUnavailable("the database is busy: no connection free in time") from None

    async def _checkout(self) -> _Pooled:
        while self._idle:
            pooled = self._idle.pop()
            lost = _lost(pooled.driver)  # known lost already: no ping was needed to tell
            try:
                usable = await self._usable(pooled)
            except BaseException:  # cancelled while it pinged: of no use to anyone now
                await _close(pooled.driver)
                raise
            if usable:
                return pooled
            await _close(pooled.driver)
            if not lost:
                # It failed its ping (a silent network, a restarted server): the ones idle
                # longer would fail theirs too, each taking the grace. Close them unasked,
                # so that a checkout takes one ping's grace and one connect at most.
                stale, self._idle = self._idle, []
                for older in stale:
                    await _close(older.driver)
        try:
            driver = await psycopg.AsyncConnection.connect(**self._arguments)
        except psycopg.Error as error:
            translated = self._dialect.translated(error, True)
            if translated is error:
                raise
            raise translated from error
        # List parameters (the batch's arrays) in binary: psycopg's text form escapes
        # every element in Python, ~9x slower for 1000 rows.
        driver.adapters.register_dumper(list, ListBinaryDumper)
        return _Pooled(driver)

    async def _usable(self, pooled: _Pooled) -> bool:
        """Whether an idle connection can serve: used recently and silent since, or answering
        a ping within the grace a statement's answer gets."""
        driver = pooled.driver
        if _lost(driver):
            return False
        recently = (
            pooled.idle_since is not None
            and time.monotonic() - pooled.idle_since < PING_AFTER_IDLE_SECONDS
        )
        if recently and not _has_news(driver):
            return True
        try:
            # SELECT 1 needs no more than the grace a statement's answer gets.
            await answered_within(driver, ANSWER_GRACE_SECONDS, driver.execute("SELECT 1"))
        except (psycopg.Error, OSError):
            return False
        return True

    async def _checkin(self, pooled: _Pooled) -> None:
        driver = pooled.driver
        keep = (
            not self._closed
            and not _lost(driver)
            and pooled.given_up.at is None
            and driver.info.transaction_status == pq.TransactionStatus.IDLE
        )
        if keep:
            pooled.idle_since = time.monotonic()
            self._idle.append(pooled)
            return
        await _close(driver)

    def listen(self, listener: Callable[[str], object]) -> None:
        self.statements.listeners.append(listener)

    async def close(self) -> None:
        self._closed = True
        idle, self._idle = self._idle, []
        for pooled in idle:
            await _close(pooled.driver)


async def _close(driver: psycopg.AsyncConnection[Any]) -> None:
    try:
        await driver.close()
    except (psycopg.Error, OSError):
        pass  # gone already


def _has_news(driver: psycopg.AsyncConnection[Any]) -> bool:
    """Whether an idle connection has something to read: the server closed it (restart,
    pg_terminate_backend) and its notice or EOF is waiting. poll(), not select(): a server
    with many open sockets has descriptors above select()'s limit of 1024."""
    try:
        waiting = poll()
        waiting.register(driver.pgconn.socket, POLLIN)
        return bool(waiting.poll(0))
    except (OSError, ValueError, psycopg.Error):
        return True  # cannot tell: ask the server


async def answered_within(
    driver: psycopg.AsyncConnection[Any],
    seconds: float,
    operation: Awaitable[T],
    given_up: _GivenUp | None = None,
) -> T:
    """Await `operation` on `driver`; when no answer has come after `seconds`, shut the
    connection's socket down, which fails `operation` with psycopg.OperationalError. The
    connection is then of no further use."""

    def give_up() -> None:
        if given_up is not None:
            given_up.at = seconds
        try:
            # A duplicate descriptor: shutdown acts on the socket, and closing the
            # duplicate leaves libpq's own descriptor to libpq.
            with socket.socket(fileno=os.dup(driver.pgconn.socket)) as connected:
                connected.shutdown(socket.SHUT_RDWR)
        except (OSError, psycopg.Error):
            pass  # closed already

    timer = asyncio.get_running_loop().call_later(seconds, give_up)
    try:
        return await operation
    finally:
        timer.cancel()
