"""Background work the service repeats: installing cron runs, pruning the history."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable

log = logging.getLogger(__name__)

# The work gets a function telling whether shutdown has begun, to stop between steps.
Work = Callable[[Callable[[], bool]], Awaitable[int]]


class Periodic:
    """Runs `work` at start and then every `interval` seconds until stopped.

    A failed run is logged and counted (`failures`, and `failed(kind)` for the
    metrics), and the next run tries again.
    """

    def __init__(
        self,
        kind: str,
        work: Work,
        interval: float,
        failed: Callable[[str], object] = lambda kind: None,
    ) -> None:
        self.kind = kind
        self.work = work
        self.interval = interval
        self.failed = failed
        self.failures = 0
        self._stop = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._loop(), name=self.kind)

    def request_stop(self) -> None:
        """Stop after the step running now; `stop()` waits for that."""
        self._stop.set()

    async def stop(self) -> None:
        """Let the step running now finish, then stop."""
        self._stop.set()
        if self._task is not None:
            await self._task

    async def run_pass(self) -> int:
        """One run; what the work counted (runs installed, rows pruned), 0 after a failure."""
        try:
            return await self.work(self._stop.is_set)
        except Exception:
            self.failures += 1
            self.failed(self.kind)
            log.exception("%s failed; trying again in %s s", self.kind, self.interval)
            return 0

    async def _loop(self) -> None:
        while not self._stop.is_set():
            await self.run_pass()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stop.wait(), self.interval)
