"""kill -9 in the middle of offers and polls, then a restart (PostgreSQL, MariaDB): nothing that was accepted is lost."""

from __future__ import annotations

import os
import signal
import threading
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from tests.conftest import truncate_all
from tests.support.server import running_server

pytestmark = pytest.mark.server_databases

PRODUCERS, CONSUMERS = 3, 3
KILL_AFTER_OFFERS = 300
LEASE = 1  # seconds: what the killed server had leased comes back quickly


def test_a_killed_server_loses_nothing_it_accepted(server_url):
    truncate_all(server_url)
    accepted: set[str] = set()
    # Received by a worker before the crash. An acknowledgement in flight may have
    # deleted its messages without the worker hearing back: they were delivered.
    delivered: set[str] = set()
    lock = threading.Lock()
    enough = threading.Event()

    def produce(producer: int, url: str) -> None:
        with httpx.Client(base_url=url, timeout=10) as client:
            for number in range(10_000):
                key = f"p{producer}-{number}"
                try:
                    response = client.put(
                        f"/v1/queues/crash/messages/{key}", json={"payload": number}
                    )
                except httpx.HTTPError:
                    return  # the server is gone
                if response.status_code in (200, 201):
                    with lock:
                        accepted.add(key)
                        if len(accepted) >= KILL_AFTER_OFFERS:
                            enough.set()

    def consume(url: str) -> None:
        with httpx.Client(base_url=url, timeout=10) as client:
            while True:
                try:
                    polled = client.post("/v1/queues/crash/poll", json={"max": 5, "lease": LEASE})
                    body = polled.json()
                    with lock:
                        delivered.update(message["key"] for message in body["messages"])
                    if body["messages"]:
                        client.delete(f"/v1/queues/crash/locks/{body['lock_id']}")
                except (httpx.HTTPError, ValueError):
                    return  # the server is gone

    with running_server(server_url) as first, ThreadPoolExecutor(PRODUCERS + CONSUMERS) as pool:
        work = [pool.submit(produce, n, first.url) for n in range(PRODUCERS)]
        work += [pool.submit(consume, first.url) for _ in range(CONSUMERS)]
        assert enough.wait(60), "the load never reached the kill point"
        os.kill(first.pid, signal.SIGKILL)
        for future in work:
            future.result(timeout=60)

    with (
        running_server(server_url) as second,
        httpx.Client(base_url=second.url, timeout=30) as client,
    ):
        # Leases taken by the dead server run out within LEASE seconds: wait for them.
        redelivered: set[str] = set()
        while True:
            body = client.post("/v1/queues/crash/poll", json={"max": 100, "wait": LEASE + 2}).json()
            if not body["messages"]:
                break
            redelivered.update(message["key"] for message in body["messages"])
            assert client.delete(f"/v1/queues/crash/locks/{body['lock_id']}").status_code == 204

    assert len(accepted) >= KILL_AFTER_OFFERS
    lost = accepted - delivered - redelivered
    assert not lost, f"{len(lost)} accepted offers were lost, e.g. {sorted(lost)[:5]}"
