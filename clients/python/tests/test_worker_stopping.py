"""A worker's stop: what it has not started goes back, nothing stays held, two signals abandon."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
import threading
from collections.abc import AsyncIterator, Callable, Iterator

import httpx
import pytest

from hourglass_client import AsyncClient, AsyncWorker, Client
from worker_support import WAIT, HoldsAnswersThatDoNotWait, keyed_offer


def test_a_stop_while_a_poll_answers_gives_back_what_it_did_not_start(service, queue):
    handled: list[str] = []

    async def handler(message):
        handled.append(message.key)

    class StopsAsItPolls(AsyncClient):
        async def poll(self, *arguments, **keywords):
            lease = await super().poll(*arguments, **keywords)
            worker.stop()  # the stop comes as the answer does
            return lease

    async def main() -> None:
        nonlocal worker
        async with StopsAsItPolls(service.url) as hourglass:
            await hourglass.offer(queue, "a", 1)
            await hourglass.offer(queue, "b", 2)
            # One poll for every slot: no second poll out to claim what the first gives back.
            worker = AsyncWorker(hourglass, queue, handler, batch=10)
            await asyncio.wait_for(worker.run(handle_signals=False), WAIT)

    worker: AsyncWorker
    asyncio.run(main())
    assert handled == []
    with Client(service.url) as hourglass:
        for key in ["a", "b"]:
            message = hourglass.get(queue, key)
            assert message.state == "ready" and message.deliveries == 1


class StopsAsTheAnswerIsRead(httpx.AsyncBaseTransport):
    """A transport that stops the worker as a waiting poll's answer is read: its headers
    are in (the service has claimed), its body not yet."""

    def __init__(self) -> None:
        self.inner = httpx.AsyncHTTPTransport()
        self.stop: Callable[[], None] = lambda: None

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        response = await self.inner.handle_async_request(request)
        if not (request.url.path.endswith("/poll") and json.loads(request.content).get("wait")):
            return response
        return httpx.Response(
            response.status_code,
            headers=response.headers,
            stream=_StopsBeforeItsBody(response.stream, self.stop),
            extensions=response.extensions,
        )

    async def aclose(self) -> None:
        await self.inner.aclose()


class _StopsBeforeItsBody(httpx.AsyncByteStream):
    def __init__(self, stream: httpx.AsyncByteStream, stop: Callable[[], None]) -> None:
        self.stream = stream
        self.stop = stop

    async def __aiter__(self) -> AsyncIterator[bytes]:
        self.stop()
        for _ in range(10):  # the worker's loop runs its stop: a poll it cut would end here
            await asyncio.sleep(0)
        async for chunk in self.stream:
            yield chunk

    async def aclose(self) -> None:
        await self.stream.aclose()


def test_a_stop_as_a_waiting_polls_answer_begins_reads_it_whole_and_gives_it_back(service, queue):
    """Cut short then, the poll's messages would stay leased to a lock nobody saw until
    their lease ran out (and, under a delivery limit, be dead-lettered unhandled)."""
    handled: list[str] = []

    async def handler(message):
        handled.append(message.key)

    async def main() -> None:
        transport = StopsAsTheAnswerIsRead()
        async with AsyncClient(service.url, transport=transport) as hourglass:
            await hourglass.offer(queue, "a", 1)
            await hourglass.offer(queue, "b", 2)
            worker = AsyncWorker(hourglass, queue, handler, batch=10, wait=5)
            transport.stop = worker.stop
            await asyncio.wait_for(worker.run(handle_signals=False), WAIT)
            stats = await hourglass.stats(queue)
            assert (stats.leased, stats.ready) == (0, 2), stats
            for key in ["a", "b"]:
                message = await hourglass.get(queue, key)
                assert message.state == "ready" and message.deliveries == 1

    asyncio.run(main())
    assert handled == []


def test_a_second_signal_gives_the_async_workers_running_messages_back_at_once(service, queue):
    async def main() -> None:
        async with AsyncClient(service.url) as hourglass:
            for key in ["a", "b"]:
                await hourglass.offer(queue, key, key)
            started: set[str] = set()
            both_started = asyncio.Event()

            async def handler(message):
                started.add(message.key)
                if len(started) == 2:
                    both_started.set()
                await asyncio.Event().wait()  # never done on its own

            worker = AsyncWorker(hourglass, queue, handler, concurrency=2)
            running = asyncio.create_task(worker.run())  # its signal handlers: the main thread
            await asyncio.wait_for(both_started.wait(), WAIT)
            os.kill(os.getpid(), signal.SIGTERM)  # stop: the handlers run on
            os.kill(os.getpid(), signal.SIGTERM)  # stop now: their messages go back
            await asyncio.wait_for(running, WAIT)
            assert worker.abandoned
            for key in ["a", "b"]:
                message = await hourglass.get(queue, key)
                assert message.state == "ready" and message.deliveries == 1

    asyncio.run(main())


class LogEvent(logging.Handler):
    """Set once the worker logs a line starting with `start`."""

    def __init__(self, start: str) -> None:
        super().__init__(logging.DEBUG)
        self.start = start
        self.seen = threading.Event()

    def emit(self, record: logging.LogRecord) -> None:
        if record.getMessage().startswith(self.start):
            self.seen.set()


@pytest.fixture
def stopping() -> Iterator[LogEvent]:
    """Set once a stopping worker waits for one poll to answer (the worker's debug log)."""
    event = LogEvent("stopping: waiting for 1 poll(s) to answer")
    log = logging.getLogger("hourglass_client.worker")
    log.addHandler(event)
    level = log.level
    log.setLevel(logging.DEBUG)
    yield event
    log.removeHandler(event)
    log.setLevel(level)


def test_a_stop_lets_a_poll_that_does_not_wait_answer_and_gives_its_messages_back(
    service, queue, stopping
):
    """Two polls of two fill four slots; the worker stops while the one that does not wait
    has claimed and not yet answered: it is let answer, and its messages come back at
    once, none left leased to nobody (a cancelled poll's claim would stay leased for the
    lease's 30 s)."""

    async def main() -> None:
        async with HoldsAnswersThatDoNotWait(service.url) as hourglass:
            await hourglass.offer_many(queue, [keyed_offer(f"m{index}") for index in range(4)])
            two_running, finish = asyncio.Event(), asyncio.Event()
            started: list[str] = []

            async def handler(message):
                started.append(message.key)
                if len(started) == 2:
                    two_running.set()
                await finish.wait()

            worker = AsyncWorker(hourglass, queue, handler, concurrency=4)
            running = asyncio.create_task(worker.run(handle_signals=False))
            await asyncio.wait_for(hourglass.claimed.wait(), WAIT)
            await asyncio.wait_for(two_running.wait(), WAIT)
            assert hourglass.most_out == 2 and hourglass.asked[:2] == [2, 2]
            worker.stop()
            # The answer comes once the worker, stopping, is waiting for it.
            assert await asyncio.to_thread(stopping.seen.wait, WAIT)
            hourglass.release.set()
            finish.set()
            await asyncio.wait_for(running, WAIT)
            stats = await hourglass.stats(queue)
            assert (stats.leased, stats.ready) == (0, 2), stats
            finished = sorted([entry.key async for entry in hourglass.iter_history(queue)])
            assert finished == sorted(started)

    asyncio.run(main())


def test_a_stop_cuts_the_waiting_poll_before_it_waits_for_any_other(service, queue, stopping):
    """A waiting poll is cut at once, not after a poll sent before it: its answer could
    begin meanwhile and be cut mid-way, its messages left leased to nobody."""

    async def main() -> None:
        async with HoldsAnswersThatDoNotWait(service.url, empty_too=True) as hourglass:
            finish = asyncio.Event()

            async def handler(message):
                await finish.wait()

            # Two polls on an empty queue: one waits, one does not (its answer held). The
            # one that waits takes `x` once it comes, and a third, waiting, goes out after
            # the held one.
            worker = AsyncWorker(hourglass, queue, handler, concurrency=4, batch=2, wait=5)
            running = asyncio.create_task(worker.run(handle_signals=False))
            await asyncio.wait_for(hourglass.holding.wait(), WAIT)  # the empty answer
            await hourglass.offer(queue, "x", 1)
            await asyncio.wait_for(hourglass.polls_sent(3), WAIT)
            assert hourglass.asked == [2, 2, 1]
            worker.stop()
            # Cut while the held answer is still out, not once it is in.
            await asyncio.wait_for(hourglass.cut_short.wait(), WAIT)
            assert await asyncio.to_thread(stopping.seen.wait, WAIT)
            hourglass.release.set()
            finish.set()
            await asyncio.wait_for(running, WAIT)
            stats = await hourglass.stats(queue)
            assert (stats.messages, stats.leased) == (0, 0), stats

    asyncio.run(main())
