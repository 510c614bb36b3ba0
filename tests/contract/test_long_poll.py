"""Long polling: wakes on offers and due times, ends empty on time, holds no connection."""

from __future__ import annotations

import asyncio
import signal
import socket
import threading
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
from fastapi.testclient import TestClient

from app.main import create_app
from tests.support.helpers import keys_of, poll, put
from tests.support.server import serving

# Generous bounds for "returned long before its wait ran out" on a loaded machine.
WAIT = 20
RETURNED_EARLY = 10


class WaitingPolls:
    """Counts polls that have found nothing and started waiting, for tests to wait on."""

    def __init__(self, service) -> None:
        self._condition = threading.Condition()
        self._count = 0
        notifier = service.notifier
        original_wait = notifier.wait

        async def counted_wait(ticket, timeout):
            with self._condition:
                self._count += 1
                self._condition.notify_all()
            await original_wait(ticket, timeout)

        notifier.wait = counted_wait

    def wait_for(self, count: int, timeout: float = RETURNED_EARLY) -> None:
        with self._condition:
            assert self._condition.wait_for(lambda: self._count >= count, timeout), (
                f"{self._count} polls waiting, expected {count}"
            )


@pytest.fixture
def long_poll_client(clean_database, clock):
    # Rechecks as rarely as allowed: only a wake-up can end these polls early.
    settings = clean_database.settings(poll_recheck_seconds=WAIT)
    with TestClient(create_app(settings, clock=clock)) as client:
        yield client, WaitingPolls(client.app.state.service)


def test_a_waiting_poll_wakes_when_a_message_is_offered(long_poll_client):
    client, waiting = long_poll_client
    with ThreadPoolExecutor(1) as pool:
        result = pool.submit(poll, client, "q", wait=WAIT)
        waiting.wait_for(1)
        assert put(client, "q", "k", "hello").status_code == 201
        polled = result.result(timeout=RETURNED_EARLY)
    assert keys_of(polled) == ["k"]
    assert polled["messages"][0]["payload"] == "hello"


def test_a_waiting_poll_wakes_when_a_message_comes_due(long_poll_client, clock):
    client, waiting = long_poll_client
    put(client, "q", "k", 1, delay=0.5)
    with ThreadPoolExecutor(1) as pool:
        result = pool.submit(poll, client, "q", wait=WAIT)
        waiting.wait_for(1)
        clock.advance(0.5)
        assert keys_of(result.result(timeout=RETURNED_EARLY)) == ["k"]


def test_a_wait_that_runs_out_answers_empty(client):
    put(client, "other", "k", 1)
    assert poll(client, "q", wait=0.2) == {"lock_id": None, "messages": []}


def test_waiting_polls_hold_no_database_connection(clean_database, clock):
    # One connection and one storage thread for the whole app: if a waiting poll
    # held either, the offers below could not run until the polls gave up.
    settings = clean_database.settings(pool_size=1, poll_recheck_seconds=WAIT)
    pollers = 5
    with TestClient(create_app(settings, clock=clock)) as client:
        waiting = WaitingPolls(client.app.state.service)
        with ThreadPoolExecutor(pollers) as pool:
            results = [pool.submit(poll, client, "q", wait=WAIT) for _ in range(pollers)]
            waiting.wait_for(pollers)
            assert client.get("/v1/queues/q").json()["messages"] == 0
            for index in range(pollers):
                assert put(client, "q", f"k{index}", index).status_code == 201
            delivered = [
                key for result in results for key in keys_of(result.result(timeout=RETURNED_EARLY))
            ]
    assert sorted(delivered) == [f"k{index}" for index in range(pollers)]


def test_polls_leave_no_subscription_behind(long_poll_client):
    client, _waiting = long_poll_client
    notifier = client.app.state.service.notifier
    for index in range(20):
        poll(client, f"queue-{index}")  # no wait: never subscribes
    poll(client, "waited", wait=0.1)
    assert notifier.waiting("waited") == 0
    assert notifier._events == {} and not notifier._subscribers


def test_a_poll_whose_client_hung_up_leases_nothing(clean_database, clock):
    """A waiting poll whose client disconnected must not take the next message."""
    settings = clean_database.settings(poll_recheck_seconds=WAIT)
    app = create_app(settings, clock=clock)
    with serving(app) as (port, _server):
        service = app.state.service
        waiting = WaitingPolls(service)
        finished = threading.Event()
        original_poll = service.poll

        async def tracked_poll(*args, **kwargs):
            try:
                return await original_poll(*args, **kwargs)
            finally:
                finished.set()

        service.poll = tracked_poll
        body = b'{"wait": 20}'
        with socket.create_connection(("127.0.0.1", port), timeout=RETURNED_EARLY) as hung_up:
            hung_up.sendall(
                b"POST /v1/queues/q/poll HTTP/1.1\r\nHost: test\r\nContent-Type: application/json\r\n"
                b"Content-Length: %d\r\n\r\n%s" % (len(body), body)
            )
            waiting.wait_for(1)
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=RETURNED_EARLY) as client:
            assert put(client, "q", "k", 1).status_code == 201  # wakes the abandoned poll
            assert finished.wait(RETURNED_EARLY), "the abandoned poll did not end"
            assert keys_of(poll(client, "q")) == ["k"]


@pytest.mark.parametrize("offered", ["before the poll", "while it waits"])
def test_a_poll_whose_client_hangs_up_as_it_claims_gives_the_messages_back(
    clean_database, clock, offered
):
    """A worker stopping cuts its waiting poll short; if the poll claimed meanwhile (at its
    first look, or after a wake-up), what it claimed is given back as it was, due again at
    once, not leased to nobody until the lease ends (the fake clock never reaches that end
    here) with a delivery counted that nobody received."""
    settings = clean_database.settings(poll_recheck_seconds=WAIT)
    app = create_app(settings, clock=clock)
    with serving(app) as (port, _server):
        service = app.state.service
        waiting = WaitingPolls(service)
        claimed, hung_up_closed, finished = threading.Event(), threading.Event(), threading.Event()
        callers: list = []
        original_poll, original_claim = service.poll, service.poller.look

        async def tracked_poll(*args, **kwargs):
            callers.append(kwargs["abandoned"])
            try:
                return await original_poll(*args, **kwargs)
            finally:
                finished.set()

        async def claim_then_lose_the_caller(*args, **kwargs):
            look = await original_claim(*args, **kwargs)
            if look.lease is not None:
                claimed.set()
                await asyncio.to_thread(hung_up_closed.wait, RETURNED_EARLY)
                # Until the server has seen the hang-up (an event, bounded by a deadline).
                deadline = asyncio.get_running_loop().time() + RETURNED_EARLY
                while not await callers[0]() and asyncio.get_running_loop().time() < deadline:
                    await asyncio.sleep(0.01)
            return look

        service.poll, service.poller.look = tracked_poll, claim_then_lose_the_caller
        body = b'{"wait": 20, "lease": 600}'
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=RETURNED_EARLY) as client:
            if offered == "before the poll":
                assert put(client, "q", "k", 1).status_code == 201
            hung_up = socket.create_connection(("127.0.0.1", port), timeout=RETURNED_EARLY)
            hung_up.sendall(
                b"POST /v1/queues/q/poll HTTP/1.1\r\nHost: test\r\n"
                b"Content-Type: application/json\r\n"
                b"Content-Length: %d\r\n\r\n%s" % (len(body), body)
            )
            if offered == "while it waits":
                waiting.wait_for(1)
                assert put(client, "q", "k", 1).status_code == 201  # wakes the poll
            assert claimed.wait(RETURNED_EARLY), "the waiting poll claimed nothing"
            hung_up.close()
            hung_up_closed.set()
            assert finished.wait(RETURNED_EARLY), "the abandoned poll did not end"
            service.poller.look = original_claim
            # As it was: due, never delivered (a delivery limit of one still delivers it).
            again = poll(client, "q")["messages"]  # the clock has not moved
            assert [(m["key"], m["deliveries"], m["delivery"]) for m in again] == [
                ("k", 1, "first")
            ]


def test_a_stopping_server_answers_waiting_polls_at_once(clean_database, clock):
    """SIGTERM: a poll waiting 20 s answers empty at once, and the server then exits."""
    app = create_app(clean_database.settings(poll_recheck_seconds=WAIT), clock=clock)
    with serving(app) as (port, server), ThreadPoolExecutor(1) as pool:
        waiting = WaitingPolls(app.state.service)
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=WAIT + 10) as client:
            answer = pool.submit(client.post, "/v1/queues/q/poll", json={"wait": WAIT})
            waiting.wait_for(1)
            server.handle_exit(signal.SIGTERM, None)  # what uvicorn's signal handler calls
            response = answer.result(timeout=RETURNED_EARLY)
    assert response.status_code == 200
    assert response.json() == {"lock_id": None, "messages": []}
