"""The engine's settling half: the locks a worker holds, their leases kept while it holds
any of their messages, and its acknowledgements and releases, batched per lock."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field

from hourglass_client.client import AsyncClient
from hourglass_client.errors import HourglassError, NotFound
from hourglass_client.models.leases import AckResult

# A lease is extended when a third of it has passed, so two extensions in a row
# may fail (a slow answer, a 503) before it runs out.
_EXTEND_EVERY = 1 / 3


def one_line(text: str) -> str:
    """`text` fit for a log line of its own (a line break shown as `\\n`)."""
    return text.replace("\r", "\\r").replace("\n", "\\n")


def described(error: BaseException) -> str:
    return one_line(f"{type(error).__name__}: {error}" if str(error) else type(error).__name__)


@dataclass
class Held:
    """One poll's lock, while this worker holds any of its messages."""

    lock_id: str
    keys: set[str]  # not yet acknowledged or released
    running: set[str] = field(default_factory=set)  # handlers still running
    keeper: asyncio.Task[None] | None = None


@dataclass
class Counts:
    """What a worker did with its messages, for the summary it logs when it stops."""

    done: int = 0
    failed: int = 0
    retried: int = 0
    released_unstarted: int = 0
    lost: int = 0


class Settler:
    """What a worker holds and has to settle: its locks (each kept leased while any of its
    messages is running or not yet settled), and the finished messages' acknowledgements
    and releases, sent a request per lock (and delay).

    An acknowledgement goes out by key, or rides on the next poll (`Engine`'s loop
    decides when): `_riding` holds those until a poll takes them or `_acknowledge_now`
    sends them by themselves.
    """

    def __init__(
        self, client: AsyncClient, queue: str, *, lease: float, log: logging.Logger
    ) -> None:
        self.client = client
        self.queue = queue
        self.lease = lease
        self.log = log
        self.counts = Counts()
        self._settle_needed = asyncio.Event()
        self._closing = False
        self._held: dict[str, Held] = {}
        self._acks: dict[str, list[str]] = {}  # to acknowledge now, by lock
        # Finished messages, by lock, that the next poll acknowledges on its way
        # (docs/decisions/0021-acknowledgement-on-the-next-poll.md): only while the poll
        # loop is about to send a poll that answers at once (`Engine._acks_ride`); it
        # hands whatever no poll took to `_acks` before it waits again.
        self._riding: dict[str, list[str]] = {}
        self._releases: dict[tuple[str, float | None], list[str]] = {}

    # Acknowledgements on polls

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

    # Leases

    async def _keep(self, held: Held, started: float) -> None:
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
                self.log.warning("could not extend lock %s: %s", held.lock_id, described(error))
                next_at = loop.time() + min(1.0, self.lease * _EXTEND_EVERY)
                continue
            next_at = sent + self.lease * _EXTEND_EVERY

    # Settling: acknowledgements and releases, batched per lock

    def _settle(
        self, held: Held, keys: list[str], *, release: bool, delay: float | None = None
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
                described(error),
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
                described(error),
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
