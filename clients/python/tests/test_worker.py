"""Workers against a real server: leases kept while handlers run, each message settled on
its own (by key, not with the rest of its poll's lock), bounded concurrency, and a stop
that leaves nothing held."""

from __future__ import annotations

import asyncio
import builtins
import json
import logging
import os
import signal
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from hourglass_client import (
    AsyncClient,
    AsyncWorker,
    Client,
    Invalid,
    NotFound,
    Offer,
    Retry,
    RetryPolicy,
    Worker,
)

WAIT = 30  # seconds any wait on an event may take before the test fails


@contextmanager
def working(worker: Worker) -> Iterator[list[BaseException]]:
    """`worker` running on a thread; stopped, and drained, on the way out."""
    errors: list[BaseException] = []

    def run() -> None:
        try:
            worker.run(handle_signals=False)
        except BaseException as error:  # noqa: BLE001 - handed to the test
            errors.append(error)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    try:
        yield errors
    finally:
        worker.stop()
        thread.join(WAIT)
        assert not thread.is_alive(), "the worker did not stop"


class Countdown:
    """Set once `count` calls have been counted."""

    def __init__(self, count: int) -> None:
        self.left = count
        self.lock = threading.Lock()
        self.reached = threading.Event()

    def tick(self) -> None:
        with self.lock:
            self.left -= 1
            if self.left <= 0:
                self.reached.set()


def history_of(hourglass: Client, queue: str, key: str) -> list[tuple[str, int]]:
    return [(entry.outcome, entry.deliveries) for entry in hourglass.history(queue, key=key).items]


def test_a_handler_three_times_the_lease_keeps_its_message(hourglass, queue):
    started, finish = threading.Event(), threading.Event()

    def handler(message):
        started.set()
        assert finish.wait(WAIT)

    hourglass.offer(queue, "slow", {"n": 1})
    with working(Worker(hourglass, queue, handler, lease=1, wait=1)):
        assert started.wait(WAIT)
        # Another worker's poll waits 3.5 leases: it would get the message the moment
        # its lease lapsed.
        assert hourglass.poll(queue, wait=3.5).lock_id is None
        assert hourglass.get(queue, "slow").state == "leased"
        finish.set()
    with pytest.raises(NotFound):
        hourglass.get(queue, "slow")
    assert history_of(hourglass, queue, "slow") == [("acknowledged", 1)]


def test_each_message_of_a_poll_is_settled_on_its_own(hourglass, queue):
    for key in ["ok-1", "ok-2", "fails-once", "later"]:
        hourglass.offer(queue, key, key)
    calls = Countdown(5)
    locks: dict[str, set[str]] = {}

    def handler(message):
        locks.setdefault(message.key, set()).add(message.lock_id)
        calls.tick()
        if message.key == "fails-once" and message.deliveries == 1:
            raise ValueError("no\nnot yet")
        if message.key == "later":
            raise Retry(timedelta(hours=1), "the partner's API is down")

    with working(Worker(hourglass, queue, handler, concurrency=4, batch=4)):
        assert calls.reached.wait(WAIT)
    # One poll took all four (the free slots); each was settled on its own.
    assert len({lock for key in ["ok-1", "ok-2", "later"] for lock in locks[key]}) == 1
    assert history_of(hourglass, queue, "ok-1") == [("acknowledged", 1)]
    assert history_of(hourglass, queue, "ok-2") == [("acknowledged", 1)]
    assert history_of(hourglass, queue, "fails-once") == [("acknowledged", 2)]
    assert len(locks["fails-once"]) == 2
    later = hourglass.get(queue, "later")
    assert later.state == "scheduled" and later.deliveries == 1
    due_in = later.scheduled_at - datetime.now(UTC)
    assert timedelta(minutes=59) < due_in <= timedelta(hours=1)


def test_the_queues_retry_setting_decides_when_a_failure_is_due(hourglass, queue):
    hourglass.put_settings(queue, retry=RetryPolicy(initial_delay=600, max_delay=600))
    hourglass.offer(queue, "boom", 1)
    failed = threading.Event()

    def handler(message):
        failed.set()
        raise RuntimeError("boom")

    with working(Worker(hourglass, queue, handler)):
        assert failed.wait(WAIT)
    message = hourglass.get(queue, "boom")
    assert message.state == "scheduled" and message.deliveries == 1
    assert timedelta(minutes=9) < message.scheduled_at - datetime.now(UTC) <= timedelta(minutes=10)


def test_a_slow_or_failing_handler_never_blocks_the_others(hourglass, queue):
    hourglass.offer(queue, "slow", 0, scheduled_at=datetime(2020, 1, 1, tzinfo=UTC))  # first
    for index in range(6):
        hourglass.offer(queue, f"fast-{index}", index)
    slow_started, release_slow = threading.Event(), threading.Event()
    fast_done = Countdown(7)  # six, and the one that fails once again

    def handler(message):
        if message.key == "slow":
            slow_started.set()
            assert release_slow.wait(WAIT)
            return
        fast_done.tick()
        if message.key == "fast-3" and message.deliveries == 1:
            raise ValueError("fails once")

    with working(Worker(hourglass, queue, handler, concurrency=2)):
        assert slow_started.wait(WAIT)
        assert fast_done.reached.wait(WAIT)  # all through the one other slot
        assert hourglass.get(queue, "slow").state == "leased"
        release_slow.set()
    assert hourglass.stats(queue).messages == 0


def test_polls_ask_for_the_free_slots_and_no_more_run_at_once(hourglass, queue, caplog):
    hourglass.offer_many(queue, [_offer(f"m{index}") for index in range(9)])
    first_three = threading.Barrier(3, timeout=WAIT)
    lock = threading.Lock()
    running: list[int] = [0, 0]  # now, most at once
    done = Countdown(9)

    def handler(message):
        with lock:
            running[0] += 1
            running[1] = max(running)
        if message.key in {"m0", "m1", "m2"}:
            first_three.wait()  # three run at once...
        with lock:
            running[0] -= 1
        done.tick()

    caplog.set_level(logging.DEBUG, logger="hourglass_client.worker")
    with working(Worker(hourglass, queue, handler, concurrency=3, batch=3)):
        assert done.reached.wait(WAIT)
    assert running[1] == 3  # ... and never more
    asked = [record.args[2] for record in caplog.records if record.msg.startswith("polled")]
    got = [record.args[0] for record in caplog.records if record.msg.startswith("polled")]
    assert asked[0] == 3 and got[0] == 3 and max(asked) <= 3
    assert sum(got) == 9


def test_two_polls_of_half_the_slots_fill_them_by_default(hourglass, queue, caplog):
    hourglass.offer_many(queue, [_offer(f"m{index}") for index in range(8)])
    four_at_once = threading.Barrier(4, timeout=WAIT)
    done = Countdown(8)

    def handler(message):
        if message.key in {"m0", "m1", "m2", "m3"}:
            four_at_once.wait()  # the first two polls' messages run together
        done.tick()

    caplog.set_level(logging.DEBUG, logger="hourglass_client.worker")
    with working(Worker(hourglass, queue, handler, concurrency=4)):
        assert done.reached.wait(WAIT)
    polled = [record.args for record in caplog.records if record.msg.startswith("polled")]
    assert [(got, asked) for got, _lock, asked in polled[:2]] == [(2, 2), (2, 2)]
    assert max(asked for _got, _lock, asked in polled) <= 2
    assert sum(got for got, _lock, _asked in polled) == 8


@pytest.mark.parametrize("concurrency", [1, 4])
def test_a_worker_takes_one_message_of_a_group_at_a_time_in_due_order(
    hourglass, queue, concurrency
):
    """Groups (docs/guide/flow-control.md): with one slot, each acknowledgement rides on the
    next poll, which finds the group's next message once the service has moved it up
    (a long poll is woken for it, not left to its `wait`); with four, the customers'
    reminders run side by side but never two of one customer at once."""
    first = datetime.now(UTC) - timedelta(hours=1)
    customers = ["ann", "bob", "cy"]
    # Offered latest first: each customer's are due in the order of their numbers.
    offers = [
        Offer(f"{customer}-{number}", number, first + timedelta(minutes=number), group=customer)
        for number in reversed(range(4))
        for customer in customers
    ]
    hourglass.offer_many(queue, offers)
    lock = threading.Lock()
    running: dict[str, str] = {}
    order: dict[str, list[str]] = {customer: [] for customer in customers}
    overlaps: list[tuple[str, str]] = []
    done = Countdown(len(offers))

    def handler(message):
        with lock:
            if message.group in running:
                overlaps.append((running[message.group], message.key))
            running[message.group] = message.key
            order[message.group].append(message.key)
        time.sleep(0.02)
        with lock:
            del running[message.group]
        done.tick()

    with working(Worker(hourglass, queue, handler, concurrency=concurrency)):
        assert done.reached.wait(WAIT)  # a poll left to its 20 s wait per message would not
    assert overlaps == []
    assert order == {customer: [f"{customer}-{n}" for n in range(4)] for customer in customers}
    assert hourglass.stats(queue).messages == 0


@pytest.mark.parametrize("batch", [0, 5])
def test_a_batch_outside_one_to_the_concurrency_is_refused(batch):
    with pytest.raises(ValueError, match="batch must be 1–concurrency"):
        Worker("http://127.0.0.1:9", "q", lambda message: None, concurrency=4, batch=batch)


def test_a_refused_poll_stops_the_worker_with_its_error(hourglass):
    with pytest.raises(Invalid):
        Worker(hourglass, "not a queue!", lambda message: None).run(handle_signals=False)


def test_log_lines_are_one_line_each(hourglass, queue, caplog):
    hourglass.offer(queue, "boom", 1)
    failed = threading.Event()

    def handler(message):
        failed.set()
        raise Retry(3600, "line one\nline two")

    caplog.set_level(logging.INFO, logger="hourglass_client.worker")
    with working(Worker(hourglass, queue, handler)):
        assert failed.wait(WAIT)
    lines = [record.getMessage() for record in caplog.records]
    assert any("worker started" in line for line in lines)
    assert any("'boom' (delivery 1)" in line and "in 3600 s" in line for line in lines)
    assert any("worker stopped" in line for line in lines)
    # A reason spread over lines is still logged on one.
    [retried] = [line for line in lines if line.startswith("retry 'boom'")]
    assert "line one\\nline two" in retried and "\n" not in retried


def _offer(key: str):
    from hourglass_client import Offer

    return Offer(key, key)


# The asyncio worker


def test_the_async_worker_keeps_leases_and_settles_each_message(service, queue):
    async def main() -> None:
        async with AsyncClient(service.url) as hourglass:
            for key in ["slow", "fails", "fine"]:
                await hourglass.offer(queue, key, key)
            slow_started, finish = asyncio.Event(), asyncio.Event()

            async def handler(message):
                if message.key == "slow":
                    slow_started.set()
                    await finish.wait()
                elif message.key == "fails":
                    raise Retry(3600)

            worker = AsyncWorker(hourglass, queue, handler, lease=1, wait=1)
            running = asyncio.create_task(worker.run(handle_signals=False))
            await asyncio.wait_for(slow_started.wait(), WAIT)
            assert (await hourglass.poll(queue, wait=3.5)).lock_id is None
            finish.set()
            worker.stop()
            await asyncio.wait_for(running, WAIT)

            assert (await hourglass.get(queue, "fails")).state == "scheduled"
            finished = [entry.key async for entry in hourglass.iter_history(queue)]
            assert sorted(finished) == ["fine", "slow"]

    asyncio.run(main())


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


class HoldsItsSecondPoll(AsyncClient):
    """A client that records each poll's `max` and `wait`, and holds the second poll back,
    unsent, until `release` is set: a poll whose answer is slow in coming."""

    def __init__(self, url: str) -> None:
        super().__init__(url)
        self.polls: list[tuple[int, float]] = []
        self.held = asyncio.Event()  # the second poll is held back now
        self.release = asyncio.Event()
        self.answered: list[asyncio.Event] = []  # set as each poll's answer comes
        self._sent = asyncio.Event()

    async def answer(self, number: int) -> None:
        """Wait until poll `number` (from 0) has been sent and answered."""
        while len(self.polls) <= number:
            self._sent.clear()
            await self._sent.wait()
        await self.answered[number].wait()

    async def poll(self, queue, *, max, wait, lease, ack=None):
        number = len(self.polls)
        self.polls.append((max, wait))
        self.answered.append(asyncio.Event())
        self._sent.set()
        if number == 1:
            self.held.set()
            await self.release.wait()
        lease = await super().poll(queue, max=max, wait=wait, lease=lease, ack=ack)
        self.answered[number].set()
        return lease


def test_a_slot_freed_while_a_poll_is_out_is_polled_for_at_once(service, queue):
    """A slow answer keeps no freed slot idle while messages are due: a second poll, which
    does not wait, asks for the slot at once; and one that finds nothing is not sent
    again before the first poll is back."""
    handled: list[str] = []

    async def main() -> None:
        async with HoldsItsSecondPoll(service.url) as hourglass:
            for minute, key in enumerate(["a", "b", "c"]):
                due = datetime(2020, 1, 1, tzinfo=UTC) + timedelta(minutes=minute)
                await hourglass.offer(queue, key, key, scheduled_at=due)
            finish_b, c_done = asyncio.Event(), asyncio.Event()

            async def handler(message):
                handled.append(message.key)
                if message.key == "b":
                    await finish_b.wait()
                if message.key == "c":
                    c_done.set()

            worker = AsyncWorker(hourglass, queue, handler, concurrency=2, batch=2, wait=1)
            running = asyncio.create_task(worker.run(handle_signals=False))
            # a and b come in the first poll; a is done at once, and its slot's poll is
            # held back while b runs.
            await asyncio.wait_for(hourglass.held.wait(), WAIT)
            assert hourglass.polls == [(2, 1.0), (1, 1.0)] and handled == ["a", "b"]
            finish_b.set()  # b's slot frees up while the held poll is out: c comes at once
            await asyncio.wait_for(c_done.wait(), WAIT)
            assert hourglass.polls[2] == (1, 0.0) and not hourglass.answered[1].is_set()
            # c's slot frees up too: a second poll finds the queue empty, and no other goes
            # out while the held one is (a round trip gives the worker's loop time to).
            await asyncio.wait_for(hourglass.answer(3), WAIT)
            await hourglass.stats(queue)
            assert hourglass.polls[3:] == [(1, 0.0)]
            hourglass.release.set()
            await asyncio.wait_for(hourglass.answer(1), WAIT)
            worker.stop()
            await asyncio.wait_for(running, WAIT)
            assert hourglass.polls[4:5] in ([], [(2, 1.0)])  # the held one back: one at a time
            finished = sorted([entry.key async for entry in hourglass.iter_history(queue)])
            assert finished == ["a", "b", "c"]

    asyncio.run(main())


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


class HoldsAnswersThatDoNotWait(AsyncClient):
    """A client that counts the polls it has out at once, and holds the answer of each poll
    that does not wait (claimed already by the service) until `release` is set."""

    def __init__(self, url: str) -> None:
        super().__init__(url)
        self.out = 0
        self.most_out = 0
        self.asked: list[int] = []
        self.claimed = asyncio.Event()  # a poll that does not wait has claimed
        self.release = asyncio.Event()

    async def poll(self, queue, *, max, wait, lease, ack=None):
        self.out += 1
        self.most_out = builtins.max(self.most_out, self.out)
        self.asked.append(max)
        try:
            lease = await super().poll(queue, max=max, wait=wait, lease=lease, ack=ack)
            if not wait and lease.messages:
                self.claimed.set()
                await self.release.wait()
            return lease
        finally:
            self.out -= 1


class LogEvent(logging.Handler):
    """Set once the worker logs a line starting with `start`."""

    def __init__(self, start: str) -> None:
        super().__init__(logging.DEBUG)
        self.start = start
        self.seen = threading.Event()

    def emit(self, record: logging.LogRecord) -> None:
        if record.getMessage().startswith(self.start):
            self.seen.set()


def test_a_stop_lets_a_poll_that_does_not_wait_answer_and_gives_its_messages_back(service, queue):
    """Two polls of two fill four slots; the worker stops while the one that does not wait
    has claimed and not yet answered: it is let answer, and its messages come back at
    once, none left leased to nobody (a cancelled poll's claim would stay leased for the
    lease's 30 s)."""
    stopping = LogEvent("stopping: waiting for 1 poll(s) that do not wait")
    log = logging.getLogger("hourglass_client.worker")
    log.addHandler(stopping)
    level = log.level
    log.setLevel(logging.DEBUG)

    async def main() -> None:
        async with HoldsAnswersThatDoNotWait(service.url) as hourglass:
            await hourglass.offer_many(queue, [_offer(f"m{index}") for index in range(4)])
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

    try:
        asyncio.run(main())
    finally:
        log.removeHandler(stopping)
        log.setLevel(level)


def test_polls_out_at_once_stay_within_the_cap_and_the_free_slots(service, queue):
    """Ten slots in polls of two: up to four polls out at once, never more than the free
    slots asked for."""

    async def main() -> None:
        async with HoldsAnswersThatDoNotWait(service.url) as hourglass:
            hourglass.release.set()  # answers are not held here
            await hourglass.offer_many(queue, [_offer(f"m{index}") for index in range(40)])
            done = asyncio.Event()
            handled: list[str] = []

            async def handler(message):
                handled.append(message.key)
                if len(handled) == 40:
                    done.set()

            worker = AsyncWorker(hourglass, queue, handler, concurrency=10, batch=2)
            running = asyncio.create_task(worker.run(handle_signals=False))
            await asyncio.wait_for(done.wait(), WAIT)
            worker.stop()
            await asyncio.wait_for(running, WAIT)
            assert 2 <= hourglass.most_out <= 4
            assert max(hourglass.asked) == 2
            assert sorted(handled) == sorted(f"m{index}" for index in range(40))

    asyncio.run(main())


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
            await hourglass.offer_many(queue, [_offer(key) for key in keys])
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
    hourglass.offer_many(queue, [_offer(key) for key in keys])
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
            await hourglass.offer_many(queue, [_offer(key) for key in keys])
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
