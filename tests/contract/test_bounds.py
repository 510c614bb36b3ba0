"""Bounded waits: a statement blocked by a lock held from outside answers 503 with
Retry-After within the lock bound (or the statement bound), leaves nothing waiting in
the database, and the same key is served again once the lock goes."""

from __future__ import annotations

import os
import socket
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import create_engine, text

from app.main import create_app
from app.storage.blocking import create_blocking_storage
from app.storage.dialects.base import (
    KEEPALIVE_IDLE_SECONDS,
    KEEPALIVE_INTERVAL_SECONDS,
    UNACKNOWLEDGED_SECONDS,
)
from tests.conftest import SERVERS, Database, FakeClock, truncate_all
from tests.support.helpers import history_rows, put
from tests.support.locking import busy_sessions, locked_from_outside

# Seconds: short, so the tests are; the waits measured must fall within a margin of them.
SHORT = 1.0
LONG = 30.0
MARGIN = 2.5  # a busy 2-core machine's scheduling, on top of the bound


@contextmanager
def bounded_client(database: Database, lock_timeout: float, statement_timeout: float):
    """The app on `database` (tables emptied) with these bounds, over HTTP in process."""
    truncate_all(database.url)
    settings = database.settings(lock_timeout=lock_timeout, statement_timeout=statement_timeout)
    with TestClient(create_app(settings, clock=FakeClock())) as client:
        yield client


def _timed_offer(client: TestClient, key: str, payload: object):
    """The offer's answer and how long it took; a failure when it takes much longer than
    the bounds here (then the lock's release lets it end)."""

    def offer():
        started = time.monotonic()
        response = put(client, "q", key, payload)
        return response, time.monotonic() - started

    pool = ThreadPoolExecutor(1)
    try:
        return pool.submit(offer).result(timeout=SHORT + 2 * MARGIN)
    finally:
        pool.shutdown(wait=False)  # a request still waiting ends with the lock


def test_an_offer_waiting_on_a_lock_answers_503_within_the_lock_bound(database):
    with bounded_client(database, lock_timeout=SHORT, statement_timeout=LONG) as client:
        assert put(client, "q", "k", 1).status_code == 201
        with locked_from_outside(database.url, "q") as locker:
            response, waited = _timed_offer(client, "k", 2)
            assert response.status_code == 503, response.text
            assert response.headers["content-type"] == "application/problem+json"
            assert int(response.headers["retry-after"]) >= 1
            assert SHORT * 0.9 <= waited <= SHORT + MARGIN, waited
            # Nothing of the service's is left waiting on the lock, or in a transaction.
            assert busy_sessions(database.url, locker) == []
        response, _ = _timed_offer(client, "k", 3)
        assert (response.status_code, response.json()["outcome"]) == (200, "updated")
        assert client.get("/v1/queues/q/messages/k").json()["payload"] == 3


@pytest.mark.parametrize("server", SERVERS)
def test_a_statement_past_the_statement_bound_answers_503(server, request):
    # SQLite has no bound on a statement's time, only its busy timeout (above).
    database = Database(server, request.getfixturevalue(f"{server}_url"))
    with bounded_client(database, lock_timeout=LONG, statement_timeout=SHORT) as client:
        assert put(client, "q", "k", 1).status_code == 201
        with locked_from_outside(database.url, "q") as locker:
            # The lock would be waited on for LONG; the statement is cancelled after SHORT.
            response, waited = _timed_offer(client, "k", 2)
            assert response.status_code == 503, response.text
            assert int(response.headers["retry-after"]) >= 1
            assert waited <= SHORT + MARGIN, waited
            assert busy_sessions(database.url, locker) == []
        response, _ = _timed_offer(client, "k", 3)
        assert response.status_code == 200


# A statement bound that one DELETE of a whole queue of PURGED rows outlasts on this
# machine, and no statement of the paged removal comes near. Measured with 600,000
# rows on PostgreSQL (~3.5 s with their history rows, ~1.2 s without; the paged removal
# at most ~160 ms, its cursor's first page) and 400,000 on MariaDB (~1.7-3.5 s either
# way; a page ~30 ms, at times 0.5 s on a busy machine); two thirds of that here keep
# the suite's time in check and the one DELETE with history rows past the bound.
PURGE_STATEMENT_TIMEOUT = 1.0
PURGED = {"postgresql": 400_000, "mariadb": 270_000}


def _fill(url: str, queue: str, count: int) -> None:
    """`count` messages in `queue`, written by the database itself."""
    engine = create_engine(url)
    try:
        with engine.begin() as connection:
            if engine.dialect.name == "postgresql":
                connection.execute(
                    text(
                        'INSERT INTO delayed_queue ("pKey", "pKind", payload, "scheduledAt", '
                        '"scheduledAtInitially", "createdAt") SELECT \'k\' || i, :queue, '
                        "'\\x7b7d', i, i, i FROM generate_series(1, :count) i"
                    ),
                    {"queue": queue, "count": count},
                )
            else:
                connection.execute(
                    text(
                        "INSERT INTO delayed_queue (pKey, pKind, payload, scheduledAt, "
                        "scheduledAtInitially, createdAt) SELECT CONCAT('k', seq), :queue, "
                        f"'{{}}', seq, seq, seq FROM seq_1_to_{count}"
                    ),
                    {"queue": queue},
                )
        if engine.dialect.name == "postgresql":
            # The dead rows earlier tests left would make the first page's scan slow.
            with engine.connect() as connection:
                connection.execution_options(isolation_level="AUTOCOMMIT").exec_driver_sql(
                    "VACUUM delayed_queue"
                )
    finally:
        engine.dispose()


@pytest.mark.parametrize("history", [True, False], ids=["history", "no-history"])
@pytest.mark.parametrize("server", SERVERS)
def test_a_purge_of_a_large_queue_keeps_every_statement_within_the_bound(server, history, request):
    url = request.getfixturevalue(f"{server}_url")
    truncate_all(url)
    purged = PURGED[server]
    _fill(url, "big", purged)
    _fill(url, "small", 3)
    settings = Database(server, url).settings(
        statement_timeout=PURGE_STATEMENT_TIMEOUT, history=history
    )
    with TestClient(create_app(settings, clock=FakeClock())) as client:
        response = client.delete("/v1/queues/big?confirm=big")
        assert (response.status_code, response.json()) == (200, {"deleted": purged})
        assert client.get("/v1/queues/small").json()["messages"] == 3
        assert client.get("/v1/queues/big").json()["messages"] == 0
    assert len(history_rows(url)) == (purged if history else 0)


@pytest.mark.parametrize("server", SERVERS)
def test_connections_keep_alive_and_give_up_on_unacknowledged_data(server, request):
    # What lets the kernel drop a connection to a peer that vanished without a reset,
    # between statements too: read back from the socket of a pooled connection.
    store = create_blocking_storage(
        Database(server, request.getfixturevalue(f"{server}_url")).settings()
    )

    async def options_of_a_connection() -> dict[str, int]:
        # A connection of the storage's own (PostgreSQL's pool, MariaDB's engine), in use.
        async with store.storage.connections.open("read") as connection:
            driver = connection.driver_connection  # type: ignore[attr-defined]
            descriptor = driver.pgconn.socket if server == "postgresql" else driver.fileno()
            with socket.socket(fileno=os.dup(descriptor)) as connected:
                option = connected.getsockopt
                return {
                    "keepalive": option(socket.SOL_SOCKET, socket.SO_KEEPALIVE),
                    "idle": option(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE),
                    "interval": option(socket.IPPROTO_TCP, socket.TCP_KEEPINTVL),
                    "unacknowledged": option(socket.IPPROTO_TCP, socket.TCP_USER_TIMEOUT),
                }

    try:
        assert store.wait(options_of_a_connection()) == {
            "keepalive": 1,
            "idle": KEEPALIVE_IDLE_SECONDS,
            "interval": KEEPALIVE_INTERVAL_SECONDS,
            "unacknowledged": UNACKNOWLEDGED_SECONDS * 1000,
        }
    finally:
        store.close()
