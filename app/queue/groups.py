"""The groups' keeper: takes the marks that say a group's front may have to change and
passes over those groups, so that a group's next messages become pollable once the ones
before them leave (docs/decisions/0027-message-groups.md).

Every process runs one. It looks for marks every GROUP_KEEPER_SECONDS, and at once when
this process changed a queue it knows has groups (an offer, an acknowledgement, a
release, a delete); two keepers (replicas) pass over one group one after the other.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Sequence
from functools import partial
from typing import Any

from app.clock import Clock
from app.domain.messages import Settled
from app.queue.notifier import Notifier
from app.queue.ports import Groups

log = logging.getLogger(__name__)

# How often a keeper looks for marks nobody told it of (a change through another replica,
# or one this process did not know was grouped): the longest a group's next message
# waits after the one before it leaves.
GROUP_KEEPER_SECONDS = 0.1
# Marks read per round, and groups passed over per transaction.
_MARKS_PER_ROUND = 500
_GROUPS_PER_TRANSACTION = 500
# Rounds per pass at most: a pass that keeps finding marks yields to the loop's next one.
_ROUNDS_PER_PASS = 50


class GroupKeeper:
    """Keeps every group's front, in the background and when asked."""

    def __init__(
        self,
        groups: Groups,
        run: Callable[[str, Callable[[], Awaitable[Any]]], Awaitable[Any]],
        notifier: Notifier,
        clock: Clock,
        *,
        interval: float = GROUP_KEEPER_SECONDS,
        failed: Callable[[str], object] = lambda kind: None,
    ) -> None:
        """`run(queue, call)` runs a storage call on behalf of a queue (the service's
        turns); `notifier` wakes the long polls of a queue whose front gained messages."""
        self.groups = groups
        self.run = run
        self.notifier = notifier
        self.clock = clock
        self.interval = interval
        self.failed = failed
        # Queues this process has seen grouped messages in: a change to one wakes the keeper.
        self.grouped: set[str] = set()
        self._wake = asyncio.Event()
        self._stop = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    def saw_groups(self, queue: str) -> None:
        """`queue` holds grouped messages (an offer or a poll said so)."""
        self.grouped.add(queue)

    def changed(self, queue: str) -> None:
        """Something in `queue` may have freed or taken a front's place: look at once if it
        has groups."""
        if queue in self.grouped:
            self._wake.set()

    async def settle(self, queue: str, groups: Sequence[str]) -> Settled:
        """Pass over `groups` of `queue` now (an offer's, before it answers)."""
        done = Settled()
        for start in range(0, len(groups), _GROUPS_PER_TRANSACTION):
            piece = groups[start : start + _GROUPS_PER_TRANSACTION]
            now = self.clock.now_ms()
            done += await self.run(queue, partial(self.groups.settle, queue, piece, now))
        if done.entered:
            self.notifier.notify(queue)
        return done

    async def run_pass(self) -> int:
        """Take the marks there are and pass over their groups; how many messages came
        into fronts."""
        entered = 0
        for _ in range(_ROUNDS_PER_PASS):
            # Not one queue's call: the turns of no queue (no queue's name is empty).
            marked = await self.run("", partial(self.groups.marked, _MARKS_PER_ROUND))
            if not marked:
                break
            passed = 0
            for queue, groups in marked.items():
                self.grouped.add(queue)
                done = await self.settle(queue, groups)
                entered += done.entered
                passed += done.groups - done.unfinished
            if not passed:
                break  # every group waits on a message another transaction holds: later
        return entered

    def start(self) -> None:
        self._task = asyncio.create_task(self._loop(), name="group_keeper")

    def request_stop(self) -> None:
        self._stop.set()
        self._wake.set()

    async def stop(self) -> None:
        """Let the pass running now finish, then stop."""
        self.request_stop()
        if self._task is not None:
            await self._task

    async def _loop(self) -> None:
        while not self._stop.is_set():
            self._wake.clear()
            try:
                await self.run_pass()
            except Exception:
                self.failed("group_keeper")
                log.exception("the groups' keeper failed; trying again in %s s", self.interval)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), self.interval)
