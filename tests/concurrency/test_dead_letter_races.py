"""Eight workers on a real server, on PostgreSQL and MariaDB, acknowledging only some messages: every
message ends acknowledged or dead-lettered, exactly once in the history, and no delivery
is handed out twice."""

from __future__ import annotations

import threading
import time
from collections import Counter, defaultdict
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from itertools import pairwise

import httpx
import pytest

from tests.conftest import truncate_all
from tests.support.helpers import history_rows
from tests.support.server import running_server

pytestmark = pytest.mark.server_databases

MESSAGES, WORKERS = 300, 8
MAX_DELIVERIES = 2
LEASE = 2  # seconds; unacknowledged messages come back after it
WAIT_SECONDS = 90


def wants_to_acknowledge(key: str, delivery: int) -> bool:
    """A third of the messages succeed at once, a third on their second delivery, a third never."""
    return {0: True, 1: delivery >= 2, 2: False}[int(key) % 3]


def test_workers_that_fail_some_messages_end_with_each_acked_or_dead_lettered_once(
    server_url,
):
    truncate_all(server_url)
    lock = threading.Condition()
    # key -> (delivery number, when its lease ends) per delivery, epoch ms
    seen: defaultdict[str, list[tuple[int, int]]] = defaultdict(list)
    late_acknowledgements: list[tuple[str, int, int]] = []  # (key, sent at, lease end)
    acknowledged: set[str] = set()
    dead_letters: Counter[str] = Counter()
    stop = threading.Event()

    def finished() -> bool:
        return len(acknowledged) + len(dead_letters) >= MESSAGES

    def work(url: str) -> None:
        with httpx.Client(base_url=url, timeout=30) as client:
            while not stop.is_set():
                body = client.post(
                    "/v1/queues/q/poll", json={"max": 1, "lease": LEASE, "wait": 1}
                ).json()
                for message in body["messages"]:
                    lease_ends = _epoch_ms(message["lease_expires_at"])
                    with lock:
                        seen[message["key"]].append((message["deliveries"], lease_ends))
                    if wants_to_acknowledge(message["key"], message["deliveries"]):
                        sent = time.time_ns() // 1_000_000  # the server's clock is this machine's
                        answer = client.delete(f"/v1/queues/q/locks/{body['lock_id']}")
                        with lock:
                            if answer.status_code == 204:
                                acknowledged.add(message["key"])
                                lock.notify_all()
                            else:
                                late_acknowledgements.append((message["key"], sent, lease_ends))

    def drain_dead_letters(url: str) -> None:
        with httpx.Client(base_url=url, timeout=30) as client:
            while not stop.is_set():
                body = client.post("/v1/queues/q.dead/poll", json={"max": 100, "wait": 1}).json()
                if body["messages"]:
                    assert (
                        client.delete(f"/v1/queues/q.dead/locks/{body['lock_id']}").status_code
                        == 204
                    )
                    with lock:
                        dead_letters.update(message["key"] for message in body["messages"])
                        lock.notify_all()

    with running_server(server_url) as server, httpx.Client(base_url=server.url) as client:
        settings = client.put("/v1/queues/q/settings", json={"max_deliveries": MAX_DELIVERIES})
        assert settings.status_code == 200
        batch = [{"key": str(number), "payload": number} for number in range(MESSAGES)]
        assert (
            client.post("/v1/queues/q/batch", json={"messages": batch}).json()["created"]
            == MESSAGES
        )
        with ThreadPoolExecutor(WORKERS + 1) as pool:
            futures = [pool.submit(work, server.url) for _ in range(WORKERS)]
            futures.append(pool.submit(drain_dead_letters, server.url))
            with lock:
                done = lock.wait_for(finished, WAIT_SECONDS)
            stop.set()
            for future in futures:
                future.result(timeout=WAIT_SECONDS)
        assert done, f"{len(acknowledged)} acknowledged, {len(dead_letters)} dead letters"
        assert client.get("/v1/queues/q").json()["messages"] == 0
        assert client.get("/v1/queues/q.dead").json()["messages"] == 0

    keys = {str(number) for number in range(MESSAGES)}
    never = {key for key in keys if int(key) % 3 == 2}
    # A worker slower than its lease may lose a message it meant to acknowledge
    # (then it is dead-lettered instead), but only once its lease had ended.
    assert all(sent >= lease_end for _, sent, lease_end in late_acknowledgements), (
        late_acknowledgements
    )
    assert acknowledged <= keys - never
    assert set(dead_letters) == keys - acknowledged and set(dead_letters.values()) == {1}
    assert len(acknowledged) > MESSAGES / 2  # the workers did acknowledge
    for key, deliveries in seen.items():
        # Handed out as 1, 2, …, each only once its previous lease had ended (a lease
        # ends LEASE after the poll that took it): no two workers ever held one
        # message at the same time.
        assert [number for number, _ in deliveries] == list(range(1, len(deliveries) + 1))
        for (_, lease_ended), (_, next_lease_ends) in pairwise(deliveries):
            assert next_lease_ends - LEASE * 1000 >= lease_ended, (key, deliveries)
    assert all(len(seen[key]) == MAX_DELIVERIES for key in never)

    history = [row for row in history_rows(server_url) if row["queue"] == "q"]
    assert sorted(row["key"] for row in history) == sorted(keys)  # each exactly once
    for row in history:
        expected = "acknowledged" if row["key"] in acknowledged else "dead_lettered"
        assert row["outcome"] == expected, row
        assert row["deliveries"] == len(seen[row["key"]]), row


def _epoch_ms(text: str) -> int:
    return round(datetime.fromisoformat(text).timestamp() * 1000)
