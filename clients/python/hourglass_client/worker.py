"""Workers: poll a queue, run a handler per message with bounded concurrency, keep the
leases while handlers run, acknowledge each message that succeeds and release each that
fails; on SIGTERM or SIGINT, drain and stop.

`Worker` runs a plain function in a pool of threads, `AsyncWorker` a coroutine function
as tasks. Both share one engine on an event loop (the calling thread's, for
`Worker.run`): the polls, lease extensions, acknowledgements and releases are
its requests, so a stop can cut a waiting poll short and a slow handler holds up
nothing but its own message.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import signal
import threading
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from queue import SimpleQueue
from typing import Any

from hourglass_client.client import AsyncClient, Client, Options
from hourglass_client.errors import (
    BadRequest,
    Forbidden,
    HourglassError,
    Invalid,
    NotFound,
    Unauthorized,
)
from hourglass_client.models.leases import Ack, AckResult, DeliveredMessage, Lease
from hourglass_client.models.times import Seconds, seconds

logger = logging.getLogger("hourglass_client.worker")

Handler = Callable[[DeliveredMessage], object]
AsyncHandler = Callable[[DeliveredMessage], Awaitable[object]]

# A poll failing with these will fail again the same way: the worker stops.
_FATAL = (BadRequest, Unauthorized, Forbidden, NotFound, Invalid)
# The longest pause between polls after failures (they double from 1 s).
_MAX_POLL_BACKOFF = 30.0
# The most polls a worker has out at once, whatever its `batch`: each holds a connection.
_MOST_POLLS = 4
# Polls that wait less than this for a message (`wait`) come this far apart while
# nothing is due.
_IDLE_PAUSE = 1.0
# Outcomes of handler threads that finish while others still run are read at most this
# long after (seconds), unless the others finish sooner: a burst is settled together.
_BATCH_WINDOW = 0.001
# A lease is extended when a third of it has passed, so two extensions in a row
# may fail (a slow answer, a 503) before it runs out.
_EXTEND_EVERY = 1 / 3


class Retry(Exception):
    """Raise from a handler to give its message back without an error being logged as one:
    due again after `delay` seconds, or, without a delay, when the queue's `retry`
    setting says (at once when it has none)."""

    def __init__(self, delay: Seconds | None = None, reason: str = "") -> None:
        super().__init__(reason or "retry")
        self.delay = None if delay is None else seconds(delay)
        self.reason = reason


def _one_line(text: str) -> str:
    """`text` fit for a log line of its own (a line break shown as `\\n`)."""
    return text.replace("\r", "\\r").replace("\n", "\\n")


def _described(error: BaseException) -> str:
    return _one_line(f"{type(error).__name__}: {error}" if str(error) else type(error).__name__)


@dataclass
class _Held:
    """One poll's lock, while this worker holds any of its messages."""

    lock_id: str
    keys: set[str]  # not yet acknowledged or released
    running: set[str] = field(default_factory=set)  # handlers still running
    keeper: asyncio.Task[None] | None = None


class _Job:
    """A message on its way through a handler, and what came of it."""

    __slots__ = ("error", "held", "message", "task", "took")

    def __init__(self, message: DeliveredMessage, held: _Held) -> None:
        self.message = message
        self.held = held
        self.task: asyncio.Task[None] | None = None  # a coroutine handler's
        self.error: BaseException | None = None  # what a handler thread raised
        self.took = 0.0  # how long a handler thread took, in seconds


@dataclass(frozen=True)
class _Poll:
    """A poll on its way: how many messages it asks for, whether it may wait for them, when
    it was sent (on the loop's clock), and the finished messages of one lock it
    acknowledges on its way (lock id and keys), if any."""

    asked: int
    waits: bool
    started: float
    ack: tuple[str, list[str]] | None = None


@dataclass
class _Counts:
    done: int = 0
    failed: int = 0
    retried: int = 0
    released_unstarted: int = 0
    lost: int = 0


class _Engine:
    """The loop both workers run: poll for free slots, handle, keep leases, settle, drain.

    How a handler runs is the subclass's (`_start`): `_TaskEngine` runs a coroutine
    function's as tasks, `_ThreadEngine` a plain function's on threads. Both report
    each handler's outcome to `_ended`, on the loop.
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
        self.client = client
        self.queue = queue
        self.concurrency = concurrency
        self.batch = batch
        # Polls out together: enough to ask for every slot (at most _MOST_POLLS), and at
        # least a second one.
        self._in_flight = max(2, min(-(-concurrency // batch), _MOST_POLLS))
        self.lease = lease
        self.wait = wait
        self.log = log
        self.counts = _Counts()
        self.fatal: HourglassError | None = None
        self.stopping = asyncio.Event()
        self.abandoning = False
        self._jobs: set[_Job] = set()  # handlers started and not finished (nor given back)
        self._idle = asyncio.Event()  # set while none runs
        self._idle.set()
        self._slot_freed = asyncio.Event()
        self._settle_needed = asyncio.Event()
        self._closing = False
        self._held: dict[str, _Held] = {}
        self._acks: dict[str, list[str]] = {}  # to acknowledge now, by lock
        # Finished messages, by lock, that the next poll acknowledges on its way (the service's decision 21):
        # only while the poll loop is about to send a poll that answers at once
        # (`_acks_ride`); it hands whatever no poll took to `_acks` before it waits again.
        self._riding: dict[str, list[str]] = {}
        self._acks_ride = False
        self._acks_on_polls = True  # until the service refuses them
        self._releases: dict[tuple[str, float | None], list[str]] = {}

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
        polls: dict[asyncio.Future[Lease], _Poll] = {}
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
                    poll = _Poll(free, waits, loop.time(), ack)
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
                            self.log.error("poll failed: %s; stopping", _described(error))
                            self.fatal = error
                            self.stopping.set()
                            continue
                        # A service from before acknowledgements on polls refuses the
                        # field (its acknowledgements went out by key): poll without it.
                        self._acks_on_polls = False
                        self.log.warning(
                            "the service refused a poll that acknowledged (%s): acknowledging "
                            "by key from now on",
                            _described(error),
                        )
                        continue
                    except _FATAL as error:
                        self.log.error("poll failed: %s; stopping", _described(error))
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
                            "poll failed: %s; polling again in %g s", _described(error), backoff
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
            # gives back what it claimed meanwhile); the others answer at once and are
            # waited for (a poll that acknowledges answers at once: it waits for nothing).
            # What they bring is given back, unstarted.
            cut_short = [poll.waits and poll.ack is None for poll in polls.values()]
            answering = cut_short.count(False)
            if answering:
                self.log.debug("stopping: waiting for %d poll(s) that do not wait", answering)
            for (future, poll), cut in zip(polls.items(), cut_short, strict=True):
                if cut:
                    future.cancel()
                await asyncio.wait([future])
                if future.cancelled() and poll.ack is None:
                    continue
                try:
                    lease = self._answered(poll, future)
                except (asyncio.CancelledError, Exception) as error:  # noqa: BLE001 - stopping
                    self.log.debug("a poll failed as the worker stopped: %s", _described(error))
                    continue
                self._take(lease, poll.started, poll.asked)

    def _send(self, poll: _Poll) -> asyncio.Future[Lease]:
        wait = self.wait if poll.waits else 0.0
        ack = None if poll.ack is None else Ack(*poll.ack)
        return asyncio.ensure_future(
            self.client.poll(self.queue, max=poll.asked, wait=wait, lease=self.lease, ack=ack)
        )

    def _ride(self) -> tuple[str, list[str]] | None:
        """The finished messages of one lock (the one with most) for the poll being sent to
        acknowledge on its way; None when none wait for a poll."""
        if not self._riding:
            return None
        lock_id = max(self._riding, key=lambda lock: len(self._riding[lock]))
        return lock_id, self._riding.pop(lock_id)

    def _acknowledge_now(self) -> None:
        """Send the acknowledgements no poll took along by themselves, at once."""
        if self._riding:
            for lock_id, keys in self._riding.items():
                self._acks.setdefault(lock_id, []).extend(keys)
            self._riding.clear()
            self._settle_needed.set()

    def _answered(self, poll: _Poll, future: asyncio.Future[Lease]) -> Lease:
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
        held = _Held(lease.lock_id, set(lease.keys))
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
            job = _Job(message, held)
            self._jobs.add(job)
            self._start(job)

    # Handling

    def _start(self, job: _Job) -> None:
        """Run the handler on the job's message, and report the outcome to `_ended`."""
        raise NotImplementedError

    def _ended(self, job: _Job, error: BaseException | None, took: float) -> None:
        """The job's handler returned (`error` None) or raised after `took` seconds: settle
        its message, unless a second signal gave it back meanwhile."""
        if job in self._jobs:
            self._free(job)
            self._finish(job.message, job.held, error, took)

    def _free(self, job: _Job) -> None:
        self._jobs.remove(job)
        job.held.running.discard(job.message.key)
        if not self._jobs:
            self._idle.set()
        self._slot_freed.set()

    def _give_back(self, job: _Job) -> None:
        """Release the job's message at once, due now, for another worker."""
        self._free(job)
        self._settle(job.held, [job.message.key], release=True, delay=0.0)

    def _abandon(self) -> None:
        """Give every running message back (a second signal), not waiting for its handler:
        what the handler does later is ignored."""
        for job in list(self._jobs):
            self._give_back(job)

    def _finish(
        self, message: DeliveredMessage, held: _Held, error: BaseException | None, took: float
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
            reason = f": {_one_line(error.reason)}" if error.reason else ""
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
                _described(error),
            )
            self.log.debug("traceback of %r (delivery %d)", key, deliveries, exc_info=error)
            self._settle(held, [key], release=True, delay=None)

    # Leases

    async def _keep(self, held: _Held, started: float) -> None:
        """Extend the lock's lease while this worker holds any of its messages."""
        loop = asyncio.get_running_loop()
        next_at = started + self.lease * _EXTEND_EVERY
        while True:
            await asyncio.sleep(max(0.0, next_at - loop.time()))
            if not held.keys:
                return
            sent = loop.time()
            try:
                await self.client.extend(self.queue, held.lock_id, self.lease)
            except NotFound:
                if held.running:
                    self.counts.lost += len(held.running)
                    self.log.warning(
                        "lease lost: lock %s holds nothing any more; %d running message(s) "
                        "will be delivered again",
                        held.lock_id,
                        len(held.running),
                    )
                return
            except HourglassError as error:
                self.log.warning("could not extend lock %s: %s", held.lock_id, _described(error))
                next_at = loop.time() + min(1.0, self.lease * _EXTEND_EVERY)
                continue
            next_at = sent + self.lease * _EXTEND_EVERY

    # Settling: acknowledgements and releases, batched per lock

    def _settle(
        self, held: _Held, keys: list[str], *, release: bool, delay: float | None = None
    ) -> None:
        if release:
            self._releases.setdefault((held.lock_id, delay), []).extend(keys)
        else:
            self._acks.setdefault(held.lock_id, []).extend(keys)
        self._settle_needed.set()

    async def _settle_loop(self) -> None:
        """Send what finished handlers left to settle, a request per lock (and delay); what
        finishes while one is sent goes in the next (so busy workers send fewer)."""
        while True:
            await self._settle_needed.wait()
            self._settle_needed.clear()
            acks, self._acks = self._acks, {}
            releases, self._releases = self._releases, {}
            await asyncio.gather(
                *(self._acknowledge(lock_id, keys) for lock_id, keys in acks.items()),
                *(
                    self._release(lock_id, keys, delay)
                    for (lock_id, delay), keys in releases.items()
                ),
            )
            if self._closing and not self._acks and not self._releases:
                return

    async def _acknowledge(self, lock_id: str, keys: list[str]) -> None:
        try:
            result = await self.client.ack_keys(self.queue, lock_id, keys)
        except HourglassError as error:
            self.log.error(
                "could not acknowledge %d message(s) of lock %s: %s; they will be delivered again",
                len(keys),
                lock_id,
                _described(error),
            )
            self._done_with(lock_id, keys)
        else:
            self._acknowledged(lock_id, keys, result, "by key")

    def _acknowledged(self, lock_id: str, keys: list[str], result: AckResult, how: str) -> None:
        """`keys` of the lock were acknowledged (`how`: by key, or on a poll) as `result` says."""
        self.log.debug(
            "acknowledged %d message(s) of lock %s %s", len(result.acknowledged), lock_id, how
        )
        for key in result.missing:
            self.log.warning(
                "acknowledged %r, but lock %s no longer held it: its lease was lost "
                "(taken by another poll, or the message was updated) and it may be "
                "delivered again, unless an earlier attempt of this acknowledgement "
                "deleted it and its answer was lost",
                key,
                lock_id,
            )
        self._done_with(lock_id, keys)

    async def _release(self, lock_id: str, keys: list[str], delay: float | None) -> None:
        try:
            await self.client.release_keys(self.queue, lock_id, keys, delay=delay)
        except HourglassError as error:
            self.log.error(
                "could not release %d message(s) of lock %s: %s; they come back when the "
                "lease ends",
                len(keys),
                lock_id,
                _described(error),
            )
        self._done_with(lock_id, keys)

    def _done_with(self, lock_id: str, keys: list[str]) -> None:
        held = self._held.get(lock_id)
        if held is None:
            return
        held.keys.difference_update(keys)
        if not held.keys:
            del self._held[lock_id]
            if held.keeper is not None:
                held.keeper.cancel()


class _TaskEngine(_Engine):
    """Runs a coroutine function's handler as a task per message, on the engine's loop."""

    def __init__(self, client: AsyncClient, queue: str, handler: AsyncHandler, **settings: Any):
        super().__init__(client, queue, **settings)
        self.handler = handler
        self._loop = asyncio.get_running_loop()

    def _start(self, job: _Job) -> None:
        job.task = self._loop.create_task(self._run(job))

    async def _run(self, job: _Job) -> None:
        began = time.monotonic()
        try:
            await self.handler(job.message)
        except asyncio.CancelledError:
            # A second signal gave it back already; if the handler's own, the same.
            if job in self._jobs:
                self._give_back(job)
        except Exception as error:  # noqa: BLE001 - any failure of a handler: _finish reports it
            self._ended(job, error, time.monotonic() - began)
        except BaseException:
            if job in self._jobs:  # SystemExit, KeyboardInterrupt: on their way out
                self._free(job)
            raise
        else:
            self._ended(job, None, time.monotonic() - began)

    def _abandon(self) -> None:
        for job in self._jobs:
            if job.task is not None:
                job.task.cancel()
        super()._abandon()


class _ThreadEngine(_Engine):
    """Runs a plain function's handler on up to `concurrency` threads of its own.

    The threads take messages from one queue and leave what came of them in a list
    that the loop reads when woken: one wake-up for whatever finished meanwhile, not
    a future, a task and a wake-up per message (`_report` says when).
    """

    def __init__(self, client: AsyncClient, queue: str, handler: Handler, **settings: Any):
        super().__init__(client, queue, **settings)
        self.handler = handler
        self._loop = asyncio.get_running_loop()
        self._inbox: SimpleQueue[_Job | None] = SimpleQueue()
        self._outbox: list[_Job] = []
        self._outbox_lock = threading.Lock()  # guards the outbox and the three below
        self._busy = 0  # threads in a handler
        self._woken = False  # a read of the outbox is on its way to the loop
        self._timed = False  # a read is due in _BATCH_WINDOW
        self._threads: list[threading.Thread] = []

    def _start(self, job: _Job) -> None:
        if len(self._jobs) > len(self._threads):  # every thread busy: one more
            thread = threading.Thread(
                target=self._serve, name=f"hourglass-handler_{len(self._threads)}", daemon=True
            )
            thread.start()
            self._threads.append(thread)
        self._inbox.put(job)

    def _serve(self) -> None:
        """A handler thread: run the handler on each message it takes, until told to end."""
        while (job := self._inbox.get()) is not None:
            with self._outbox_lock:
                self._busy += 1
                self._report()
            began = time.monotonic()
            try:
                self.handler(job.message)
            except BaseException as error:  # noqa: BLE001 - the loop reports it
                job.error = error
            job.took = time.monotonic() - began
            with self._outbox_lock:
                self._busy -= 1
                self._outbox.append(job)
                self._report()

    def _report(self) -> None:
        """Have the loop read the outbox (with the lock held), unless a read is on its way
        or messages still wait to be taken (the thread that takes the last one decides).
        At once when no handler runs; else within _BATCH_WINDOW, or when the last of them
        returns if sooner: so handlers that finish together are read, and their slots
        polled for, together, and none waits long for a slow one."""
        if self._woken or not self._outbox or not self._inbox.empty():
            return
        try:
            if not self._busy:
                self._woken = True
                self._loop.call_soon_threadsafe(self._collect)
            elif not self._timed:
                self._timed = True
                self._loop.call_soon_threadsafe(
                    self._loop.call_later, _BATCH_WINDOW, self._collect_timed
                )
        except RuntimeError:
            pass  # the loop is closed: the worker gave these messages back and left

    def _collect(self) -> None:
        """On the loop: finish what the threads left since the last read."""
        with self._outbox_lock:
            finished, self._outbox = self._outbox, []
            self._woken = False
        for job in finished:
            self._ended(job, job.error, job.took)

    def _collect_timed(self) -> None:
        with self._outbox_lock:
            self._timed = False
        self._collect()

    def close(self, *, wait: bool) -> None:
        """End the threads once their handlers return; `wait` for that."""
        for _ in self._threads:
            self._inbox.put(None)
        if wait:
            for thread in self._threads:
                thread.join()


def _check(
    concurrency: int, batch: int | None, lease: Seconds, wait: Seconds
) -> tuple[int, float, float]:
    if not 1 <= concurrency <= 1000:
        raise ValueError(f"concurrency must be 1–1000, not {concurrency}")
    if batch is None:
        # Two polls share the slots: the service answers one while the handlers run
        # the other's messages (a worker whose slots all free up at once would
        # otherwise wait for a whole poll between two rounds).
        batch = -(-concurrency // 2)
    elif not 1 <= batch <= concurrency:
        raise ValueError(f"batch must be 1–concurrency ({concurrency}), not {batch}")
    if not 1 <= seconds(lease) <= 43200:
        raise ValueError(f"lease must be 1–43200 seconds, not {seconds(lease)}")
    if not 0 <= seconds(wait) <= 20:
        raise ValueError(f"wait must be 0–20 seconds, not {seconds(wait)}")
    return batch, seconds(lease), seconds(wait)


def _engine_settings(worker: AsyncWorker | Worker) -> dict[str, Any]:
    """The engine's settings, as either worker holds them."""
    return {
        "concurrency": worker.concurrency,
        "batch": worker.batch,
        "lease": worker.lease,
        "wait": worker.wait,
        "log": worker.logger,
    }


class _Signals:
    """SIGTERM and SIGINT stop the engine while it runs (main thread only)."""

    def __init__(self, engine: _Engine, enabled: bool) -> None:
        self.engine = engine
        self.enabled = enabled and threading.current_thread() is threading.main_thread()

    def __enter__(self) -> None:
        if self.enabled:
            loop = asyncio.get_running_loop()
            for number in (signal.SIGTERM, signal.SIGINT):
                loop.add_signal_handler(number, self.engine.signalled, signal.Signals(number).name)

    def __exit__(self, *_: object) -> None:
        if self.enabled:
            loop = asyncio.get_running_loop()
            for number in (signal.SIGTERM, signal.SIGINT):
                loop.remove_signal_handler(number)


class AsyncWorker:
    """Runs `handler` (a coroutine function) on each message of `queue`, at most
    `concurrency` at a time.

    Polls ask for the free slots, at most `batch` messages each (half of `concurrency`
    by default: two polls share the slots), leased for `lease` seconds and extended
    while their handlers run. A handler that returns acknowledges
    its message; one that raises releases it: due again as the queue's `retry`
    setting says, or after the delay of a `Retry` it raised. `run()` returns after a
    stop (`stop()`, SIGTERM or SIGINT): polling stops, running handlers finish,
    messages held but not started are released. A second stop releases the running
    messages too and returns at once.
    """

    def __init__(
        self,
        client: AsyncClient,
        queue: str,
        handler: AsyncHandler,
        *,
        concurrency: int = 10,
        batch: int | None = None,
        lease: Seconds = 30.0,
        wait: Seconds = 20.0,
        logger: logging.Logger = logger,
    ) -> None:
        if not inspect.iscoroutinefunction(handler):
            raise TypeError("AsyncWorker runs coroutine functions; use Worker for a plain one")
        self.client = client
        self.queue = queue
        self.handler = handler
        self.concurrency = concurrency
        self.batch, self.lease, self.wait = _check(concurrency, batch, lease, wait)
        self.logger = logger
        self._engine: _Engine | None = None

    async def run(self, *, handle_signals: bool = True) -> None:
        """Work until stopped; raises the poll's error when the service refuses it for good
        (a bad token or queue name), after draining."""
        self._engine = engine = _TaskEngine(
            self.client, self.queue, self.handler, **_engine_settings(self)
        )
        with _Signals(engine, handle_signals):
            await engine.run()

    @property
    def abandoned(self) -> bool:
        """Whether a second signal stopped it without waiting for running handlers."""
        return self._engine is not None and self._engine.abandoning

    def stop(self) -> None:
        """Stop (from the worker's event loop): as SIGTERM does."""
        if self._engine is not None:
            self._engine.stop()


class Worker:
    """Runs `handler` (a plain function) on each message of `queue` in a pool of
    `concurrency` threads; otherwise as `AsyncWorker`.

    `client` is a `Client` (the worker reaches the service as it does), a URL, or None
    for HOURGLASS_URL. `run()` blocks until a stop; it installs SIGTERM and SIGINT
    handlers when called from the main thread. `stop()` may be called from any thread.
    """

    def __init__(
        self,
        client: Client | str | None,
        queue: str,
        handler: Handler,
        *,
        concurrency: int = 10,
        batch: int | None = None,
        lease: Seconds = 30.0,
        wait: Seconds = 20.0,
        token: str | None = None,
        logger: logging.Logger = logger,
    ) -> None:
        if inspect.iscoroutinefunction(handler):
            raise TypeError("Worker runs plain functions; use AsyncWorker for a coroutine one")
        if isinstance(client, Client):
            self.options = client.options
        else:
            self.options = Options.of(client, token)
        self.queue = queue
        self.handler = handler
        self.concurrency = concurrency
        self.batch, self.lease, self.wait = _check(concurrency, batch, lease, wait)
        self.logger = logger
        self._loop: asyncio.AbstractEventLoop | None = None
        self._engine: _Engine | None = None
        self._stop_asked = threading.Event()

    def run(self, *, handle_signals: bool = True) -> None:
        """Work until stopped; see `AsyncWorker.run`."""
        asyncio.run(self._run(handle_signals))

    async def _run(self, handle_signals: bool) -> None:
        self._loop = asyncio.get_running_loop()
        async with AsyncClient.from_options(self.options) as client:
            self._engine = engine = _ThreadEngine(
                client, self.queue, self.handler, **_engine_settings(self)
            )
            try:
                if self._stop_asked.is_set():
                    engine.stop()
                with _Signals(engine, handle_signals):
                    await engine.run()
            finally:
                # After a second stop, handlers may still run in their threads: not waited for.
                engine.close(wait=not engine.abandoning)

    @property
    def abandoned(self) -> bool:
        """Whether a second signal stopped it without waiting for running handlers (their
        threads may still run; `hourglass-worker` exits without them)."""
        return self._engine is not None and self._engine.abandoning

    def stop(self) -> None:
        """Stop, from any thread: as SIGTERM does."""
        self._stop_asked.set()
        loop, engine = self._loop, self._engine
        if loop is not None and engine is not None:
            loop.call_soon_threadsafe(engine.stop)
