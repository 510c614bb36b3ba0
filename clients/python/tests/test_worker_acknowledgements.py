"""Workers' acknowledgements: on their next poll, or by key when no poll goes at once."""

from __future__ import annotations

import asyncio
import json
import logging
import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from hourglass_client import AsyncClient, AsyncWorker, NotFound, Worker
from worker_support import WAIT, keyed_offer, working

# Acknowledgements on the next poll (docs/decisions/0021-acknowledgement-on-the-next-poll.md)


class CountsRequests(httpx.AsyncBaseTransport):
    """A transport that records each request: its method, the last segment of its path
    ("poll", "ack", …) and its body."""

    def __init__(self) -> None:
        self.inner = httpx.AsyncHTTPTransport()
        self.requests: list[tuple[str, str, Any]] = []

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content) if request.content else None
        self.requests.append((request.method, request.url.path.rpartition("/")[2], body))
        return await self.inner.handle_async_request(request)

    def bodies(self, route: str) -> list[Any]:
        return [body for _method, sent, body in self.requests if sent == route]

    def acks_on_polls(self) -> list[Any]:
        return [body["ack"] for body in self.bodies("poll") if body.get("ack")]

    async def aclose(self) -> None:
        await self.inner.aclose()


class AcknowledgedLog(logging.Handler):
    """Reads the worker's DEBUG line of each acknowledgement: how many keys each
    acknowledged, and how (`on a poll`, `by key`); `reached` is set at `count` keys."""

    def __init__(self, count: int) -> None:
        super().__init__(logging.DEBUG)
        self.count = count
        self.acknowledged: list[tuple[int, str]] = []
        self.reached = threading.Event()

    def emit(self, record: logging.LogRecord) -> None:
        if record.msg.startswith("acknowledged %d"):
            number, _lock, how = record.args  # type: ignore[misc]
            self.acknowledged.append((number, how))
            if sum(number for number, _how in self.acknowledged) >= self.count:
                self.reached.set()


@contextmanager
def logged_acknowledgements(count: int) -> Iterator[tuple[logging.Logger, AcknowledgedLog]]:
    """A logger of the test's own for a worker, and what it logs of acknowledgements."""
    log = logging.getLogger(f"hourglass_client.worker.test-{uuid.uuid4().hex[:8]}")
    handler = AcknowledgedLog(count)
    log.addHandler(handler)
    log.setLevel(logging.DEBUG)
    try:
        yield log, handler
    finally:
        log.removeHandler(handler)


def test_a_drain_acknowledges_on_the_next_poll(service, queue):
    """One slot, polls that answer at once: each message is acknowledged by the poll that
    asks for the next one, the last by the poll that finds the queue empty; none by a
    request of its own."""
    keys = [f"m{index}" for index in range(5)]
    transport = CountsRequests()
    handled: list[str] = []

    async def handler(message):
        handled.append(message.key)

    async def main(log: logging.Logger, acknowledged: AcknowledgedLog) -> None:
        async with AsyncClient(service.url, transport=transport) as hourglass:
            await hourglass.offer_many(queue, [keyed_offer(key) for key in keys])
            worker = AsyncWorker(hourglass, queue, handler, concurrency=1, wait=0, logger=log)
            running = asyncio.create_task(worker.run(handle_signals=False))
            assert await asyncio.to_thread(acknowledged.reached.wait, WAIT)
            worker.stop()
            await asyncio.wait_for(running, WAIT)
            assert (await hourglass.stats(queue)).messages == 0
            finished = [entry async for entry in hourglass.iter_history(queue)]
            assert sorted(entry.key for entry in finished) == keys
            assert {entry.outcome for entry in finished} == {"acknowledged"}

    with logged_acknowledgements(len(keys)) as (log, acknowledged):
        asyncio.run(main(log, acknowledged))
    assert handled == keys
    assert acknowledged.acknowledged == [(1, "on a poll")] * len(keys)
    assert [ack["keys"] for ack in transport.acks_on_polls()] == [[key] for key in keys]
    assert transport.bodies("ack") == []


def _requests_by_route(url: str, method: str, route: str) -> float:
    """How many requests the service at `url` has answered on `route`, by its /metrics."""
    text = httpx.get(f"{url}/metrics").text
    return sum(
        sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == "hourglass_http_request_duration_seconds_count"
        and (sample.labels["method"], sample.labels["route"]) == (method, route)
    )


def test_the_threaded_worker_acknowledges_on_its_polls(hourglass, service, queue):
    """`Worker`, counted by the service's own metrics: a drain's acknowledgements ride on
    its polls, none goes by itself."""
    keys = [f"m{index}" for index in range(5)]
    hourglass.offer_many(queue, [keyed_offer(key) for key in keys])
    by_key = ("POST", "/v1/queues/{queue}/locks/{lock_id}/ack")
    polls = ("POST", "/v1/queues/{queue}/poll")
    before = [_requests_by_route(service.url, *route) for route in (by_key, polls)]
    with logged_acknowledgements(len(keys)) as (log, acknowledged):
        worker = Worker(hourglass, queue, lambda message: None, concurrency=1, wait=0, logger=log)
        with working(worker):
            assert acknowledged.reached.wait(WAIT)
    assert acknowledged.acknowledged == [(1, "on a poll")] * len(keys)
    after = [_requests_by_route(service.url, *route) for route in (by_key, polls)]
    assert after[0] == before[0]
    assert after[1] - before[1] >= len(keys) + 1  # a poll per message, and one finding none
    assert hourglass.stats(queue).messages == 0
    assert sorted(entry.key for entry in hourglass.iter_history(queue)) == keys


def test_an_acknowledgement_waits_for_no_long_poll(service, queue):
    """One slot and polls that wait: the poll for the freed slot may wait up to `wait`, so
    the finished message is acknowledged by itself, at once, while that poll waits."""
    transport = CountsRequests()

    async def handler(message):
        pass

    async def main(log: logging.Logger, acknowledged: AcknowledgedLog) -> None:
        async with AsyncClient(service.url, transport=transport) as hourglass:
            await hourglass.offer(queue, "a", 1)
            worker = AsyncWorker(hourglass, queue, handler, concurrency=1, wait=20, logger=log)
            running = asyncio.create_task(worker.run(handle_signals=False))
            assert await asyncio.to_thread(acknowledged.reached.wait, WAIT)
            with pytest.raises(NotFound):
                await hourglass.get(queue, "a")
            worker.stop()  # cuts the waiting poll short
            await asyncio.wait_for(running, WAIT)

    with logged_acknowledgements(1) as (log, acknowledged):
        asyncio.run(main(log, acknowledged))
    assert acknowledged.acknowledged == [(1, "by key")]
    assert transport.bodies("ack") == [{"keys": ["a"]}]
    assert transport.acks_on_polls() == []


def test_a_message_that_finishes_as_the_worker_stops_is_acknowledged_at_once(service, queue):
    transport = CountsRequests()

    async def main() -> None:
        async with AsyncClient(service.url, transport=transport) as hourglass:
            await hourglass.offer(queue, "a", 1)
            started, finish = asyncio.Event(), asyncio.Event()

            async def handler(message):
                started.set()
                await finish.wait()

            worker = AsyncWorker(hourglass, queue, handler, concurrency=1, wait=0)
            running = asyncio.create_task(worker.run(handle_signals=False))
            await asyncio.wait_for(started.wait(), WAIT)
            worker.stop()
            finish.set()
            await asyncio.wait_for(running, WAIT)
            assert (await hourglass.stats(queue)).messages == 0

    asyncio.run(main())
    assert transport.bodies("ack") == [{"keys": ["a"]}]
    assert transport.acks_on_polls() == []


class RefusesPollsThatAcknowledge(CountsRequests):
    """Answers polls that carry `ack` `status` without sending them on (they acknowledged
    nothing): 503 the first time, as a service that cannot serve now; 422 every time, as a
    service from before acknowledgements on polls (an unknown field)."""

    def __init__(self, status: int) -> None:
        super().__init__()
        self.status = status
        self.refused = 0

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content) if request.content else None
        refuses = self.status == 422 or not self.refused
        if refuses and isinstance(body, dict) and body.get("ack"):
            self.refused += 1
            problem = {"type": "x", "title": "refused", "status": self.status, "detail": "ack"}
            return httpx.Response(self.status, json=problem)
        return await super().handle_async_request(request)


@pytest.mark.parametrize("status", [503, 422])
def test_the_acknowledgements_of_a_refused_poll_go_out_by_themselves(service, queue, status):
    """A poll that failed may not have acknowledged: its keys go out by themselves. A 422
    (an older service) also turns acknowledgements on polls off, and the worker goes on."""
    transport = RefusesPollsThatAcknowledge(status)
    keys = ["a", "b", "c"]

    async def handler(message):
        pass

    async def main(log: logging.Logger, acknowledged: AcknowledgedLog) -> None:
        async with AsyncClient(service.url, transport=transport) as hourglass:
            await hourglass.offer_many(queue, [keyed_offer(key) for key in keys])
            worker = AsyncWorker(hourglass, queue, handler, concurrency=1, wait=0, logger=log)
            running = asyncio.create_task(worker.run(handle_signals=False))
            assert await asyncio.to_thread(acknowledged.reached.wait, WAIT)
            worker.stop()  # cuts the pause after a failed poll short
            await asyncio.wait_for(running, WAIT)
            finished = sorted([entry.key async for entry in hourglass.iter_history(queue)])
            assert finished == keys

    with logged_acknowledgements(len(keys)) as (log, acknowledged):
        asyncio.run(main(log, acknowledged))
    assert transport.refused == 1  # a 422 once: no poll carries an ack after it
    assert acknowledged.acknowledged[0] == (1, "by key")
    assert transport.bodies("ack")[0] == {"keys": ["a"]}
    if status == 422:
        assert acknowledged.acknowledged == [(1, "by key")] * len(keys)
        assert len(transport.acks_on_polls()) == 0
