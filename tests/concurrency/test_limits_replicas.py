"""A queue's `max_leased` and `rate` hold across replicas (docs/guide/flow-control.md): two real
`hourglass serve` processes on PostgreSQL and on MariaDB, many pollers on each.

`max_leased` is checked from the database, sampled while the pollers run: the messages
some lock holds, never more than the limit. `rate` is checked from the delivery history's
first-delivered times, which the servers wrote in the claims' transactions: in no window of
the period more deliveries than the limit, and over 20 s nearly all the deliveries the
limit allows. The rate is about real time, so that test runs on it (as short as its
claim allows); the others wait on their pollers."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
from sqlalchemy import create_engine, func, select

from app.storage.tables import delayed_queue, delivery_history
from tests.conftest import truncate_all
from tests.support.server import Server, running_server

pytestmark = pytest.mark.server_databases

QUEUE = "limited"


@pytest.fixture
def replicas(server_url: str) -> Iterator[tuple[Server, Server]]:
    truncate_all(server_url)
    with running_server(server_url) as a, running_server(server_url) as b:
        yield a, b


def _configure(server: Server, **settings: object) -> None:
    answer = httpx.put(f"{server.url}/v1/queues/{QUEUE}/settings", json=settings, timeout=30)
    assert answer.status_code == 200, answer.text


def _offer(server: Server, count: int) -> None:
    for start in range(0, count, 1000):
        batch = range(start, min(start + 1000, count))
        messages = [{"key": f"k{index:05d}", "payload": index} for index in batch]
        answer = httpx.post(
            f"{server.url}/v1/queues/{QUEUE}/batch", json={"messages": messages}, timeout=30
        )
        assert answer.status_code == 200, answer.text


def _work(server: Server, stop: threading.Event, limit: int, wait: float) -> list[str]:
    """Poll and acknowledge at once until `stop`; the keys delivered."""
    delivered: list[str] = []
    with httpx.Client(base_url=server.url, timeout=60) as client:
        while not stop.is_set():
            answer = client.post(
                f"/v1/queues/{QUEUE}/poll", json={"max": limit, "wait": wait, "lease": 60}
            )
            assert answer.status_code == 200, answer.text
            body = answer.json()
            if body["lock_id"] is None:
                continue
            delivered += [message["key"] for message in body["messages"]]
            acknowledged = client.delete(f"/v1/queues/{QUEUE}/locks/{body['lock_id']}")
            assert acknowledged.status_code == 204, acknowledged.text
    return delivered


def test_max_leased_holds_across_two_replicas_and_twelve_pollers(server_url, replicas):
    a, b = replicas
    most = 5
    count = 600
    _configure(a, max_leased=most)
    _offer(a, count)
    engine = create_engine(server_url)
    leased = select(func.count()).where(
        delayed_queue.c.pKind == QUEUE, delayed_queue.c.lockUuid.is_not(None)
    )
    left = select(func.count()).where(delayed_queue.c.pKind == QUEUE)
    samples: list[int] = []
    stop = threading.Event()
    try:
        with ThreadPoolExecutor(12) as pool:
            workers = [pool.submit(_work, server, stop, 3, 1) for server in (a, b) * 6]
            with engine.connect() as connection:
                deadline = time.monotonic() + 120
                # Leases last 60 s and are acknowledged at once: every message a lock holds
                # is leased, sampled as one snapshot of the table.
                while time.monotonic() < deadline:
                    samples.append(connection.execute(leased).scalar_one())
                    connection.commit()
                    if connection.execute(left).scalar_one() == 0:
                        break
                    connection.commit()
            stop.set()
            delivered = [key for worker in workers for key in worker.result(timeout=60)]
    finally:
        stop.set()
        engine.dispose()
    assert sorted(delivered) == [f"k{index:05d}" for index in range(count)]  # each once
    assert max(samples) <= most, max(samples)
    assert max(samples) == most  # the pollers filled the room: the bound was tested
    assert len(samples) > 50


def _most_in_any_window(times: list[int], period_ms: int) -> int:
    """The most of `times` (epoch ms) in any window [t, t + period_ms)."""
    ordered = sorted(times)
    most, first = 0, 0
    for last, time_ms in enumerate(ordered):
        while ordered[first] <= time_ms - period_ms:
            first += 1
        most = max(most, last - first + 1)
    return most


def test_a_rate_holds_across_two_replicas_and_keeps_up_with_what_it_allows(server_url, replicas):
    a, b = replicas
    limit, period_ms, seconds = 20, 1000, 20
    _configure(a, rate={"limit": limit, "period": period_ms / 1000})
    _offer(a, limit * seconds * 2)  # more than the rate allows in the time
    stop = threading.Event()
    with ThreadPoolExecutor(8) as pool:
        workers = [pool.submit(_work, server, stop, 5, 2) for server in (a, b) * 4]
        time.sleep(seconds + 1)  # the rate is about real time: 20 s of it, and a margin
        stop.set()
        for worker in workers:
            worker.result(timeout=60)
    engine = create_engine(server_url)
    try:
        with engine.connect() as connection:
            times = list(
                connection.execute(
                    select(delivery_history.c.firstDeliveredAt).where(
                        delivery_history.c.queue == QUEUE
                    )
                ).scalars()
            )
    finally:
        engine.dispose()
    assert _most_in_any_window(times, period_ms) <= limit
    start = min(times)
    within = [time_ms for time_ms in times if time_ms < start + seconds * 1000]
    allowed = limit * seconds
    assert len(within) >= 0.95 * allowed, (len(within), allowed)
