"""What the storage rooms run their statements on: an asynchronous `Connection` (one
statement awaited at a time, its rows read whole), the `Connections` that hand one out for
a piece of work, and the two failures the runner acts on (`TransientConflict`, `KeyTaken`).

Two kinds stand behind it (docs/decisions/0022-one-hop-per-request.md):
- PostgreSQL's own (app/storage/dialects/postgresql/direct.py): psycopg's asyncio
  connections from the service's own pool, awaited directly;
- SQLAlchemy's engine, for SQLite and MariaDB, whose drivers block: `ThreadedConnections`
  below, each statement run on a thread of its own pool while the event loop goes on.

Either way a driver's error is translated once, where the statement ran, by the
dialect (`Dialect.translated`): into the domain's StorageUnavailable, one of the two
failures below, or left as it is when it is a bug.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager, suppress
from typing import TYPE_CHECKING, Any, Literal, Protocol, TypeVar

from sqlalchemy import event, exc
from sqlalchemy.engine import Connection as EngineConnection
from sqlalchemy.engine import Engine

from app.domain.errors import StorageUnavailable

if TYPE_CHECKING:
    from app.storage.dialects.base import Dialect

T = TypeVar("T")

# How a piece of work runs (Connections.open).
Mode = Literal["transaction", "single", "read"]


class TransientConflict(Exception):
    """A deadlock or a serialization failure: the transaction is worth running again."""


class KeyTaken(Exception):
    """A write found a unique key taken: another request wrote it between this one's check
    and its write (the runner's transaction_over_keys runs the work again)."""


class BoundReached(StorageUnavailable):
    """A lock or statement bound of the session was reached: the statement was rolled back
    (and its connection is still good). A statement shared by many callers that fails so
    may concern only some of them: each then runs alone (app/storage/coalescing.py)."""


class SchemaMissing(StorageUnavailable):
    """The table a statement names does not exist: the database was never migrated."""


class Result:
    """The rows of one statement, read whole (attribute access by column name), and the
    number of rows it touched."""

    __slots__ = ("_rows", "rowcount")

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

    def scalars(self) -> Result:
        return Result([row[0] for row in self._rows], self.rowcount)


class Connection(Protocol):
    """One connection, in one piece of work: its statements run one after the other."""

    async def execute(self, statement: Any, parameters: Any = None) -> Result:
        """Run a SQLAlchemy Core statement with its bound `parameters` (a dict; a list of
        dicts for an executemany where the dialect sends one)."""
        ...


class Connections(Protocol):
    """Where the runner gets a connection for one piece of work."""

    def open(self, mode: Mode) -> Any:
        """An async context manager giving a Connection for one piece of work, in `mode`:
        "transaction" (one transaction around it), "single" (one write statement, its own
        transaction: no BEGIN/COMMIT round trips where the database allows) or "read"."""
        ...

    def listen(self, listener: Callable[[str], object]) -> None:
        """Call `listener(sql)` after every statement sent to the database, with its text."""
        ...

    async def close(self) -> None:
        """Close every connection."""
        ...


class ThreadedConnections:
    """Connections of a SQLAlchemy engine whose driver blocks (SQLite's, MariaDB's): every
    call to the driver runs on a thread of a pool as large as the engine's, awaited, so the
    event loop goes on meanwhile. A connection is used by one piece of work at a time, so
    its calls never overlap, whatever thread runs each."""

    def __init__(self, engine: Engine, dialect: Dialect, threads: int) -> None:
        self.engine = engine
        self._dialect = dialect
        self._executor = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="storage")

    @asynccontextmanager
    async def open(self, mode: Mode) -> AsyncIterator[Connection]:
        options = {
            "transaction": {},
            "single": self._dialect.single_statement_options,
            "read": self._dialect.read_options,
        }[mode]
        begun = await self.call(self._begin, options, undo=_close_begun)
        connection, transaction = begun
        try:
            yield _ThreadedConnection(connection, self)
            await self.call(transaction.commit)
        except BaseException:
            await self.call(transaction.rollback, translating=False, quietly=True)
            raise
        finally:
            await self.call(connection.close, translating=False, quietly=True)

    def _begin(self, options: dict[str, Any]) -> tuple[EngineConnection, Any]:
        connection = self.engine.connect()
        try:
            if options:
                connection = connection.execution_options(**options)
            return connection, connection.begin()
        except BaseException:
            connection.close()
            raise

    async def call(
        self,
        function: Callable[..., T],
        *arguments: Any,
        translating: bool = True,
        quietly: bool = False,
        undo: Callable[[T], object] | None = None,
    ) -> T:
        """`function(*arguments)` on a storage thread, its driver errors translated. The call
        is waited for even when the caller is cancelled (again and again): nothing else may
        use its connection before it ends; then `undo(its result)`, where given, runs on a
        storage thread (a connection just begun is closed, not left to the collector)."""
        future = asyncio.get_running_loop().run_in_executor(
            self._executor, lambda: function(*arguments)
        )
        try:
            try:
                return await asyncio.shield(future)
            except asyncio.CancelledError:
                while not future.done():
                    with suppress(asyncio.CancelledError):
                        await asyncio.wait([future])
                if undo is not None and future.exception() is None:
                    self._executor.submit(undo, future.result())
                raise
        except exc.DBAPIError as error:
            if quietly:
                return None  # type: ignore[return-value]  # rollback/close of a failed one
            if not translating:
                raise
            raise self._dialect.translated(
                error.orig or error, error.connection_invalidated
            ) from error
        except exc.TimeoutError as error:
            raise StorageUnavailable("the database is busy: no connection free in time") from error
        except Exception:
            if quietly:
                return None  # type: ignore[return-value]
            raise

    def listen(self, listener: Callable[[str], object]) -> None:
        def after(_connection: Any, _cursor: Any, statement: str, *_rest: Any) -> None:
            listener(statement)

        event.listen(self.engine, "after_cursor_execute", after)

    async def close(self) -> None:
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(None, self._executor.shutdown)
        await loop.run_in_executor(None, self.engine.dispose)


def _close_begun(begun: tuple[EngineConnection, Any]) -> None:
    """Close a connection begun for a caller that was cancelled meanwhile (its transaction
    rolls back: on SQLite, BEGIN IMMEDIATE's write lock goes with it)."""
    with suppress(Exception):
        begun[0].close()


class _ThreadedConnection:
    """A SQLAlchemy connection whose statements run on a storage thread."""

    __slots__ = ("_connection", "_connections")

    def __init__(self, connection: EngineConnection, connections: ThreadedConnections) -> None:
        self._connection = connection
        self._connections = connections

    @property
    def driver_connection(self) -> Any:
        """The driver's own connection (the tests read its socket's options)."""
        return self._connection.connection.driver_connection

    async def execute(self, statement: Any, parameters: Any = None) -> Result:
        return await self._connections.call(self._execute, statement, parameters)

    def _execute(self, statement: Any, parameters: Any) -> Result:
        result = self._connection.execute(statement, parameters)
        rows = list(result.all()) if result.returns_rows else []
        return Result(rows, result.rowcount)
