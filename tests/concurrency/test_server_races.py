"""Concurrency on real PostgreSQL and MariaDB: a real server process, real HTTP, real threads.

Each claim here would fail if it were false: same-key races produce one
creation, a drain by many workers delivers every message to exactly one of
them, and producers racing consumers lose nothing.
"""

from __future__ import annotations

import threading
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from tests.support.helpers import stored_rows

pytestmark = pytest.mark.server_databases

# A lease far longer than any test: a message delivered twice was delivered to two
# workers at once, not redelivered after its lease.
LONG_LEASE = 600
TIMEOUT = 60


def _client(base_url: str) -> httpx.Client:
    return httpx.Client(base_url=base_url, timeout=TIMEOUT)


@pytest.mark.parametrize("if_exists", ["update", "ignore"])
def test_ten_clients_offering_one_key_at_once_create_it_once(base_url, server_url, if_exists):
    clients = 10
    keys = [f"race-{index}" for index in range(20)]
    barrier = threading.Barrier(clients)

    def offer_all(worker: int) -> list[tuple[str, str, int]]:
        outcomes = []
        with _client(base_url) as client:
            for key in keys:
                barrier.wait(TIMEOUT)  # everyone fires at the same key at once
                response = client.put(
                    f"/v1/queues/races/messages/{key}",
                    json={"payload": {"worker": worker}, "if_exists": if_exists},
                )
                outcomes.append((key, response.json()["outcome"], response.status_code))
        return outcomes

    with ThreadPoolExecutor(clients) as pool:
        results = [
            item
            for future in [pool.submit(offer_all, w) for w in range(clients)]
            for item in future.result()
        ]

    for key in keys:
        outcomes = Counter(outcome for k, outcome, _ in results if k == key)
        assert outcomes["created"] == 1, (key, outcomes)
        assert sum(outcomes.values()) == clients
        if if_exists == "ignore":
            assert outcomes["ignored"] == clients - 1
    assert all(status == (201 if outcome == "created" else 200) for _, outcome, status in results)
    assert sorted(row["pKey"] for row in stored_rows(server_url)) == sorted(keys)


def _offer_batches(client: httpx.Client, queue: str, keys: list[str], size: int = 1000) -> None:
    for start in range(0, len(keys), size):
        chunk = keys[start : start + size]
        response = client.post(
            f"/v1/queues/{queue}/batch",
            json={"messages": [{"key": key, "payload": {"key": key}} for key in chunk]},
        )
        assert response.status_code == 200, response.text
        assert response.json()["created"] == len(chunk)


def _drain(
    base_url: str, queue: str, batch: int, wait: float = 0, stop: threading.Event | None = None
):
    """Poll and ack until the queue is empty (and, with `stop`, until told to stop)."""
    delivered: list[tuple[str, str]] = []
    with _client(base_url) as client:
        while True:
            response = client.post(
                f"/v1/queues/{queue}/poll", json={"max": batch, "lease": LONG_LEASE, "wait": wait}
            )
            assert response.status_code == 200, response.text
            body = response.json()
            if not body["messages"]:
                if stop is None or stop.is_set():
                    return delivered
                continue
            for message in body["messages"]:
                assert message["payload"] == {"key": message["key"]}
                delivered.append((message["key"], message["delivery"]))
            acked = client.delete(f"/v1/queues/{queue}/locks/{body['lock_id']}")
            assert acked.status_code == 204, acked.text


def test_eight_workers_drain_5000_messages_each_delivered_exactly_once(base_url, server_url):
    keys = [f"m{index:05d}" for index in range(5000)]
    with _client(base_url) as client:
        _offer_batches(client, "drain", keys)

    # Half the workers take one message per poll, half take many: both claim paths race.
    batch_sizes = [1, 1, 1, 1, 25, 25, 25, 25]
    with ThreadPoolExecutor(len(batch_sizes)) as pool:
        futures = [pool.submit(_drain, base_url, "drain", size) for size in batch_sizes]
        per_worker = [future.result(timeout=600) for future in futures]

    delivered = Counter(key for worker in per_worker for key, _ in worker)
    assert sorted(delivered) == keys, "some messages were never delivered"
    assert [key for key, count in delivered.items() if count > 1] == [], "delivered to two workers"
    assert all(delivery == "first" for worker in per_worker for _, delivery in worker)
    assert sum(1 for worker in per_worker if worker) == len(batch_sizes), "a worker starved"
    assert stored_rows(server_url) == []


def test_producers_and_consumers_together_lose_nothing(base_url, server_url):
    producers, batches, per_batch, consumers = 3, 10, 100, 5
    done_producing = threading.Event()

    def produce(producer: int) -> None:
        with _client(base_url) as client:
            for batch in range(batches):
                keys = [f"p{producer}-b{batch}-{index}" for index in range(per_batch)]
                _offer_batches(client, "mixed", keys)

    with ThreadPoolExecutor(producers + consumers) as pool:
        consumed = [
            pool.submit(_drain, base_url, "mixed", size, 0.5, done_producing)
            for size in (1, 5, 10, 50, 100)[:consumers]
        ]
        produced = [pool.submit(produce, producer) for producer in range(producers)]
        for future in produced:
            future.result(timeout=600)
        done_producing.set()
        per_consumer = [future.result(timeout=600) for future in consumed]

    delivered = Counter(key for consumer in per_consumer for key, _ in consumer)
    expected = {
        f"p{p}-b{b}-{i}" for p in range(producers) for b in range(batches) for i in range(per_batch)
    }
    assert set(delivered) == expected
    assert max(delivered.values()) == 1
    assert stored_rows(server_url) == []
