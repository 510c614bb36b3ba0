"""A database that goes silent is noticed: a real server on PostgreSQL and MariaDB reaching
its database through a TCP proxy that stops forwarding without closing anything (no RST,
no FIN), as a network dropping packets does.

Every request then answers 503 with Retry-After within the documented bound, never
hanging until the operating system gives up; /readyz answers 503 (the database is
down, as far as anyone can tell); once traffic flows again the same process serves
again by itself."""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager

import httpx
import pytest
from sqlalchemy.engine import make_url

from app.storage.dialects.base import (
    ANSWER_GRACE_SECONDS,
    CONNECT_TIMEOUT_SECONDS,
    PING_AFTER_IDLE_SECONDS,
)
from tests.conftest import truncate_all
from tests.support.proxy import TcpProxy, tcp_proxy
from tests.support.server import running_server

pytestmark = pytest.mark.server_databases

LOCK_TIMEOUT = 1.0  # seconds: HOURGLASS_LOCK_TIMEOUT here
STATEMENT_TIMEOUT = 1.0  # seconds: HOURGLASS_STATEMENT_TIMEOUT here
# The documented bound on a request when the database goes silent: a turn at a
# connection, then a statement (or a ping) given up after the statement bound and its
# grace, and a new connection that cannot be opened either.
BOUND = LOCK_TIMEOUT + STATEMENT_TIMEOUT + ANSWER_GRACE_SECONDS + CONNECT_TIMEOUT_SECONDS
MARGIN = 3.0  # seconds of scheduling on a busy 2-core machine, and whole-second rounding
CLIENTS = 4
RECOVERY_SECONDS = 15
TIMEOUT = 60  # the clients' own: far past the bound, so a hang shows as one


class Traffic:
    """Clients offering and polling in a loop; what they saw, by the phase each request
    started and ended in ("before", "silent", "after", or "changing" across two)."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.phase = "before"
        self.stop = threading.Event()
        self.changed = threading.Condition()
        self.statuses: Counter[tuple[str, str, int]] = Counter()  # (phase, client, status)
        self.slowest = 0.0
        self.failures: list[str] = []  # transport errors, and 503s without Retry-After

    def wait_until(self, condition: Callable[[], bool], timeout: float) -> bool:
        with self.changed:
            return self.changed.wait_for(condition, timeout)

    def every_client_saw(self, phase: str, statuses: set[int], at_least: int = 1) -> bool:
        return all(
            sum(self.statuses[phase, f"c{number}", status] for status in statuses) >= at_least
            for number in range(CLIENTS)
        )

    def run(self, number: int) -> None:
        with httpx.Client(base_url=self.url, timeout=TIMEOUT) as client:
            queue = f"q{number}"
            round_ = 0
            while not self.stop.is_set():
                round_ += 1
                key = f"k{round_}"
                self._send(
                    number,
                    lambda key=key: client.put(
                        f"/v1/queues/{queue}/messages/{key}", json={"payload": key}
                    ),
                )
                self._send(number, lambda: client.post(f"/v1/queues/{queue}/poll", json={}))

    def _send(self, number: int, request: Callable[[], httpx.Response]) -> None:
        phase, started = self.phase, time.monotonic()
        try:
            response = request()
        except httpx.HTTPError as error:
            with self.changed:
                self.failures.append(f"{phase}: {error!r} after {time.monotonic() - started} s")
                self.changed.notify_all()
            return
        if self.phase != phase:
            phase = "changing"
        with self.changed:
            self.slowest = max(self.slowest, time.monotonic() - started)
            self.statuses[phase, f"c{number}", response.status_code] += 1
            if response.status_code == 503 and not response.headers.get("retry-after"):
                self.failures.append(f"{phase}: 503 without Retry-After: {response.text}")
            self.changed.notify_all()


@contextmanager
def served_through_a_proxy(server_url: str) -> Iterator[tuple[TcpProxy, str]]:
    """A proxy in front of the database, and the URL of a server reaching it through it."""
    truncate_all(server_url)
    target = make_url(server_url)
    default_port = 5432 if target.get_backend_name() == "postgresql" else 3306
    with tcp_proxy(target.host or "127.0.0.1", target.port or default_port) as proxy:
        through_proxy = target.set(host="127.0.0.1", port=proxy.port)
        with running_server(
            through_proxy.render_as_string(hide_password=False),
            HOURGLASS_LOCK_TIMEOUT=str(LOCK_TIMEOUT),
            HOURGLASS_STATEMENT_TIMEOUT=str(STATEMENT_TIMEOUT),
        ) as server:
            try:
                yield proxy, server.url
            finally:
                proxy.go_on()


def test_a_silent_database_answers_503_within_the_bound_then_recovers(server_url):
    with (
        served_through_a_proxy(server_url) as (proxy, url),
        httpx.Client(base_url=url, timeout=TIMEOUT) as observer,
        ThreadPoolExecutor(CLIENTS) as pool,
    ):
        traffic = Traffic(url)
        clients = [pool.submit(traffic.run, number) for number in range(CLIENTS)]
        try:
            assert traffic.wait_until(
                lambda: traffic.every_client_saw("before", {200, 201}, 5), TIMEOUT
            ), traffic.statuses

            # The network drops everything, closing nothing.
            proxy.hold()
            traffic.phase = "silent"
            assert traffic.wait_until(
                lambda: traffic.every_client_saw("silent", {503}, 2) or traffic.failures,
                2 * (BOUND + MARGIN),
            ), traffic.statuses
            started = time.monotonic()
            ready = observer.get("/readyz")
            assert ready.status_code == 503
            assert time.monotonic() - started <= BOUND + MARGIN
            assert observer.get("/healthz").status_code == 200

            # Traffic flows again: the same process serves again, by itself.
            traffic.phase = "after"
            proxy.go_on()
            assert traffic.wait_until(
                lambda: traffic.every_client_saw("after", {200, 201}, 2) or traffic.failures,
                RECOVERY_SECONDS,
            ), traffic.statuses
            assert observer.get("/readyz").status_code == 200
        finally:
            traffic.stop.set()
            proxy.go_on()
            for future in clients:
                future.result(TIMEOUT)

    print(f"slowest answer {traffic.slowest:.2f} s (bound {BOUND} s); {dict(traffic.statuses)}")
    assert not traffic.failures, traffic.failures[:3]
    silent = {status for phase, _, status in traffic.statuses if phase == "silent"}
    assert silent == {503}, traffic.statuses
    assert traffic.slowest <= BOUND + MARGIN, traffic.slowest


def test_an_idle_connection_is_given_up_at_its_ping(server_url):
    with (
        served_through_a_proxy(server_url) as (proxy, url),
        httpx.Client(base_url=url, timeout=TIMEOUT) as client,
    ):
        for number in range(5):
            assert client.put(f"/v1/queues/q/messages/k{number}", json={"payload": 1}).is_success
        proxy.hold()
        # A connection idle this long is pinged before use (app/storage/dialects/base.py): that
        # rule is about time, so time must pass.
        time.sleep(PING_AFTER_IDLE_SECONDS + 0.5)
        started = time.monotonic()
        response = client.put("/v1/queues/q/messages/k", json={"payload": 2})
        took = time.monotonic() - started
        assert response.status_code == 503, response.text
        assert response.headers["retry-after"]
        assert took <= BOUND + MARGIN, took
        proxy.go_on()
        assert client.put("/v1/queues/q/messages/k", json={"payload": 3}).status_code == 201
