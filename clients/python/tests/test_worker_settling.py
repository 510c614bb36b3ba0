"""Workers against a real server: leases kept while handlers run, each message settled alone."""

from __future__ import annotations

import asyncio
import logging
import threading
from datetime import UTC, datetime, timedelta

import pytest

from hourglass_client import AsyncClient, AsyncWorker, NotFound, Retry, RetryPolicy, Worker
from worker_support import WAIT, Countdown, history_of, working


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
