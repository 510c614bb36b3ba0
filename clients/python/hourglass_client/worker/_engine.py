"""The engine both workers run on an event loop: polls for the free slots, a handler per
message, and a drain on a stop; how a handler runs is a subclass's (_runners.py), the
leases and settling are `Settler`'s (_settling.py)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable
from dataclasses import dataclass
from typing import Any

from hourglass_client.client import AsyncClient
from hourglass_client.errors import (
    BadRequest,
    Forbidden,
    HourglassError,
    Invalid,
    NotFound,
    Unauthorized,
)
from hourglass_client.models.leases import Ack, DeliveredMessage, Lease
from hourglass_client.worker._settling import Held, Settler, described, one_line
from hourglass_client.worker.handlers import Retry

# A poll failing with these will fail again the same way: the worker stops.
_FATAL = (BadRequest, Unauthorized, Forbidden, NotFound, Invalid)
# The longest pause between polls after failures (they double from 1 s).
_MAX_POLL_BACKOFF = 30.0
# The most polls a worker has out at once, whatever its `batch`: each holds a connection.
_MOST_POLLS = 4
# Polls that wait less than this for a message (`wait`) come this far apart while
# nothing is due.
_IDLE_PAUSE = 1.0


class Job:
    """A message on its way through a handler, and what came of it."""

    __slots__ = ("error", "held", "message", "task", "took")

    def __init__(self, message: DeliveredMessage, held: Held) -> None:
        self.message = message
        self.held = held
        self.task: asyncio.Task[None] | None = None  # a coroutine handler's
        self.error: BaseException | None = None  # what a handler thread raised
        self.took = 0.0  # how long a handler thread took, in seconds


@dataclass(eq=False)
class Poll:
    """A poll on its way: how many messages it asks for, whether it may wait for them, when
    it was sent (on the loop's clock), the finished messages of one lock it acknowledges
    on its way (lock id and keys), if any, and whether its answer has begun."""

    asked: int
    waits: bool
    started: float
    ack: tuple[str, list[str]] | None = None
    begun: bool = False

    def answer_begun(self) -> None:
        self.begun = True


class Engine(Settler):
    """The loop both workers run: poll for free slots, handle, keep leases, settle, drain.

    How a handler runs is the subclass's (`_start`): `TaskEngine` runs a coroutine
    function's as tasks, `ThreadEngine` a plain function's on threads. Both report
    each handler's outcome to `_ended`, on the loop. Keeping the leases and settling
    the messages is `Settler`'s.
    """

    def __init__(
        self,
        client: AsyncClient,
        queue: str,
        *,
        concurrency: int,
        batch: int,
        lease: float,
        wait: float,
        log: logging.Logger,
    ) -> None:
        super().__init__(client, queue, lease=lease, log=log)
        self.concurrency = concurrency
        self.batch = batch
        # Polls out together: enough to ask for every slot (at most _MOST_POLLS), and at
        # least a second one.
        self._in_flight = max(2, min(-(-concurrency // batch), _MOST_POLLS))
        self.wait = wait
        self.fatal: HourglassError | None = None
        self.stopping = asyncio.Event()
        self.abandoning = False
        self._jobs: set[Job] = set()  # handlers started and not finished (nor given back)
        self._idle = asyncio.Event()  # set while none runs
        self._idle.set()
        self._slot_freed = asyncio.Event()
        # Finished messages acknowledge on the next poll (`_riding`) only while this is set.
        self._acks_ride = False
        self._acks_on_polls = True  # until the service refuses them

    def stop(self, why: str = "asked to") -> None:
        """Stop polling and drain (again: nothing more)."""
        if self.stopping.is_set():
            return
        running = len(self._jobs)
        waiting = (
            f"waiting for {running} running handler(s) to finish" if running else "none running"
        )
        self.log.info("stopping (%s): no more polls; %s", why, waiting)
        self.stopping.set()

    def signalled(self, name: str) -> None:
        """A SIGTERM or SIGINT: the first stops, the second gives the running messages back
        now, for another worker, and stops without waiting for them."""
        if not self.stopping.is_set():
            self.stop(name)
        elif not self.abandoning:
            self.log.warning(
                "stopping now (%s again): releasing %d running message(s) for another worker",
                name,
                len(self._jobs),
            )
            self.abandoning = True
            self._abandon()

    async def run(self) -> None:
        self.log.info(
            "worker started: queue %r at %s, concurrency %d, polls of up to %d, lease %g s",
            self.queue,
            self.client.options.url,
            self.concurrency,
            self.batch,
            self.lease,
        )
        settler = asyncio.create_task(self._settle_loop())
        try:
            await self._poll_loop()
            await self._idle.wait()
        finally:
            self._closing = True
            self._settle_needed.set()
            await settler
            for held in list(self._held.values()):
                if held.keeper is not None:
                    held.keeper.cancel()
        counts = self.counts
        self.log.info(
            "worker stopped: %d done, %d failed, %d retried, %d released unstarted, %d leases lost",
            counts.done,
            counts.failed,
            counts.retried,
            counts.released_unstarted,
            counts.lost,
        )
        if self.fatal is not None:
            raise self.fatal

    # Polling

    async def _poll_loop(self) -> None:
        """Poll for the free slots until a stop, in polls of at most `batch` messages.

        One poll at a time may wait for messages (`wait`); the others ask for free
        slots at once and do not wait, up to `_in_flight` polls out together, so
        neither a poll waiting on an empty queue nor a slow answer keeps freed slots
        idle while messages are due, and the service works on several polls while
        handlers run. Those polls go out only while the queue seems to have more due
        than was asked for: after a poll comes back short, only the waiting one goes out
        until a poll comes back with all it asked for."""
        loop = asyncio.get_running_loop()
        polls: dict[asyncio.Future[Lease], Poll] = {}
        hungry = True  # the last poll back brought all it asked for
        failures = 0
        stop = asyncio.ensure_future(self.stopping.wait())
        try:
            while not self.stopping.is_set():
                asked = sum(poll.asked for poll in polls.values())
                free = min(self.concurrency - len(self._jobs) - asked, self.batch)
                waiting = any(poll.waits for poll in polls.values())
                may_send = not polls or (len(polls) < self._in_flight and (not waiting or hungry))
                if free > 0 and may_send:
                    waits = not waiting
                    # Acknowledgements ride only on a poll that answers at once: one that
                    # may wait would hold back their answer (and the end of their leases'
                    # extensions) for as long.
                    rides = self._acks_on_polls and not (waits and self.wait)
                    ack = self._ride() if rides else None
                    poll = Poll(free, waits, loop.time(), ack)
                    polls[self._send(poll)] = poll
                    continue
                self._acknowledge_now()  # what no poll took along goes out at once
                self._slot_freed.clear()
                # A slot that frees up matters only when it would send a poll.
                freed = asyncio.ensure_future(self._slot_freed.wait()) if may_send else stop
                watched: list[asyncio.Future[Any]] = [stop, freed, *polls]
                # The message whose end frees a slot is acknowledged by the poll that asks
                # for the slot, when that poll answers at once.
                self._acks_ride = self._acks_on_polls and may_send and (waiting or not self.wait)
                try:
                    await asyncio.wait(watched, return_when=asyncio.FIRST_COMPLETED)
                finally:
                    self._acks_ride = False
                if freed is not stop:
                    freed.cancel()
                pause = 0.0  # before the next poll; what came back is taken first
                for future in [future for future in polls if future.done()]:
                    poll = polls.pop(future)
                    try:
                        lease = self._answered(poll, future)
                    except Invalid as error:
                        if poll.ack is None or not self._acks_on_polls:
                            self.log.error("poll failed: %s; stopping", described(error))
                            self.fatal = error
                            self.stopping.set()
                            continue
                        # A service from before acknowledgements on polls refuses the
                        # field (its acknowledgements went out by key): poll without it.
                        self._acks_on_polls = False
                        self.log.warning(
                            "the service refused a poll that acknowledged (%s): acknowledging "
                            "by key from now on",
                            described(error),
                        )
                        continue
                    except _FATAL as error:
                        self.log.error("poll failed: %s; stopping", described(error))
                        self.fatal = error
                        self.stopping.set()
                        continue  # the others' messages are taken (and, stopping, given back)
                    except Exception as error:  # noqa: BLE001 (a proxy's answer, an unreadable one)
                        # Polled again after a pause: leaving the loop would stop the worker
                        # without settling what its handlers are running.
                        failures += 1
                        backoff = min(2.0 ** (failures - 1), _MAX_POLL_BACKOFF)
                        pause = max(pause, backoff)
                        self.log.warning(
                            "poll failed: %s; polling again in %g s", described(error), backoff
                        )
                        continue
                    failures = 0
                    hungry = len(lease.messages) >= poll.asked
                    if poll.waits and not lease.messages and self.wait < _IDLE_PAUSE:
                        # Nothing due and a poll that does not wait: do not ask again at once.
                        pause = max(pause, _IDLE_PAUSE - self.wait)
                    self._take(lease, poll.started, poll.asked)
                if pause and not self.stopping.is_set():
                    self._acknowledge_now()  # nothing waits for the pause
                    await self._until_stopping(asyncio.sleep(pause))
        finally:
            stop.cancel()
            self._acknowledge_now()
            # Stopping: the waiting poll is cut short (the service, seeing its caller gone,
            # gives back what it claimed meanwhile) unless its answer has begun, which is
            # read whole (its messages are claimed by then); the others answer at once and
            # are waited for (a poll that acknowledges answers at once: it waits for
            # nothing). What they bring is given back, unstarted.
            # All cut at once, before any other is waited for: one whose answer began while
            # the worker waited would be cut mid-answer.
            answering = 0
            for future, poll in polls.items():
                if poll.waits and poll.ack is None and not poll.begun:
                    future.cancel()
                else:
                    answering += 1
            if answering:
                self.log.debug("stopping: waiting for %d poll(s) to answer", answering)
            for future, poll in polls.items():
                await asyncio.wait([future])
                if future.cancelled() and poll.ack is None:
                    continue
                try:
                    lease = self._answered(poll, future)
                except (asyncio.CancelledError, Exception) as error:  # noqa: BLE001 - stopping
                    self.log.debug("a poll failed as the worker stopped: %s", described(error))
                    continue
                self._take(lease, poll.started, poll.asked)

    def _send(self, poll: Poll) -> asyncio.Future[Lease]:
        wait = self.wait if poll.waits else 0.0
        ack = None if poll.ack is None else Ack(*poll.ack)
        return asyncio.ensure_future(
            self.client.poll(
                self.queue,
                max=poll.asked,
                wait=wait,
                lease=self.lease,
                ack=ack,
                answer_begun=poll.answer_begun,
            )
        )

    def _answered(self, poll: Poll, future: asyncio.Future[Lease]) -> Lease:
        """The lease a finished poll brought (or its error), its acknowledgement settled: a
        poll that failed may or may not have acknowledged, so those go out again by
        themselves (a repeat is safe: what the first did comes back `missing`)."""
        try:
            lease = future.result()
        except BaseException:
            if poll.ack is not None:
                lock_id, keys = poll.ack
                self._acks.setdefault(lock_id, []).extend(keys)
                self._settle_needed.set()
            raise
        if poll.ack is not None:
            lock_id, keys = poll.ack
            if lease.acknowledgement is None:  # a service that does not acknowledge on polls
                self._acks.setdefault(lock_id, []).extend(keys)
                self._settle_needed.set()
            else:
                self._acknowledged(lock_id, keys, lease.acknowledgement, "on a poll")
        return lease

    async def _until_stopping(self, awaitable: Awaitable[Any]) -> bool:
        """Wait for `awaitable` or a stop, whichever comes first: True when it finished."""
        task = asyncio.ensure_future(awaitable)
        stop = asyncio.ensure_future(self.stopping.wait())
        await asyncio.wait([task, stop], return_when=asyncio.FIRST_COMPLETED)
        stop.cancel()
        if task.done():
            return True
        if not isinstance(awaitable, asyncio.Future):
            task.cancel()  # ours to cancel; a caller's future is the caller's
        return False

    def _take(self, lease: Lease, started: float, asked: int) -> None:
        """Start a handler for each message of `lease` (or, when stopping, give them back)."""
        if lease.lock_id is None or not lease.messages:
            return
        self.log.debug(
            "polled %d message(s) under lock %s (asked for %d)", len(lease), lease.lock_id, asked
        )
        held = Held(lease.lock_id, set(lease.keys))
        self._held[lease.lock_id] = held
        held.keeper = asyncio.create_task(self._keep(held, started))
        if self.stopping.is_set():
            self.counts.released_unstarted += len(lease.messages)
            self.log.info(
                "released %d message(s) polled as the worker stopped, unstarted",
                len(lease.messages),
            )
            self._settle(held, lease.keys, release=True, delay=0.0)
            return
        self._idle.clear()
        for message in lease.messages:
            held.running.add(message.key)
            job = Job(message, held)
            self._jobs.add(job)
            self._start(job)

    # Handling

    def _start(self, job: Job) -> None:
        """Run the handler on the job's message, and report the outcome to `_ended`."""
        raise NotImplementedError

    def _ended(self, job: Job, error: BaseException | None, took: float) -> None:
        """The job's handler returned (`error` None) or raised after `took` seconds: settle
        its message, unless a second signal gave it back meanwhile."""
        if job in self._jobs:
            self._free(job)
            self._finish(job.message, job.held, error, took)

    def _free(self, job: Job) -> None:
        self._jobs.remove(job)
        job.held.running.discard(job.message.key)
        if not self._jobs:
            self._idle.set()
        self._slot_freed.set()

    def _give_back(self, job: Job) -> None:
        """Release the job's message at once, due now, for another worker."""
        self._free(job)
        self._settle(job.held, [job.message.key], release=True, delay=0.0)

    def _abandon(self) -> None:
        """Give every running message back (a second signal), not waiting for its handler:
        what the handler does later is ignored."""
        for job in list(self._jobs):
            self._give_back(job)

    def _finish(
        self, message: DeliveredMessage, held: Held, error: BaseException | None, took: float
    ) -> None:
        """Count, log and settle a message whose handler returned (`error` None) after
        `took` seconds, or raised `error`."""
        key, deliveries = message.key, message.deliveries
        if error is None:
            self.counts.done += 1
            self.log.info("done %r (delivery %d) in %.0f ms", key, deliveries, took * 1000)
            if self._acks_ride and not self.stopping.is_set():  # the poll for its slot will
                self._riding.setdefault(held.lock_id, []).append(key)
                return
            acks = self._acks.get(held.lock_id)
            if acks is None:
                acks = self._acks[held.lock_id] = []
            acks.append(key)
            self._settle_needed.set()
        elif isinstance(error, Retry):
            self.counts.retried += 1
            when = "when the queue's retry says" if error.delay is None else f"in {error.delay:g} s"
            reason = f": {one_line(error.reason)}" if error.reason else ""
            self.log.info("retry %r (delivery %d)%s; due again %s", key, deliveries, reason, when)
            self._settle(held, [key], release=True, delay=error.delay)
        else:
            self.counts.failed += 1
            self.log.warning(
                "failed %r (delivery %d) after %.0f ms: %s; released, due again when the "
                "queue's retry says",
                key,
                deliveries,
                took * 1000,
                described(error),
            )
            self.log.debug("traceback of %r (delivery %d)", key, deliveries, exc_info=error)
            self._settle(held, [key], release=True, delay=None)
