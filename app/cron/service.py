"""The cron rules over a Store and a Clock: install, read, list, uninstall, and keep
upcoming runs installed as ordinary messages.

Installing runs is idempotent (`if_exists=ignore` on keys that name the entry,
its configuration and the run's instant), so any number of replicas may do it
at once: each run exists once.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

from app.clock import Clock
from app.cron.models import CronEntry, InstallOutcome
from app.cron.schedule import Schedule, config_hash, next_runs, run_key
from app.queue.errors import CronEntryNotFound
from app.queue.models import IfExists, Offer
from app.queue.notifier import Notifier
from app.queue.payloads import encode_payload
from app.storage.calls import StorageCalls

log = logging.getLogger(__name__)

# How far ahead runs are installed unless an entry says: an hour, and at least
# the next MIN_RUNS_AHEAD runs however far off they are.
DEFAULT_LOOKAHEAD_MS = 3_600_000
MIN_RUNS_AHEAD = 3
# Runs installed per entry in one pass: with `every` at least a second, that is
# over 16 minutes of runs, far more than the time between passes.
MAX_RUNS_PER_PASS = 1000
# The manager's passes leave the next minute to earlier passes (see _install_runs),
# so they keep at least a few minutes of runs installed whatever the lookahead.
SKEW_MARGIN_MS = 60_000
MIN_LOOKAHEAD_MS = 300_000


@dataclass(frozen=True, slots=True)
class CronSpec:
    """What a user asks to install."""

    schedule: Schedule
    payload: Any
    lookahead_seconds: float | None = None


@dataclass(frozen=True, slots=True)
class CronView:
    """An entry as the API shows it, with its next runs (epoch ms)."""

    entry: CronEntry
    schedule: Schedule
    next_runs: list[int]


class CronService:
    """Everything a client can ask of cron entries, plus the manager's installation pass."""

    def __init__(
        self,
        calls: StorageCalls,
        clock: Clock,
        notifier: Notifier,
        *,
        max_payload_bytes: int,
        runs_installed: Callable[[str, str, int], object] = lambda queue, name, count: None,
        failed: Callable[[str], object] = lambda kind: None,
    ) -> None:
        self.calls = calls
        self.store = calls.store
        self.clock = clock
        self.notifier = notifier
        self.max_payload_bytes = max_payload_bytes
        self.failures = 0  # entries whose runs could not be installed in a pass
        # Observers (the app's metrics): runs created per entry, and failures by kind.
        self.runs_installed = runs_installed
        self.failed = failed

    async def install(
        self, queue: str, name: str, spec: CronSpec
    ) -> tuple[InstallOutcome, CronView]:
        """Create, change or confirm an entry, and install its upcoming runs at once."""
        now = self.clock.now_ms()
        payload = encode_payload(spec.payload, self.max_payload_bytes)
        lookahead_ms = (
            None if spec.lookahead_seconds is None else round(spec.lookahead_seconds * 1000)
        )
        entry = CronEntry(
            queue=queue,
            name=name,
            schedule=json.dumps(spec.schedule.as_json(), sort_keys=True),
            payload=payload,
            config_hash=config_hash(spec.schedule, payload),
            lookahead_ms=lookahead_ms,
            created_at=now,
            updated_at=now,
        )
        installed = await self.calls.run(partial(self.store.cron_install, entry), queue)
        await self.calls.run(partial(self._install_runs, installed.entry, now), queue)
        self.notifier.notify(queue)
        return installed.outcome, self._view(installed.entry, now, 5)

    async def get(
        self, queue: str, name: str, after: int | None = None, count: int = 5
    ) -> CronView:
        entry = await self.calls.run(partial(self.store.cron_get, queue, name), queue)
        if entry is None:
            raise CronEntryNotFound(f"no cron entry {name!r} in queue {queue!r}")
        return self._view(entry, self.clock.now_ms() if after is None else after, count)

    async def list_entries(self, queue: str) -> list[CronView]:
        now = self.clock.now_ms()
        entries = await self.calls.run(partial(self.store.cron_list, queue), queue)
        return [self._view(entry, now, 5) for entry in entries]

    async def uninstall(self, queue: str, name: str) -> None:
        """Delete the entry and its runs not yet delivered."""
        now = self.clock.now_ms()
        removed = await self.calls.run(partial(self.store.cron_uninstall, queue, name, now), queue)
        if removed is None:
            raise CronEntryNotFound(f"no cron entry {name!r} in queue {queue!r}")

    async def install_upcoming_runs(self, stopping: Callable[[], bool] = lambda: False) -> int:
        """One pass of the manager: every entry's runs within its lookahead; how many are new.

        An entry that fails is logged and counted and the others go on; `stopping`
        is checked between entries, so shutdown does not wait for a long pass.
        """
        now = self.clock.now_ms()
        entries = await self.calls.run(self.store.cron_list)
        created = 0
        for entry in entries:
            if stopping():
                break
            try:
                created += await self.calls.run(
                    partial(self._install_runs, entry, now, SKEW_MARGIN_MS), entry.queue
                )
            except Exception:
                self.failures += 1
                self.failed("cron_entry")
                log.exception("cron: installing runs of %s/%s failed", entry.queue, entry.name)
        return created

    def _install_runs(self, entry: CronEntry, now: int, margin_ms: int = 0) -> int:
        """Insert the entry's upcoming runs whose keys are free (on a storage thread or greenlet).

        Runs within `margin_ms` of now are left to earlier passes: a replica whose
        clock is behind must not re-create a run that another has delivered.
        """
        schedule = Schedule.from_json(json.loads(entry.schedule))
        lookahead = DEFAULT_LOOKAHEAD_MS if entry.lookahead_ms is None else entry.lookahead_ms
        start = now + margin_ms
        until = start + max(lookahead, MIN_LOOKAHEAD_MS)
        first = next_runs(schedule, start, count=MIN_RUNS_AHEAD)
        if first:
            until = max(until, first[-1])
        runs = next_runs(schedule, start, until=until, count=MAX_RUNS_PER_PASS)
        offers = [
            Offer(
                key=run_key(entry.name, entry.config_hash, run),
                payload=entry.payload,
                scheduled_at=run,
                if_exists=IfExists.IGNORE,
            )
            for run in runs
        ]
        # None: another replica changed or removed the entry meanwhile; nothing written.
        created = self.store.cron_install_runs(entry, offers, now) or 0
        if created:
            self.runs_installed(entry.queue, entry.name, created)
        return created

    def _view(self, entry: CronEntry, after: int, count: int) -> CronView:
        schedule = Schedule.from_json(json.loads(entry.schedule))
        return CronView(entry, schedule, next_runs(schedule, after, count=count))
