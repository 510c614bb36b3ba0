"""Expiry under real concurrency (docs/guide/flow-control.md#expiry): two `hourglass serve`
replicas, both sweeping, on PostgreSQL and on MariaDB. With nobody polling, 1,000 messages
of staggered expiry each leave their queue within a second of it, exactly once: half to
their queue's dead-letter queue (shown expired), half removed, each with one history row
of outcome `expired`. And a message leased past its expiry is never delivered again,
however often pollers on both replicas look."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
from sqlalchemy import create_engine, func, select

from app.domain.formats import format_timestamp, parse_timestamp
from app.storage.tables import delayed_queue, delivery_history
from tests.conftest import truncate_all
from tests.support.helpers import wait_until
from tests.support.server import Server, running_server

pytestmark = pytest.mark.server_databases

MESSAGES = 1000
# Expiries spread over this many ms after the offers, one every 5 ms.
SPREAD_MS = 5000
# The bound: a message leaves within this long after its expiry.
WITHIN_MS = 1000


@pytest.fixture
def replicas(server_url: str) -> Iterator[tuple[Server, Server]]:
    truncate_all(server_url)
    with running_server(server_url) as a, running_server(server_url) as b:
        yield a, b


def _configure(server: Server, queue: str, **settings: object) -> None:
    answer = httpx.put(f"{server.url}/v1/queues/{queue}/settings", json=settings, timeout=30)
    assert answer.status_code == 200, answer.text


def _offer(server: Server, queue: str, messages: list[dict]) -> None:
    for start in range(0, len(messages), 1000):
        answer = httpx.post(
            f"{server.url}/v1/queues/{queue}/batch",
            json={"messages": messages[start : start + 1000]},
            timeout=60,
        )
        assert answer.status_code == 200, answer.text


def test_expired_messages_leave_within_a_second_with_nobody_polling(replicas, server_url):
    a, b = replicas
    _configure(a, "kept", max_deliveries=5)  # has a dead-letter queue: kept.dead
    # Due a minute ago; each expires `ttl` after that, 2 s to 7 s from now, 5 ms apart.
    due = int(time.time() * 1000) - 60_000
    start = int(time.time() * 1000) + 2000
    expiries: dict[tuple[str, str], int] = {}
    for queue, server in (("kept", a), ("dropped", b)):
        messages = []
        for index in range(MESSAGES // 2):
            key = f"k{index:04d}"
            expires = start + (2 * index + (queue == "dropped")) * SPREAD_MS // MESSAGES
            expiries[queue, key] = expires
            messages.append(
                {
                    "key": key,
                    "payload": index,
                    "scheduled_at": format_timestamp(due),
                    "ttl": (expires - due) / 1000,
                }
            )
        _offer(server, queue, messages)
    assert int(time.time() * 1000) < start, "the offers took longer than the margin before"

    engine = create_engine(server_url)
    history = delivery_history.c
    try:

        def recorded() -> int:
            with engine.connect() as connection:
                return connection.execute(
                    select(func.count()).select_from(delivery_history)
                ).scalar_one()

        wait_until(
            lambda: recorded() >= MESSAGES,
            timeout=SPREAD_MS / 1000 + 30,
            what="every message's history row",
            details=recorded,
            every=0.1,
        )
        with engine.connect() as connection:
            rows = connection.execute(
                select(history.queue, history.key, history.outcome, history.finishedAt)
            ).all()
            left = connection.execute(
                select(delayed_queue.c.pKind, delayed_queue.c.pKey, delayed_queue.c.expiredAt)
            ).all()
    finally:
        engine.dispose()

    assert len(rows) == MESSAGES  # one each: no message swept twice
    assert {(row.queue, row.key) for row in rows} == set(expiries)
    assert {row.outcome for row in rows} == {"expired"}
    late = {
        (row.queue, row.key): row.finishedAt - expiries[row.queue, row.key]
        for row in rows
        if not 0 <= row.finishedAt - expiries[row.queue, row.key] <= WITHIN_MS
    }
    assert not late, (
        f"left outside [0, {WITHIN_MS}] ms of their expiry: {sorted(late.items())[:10]}"
    )
    # The queue with a dead-letter queue moved them there, marked; the other removed them.
    assert sorted((row.pKind, row.pKey) for row in left) == sorted(
        ("kept.dead", key) for queue, key in expiries if queue == "kept"
    )
    assert all(row.expiredAt is not None for row in left)


def test_a_message_leased_past_its_expiry_is_never_delivered_again(replicas):
    a, b = replicas
    count = 50
    # Due now, each expiring 5 s on: leases of 1 s run out (unacknowledged) and are taken
    # again several times before the expiry.
    now = int(time.time() * 1000)
    expiry_of = {f"k{i:02d}": now + 5000 + 20 * i for i in range(count)}
    _offer(
        a,
        "leased",
        [
            {
                "key": key,
                "payload": index,
                "scheduled_at": format_timestamp(now),
                "expires_at": format_timestamp(expires),
            }
            for index, (key, expires) in enumerate(expiry_of.items())
        ],
    )
    stop = threading.Event()
    deliveries: list[tuple[str, int]] = []  # key, when the claim leased it (server's clock)
    lock = threading.Lock()
    lease = 1

    def poller(server: Server) -> None:
        with httpx.Client(base_url=server.url, timeout=30) as client:
            while not stop.is_set():
                answer = client.post("/v1/queues/leased/poll", json={"max": 10, "lease": lease})
                assert answer.status_code == 200, answer.text
                for message in answer.json()["messages"]:
                    claimed = parse_timestamp(message["lease_expires_at"]) - lease * 1000
                    with lock:
                        deliveries.append((message["key"], claimed))
                # Each lease runs out without an acknowledgement: redelivered until it expires.

    with ThreadPoolExecutor(4) as pool:
        running = [pool.submit(poller, server) for server in (a, b, a, b)]
        # The pollers run until past every expiry and a sweep (real time must pass).
        stop.wait(max(expiry_of.values()) / 1000 + 2.5 - time.time())
        stop.set()
        for future in running:
            future.result()

    assert {key for key, _ in deliveries} == set(expiry_of)  # each was delivered
    assert any(sum(1 for each, _ in deliveries if each == key) > 1 for key in expiry_of), (
        "no lease ran out before the expiry: nothing proves redelivery stops"
    )
    after = [(key, at - expiry_of[key]) for key, at in deliveries if at >= expiry_of[key]]
    assert not after, f"delivered at or after their expiry (ms past it): {after[:10]}"
    leftover = httpx.get(f"{a.url}/v1/queues/leased", timeout=30).json()
    assert leftover["messages"] == 0
