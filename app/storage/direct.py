"""The store's Core statements run straight on the driver's asyncio connection.

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
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg.rows import namedtuple_row
from sqlalchemy import exc
from sqlalchemy.engine import Engine
from sqlalchemy.sql import ClauseElement
from sqlalchemy.sql.dml import Insert
from sqlalchemy.util import await_only


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
    """Core statements compiled once for one engine's dialect."""

    def __init__(self, engine: Engine) -> None:
        self.dialect = engine.dialect
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
        compiled = statement.compile(dialect=self.dialect, column_keys=list(columns) or None)
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
        self._driver: psycopg.AsyncConnection = self._pooled.driver_connection
        self._statements = statements

    def execute(self, statement: ClauseElement, parameters: dict[str, Any]) -> DirectResult:
        compiled = self._statements.compiled(statement, parameters)
        values = compiled.values(parameters)
        cursor = None
        try:
            cursor = self._driver.cursor(row_factory=namedtuple_row)
            await_only(cursor.execute(compiled.sql, values))
            for listener in self._statements.listeners:
                listener()
            rows = await_only(cursor.fetchall()) if cursor.description is not None else []
            return DirectResult(rows, cursor.rowcount)
        except psycopg.Error as error:
            raise self._translated(error, compiled.sql, values) from error
        finally:
            if cursor is not None:
                await_only(cursor.close())

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
        """Give the connection back to the pool."""
        self._pooled.close()

    def _command(self, command: str) -> None:
        try:
            await_only(self._driver.execute(command))
        except psycopg.Error as error:
            raise self._translated(error, command, {}) from error

    def _translated(self, error: psycopg.Error, sql: str, parameters: dict) -> exc.DBAPIError:
        """The error SQLAlchemy would raise; a lost connection leaves the pool, as there."""
        disconnected = self._dialect.is_disconnect(error, self._pooled.dbapi_connection, None)
        if disconnected:
            self._pooled.invalidate(error)
        return exc.DBAPIError.instance(
            sql,
            parameters,
            error,
            psycopg.Error,
            connection_invalidated=disconnected,
            dialect=self._dialect,
        )


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
