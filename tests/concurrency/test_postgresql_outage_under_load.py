"""PostgreSQL goes away under load and comes back: a real server, reaching the database
through a TCP proxy that cuts every connection and refuses new ones, then listens again.

While the database is gone every request answers 503 with Retry-After and
problem+json, /readyz answers 503 and /healthz 200; nothing answers 500; once
it is back the same process serves again within seconds; every offer that was
answered 2xx is delivered."""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from functools import partial

import httpx
import pytest
from sqlalchemy.engine import make_url

from tests.conftest import truncate_all
from tests.support.proxy import refuses_connections, tcp_proxy
from tests.support.server import running_server

pytestmark = pytest.mark.postgresql_only

PRODUCERS, CONSUMERS = 4, 2
LEASE = 2  # seconds: leases whose acknowledgement the outage swallowed come back quickly
RECOVERY_SECONDS = 10  # "within seconds of the database coming back"
WAIT_SECONDS = 60  # for load to reach a point; only a broken service takes this long

# What each request may answer, outage or not. An acknowledgement may find its
# lock gone (404): its DELETE committed but the answer was lost in the cut.
ALLOWED = {
    "offer": {200, 201, 503},
    "poll": {200, 503},
    "ack": {204, 404, 503},
}


class Load:
    """Producers and consumers hammering the service; what they saw, by phase."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.phase = "before"
        self.stop = threading.Event()
        self.changed = threading.Condition()
        self.statuses: Counter[tuple[str, str, int]] = Counter()  # (phase, request, status)
        self.worker_statuses: Counter[tuple[str, str, int]] = Counter()  # (worker, phase, status)
        self.bad_unavailable: list[str] = []  # 503s without Retry-After or problem+json
        self.transport_errors: list[str] = []
        self.accepted: set[str] = set()
        self.delivered: set[str] = set()

    def wait_until(self, condition: Callable[[], bool], timeout: float = WAIT_SECONDS) -> bool:
        with self.changed:
            return self.changed.wait_for(condition, timeout)

    def count(self, phase: str, request: str, *statuses: int) -> int:
        return sum(self.statuses[phase, request, status] for status in statuses)

    def every_worker_saw(self, phase: str, statuses: set[int], at_least: int = 1) -> bool:
        workers = [f"p{n}" for n in range(PRODUCERS)] + [f"c{n}" for n in range(CONSUMERS)]
        return all(
            sum(self.worker_statuses[worker, phase, status] for status in statuses) >= at_least
            for worker in workers
        )

    def _record(self, worker: str, request: str, response: httpx.Response, phase: str) -> None:
        if response.status_code == 503 and not (
            response.headers.get("retry-after")
            and response.headers.get("content-type") == "application/problem+json"
            and response.json()["status"] == 503
        ):
            self.bad_unavailable.append(f"{request}: {response.headers} {response.text}")
        with self.changed:
            self.statuses[phase, request, response.status_code] += 1
            self.worker_statuses[worker, phase, response.status_code] += 1
            self.changed.notify_all()

    def _send(self, worker: str, request: str, send: Callable[[], httpx.Response]):
        phase = self.phase
        try:
            response = send()
        except httpx.HTTPError as error:  # the service itself must stay reachable
            self.transport_errors.append(f"{request}: {error!r}")
            return None
        self._record(worker, request, response, phase)
        return response

    def produce(self, producer: int) -> None:
        with httpx.Client(base_url=self.url, timeout=30) as client:
            number = 0
            while not self.stop.is_set():
                key = f"p{producer}-{number}"
                number += 1
                response = self._send(
                    f"p{producer}",
                    "offer",
                    partial(
                        client.put, f"/v1/queues/outage/messages/{key}", json={"payload": number}
                    ),
                )
                if response is not None and response.status_code in (200, 201):
                    with self.changed:
                        self.accepted.add(key)

    def consume(self, consumer: int) -> None:
        with httpx.Client(base_url=self.url, timeout=30) as client:
            while not self.stop.is_set():
                polled = self._send(
                    f"c{consumer}",
                    "poll",
                    partial(
                        client.post, "/v1/queues/outage/poll", json={"max": 10, "lease": LEASE}
                    ),
                )
                if polled is None or polled.status_code != 200:
                    continue
                body = polled.json()
                with self.changed:
                    self.delivered.update(message["key"] for message in body["messages"])
                if body["messages"]:
                    self._send(
                        f"c{consumer}",
                        "ack",
                        partial(client.delete, f"/v1/queues/outage/locks/{body['lock_id']}"),
                    )


def _drain(url: str) -> set[str]:
    """Every key still in the queue, waiting out the leases the outage left behind."""
    keys: set[str] = set()
    with httpx.Client(base_url=url, timeout=30) as client:
        while True:
            body = client.post("/v1/queues/outage/poll", json={"max": 100, "wait": LEASE + 2})
            assert body.status_code == 200, body.text
            messages = body.json()["messages"]
            if not messages:
                return keys
            keys.update(message["key"] for message in messages)
            lock = body.json()["lock_id"]
            assert client.delete(f"/v1/queues/outage/locks/{lock}").status_code == 204


def test_the_service_rides_out_a_database_outage_under_load(postgresql_url):
    truncate_all(postgresql_url)
    target = make_url(postgresql_url)
    with tcp_proxy(target.host or "127.0.0.1", target.port or 5432) as proxy:
        through_proxy = target.set(host="127.0.0.1", port=proxy.port)
        with (
            running_server(through_proxy.render_as_string(hide_password=False)) as server,
            httpx.Client(base_url=server.url, timeout=30) as observer,
            ThreadPoolExecutor(PRODUCERS + CONSUMERS) as pool,
        ):
            load = Load(server.url)
            work = [pool.submit(load.produce, n) for n in range(PRODUCERS)]
            work += [pool.submit(load.consume, n) for n in range(CONSUMERS)]
            try:
                assert load.wait_until(
                    lambda: len(load.accepted) >= 200 and load.count("before", "ack", 204) >= 5
                ), f"the load never got going: {load.statuses}"

                # The database goes away: connections reset, new ones refused.
                load.phase = "outage"
                proxy.cut()
                assert refuses_connections(proxy.port)
                assert load.wait_until(lambda: load.every_worker_saw("outage", {503}, 3)), (
                    f"not every worker was told 503: {load.worker_statuses}"
                )
                ready = observer.get("/readyz")
                assert ready.status_code == 503
                assert ready.headers["content-type"] == "application/problem+json"
                assert observer.get("/healthz").status_code == 200
                metrics = observer.get("/metrics")  # the gauges need the database; it answers
                assert metrics.status_code == 200

                # It comes back: the same process serves again, by itself.
                load.phase = "after"
                restored = time.monotonic()
                proxy.restore()
                assert load.wait_until(
                    lambda: load.every_worker_saw("after", {200, 201}), RECOVERY_SECONDS
                ), (
                    f"not every worker was served within {RECOVERY_SECONDS} s: {load.worker_statuses}"
                )
                recovered_in = time.monotonic() - restored
                assert observer.get("/readyz").status_code == 200
                accepted_before = len(load.accepted)
                assert load.wait_until(lambda: len(load.accepted) >= accepted_before + 200)
            finally:
                load.stop.set()
                for future in work:
                    future.result(timeout=WAIT_SECONDS)

            remaining = _drain(server.url)
            scraped = observer.get("/metrics").text

    for (phase, request, status), count in load.statuses.items():
        assert status in ALLOWED[request], f"{count} × {request} answered {status} ({phase})"
    assert not load.bad_unavailable, load.bad_unavailable[:3]
    assert not load.transport_errors, load.transport_errors[:3]
    assert load.count("outage", "offer", 503) and load.count("outage", "poll", 503)
    lost = load.accepted - load.delivered - remaining
    assert not lost, f"{len(lost)} accepted offers were lost, e.g. {sorted(lost)[:5]}"
    unavailable = sum(count for (_, _, status), count in load.statuses.items() if status == 503)
    counted = _sample(scraped, 'hourglass_errors_total{kind="database_unavailable"}')
    assert counted == unavailable
    print(
        f"recovered in {recovered_in:.2f} s; statuses {dict(load.statuses)}; "
        f"{len(load.accepted)} offers accepted, {proxy.connections_made} database connections"
    )


def _sample(exposition: str, name: str) -> float:
    for line in exposition.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[-1])
    raise AssertionError(f"{name} is not in the scrape")
