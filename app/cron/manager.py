"""The cron manager: a thin loop that runs CronService's installation pass periodically."""

from __future__ import annotations

import asyncio
import contextlib
import logging

from app.cron.service import CronService

log = logging.getLogger(__name__)

# How often each replica installs upcoming runs (well inside the lookahead).
PASS_INTERVAL_SECONDS = 30.0


class CronManager:
    """Runs a pass at start and then every `interval`; failures are logged, counted,
    and the next pass tries again."""

    def __init__(self, cron: CronService, interval: float = PASS_INTERVAL_SECONDS) -> None:
        self.cron = cron
        self.interval = interval
        self.failures = 0
        self._stop = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._loop(), name="cron-manager")

    def request_stop(self) -> None:
        """Stop after the entry being installed now; `stop()` waits for that."""
        self._stop.set()

    async def stop(self) -> None:
        """Let the entry being installed finish, then stop."""
        self._stop.set()
        if self._task is not None:
            await self._task

    async def run_pass(self) -> int:
        """One installation pass; the number of runs it created, 0 after a failure."""
        try:
            return await self.cron.install_upcoming_runs(stopping=self._stop.is_set)
        except Exception:
            self.failures += 1
            self.cron.failed("cron_pass")
            log.exception(
                "cron: installing upcoming runs failed; trying again in %s s", self.interval
            )
            return 0

    async def _loop(self) -> None:
        while not self._stop.is_set():
            await self.run_pass()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stop.wait(), self.interval)
