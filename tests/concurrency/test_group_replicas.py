"""Message groups under real concurrency (docs/guide/flow-control.md): eight workers on two
`hourglass serve` replicas drain 2,000 messages in 50 groups, on PostgreSQL and on MariaDB.
With group_concurrency N, never more than N of one group are leased at once (seen both in
the database, sampled all along, and in the workers' answers), every message is
acknowledged exactly once, and with N = 1 each group goes in due order; with N = 1 while
workers release some of what they get and another client moves messages between groups,
still never two of one group at once."""

from __future__ import annotations

import threading
import time
from collections import Counter, defaultdict
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import httpx
import pytest
from sqlalchemy import create_engine, func, select

from app.domain.formats import format_timestamp
from app.storage.tables import delayed_queue, delivery_history
from tests.conftest import truncate_all
from tests.support.server import Server, running_server

pytestmark = pytest.mark.server_databases

QUEUE = "grouped"
MESSAGES = 2000
GROUPS = 50
WORKERS_PER_REPLICA = 4
# Long enough that no lease runs out while the drain goes on: every delivery is a first.
LEASE = 120
DRAIN_SECONDS = 240


@dataclass(frozen=True)
class Delivered:
    key: str
    group: str
    received: float  # monotonic, once the poll answered
    acknowledging: float  # monotonic, before the acknowledgement was sent


@pytest.fixture
def replicas(server_url: str) -> Iterator[tuple[Server, Server]]:
    truncate_all(server_url)
    with running_server(server_url) as a, running_server(server_url) as b:
        yield a, b


def _offer(server: Server) -> dict[str, int]:
    """2,000 messages, message i in group i % 50, due i ms after a time in the past (so a
    group's due order is its keys' order); the position of each key in its group."""
    base = int(time.time() * 1000) - 3_600_000
    positions = {}
    for start in range(0, MESSAGES, 1000):
        messages = []
        for index in range(start, start + 1000):
            key = f"k{index:04d}"
            positions[key] = index // GROUPS
            messages.append(
                {
                    "key": key,
                    "payload": index,
                    "group": f"g{index % GROUPS:02d}",
                    "scheduled_at": format_timestamp(base + index),
                }
            )
        answer = httpx.post(
            f"{server.url}/v1/queues/{QUEUE}/batch", json={"messages": messages}, timeout=60
        )
        assert answer.status_code == 200, answer.text
    return positions


def _sample(url: str, stop: threading.Event, worst: Counter) -> None:
    """Until `stop`: the most messages of any group leased at one instant, by group, as the
    database shows them (held, and the lease not run out)."""
    engine = create_engine(url)
    leased = (
        select(delayed_queue.c.messageGroup, func.count())
        # Leases are long enough that none runs out: held is leased.
        .where(delayed_queue.c.pKind == QUEUE, delayed_queue.c.lockUuid.is_not(None))
        .group_by(delayed_queue.c.messageGroup)
    )
    try:
        with engine.connect() as connection:
            while not stop.is_set():
                for group, count in connection.execute(leased):
                    worst[group] = max(worst[group], count)
                connection.rollback()  # a fresh snapshot each time
    finally:
        engine.dispose()


def _work(server: Server, done: Counter, lock: threading.Lock, out: list[Delivered]) -> None:
    deadline = time.monotonic() + DRAIN_SECONDS
    with httpx.Client(base_url=server.url, timeout=60) as client:
        while time.monotonic() < deadline:
            with lock:
                if done["acknowledged"] >= MESSAGES:
                    return
            answer = client.post(
                f"/v1/queues/{QUEUE}/poll", json={"max": 5, "wait": 0.5, "lease": LEASE}
            )
            assert answer.status_code == 200, answer.text
            received = time.monotonic()
            polled = answer.json()
            if not polled["messages"]:
                continue
            acknowledging = time.monotonic()
            gone = client.delete(f"/v1/queues/{QUEUE}/locks/{polled['lock_id']}")
            assert gone.status_code == 204, gone.text
            with lock:
                done["acknowledged"] += len(polled["messages"])
                out.extend(
                    Delivered(message["key"], message["group"], received, acknowledging)
                    for message in polled["messages"]
                )


def _assert_each_acknowledged_once(url: str) -> None:
    """The queue is empty and its history holds one acknowledgement of each message."""
    engine = create_engine(url)
    try:
        with engine.connect() as connection:
            history = connection.execute(
                select(delivery_history.c.key, delivery_history.c.outcome).where(
                    delivery_history.c.queue == QUEUE
                )
            ).all()
            left = connection.execute(
                select(func.count()).where(delayed_queue.c.pKind == QUEUE)
            ).scalar()
    finally:
        engine.dispose()
    assert left == 0
    assert Counter(outcome for _, outcome in history) == {"acknowledged": MESSAGES}
    assert len({key for key, _ in history}) == MESSAGES


@pytest.mark.parametrize("concurrency", [1, 2])
def test_eight_workers_on_two_replicas_keep_each_group_s_bound_and_order(
    replicas, server_url, concurrency
):
    a, b = replicas
    answer = httpx.put(
        f"{a.url}/v1/queues/{QUEUE}/settings", json={"group_concurrency": concurrency}
    )
    assert answer.status_code == 200, answer.text
    positions = _offer(a)
    worst: Counter = Counter()
    stop = threading.Event()
    sampler = threading.Thread(target=_sample, args=(server_url, stop, worst))
    sampler.start()
    done: Counter = Counter()
    lock = threading.Lock()
    delivered: list[Delivered] = []
    try:
        with ThreadPoolExecutor(2 * WORKERS_PER_REPLICA) as pool:
            workers = [
                pool.submit(_work, server, done, lock, delivered)
                for server in (a, b)
                for _ in range(WORKERS_PER_REPLICA)
            ]
            for worker in workers:
                worker.result()
    finally:
        stop.set()
        sampler.join()

    # Every message delivered once, and acknowledged once (the history says so too).
    assert sorted(each.key for each in delivered) == sorted(positions)
    _assert_each_acknowledged_once(server_url)

    # Never more than `concurrency` of one group leased at once: in the database ...
    assert worst, "the sampler saw nothing leased"
    assert max(worst.values()) <= concurrency, worst
    # ... and in the answers: when a message arrived, the others of its group that had
    # arrived and were not yet being acknowledged were all leased with it.
    by_group: dict[str, list[Delivered]] = defaultdict(list)
    for each in delivered:
        by_group[each.group].append(each)
    for group, deliveries in by_group.items():
        for each in deliveries:
            held = [
                other
                for other in deliveries
                if other is not each and other.received < each.received < other.acknowledging
            ]
            assert len(held) + 1 <= concurrency, (group, each, held)
        if concurrency == 1:  # one at a time: each arrives after the one before is let go
            order = [positions[each.key] for each in sorted(deliveries, key=lambda d: d.received)]
            assert order == sorted(order), group


def _churn_work(
    server: Server, acknowledged: set[str], lock: threading.Lock, finished: threading.Event
) -> None:
    """A worker that lets every fifth poll's messages go again (a release) and acknowledges
    the others by key, noting what each acknowledgement took."""
    deadline = time.monotonic() + DRAIN_SECONDS
    polls = 0
    with httpx.Client(base_url=server.url, timeout=60) as client:
        while time.monotonic() < deadline and not finished.is_set():
            answer = client.post(
                f"/v1/queues/{QUEUE}/poll", json={"max": 5, "wait": 0.5, "lease": LEASE}
            )
            assert answer.status_code == 200, answer.text
            polled = answer.json()
            if not polled["messages"]:
                continue
            polls += 1
            path = f"/v1/queues/{QUEUE}/locks/{polled['lock_id']}"
            if polls % 5 == 0:
                released = client.post(f"{path}/release", json={})
                assert released.status_code == 204, released.text
                continue
            keys = [message["key"] for message in polled["messages"]]
            taken = client.post(f"{path}/ack", json={"keys": keys})
            assert taken.status_code == 200, taken.text
            with lock:
                acknowledged.update(taken.json()["acknowledged"])
                if len(acknowledged) >= MESSAGES:
                    finished.set()


def _regroup(server: Server, finished: threading.Event, moved: Counter) -> None:
    """Until the drain ends: move messages to another group (an update-only offer of the
    same payload and time, the group changed), whether they wait, lead their group or are
    leased (an update takes a message from its holder)."""
    base = int(time.time() * 1000) - 3_600_000
    index = 0
    with httpx.Client(base_url=server.url, timeout=60) as client:
        while not finished.is_set():
            index = (index + 37) % MESSAGES
            body = {
                "payload": index,
                "group": f"g{(index + 1) % GROUPS:02d}",
                "scheduled_at": format_timestamp(base + index),
            }
            answer = client.post(f"/v1/queues/{QUEUE}/messages/k{index:04d}", json=body)
            assert answer.status_code in (200, 404), answer.text  # 404: acknowledged already
            moved[answer.status_code] += 1


def test_releases_and_regroups_during_the_drain_never_lease_two_of_a_group(replicas, server_url):
    """As above with group_concurrency 1, while workers release a fifth of what they get
    and a ninth client moves messages between groups: still never two of one group leased
    at once, and every message acknowledged exactly once."""
    a, b = replicas
    positions = _offer(a)
    worst: Counter = Counter()
    stop, finished = threading.Event(), threading.Event()
    sampler = threading.Thread(target=_sample, args=(server_url, stop, worst))
    sampler.start()
    acknowledged: set[str] = set()
    moved: Counter = Counter()
    lock = threading.Lock()
    try:
        with ThreadPoolExecutor(2 * WORKERS_PER_REPLICA + 1) as pool:
            regrouping = pool.submit(_regroup, b, finished, moved)
            workers = [
                pool.submit(_churn_work, server, acknowledged, lock, finished)
                for server in (a, b)
                for _ in range(WORKERS_PER_REPLICA)
            ]
            for worker in workers:
                worker.result()
            finished.set()
            regrouping.result()
    finally:
        stop.set()
        sampler.join()

    assert acknowledged == set(positions)
    assert moved[200] > 0, moved  # some messages did change group during the drain
    _assert_each_acknowledged_once(server_url)
    assert worst, "the sampler saw nothing leased"
    assert max(worst.values()) <= 1, worst
