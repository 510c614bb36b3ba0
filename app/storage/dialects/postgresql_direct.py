"""PostgreSQL's statements run straight on the driver's asyncio connection: the
PostgreSQL dialect's way of opening connections on an engine of its asyncio driver.

Profiling (issue 3, bench/RESULTS.md) showed SQLAlchemy's execution layer over
psycopg's asyncio API costing ~200 µs of CPU per statement, twice the statement
itself: an adapted cursor per call, a greenlet round trip per driver call,
result objects, per-call isolation changes. The statements stay SQLAlchemy Core
objects (app/storage/sql.py and the dialect modules); `DirectConnection`
compiles each one once with the engine's dialect and sends the compiled SQL
through psycopg on a connection from the engine's own pool, so pooling,
checkout pings, disconnect handling and error types stay SQLAlchemy's.

Results are rows as the driver returns them: no result processors run, which is
right for the column types the store reads today (integers, strings, bytea,
booleans); a column type that needs converting on the way out would need it.

It offers the part of SQLAlchemy's Connection API the store uses: `execute`
with one dict of parameters, `begin()`, and results with `first`, `scalar`,
`scalars().all()`, `all`, `rowcount` and iteration over rows with attribute
access. It runs inside `sqlalchemy.util.greenlet_spawn`, like the engine.

Every round trip has a deadline (`answered_within`): a database, or a network to
it, that goes silent without closing anything would otherwise keep the statement
waiting until the operating system gives up. Cancelling psycopg's coroutine is no
way out (it then sends a cancel request over a new connection and waits for the
old one, ~10 s more), so the socket is shut down instead: the statement fails at
once as on a lost connection, and the connection leaves the pool.
"""

from __future__ import annotations

import asyncio
import os
import socket
from collections.abc import Awaitable, Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, TypeVar, cast

import psycopg
from psycopg import pq
from psycopg.rows import namedtuple_row
from sqlalchemy import exc
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.sql import ClauseElement
from sqlalchemy.sql.dml import Insert
from sqlalchemy.util import await_only

from app.storage.dialects.base import Connections

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class _Compiled:
    statement: ClauseElement  # kept alive, so its id() is never reused while cached
    sql: str
    defaults: dict[str, Any]  # values of literal binds (a CASE's 1 and 0, say)
    processors: dict[str, Any]

    def values(self, parameters: dict[str, Any]) -> dict[str, Any]:
        values = {**self.defaults, **parameters}
        for name, process in self.processors.items():
            if name in values:
                values[name] = process(values[name])
        return values


class DirectStatements:
    """Core statements compiled once for one engine's dialect; each is given up when it has
    no answer after `answer_deadline` seconds."""

    def __init__(self, engine: Engine, answer_deadline: float) -> None:
        self.dialect = engine.dialect
        self.answer_deadline = answer_deadline
        self._compiled: dict[tuple[int, tuple[str, ...]], _Compiled] = {}
        # Called after each statement, like SQLAlchemy's after_cursor_execute.
        self.listeners: list[Callable[[], object]] = []

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
    (~5% of an empty poll's CPU, in a profile of issue 19)."""
    result = cursor.pgresult
    return result is not None and (bool(result.nfields) or result.status in _ROW_STATUSES)


def _values_from_parameters(statement: ClauseElement) -> bool:
    return isinstance(statement, Insert) and not statement._values and statement.select is None


class DirectConnection:
    """One pooled connection of `engine`, in autocommit: statements run as they come,
    and `begin()` wraps several in one transaction."""

    def __init__(self, engine: Engine, statements: DirectStatements) -> None:
        self._dialect = engine.dialect
        try:
            self._pooled = engine.raw_connection()
        except psycopg.Error as error:  # connecting failed (SQLAlchemy wraps it for connect())
            raise exc.DBAPIError.instance(
                None, None, error, psycopg.Error, connection_invalidated=True, dialect=self._dialect
            ) from error
        self._driver: psycopg.AsyncConnection = cast(
            psycopg.AsyncConnection, self._pooled.driver_connection
        )
        self._statements = statements
        self._given_up = _GivenUp()

    def execute(self, statement: ClauseElement, parameters: dict[str, Any]) -> DirectResult:
        compiled = self._statements.compiled(statement, parameters)
        values = compiled.values(parameters)
        cursor = None
        try:
            cursor = self._driver.cursor(row_factory=namedtuple_row)
            self._answered(cursor.execute(compiled.sql, values))
            for listener in self._statements.listeners:
                listener()
            rows = await_only(cursor.fetchall()) if _has_rows(cursor) else []
            return DirectResult(rows, cursor.rowcount)
        except psycopg.Error as error:
            raise self._translated(error, compiled.sql, values) from error
        finally:
            if cursor is not None:
                await_only(cursor.close())

    def copy_rows(
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
            self._answered(copy())
            for listener in self._statements.listeners:
                listener()
        except psycopg.Error as error:
            raise self._translated(error, statement, {}) from error

    @contextmanager
    def begin(self, transactional: bool = True) -> Iterator[None]:
        """One transaction around the block; with `transactional` off, nothing (autocommit)."""
        if not transactional:
            yield
            return
        self._command("BEGIN")
        try:
            yield
        except BaseException:
            if not self._driver.closed:
                self._command("ROLLBACK")
            raise
        self._command("COMMIT")

    def close(self) -> None:
        """Give the connection back to the pool (or close it, if a statement was given up)."""
        if self._given_up.at is not None and self._pooled.is_valid:
            self._pooled.invalidate(TimeoutError("a statement was given up"))
        self._pooled.close()

    def _command(self, command: str) -> None:
        try:
            self._answered(self._driver.execute(command))
        except psycopg.Error as error:
            raise self._translated(error, command, {}) from error

    def _answered(self, operation: Awaitable[Any]) -> None:
        answered_within(self._driver, self._statements.answer_deadline, operation, self._given_up)

    def _translated(self, error: psycopg.Error, sql: str, parameters: dict) -> exc.DBAPIError:
        """The error SQLAlchemy would raise; a lost connection leaves the pool, as there."""
        if self._given_up.at is not None:
            error = psycopg.OperationalError(
                f"no answer from the database within {self._given_up.at:g} s: "
                "the connection was closed"
            )
            disconnected = True
        else:
            disconnected = self._dialect.is_disconnect(
                cast(Any, error), self._pooled.dbapi_connection, None
            )
        if disconnected:
            self._pooled.invalidate(error)
        translated = exc.DBAPIError.instance(
            sql,
            parameters,
            error,
            psycopg.Error,
            connection_invalidated=disconnected,
            dialect=self._dialect,
        )
        assert isinstance(translated, exc.DBAPIError)  # psycopg.Error is the DBAPI's
        return translated


class _GivenUp:
    """Whether (and after how many seconds) a round trip on a connection was given up."""

    __slots__ = ("at",)

    def __init__(self) -> None:
        self.at: float | None = None


def answered_within(
    driver: psycopg.AsyncConnection,
    seconds: float,
    operation: Awaitable[T],
    given_up: _GivenUp | None = None,
) -> T:
    """Await `operation` on `driver` (inside greenlet_spawn); when no answer has come after
    `seconds`, shut the connection's socket down, which fails `operation` with
    psycopg.OperationalError. The connection is then of no further use."""

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
        return await_only(operation)
    finally:
        timer.cancel()


def ping_within(seconds: float) -> Callable[[Any], None]:
    """A ping of a pooled psycopg asyncio connection (a checkout's) that gives up after
    `seconds`, raising psycopg.OperationalError."""

    def ping(dbapi_connection: Any) -> None:
        driver = dbapi_connection.driver_connection
        answered_within(driver, seconds, driver.execute("SELECT 1"))

    return ping


class DirectResult:
    """Rows of one statement, read the way the store reads SQLAlchemy results."""

    def __init__(self, rows: list[Any], rowcount: int) -> None:
        self._rows = rows
        self.rowcount = rowcount

    def __iter__(self) -> Iterator[Any]:
        return iter(self._rows)

    def first(self) -> Any:
        return self._rows[0] if self._rows else None

    def scalar(self) -> Any:
        return self._rows[0][0] if self._rows else None

    def all(self) -> list[Any]:
        return self._rows

    def scalars(self) -> DirectResult:
        return DirectResult([row[0] for row in self._rows], self.rowcount)


class DirectConnections(Connections):
    """The runner's connections on an engine of psycopg's asyncio driver: DirectConnection
    in autocommit, with a transaction only when the work is `transactional` (its
    execution options are SQLAlchemy's, and have no use here)."""

    def __init__(self, engine: Engine, answer_deadline: float) -> None:
        super().__init__(engine)
        self.statements = DirectStatements(engine, answer_deadline)

    @contextmanager
    def open(self, options: dict[str, Any], *, transactional: bool) -> Iterator[Connection]:
        direct = DirectConnection(self.engine, self.statements)
        try:
            with direct.begin(transactional):
                # It offers the part of Connection's API the storage rooms use.
                yield cast(Connection, direct)
        finally:
            direct.close()

    def listen(self, listener: Callable[[], object]) -> None:
        super().listen(listener)
        self.statements.listeners.append(listener)
