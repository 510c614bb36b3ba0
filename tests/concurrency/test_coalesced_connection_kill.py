"""A connection killed under a coalesced statement (PostgreSQL): the callers that shared it
fail, as one caller alone would (StorageUnavailable: a 503 with Retry-After), and nobody else.

Held deterministically: another session's open transaction has inserted keys "h1" and "h2",
so an INSERT … ON CONFLICT of either waits until it ends. An offer of "h1" goes alone and
waits there; offers of "h2" and "c" arrive meanwhile and wait for it; its backend is
terminated, and they go next, together, in one statement that waits on "h2"; that backend
is terminated too. Nothing of theirs was written; a caller that came after is served.
"""

from __future__ import annotations

import asyncio
import queue
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import Any

import httpx
import pytest
from sqlalchemy import Engine, create_engine, insert, text

from app.config import Settings
from app.domain.errors import StorageUnavailable
from app.domain.messages import Offer, OfferOutcome, Outcome
from app.main import create_app
from app.storage.blocking import BlockingStorage, create_blocking_storage
from app.storage.store import Storage
from app.storage.tables import delayed_queue
from tests.conftest import START_MS, truncate_all
from tests.support.helpers import stored_rows, wait_until
from tests.support.server import serving

pytestmark = pytest.mark.postgresql_only

QUEUE = "kill"
# For anything that should happen at once; a failure, not a pace.
WAIT = 10


def _settings(url: str) -> Settings:
    # Lock and statement bounds far past the test: only the kills end the waiting statements.
    return Settings(database_url=url, auto_migrate=False, lock_timeout=120, statement_timeout=120)


@pytest.fixture
def admin(postgresql_url: str) -> Iterator[Engine]:
    """The clean database, and an autocommit engine on it to watch and kill sessions."""
    truncate_all(postgresql_url)
    engine = create_engine(postgresql_url, isolation_level="AUTOCOMMIT")
    yield engine
    engine.dispose()


@pytest.fixture
def store(postgresql_url: str, admin: Engine) -> Iterator[BlockingStorage]:
    store = create_blocking_storage(_settings(postgresql_url))
    yield store
    store.close()


@contextmanager
def inserted_from_outside(url: str, keys: list[str]) -> Iterator[None]:
    """Another session has inserted `keys` into QUEUE, uncommitted, until the block ends
    (then rolls back): an INSERT … ON CONFLICT of any of them waits for it meanwhile."""
    engine = create_engine(url)
    try:
        with engine.connect() as connection:
            rows = [
                {
                    "pKey": key,
                    "pKind": QUEUE,
                    "payload": b'"outside"',
                    "scheduledAt": START_MS,
                    "scheduledAtInitially": START_MS,
                    "createdAt": START_MS,
                }
                for key in keys
            ]
            connection.execute(insert(delayed_queue), rows)  # the transaction stays open
            try:
                yield
            finally:
                connection.rollback()
    finally:
        engine.dispose()


def _inserts_waiting(admin: Engine) -> list[tuple[int, str]]:
    """The sessions of this database whose INSERT waits for a lock: (pid, statement)."""
    with admin.connect() as connection:
        rows = connection.execute(
            text(
                "SELECT pid, query FROM pg_stat_activity WHERE datname = current_database() "
                "AND pid <> pg_backend_pid() AND state = 'active' "
                "AND wait_event_type = 'Lock' AND query ILIKE 'INSERT%'"
            )
        )
        return [(row.pid, row.query) for row in rows]


def one_insert_waiting(admin: Engine, besides: set[int]) -> tuple[int, str]:
    """Wait (bounded) until exactly one INSERT of a session not in `besides` waits for a
    lock; its pid and statement. The database sends no event for it: polled."""
    found: list[tuple[int, str]] = []

    def one_waits() -> bool:
        found[:] = [each for each in _inserts_waiting(admin) if each[0] not in besides]
        return len(found) == 1

    wait_until(one_waits, WAIT, "one INSERT waiting on the keys inserted from outside")
    return found[0]


def terminate(admin: Engine, pid: int) -> None:
    """Terminate a backend, and wait until it has exited."""
    with admin.connect() as connection:
        ended = connection.execute(text("SELECT pg_terminate_backend(:pid, 10000)"), {"pid": pid})
        assert ended.scalar() is True


def _offer(key: str) -> Offer:
    return Offer(key, f'"{key}"'.encode(), START_MS)


def test_a_killed_shared_statement_fails_exactly_its_callers(store, admin, postgresql_url):
    """Broken by a failure that reaches callers beyond the killed statement's (the one that
    came after the kill, or the next batch), by one that reaches only the shared
    statement's leader (its other caller would wait for ever, or be told `created`), by a
    caller of a killed statement run again behind its back, or by anything of theirs
    written."""
    storage: Storage = store.storage

    async def scenario() -> None:
        def offer(key: str) -> tuple[asyncio.Task[OfferOutcome | None], asyncio.Event]:
            arrived = asyncio.Event()

            async def call() -> OfferOutcome | None:
                # Set within the step that takes the offer to the coalescer (nothing in
                # between awaits): whoever awaits `arrived` resumes after it is in line.
                arrived.set()
                return await storage.messages.offer(QUEUE, _offer(key), START_MS)

            return asyncio.create_task(call()), arrived

        async def arrive(key: str) -> asyncio.Task[OfferOutcome | None]:
            task, arrived = offer(key)
            await asyncio.wait_for(arrived.wait(), WAIT)
            return task

        async def fails(task: asyncio.Task[Any]) -> None:
            with pytest.raises(StorageUnavailable):
                await asyncio.wait_for(task, WAIT)

        h1 = await arrive("h1")  # nothing of its kind runs: alone
        alone_pid, alone_statement = await asyncio.to_thread(one_insert_waiting, admin, set())
        assert "unnest" not in alone_statement  # the single-row INSERT
        h2, c = await arrive("h2"), await arrive("c")  # they wait for h1's
        assert not (h1.done() or h2.done() or c.done())

        await asyncio.to_thread(terminate, admin, alone_pid)
        await fails(h1)
        # h2's and c's offers go next, together: one statement, waiting on "h2".
        shared_pid, shared_statement = await asyncio.to_thread(
            one_insert_waiting, admin, {alone_pid}
        )
        assert "unnest" in shared_statement  # the shared INSERT … SELECT FROM unnest(…)
        assert not (h2.done() or c.done())
        during = await arrive("during")  # waits for the shared statement

        await asyncio.to_thread(terminate, admin, shared_pid)
        await fails(h2)
        await fails(c)  # it shared the statement, not the lock: it fails too
        # The one that waited meanwhile goes next (alone) and is served, as is one after.
        assert (await asyncio.wait_for(during, WAIT)).outcome is Outcome.CREATED
        after = await arrive("after")
        assert (await asyncio.wait_for(after, WAIT)).outcome is Outcome.CREATED

    with inserted_from_outside(postgresql_url, ["h1", "h2"]):
        store.wait(scenario())
    # Nothing of h1, h2 or c went in (the outside rows were rolled back).
    assert sorted(row["pKey"] for row in stored_rows(postgresql_url)) == ["after", "during"]
    for key in ("h1", "h2", "c"):
        assert store.messages.offer(QUEUE, _offer(key), START_MS).outcome is Outcome.CREATED
    assert _inserts_waiting(admin) == []


class Arrivals:
    """Wraps the service's coalesced single inserts (`Offers._insert`): tells the test
    each key as its request reaches them, within the step in which it joins the line."""

    def __init__(self, offers: Any) -> None:
        self._coalesced = offers._insert
        self.keys: queue.Queue[str] = queue.Queue()
        offers._insert = self

    async def __call__(self, item: tuple[str, Offer, int]) -> bool:
        self.keys.put(item[1].key)
        return await self._coalesced(item)

    def next(self) -> str:
        return self.keys.get(timeout=WAIT)


def test_over_http_the_callers_of_a_killed_shared_statement_get_503_with_retry_after(
    admin, postgresql_url
):
    """The same, through the service on a real port: the lone offer's 503, then the two of
    the shared statement, each with Retry-After; the offer made after is created. Broken
    by a failure of the shared statement answered other than as a lost connection is
    today (a 500, a 503 without Retry-After), or answered to only one of its callers."""
    app = create_app(_settings(postgresql_url))

    def put(base: str, key: str) -> httpx.Response:
        with httpx.Client(base_url=base, timeout=3 * WAIT) as client:
            return client.put(f"/v1/queues/{QUEUE}/messages/{key}", json={"payload": key})

    with (
        inserted_from_outside(postgresql_url, ["h1", "h2"]),
        serving(app) as (port, _server),
        ThreadPoolExecutor(4) as pool,
    ):
        arrivals = Arrivals(app.state.service.storage.messages.offers)
        base = f"http://127.0.0.1:{port}"
        h1 = pool.submit(put, base, "h1")
        assert arrivals.next() == "h1"
        alone_pid, alone_statement = one_insert_waiting(admin, set())
        assert "unnest" not in alone_statement
        h2 = pool.submit(put, base, "h2")
        assert arrivals.next() == "h2"
        c = pool.submit(put, base, "c")
        assert arrivals.next() == "c"

        terminate(admin, alone_pid)
        shared_pid, shared_statement = one_insert_waiting(admin, {alone_pid})
        assert "unnest" in shared_statement
        terminate(admin, shared_pid)

        for answered in (h1, h2, c):
            response = answered.result(timeout=3 * WAIT)
            assert response.status_code == 503, response.text
            assert response.headers["content-type"].startswith("application/problem+json")
            assert int(response.headers["retry-after"]) > 0
        after = put(base, "after")
        assert after.status_code == 201, after.text
    assert sorted(row["pKey"] for row in stored_rows(postgresql_url)) == ["after"]
