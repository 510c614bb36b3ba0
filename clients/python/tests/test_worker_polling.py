"""How workers poll: for their free slots and no more, a group one at a time, few polls at once."""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from datetime import UTC, datetime, timedelta

import pytest

from hourglass_client import (
    AsyncClient,
    AsyncWorker,
    Invalid,
    Offer,
    Worker,
)
from worker_support import (
    WAIT,
    Countdown,
    HoldsAnswersThatDoNotWait,
    keyed_offer,
    working,
)


def test_polls_ask_for_the_free_slots_and_no_more_run_at_once(hourglass, queue, caplog):
    hourglass.offer_many(queue, [keyed_offer(f"m{index}") for index in range(9)])
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
    hourglass.offer_many(queue, [keyed_offer(f"m{index}") for index in range(8)])
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

    async def poll(self, queue, *, max, wait, lease, ack=None, answer_begun=None):
        number = len(self.polls)
        self.polls.append((max, wait))
        self.answered.append(asyncio.Event())
        self._sent.set()
        if number == 1:
            self.held.set()
            await self.release.wait()
        lease = await super().poll(
            queue, max=max, wait=wait, lease=lease, ack=ack, answer_begun=answer_begun
        )
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


def test_polls_out_at_once_stay_within_the_cap_and_the_free_slots(service, queue):
    """Ten slots in polls of two: up to four polls out at once, never more than the free
    slots asked for."""

    async def main() -> None:
        async with HoldsAnswersThatDoNotWait(service.url) as hourglass:
            hourglass.release.set()  # answers are not held here
            await hourglass.offer_many(queue, [keyed_offer(f"m{index}") for index in range(40)])
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
