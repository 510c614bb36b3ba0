"""The one way storage runs statements: on a connection the dialect opens (PostgreSQL's
straight through psycopg on the event loop, app/storage/dialects/postgresql_direct.py),
in a transaction or in
autocommit, again on a transient conflict or a unique key another request took,
within the dialect's bounds, with driver errors translated into the domain's
StorageUnavailable (or let through when they are bugs)."""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, TypeVar

from sqlalchemy import exc
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.util import await_only

from app.domain.errors import StorageUnavailable
from app.storage.dialects import Dialect

T = TypeVar("T")

# Transient conflicts (deadlocks, serialization failures) and lost races on one key.
_TRANSACTION_ATTEMPTS = 5
_KEY_RACE_ATTEMPTS = 100


class Runner:
    """Runs work on `engine`'s pooled connections as `dialect` needs."""

    def __init__(self, engine: Engine, dialect: Dialect) -> None:
        self.engine = engine
        self.dialect = dialect
        # An engine with an asyncio driver does its I/O on the event loop: its
        # methods must then be called through sqlalchemy.util.greenlet_spawn.
        self.runs_on_event_loop: bool = engine.dialect.is_async
        # How a piece of work gets its connection: the dialect knows.
        self._connections = dialect.connections(engine)

    def transaction_over_keys(self, work: Callable[[Connection], T], what: str) -> T:
        """`work` in one transaction, again when it found a unique key taken: another
        request wrote that key between this one's check and its write. Any other
        integrity error is a bug, and goes up as one."""
        for attempt in range(1, _KEY_RACE_ATTEMPTS + 1):
            try:
                return self.transaction(work)
            except exc.IntegrityError as error:
                if not self.dialect.is_unique_violation(error):
                    raise
                self.pause(random.uniform(0, 0.001 * min(attempt, 10)))
        raise StorageUnavailable(f"too much contention {what}; try again")

    def single(self, statement: Any, parameters: dict) -> int:
        """Run one write statement on its own; the number of rows it touched."""
        return self.autocommit(
            lambda connection: connection.execute(statement, parameters).rowcount
        )

    def autocommit(self, work: Callable[[Connection], T]) -> T:
        """Run `work`, one statement, as its own transaction: no BEGIN/COMMIT round trips
        where the dialect can avoid them."""
        return self.run(work, self.dialect.single_statement_options, transactional=False)

    def read(self, work: Callable[[Connection], T]) -> T:
        return self.run(work, self.dialect.read_options, transactional=False)

    def transaction(self, work: Callable[[Connection], T]) -> T:
        """Run `work` in one transaction."""
        return self.run(work, {}, transactional=True)

    def run(
        self,
        work: Callable[[Connection], T],
        options: dict[str, Any],
        *,
        transactional: bool,
    ) -> T:
        """Run `work` on a connection the dialect opens, again on a transient conflict:
        in one transaction, or with `options` (SQLAlchemy execution options: the
        dialect's for a read or a single statement) where `transactional` is off."""
        for attempt in range(1, _TRANSACTION_ATTEMPTS + 1):
            try:
                with (
                    self._translated_errors(retrying=attempt < _TRANSACTION_ATTEMPTS),
                    self._connections.open(options, transactional=transactional) as connection,
                ):
                    return work(connection)
            except _Retry:
                # Back off a little, with jitter, so the two sides of a deadlock part.
                self.pause(random.uniform(0, 0.005 * 2**attempt))
        raise AssertionError("unreachable")

    def pause(self, seconds: float) -> None:
        if self.runs_on_event_loop:
            await_only(asyncio.sleep(seconds))  # let the event loop go on meanwhile
        else:
            time.sleep(seconds)

    def listen_statements(self, listener: Callable[[], object]) -> None:
        """Call `listener` after every statement sent to the database."""
        self._connections.listen(listener)

    def close(self) -> None:
        """Close every pooled connection."""
        self.engine.dispose()

    @contextmanager
    def _translated_errors(self, retrying: bool = False) -> Iterator[None]:
        """Turn driver errors into StorageUnavailable (or a retry); let bugs through."""
        try:
            yield
        except exc.DBAPIError as error:
            if retrying and self.dialect.is_retryable(error):
                raise _Retry from error
            if self.dialect.is_schema_missing(error):
                raise StorageUnavailable(
                    "the database schema is not migrated: run `hourglass migrate`"
                ) from error
            if self.dialect.is_unavailable(error) or self.dialect.is_retryable(error):
                raise StorageUnavailable("the database is unavailable; retry shortly") from error
            raise
        except exc.TimeoutError as error:
            raise StorageUnavailable("the database is busy: no connection free in time") from error


class _Retry(Exception):
    """A transient conflict: the transaction is worth running again."""


def chunks(items: Sequence[T], size: int) -> Iterator[Sequence[T]]:
    """`items` in slices of `size`."""
    for start in range(0, len(items), size):
        yield items[start : start + size]
