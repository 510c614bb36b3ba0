"""The one way storage runs its work: awaited on a connection its dialect's `Connections`
hand out (app/storage/connection.py), in a transaction or statement by statement, again on a
transient conflict or a unique key another request took. Driver errors arrive translated
already (where each statement ran): StorageUnavailable goes up as it is."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable, Iterator, Sequence
from typing import Any, TypeVar

from app.domain.errors import StorageUnavailable
from app.storage.connection import Connection, Connections, KeyTaken, Mode, TransientConflict
from app.storage.dialects import Dialect

T = TypeVar("T")

# A piece of work: statements awaited on one connection.
Work = Callable[[Connection], Awaitable[T]]

# Transient conflicts (deadlocks, serialization failures) and lost races on one key. Ten
# attempts: on MariaDB, 16 clients offering and updating the same keys at once saw a
# request deadlock five times in a row (a 503) about once a run under CI's load
# (tests/concurrency/test_coalesced_races.py); the waits between them (below) add up to
# under a second.
_TRANSACTION_ATTEMPTS = 10
_BACKOFF_MOST_SECONDS = 0.16
_KEY_RACE_ATTEMPTS = 100


class Runner:
    """Runs work on `connections` as `dialect` needs."""

    def __init__(self, connections: Connections, dialect: Dialect) -> None:
        self.connections = connections
        self.dialect = dialect

    async def transaction_over_keys(self, work: Work[T], what: str) -> T:
        """`work` in one transaction, again when it found a unique key taken: another
        request wrote that key between this one's check and its write."""
        for attempt in range(1, _KEY_RACE_ATTEMPTS + 1):
            try:
                return await self.transaction(work)
            except KeyTaken:
                await asyncio.sleep(random.uniform(0, 0.001 * min(attempt, 10)))
        raise StorageUnavailable(f"too much contention {what}; try again")

    async def single(self, statement: Any, parameters: dict) -> int:
        """Run one write statement on its own; the number of rows it touched."""

        async def run(connection: Connection) -> int:
            return (await connection.execute(statement, parameters)).rowcount

        return await self.autocommit(run)

    async def rows(self, statement: Any, parameters: dict) -> list[Any]:
        """The rows one reading statement answers."""

        async def run(connection: Connection) -> list[Any]:
            return (await connection.execute(statement, parameters)).all()

        return await self.read(run)

    async def first(self, statement: Any, parameters: dict) -> Any:
        """The first row one reading statement answers, or None."""
        rows = await self.rows(statement, parameters)
        return rows[0] if rows else None

    async def scalar(self, statement: Any, parameters: dict) -> Any:
        """The first value of the first row one reading statement answers, or None."""
        row = await self.first(statement, parameters)
        return None if row is None else row[0]

    async def autocommit(self, work: Work[T]) -> T:
        """Run `work`, one statement, as its own transaction: no BEGIN/COMMIT round trips
        where the dialect can avoid them."""
        return await self.run(work, "single")

    async def shared(self, work: Work[T]) -> T:
        """Run `work`, a call many callers share (app/storage/coalescing.py): one statement
        without BEGIN/COMMIT where the dialect makes it one, else one transaction."""
        return await self.run(
            work, "single" if self.dialect.shares_one_statement else "transaction"
        )

    async def read(self, work: Work[T]) -> T:
        return await self.run(work, "read")

    async def transaction(self, work: Work[T]) -> T:
        """Run `work` in one transaction."""
        return await self.run(work, "transaction")

    async def run(self, work: Work[T], mode: Mode) -> T:
        """Run `work` on a connection in `mode`, again on a transient conflict."""
        for attempt in range(1, _TRANSACTION_ATTEMPTS + 1):
            try:
                async with self.connections.open(mode) as connection:
                    return await work(connection)
            except TransientConflict as error:
                if attempt == _TRANSACTION_ATTEMPTS:
                    raise StorageUnavailable(
                        f"the database reported a conflict {_TRANSACTION_ATTEMPTS} times in a "
                        "row (deadlocks); retry shortly"
                    ) from error
                # Back off a little, with jitter, so the two sides of a deadlock part.
                backoff = min(0.005 * 2**attempt, _BACKOFF_MOST_SECONDS)
                await asyncio.sleep(random.uniform(0, backoff))
        raise AssertionError("unreachable")

    def listen_statements(self, listener: Callable[[str], object]) -> None:
        """Call `listener(sql)` after every statement sent to the database, with its text."""
        self.connections.listen(listener)

    async def close(self) -> None:
        """Close every connection."""
        await self.connections.close()


def chunks(items: Sequence[T], size: int) -> Iterator[Sequence[T]]:
    """`items` in slices of `size`."""
    for start in range(0, len(items), size):
        yield items[start : start + size]
