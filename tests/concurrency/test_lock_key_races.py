"""Workers on a real server, on PostgreSQL and MariaDB, acknowledging by key, some of
them as their leases run out while other workers poll: no acknowledgement ever takes
a message from the lock that holds it now."""

from __future__ import annotations

import random
import threading
import time
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime

import httpx
import pytest

from tests.conftest import truncate_all
from tests.support.helpers import history_rows
from tests.support.server import running_server

pytestmark = pytest.mark.server_databases

MESSAGES, WORKERS, BATCH = 240, 6, 8
LEASE = 1  # seconds
WAIT_SECONDS = 90


def test_late_acknowledgements_by_key_never_take_a_message_from_its_new_lock(server_url):
    truncate_all(server_url)
    lock = threading.Condition()
    # key -> lock id of each delivery, by delivery number
    delivered: defaultdict[str, dict[int, str]] = defaultdict(dict)
    acknowledged: dict[str, str] = {}  # key -> the lock whose acknowledgement took it
    twice: list[str] = []  # keys acknowledged by two answers
    missing = 0  # keys answered missing: their lease ran out and another poll took them
    stop = threading.Event()

    def work(url: str, seed: int) -> None:
        nonlocal missing
        chance = random.Random(seed)
        with httpx.Client(base_url=url, timeout=30) as client:
            while not stop.is_set():
                body = client.post(
                    "/v1/queues/q/poll", json={"max": BATCH, "lease": LEASE, "wait": 1}
                ).json()
                if not body["messages"]:
                    continue
                lock_id = body["lock_id"]
                keys = [message["key"] for message in body["messages"]]
                with lock:
                    for message in body["messages"]:
                        delivered[message["key"]][message["deliveries"]] = lock_id
                # Half now; the rest, for half the polls, within 50 ms of the lease's end,
                # as other workers' polls wait for it (a slow handler).
                now, late = keys[: len(keys) // 2], keys[len(keys) // 2 :]
                batches = [now]
                if chance.random() < 0.5:
                    batches.append(late)
                for number, batch in enumerate(batches):
                    if number:
                        lease_ends = _epoch_seconds(body["messages"][0]["lease_expires_at"])
                        time.sleep(max(0.0, lease_ends + chance.uniform(-0.05, 0.05) - time.time()))
                    if not batch:
                        continue
                    answer = client.post(f"/v1/queues/q/locks/{lock_id}/ack", json={"keys": batch})
                    assert answer.status_code == 200, answer.text
                    outcome = answer.json()
                    with lock:
                        for key in outcome["acknowledged"]:
                            if key in acknowledged:
                                twice.append(key)
                            acknowledged[key] = lock_id
                        missing += len(outcome["missing"])
                        lock.notify_all()

    with running_server(server_url) as server, httpx.Client(base_url=server.url) as client:
        batch = [{"key": f"k{number:03d}", "payload": number} for number in range(MESSAGES)]
        response = client.post("/v1/queues/q/batch", json={"messages": batch})
        assert response.json()["created"] == MESSAGES
        with ThreadPoolExecutor(WORKERS) as pool:
            futures = [pool.submit(work, server.url, seed) for seed in range(WORKERS)]
            with lock:
                done = lock.wait_for(lambda: len(acknowledged) >= MESSAGES, WAIT_SECONDS)
            stop.set()
            for future in futures:
                future.result(timeout=WAIT_SECONDS)
        assert done, f"{len(acknowledged)} of {MESSAGES} acknowledged"
        assert client.get("/v1/queues/q").json()["messages"] == 0

    assert twice == []
    for key, lock_id in acknowledged.items():
        # The acknowledgement that took it came from the lock of its last delivery: an
        # older lock's late acknowledgement found it missing, and left it to the new one.
        deliveries = delivered[key]
        assert lock_id == deliveries[max(deliveries)], (key, lock_id, deliveries)
    assert missing > 0, "no acknowledgement raced a new poll: the test proved nothing"
    history = history_rows(server_url)
    assert sorted(row["key"] for row in history) == sorted(acknowledged)
    for row in history:
        assert row["outcome"] == "acknowledged"
        assert row["deliveries"] == max(delivered[row["key"]]), row


def _epoch_seconds(text: str) -> float:
    return datetime.fromisoformat(text).timestamp()
