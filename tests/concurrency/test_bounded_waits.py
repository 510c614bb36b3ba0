"""One queue in trouble never stops the others: a real server on PostgreSQL and MariaDB,
real HTTP, with the message table's rows (or the whole table) locked from outside,
or ten batches contending for one key.

Each request that runs into a lock answers 503 with Retry-After within the bounds
(a turn at a connection, then the lock: twice the lock bound at most; a poll reads its
queue's settings first, with a turn of its own: three times), nothing of
the service stays waiting in the database, other queues keep answering 2xx at
their usual speed, /readyz stays ready, and all is served again once the lock goes.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from tests.support.locking import EXPIRY_SWEEP, busy_sessions, locked_from_outside
from tests.support.server import running_server

pytestmark = pytest.mark.server_databases

LOCK_TIMEOUT = 2.0  # seconds, the server's HOURGLASS_LOCK_TIMEOUT here
MARGIN = 2.5  # seconds of scheduling on a busy 2-core machine, on top of a bound
# An unrelated request on an idle machine takes milliseconds. Waiting for a turn
# behind calls that wait on the lock would take up to the lock bound; half of it
# tells the two apart with room for a busy machine.
UNRELATED_LIMIT = LOCK_TIMEOUT / 2
RETRYING_CLIENTS = 12  # more than the pool's ten connections
TABLE_CLIENTS = 24  # enough that /readyz, in their line for a turn, would wait past the bound
TIMEOUT = 60


class Observed:
    """Answers seen, by what was asked: status counts, the slowest, 503s without Retry-After."""

    def __init__(self) -> None:
        self._lock = threading.Condition()
        self.statuses: Counter[tuple[str, int]] = Counter()
        self.slowest: dict[str, float] = {}
        self.without_retry_after: list[str] = []

    def send(self, what: str, request: Callable[[], httpx.Response]) -> httpx.Response:
        started = time.monotonic()
        response = request()
        took = time.monotonic() - started
        with self._lock:
            self.statuses[what, response.status_code] += 1
            self.slowest[what] = max(self.slowest.get(what, 0.0), took)
            if response.status_code == 503 and not response.headers.get("retry-after"):
                self.without_retry_after.append(f"{what}: {response.text}")
            self._lock.notify_all()
        return response

    def wait_for(self, what: tuple[str, ...], status: int, count: int) -> None:
        """Wait until `count` answers to `what` were `status`."""
        with self._lock:
            seen = self._lock.wait_for(
                lambda: sum(self.statuses[asked, status] for asked in what) >= count, TIMEOUT
            )
        assert seen, f"never {count} × {status} for {what}: {self.statuses}"

    def count(self, what: str, *statuses: int) -> int:
        with self._lock:
            return sum(
                count
                for (seen, status), count in self.statuses.items()
                if seen == what and (not statuses or status in statuses)
            )

    def __str__(self) -> str:
        slowest = {what: round(seconds, 3) for what, seconds in sorted(self.slowest.items())}
        return f"statuses {dict(self.statuses)}; slowest (s) {slowest}"

    def statuses_of(self, what: str) -> set[int]:
        with self._lock:
            return {status for seen, status in self.statuses if seen == what}


@pytest.fixture(scope="module")
def server(server_url: str):
    with running_server(server_url, HOURGLASS_LOCK_TIMEOUT=str(LOCK_TIMEOUT)) as running:
        yield running.url


def _offer(client: httpx.Client, queue: str, key: str, payload: object) -> httpx.Response:
    return client.put(f"/v1/queues/{queue}/messages/{key}", json={"payload": payload})


def _poll_and_ack(client: httpx.Client, observed: Observed, queue: str) -> None:
    polled = observed.send("other poll", lambda: client.post(f"/v1/queues/{queue}/poll", json={}))
    if polled.status_code == 200 and polled.json()["lock_id"]:
        lock = polled.json()["lock_id"]
        observed.send("other ack", lambda: client.delete(f"/v1/queues/{queue}/locks/{lock}"))


def _other_queues_meanwhile(url: str, observed: Observed, rounds: int) -> None:
    """Offers, polls and acknowledgements on other queues, and /readyz, one at a time."""
    with httpx.Client(base_url=url, timeout=TIMEOUT) as client:
        for number in range(rounds):
            queue = f"other-{number % 3}"
            observed.send(
                "other offer",
                lambda queue=queue, number=number: _offer(client, queue, f"k{number}", number),
            )
            _poll_and_ack(client, observed, queue)
            observed.send("readyz", lambda: client.get("/readyz"))


def _retrying(url: str, observed: Observed, what: str, send, stop: threading.Event) -> None:
    with httpx.Client(base_url=url, timeout=TIMEOUT) as client:
        number = 0
        while not stop.is_set():
            number += 1
            observed.send(what, lambda number=number: send(client, number))


def test_a_locked_queue_stops_only_itself(base_url, server_url):
    with httpx.Client(base_url=base_url, timeout=TIMEOUT) as client:
        for index in range(RETRYING_CLIENTS):
            assert _offer(client, "locked", f"k{index}", 0).status_code == 201
    observed = Observed()
    stop = threading.Event()
    with (
        locked_from_outside(server_url, "locked") as locker,
        ThreadPoolExecutor(RETRYING_CLIENTS) as pool,
    ):
        # A dozen clients keep updating the locked rows, each retrying at once on 503.
        retrying = [
            pool.submit(
                _retrying,
                base_url,
                observed,
                "locked offer",
                lambda client, number, index=index: _offer(client, "locked", f"k{index}", number),
                stop,
            )
            for index in range(RETRYING_CLIENTS)
        ]
        try:
            observed.wait_for(("locked offer",), 503, RETRYING_CLIENTS)
            # Every turn the locked queue may take is now taken by a wait on its lock.
            _other_queues_meanwhile(base_url, observed, rounds=30)
        finally:
            stop.set()
            for future in retrying:
                future.result(TIMEOUT)
        # Each answered 503 within its bounds, and left nothing behind in the database.
        assert busy_sessions(server_url, locker) == []

    print(observed)
    assert observed.statuses_of("locked offer") == {503}, observed.statuses
    assert observed.slowest["locked offer"] <= 2 * LOCK_TIMEOUT + MARGIN, observed.slowest
    assert not observed.without_retry_after, observed.without_retry_after[:3]
    assert observed.statuses_of("other offer") == {201}, observed.statuses
    assert observed.statuses_of("other poll") == {200}, observed.statuses
    assert observed.statuses_of("other ack") == {204}, observed.statuses
    assert observed.statuses_of("readyz") == {200}, observed.statuses
    for what in ("other offer", "other poll", "other ack", "readyz"):
        assert observed.slowest[what] < UNRELATED_LIMIT, observed.slowest
    with httpx.Client(base_url=base_url, timeout=TIMEOUT) as client:  # the lock is gone
        assert _offer(client, "locked", "k0", "after").status_code == 200


def test_a_locked_table_answers_503_within_the_bounds_then_recovers(base_url, server_url):
    observed = Observed()
    stop = threading.Event()

    # Every request to a queue of its own: each may take one of the reserved turns,
    # and the turns' waiters far outnumber the turns.
    queues = itertools.count()

    def offer(client: httpx.Client, number: int) -> httpx.Response:
        return _offer(client, f"offered-{next(queues)}", "k", number)

    def poll(client: httpx.Client, _number: int) -> httpx.Response:
        return client.post(f"/v1/queues/polled-{next(queues)}/poll", json={})

    with (
        locked_from_outside(server_url) as locker,
        ThreadPoolExecutor(TABLE_CLIENTS) as pool,
    ):
        clients = [
            pool.submit(_retrying, base_url, observed, what, send, stop)
            for what, send in [("offer", offer), ("poll", poll)] * (TABLE_CLIENTS // 2)
        ]
        try:
            observed.wait_for(("offer", "poll"), 503, 2 * len(clients))
            with httpx.Client(base_url=base_url, timeout=TIMEOUT) as client:
                for _ in range(10):  # its own connection: never behind the waits on the lock
                    observed.send("readyz", lambda: client.get("/readyz"))
        finally:
            stop.set()
            for future in clients:
                future.result(TIMEOUT)
        # Nothing of the requests' is left; the background sweep waits its turn, bounded.
        assert busy_sessions(server_url, locker, but=EXPIRY_SWEEP) == []

    print(observed)
    assert observed.statuses_of("offer") == {503}, observed.statuses
    assert observed.statuses_of("poll") == {503}, observed.statuses
    # A turn, then the lock; a poll reads its queue's settings first, with a turn of its own.
    assert observed.slowest["offer"] <= 2 * LOCK_TIMEOUT + MARGIN, observed.slowest
    assert observed.slowest["poll"] <= 3 * LOCK_TIMEOUT + MARGIN, observed.slowest
    assert not observed.without_retry_after, observed.without_retry_after[:3]
    assert observed.statuses_of("readyz") == {200}, observed.statuses
    assert observed.slowest["readyz"] < UNRELATED_LIMIT, observed.slowest
    # The lock is gone: everything is served again at once.
    after = Observed()
    _other_queues_meanwhile(base_url, after, rounds=5)
    assert after.statuses_of("other offer") == {201}, after.statuses
    assert after.statuses_of("other poll") == {200}, after.statuses


def test_ten_batches_on_one_key_leave_other_queues_served(base_url):
    # 200 items, not the 1000 a batch may hold: a same-key update is a transaction
    # each, ~5 ms on this machine, and ten such batches at once take a minute.
    batches, items = 10, 200
    observed = Observed()
    started = threading.Barrier(batches + 1)

    def batch(number: int) -> None:
        # Every item an update of the one key: a transaction each, all on one row.
        body = {"messages": [{"key": "k", "payload": [number, i]} for i in range(items)]}
        with httpx.Client(base_url=base_url, timeout=TIMEOUT) as client:
            started.wait(TIMEOUT)
            observed.send("batch", lambda: client.post("/v1/queues/hot/batch", json=body))

    with ThreadPoolExecutor(batches) as pool:
        running = [pool.submit(batch, number) for number in range(batches)]
        started.wait(TIMEOUT)
        with httpx.Client(base_url=base_url, timeout=TIMEOUT) as client:
            while not all(future.done() for future in running):
                key = f"k{observed.count('other offer')}"
                observed.send("other offer", lambda key=key: _offer(client, "cold", key, key))
                # Another key of the batches' own queue waits for one of its turns at
                # most the lock bound, then is served or told 503.
                observed.send("hot offer", lambda key=key: _offer(client, "hot", key, key))
        for future in running:
            future.result(TIMEOUT)

    print(observed)
    # A batch that found no turn of its queue free within the bound is told so.
    assert observed.statuses_of("batch") <= {200, 503}, observed.statuses
    assert observed.count("batch", 200) >= 1, observed.statuses
    assert observed.slowest["batch"] <= TIMEOUT
    assert observed.count("other offer") >= 3, observed.statuses
    assert observed.statuses_of("other offer") == {201}, observed.statuses
    assert observed.slowest["other offer"] < UNRELATED_LIMIT, observed.slowest
    assert observed.statuses_of("hot offer") <= {201, 503}, observed.statuses
    assert observed.slowest["hot offer"] <= LOCK_TIMEOUT + MARGIN, observed.slowest
