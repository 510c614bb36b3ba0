"""A pause made through one replica holds on another within a second (docs/guide/flow-control.md): two real
`hourglass serve` processes on PostgreSQL and on MariaDB. Through B, polls and push deliver
nothing from a second after a pause through A on, and a long poll waiting on B wakes
within a second of a resume through A.

What is checked is what did not happen over a window of real time (no delivery after the
pause's second): these tests watch that window for a breach, and wait on events otherwise."""

from __future__ import annotations

import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from tests.conftest import truncate_all
from tests.support.push_receiver import PushReceiver, faults, push_receiver
from tests.support.server import Server, running_server

pytestmark = pytest.mark.server_databases

QUEUE = "paused"
# docs/guide/flow-control.md: every replica obeys a pause or a resume within a second.
WITHIN = 1.0
# How long past that second B is watched delivering nothing.
WATCHED = 1.0


@pytest.fixture
def receiver() -> Iterator[PushReceiver]:
    """Where the replicas may push, its answers 20 ms late: a steady stream of requests."""
    with push_receiver(faults(latency=0.02)) as receiver:
        yield receiver


@pytest.fixture
def replicas(server_url: str, receiver: PushReceiver) -> Iterator[tuple[Server, Server]]:
    truncate_all(server_url)
    allowed = {"HOURGLASS_PUSH_ALLOWED": receiver.url + "/"}
    with running_server(server_url, **allowed) as a, running_server(server_url, **allowed) as b:
        yield a, b


def _offer(server: Server, keys: range) -> None:
    for start in range(keys.start, keys.stop, 1000):
        batch = range(start, min(start + 1000, keys.stop))
        messages = [{"key": f"k{index}", "payload": index} for index in batch]
        answer = httpx.post(
            f"{server.url}/v1/queues/{QUEUE}/batch", json={"messages": messages}, timeout=30
        )
        assert answer.status_code == 200, answer.text


def _poll(client: httpx.Client, wait: float = 0, limit: int = 10) -> list[str]:
    answer = client.post(f"/v1/queues/{QUEUE}/poll", json={"max": limit, "wait": wait})
    assert answer.status_code == 200, answer.text
    return [message["key"] for message in answer.json()["messages"]]


def _post(server: Server, action: str) -> dict:
    answer = httpx.post(f"{server.url}/v1/queues/{QUEUE}/{action}", timeout=30)
    assert answer.status_code == 200, answer.text
    return answer.json()


def test_a_pause_through_one_replica_stops_the_other_s_polls_within_a_second(replicas):
    a, b = replicas
    _offer(a, range(2000))
    with httpx.Client(base_url=b.url, timeout=30) as client:
        assert _poll(client)  # B delivers, and has read that the queue is not paused
        paused_at = time.monotonic()
        _post(a, "pause")
        late = []  # keys B delivered more than a second after the pause
        while time.monotonic() < paused_at + WITHIN + WATCHED:
            keys = _poll(client)
            if time.monotonic() > paused_at + WITHIN:
                late += keys
        assert late == []
        assert _post(b, "resume")["paused"] is False
        assert _poll(client)  # delivers again


def test_a_long_poll_on_one_replica_wakes_within_a_second_of_a_resume_through_the_other(
    replicas,
):
    a, b = replicas
    _offer(a, range(1))
    _post(a, "pause")
    with httpx.Client(base_url=b.url, timeout=60) as client, ThreadPoolExecutor(1) as pool:
        waiting = pool.submit(_poll, client, 20, 1)
        # A poll of a paused queue answers only at the end of its wait: still waiting.
        with pytest.raises(TimeoutError):
            waiting.result(timeout=WITHIN)
        _post(a, "resume")
        resumed = time.monotonic()
        assert waiting.result(timeout=10) == ["k0"]
        assert time.monotonic() - resumed < WITHIN


def test_a_pause_through_one_replica_stops_both_replicas_pushing_within_a_second(
    replicas, receiver
):
    a, b = replicas
    count = 500
    push = {"url": f"{receiver.url}/hook", "timeout": 5, "concurrency": 4}
    answer = httpx.put(f"{a.url}/v1/queues/{QUEUE}/settings", json={"push": push})
    assert answer.status_code == 200, answer.text
    _offer(a, range(count))
    assert receiver.wait_until(lambda r: r.succeeded() >= 10, 30), "pushing"
    _post(b, "pause")
    limit = time.time() + WITHIN  # no request may arrive after this (receiver's clock)

    def late(receiver: PushReceiver) -> bool:
        return any(receipt.arrived > limit for receipt in receiver.receipts)

    assert not receiver.wait_until(late, WITHIN + WATCHED), "pushed after the pause's second"
    assert receiver.succeeded() < count  # the pause held back the rest
    _post(a, "resume")
    assert receiver.wait_until(lambda r: r.succeeded() >= count, 60), "the rest pushed"
