"""The cron rules over storage (its port: app/cron/ports.py) and a Clock: install, read, list, uninstall, and keep
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
from app.cron.bounds import MAX_RUN_BYTES_PER_ENTRY, MAX_RUNS_PER_ENTRY, runs_allowed
from app.cron.ports import CronStorage
from app.domain.cron import (
    DEFAULT_LOOKAHEAD_MS,
    DEFAULT_RUNS_SHOWN,
    MAX_LOOKAHEAD_MS,
    MIN_LOOKAHEAD_MS,
    CronEntry,
    InstallOutcome,
    run_key,
)
from app.domain.errors import CronEntryNotFound, CronEntryTooLarge
from app.domain.formats import seconds_to_ms
from app.domain.messages import IfExists, Offer, expiry_after
from app.domain.payloads import encode_payload
from app.domain.schedule import Schedule, config_hash, most_runs_within, next_runs
from app.queue.notifier import Notifier
from app.storage.calls import StorageCalls

log = logging.getLogger(__name__)

# How often each replica's manager installs upcoming runs (app/cron/manager.py).
PASS_INTERVAL_MS = 30_000
# The manager's passes leave the next minute to earlier passes (see _install_runs).
SKEW_MARGIN_MS = 60_000
# A run is due at least SKEW_MARGIN_MS after the last pass that may install it, so an
# entry must be able to keep the runs of that minute and of four passes more installed
# at once (three passes may fail or come late, and none of its runs goes missing):
# an entry whose schedule and payload cannot fit that in its bound is refused.
RUNS_REACH_MS = SKEW_MARGIN_MS + 4 * PASS_INTERVAL_MS


@dataclass(frozen=True, slots=True)
class CronSpec:
    """What a user asks to install."""

    schedule: Schedule
    payload: Any
    lookahead_seconds: float | None = None
    priority: int = 0
    group: str | None = None
    # Every run expires this long after it is due (None: never).
    ttl_seconds: float | None = None


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
        storage: CronStorage,
        calls: StorageCalls,
        notifier: Notifier,
        clock: Clock,
        *,
        max_payload_bytes: int,
        runs_installed: Callable[[str, str, int], object] = lambda queue, name, count: None,
        failed: Callable[[str], object] = lambda kind: None,
    ) -> None:
        self.storage = storage
        self.calls = calls
        self.clock = clock
        self.notifier = notifier
        self.max_payload_bytes = max_payload_bytes
        self.failures = 0  # entries whose runs could not be installed in a pass
        # Observers (the app's metrics): runs created per entry, and failures by kind.
        self.runs_installed = runs_installed
        self.failed = failed
        # Entries (queue, name, config hash) already logged as beyond their bound.
        self._over_bound: set[tuple[str, str, str]] = set()

    async def install(
        self, queue: str, name: str, spec: CronSpec
    ) -> tuple[InstallOutcome, CronView]:
        """Create, change or confirm an entry, and install its upcoming runs at once."""
        now = self.clock.now_ms()
        payload = encode_payload(spec.payload, self.max_payload_bytes)
        _check_fits(spec.schedule, payload)
        lookahead_ms = (
            None if spec.lookahead_seconds is None else round(spec.lookahead_seconds * 1000)
        )
        ttl_ms = None if spec.ttl_seconds is None else seconds_to_ms(spec.ttl_seconds)
        entry = CronEntry(
            queue=queue,
            name=name,
            schedule=json.dumps(spec.schedule.as_json(), sort_keys=True),
            payload=payload,
            config_hash=config_hash(spec.schedule, payload, spec.priority, spec.group, ttl_ms),
            lookahead_ms=lookahead_ms,
            created_at=now,
            updated_at=now,
            priority=spec.priority,
            group=spec.group,
            ttl_ms=ttl_ms,
        )
        installed = await self.calls.run(partial(self.storage.cron.install, entry), queue)
        await self.calls.run(partial(self._install_runs, installed.entry, now), queue)
        self.notifier.notify(queue)
        return installed.outcome, self._view(installed.entry, now, DEFAULT_RUNS_SHOWN)

    async def get(
        self, queue: str, name: str, after: int | None = None, count: int = DEFAULT_RUNS_SHOWN
    ) -> CronView:
        entry = await self.calls.run(partial(self.storage.cron.get, queue, name), queue)
        if entry is None:
            raise CronEntryNotFound(f"no cron entry {name!r} in queue {queue!r}")
        return self._view(entry, self.clock.now_ms() if after is None else after, count)

    async def list_entries(self, queue: str) -> list[CronView]:
        now = self.clock.now_ms()
        entries = await self.calls.run(partial(self.storage.cron.entries, queue), queue)
        return [self._view(entry, now, DEFAULT_RUNS_SHOWN) for entry in entries]

    async def entry_names(self) -> list[tuple[str, str]]:
        """The (queue, name) of every stored entry."""
        return await self.calls.run(self.storage.cron.names)

    async def pause(self, queue: str, name: str) -> CronView:
        """Install no more runs of the entry, and delete those never delivered (one a worker
        holds, or one delivered and released to retry, stays); again is no error."""
        now = self.clock.now_ms()
        entry = await self.calls.run(partial(self.storage.cron.pause, queue, name, now), queue)
        if entry is None:
            raise CronEntryNotFound(f"no cron entry {name!r} in queue {queue!r}")
        return self._view(entry, now, DEFAULT_RUNS_SHOWN)

    async def resume(self, queue: str, name: str) -> CronView:
        """Install the entry's runs again, from now on: none of those it missed while
        paused; again is no error."""
        now = self.clock.now_ms()
        entry = await self.calls.run(partial(self.storage.cron.resume, queue, name), queue)
        if entry is None:
            raise CronEntryNotFound(f"no cron entry {name!r} in queue {queue!r}")
        await self.calls.run(partial(self._install_runs, entry, now), queue)
        self.notifier.notify(queue)
        return self._view(entry, now, DEFAULT_RUNS_SHOWN)

    async def uninstall(self, queue: str, name: str) -> None:
        """Delete the entry and its runs not yet delivered."""
        now = self.clock.now_ms()
        removed = await self.calls.run(
            partial(self.storage.cron.uninstall, queue, name, now), queue
        )
        if removed is None:
            raise CronEntryNotFound(f"no cron entry {name!r} in queue {queue!r}")

    async def install_upcoming_runs(self, stopping: Callable[[], bool] = lambda: False) -> int:
        """One pass of the manager: every entry's runs within its lookahead; how many are new.

        An entry that fails is logged and counted and the others go on; `stopping`
        is checked between entries, so shutdown does not wait for a long pass.
        """
        entries = await self.calls.run(self.storage.cron.entries)
        created = 0
        for entry in entries:
            if stopping():
                break
            if entry.paused_at is not None:
                continue
            # Each entry from its own now: a pass slowed past a pause and resume of an entry
            # must not install the runs it missed meanwhile.
            now = self.clock.now_ms()
            try:
                created += await self.calls.run(
                    partial(self._install_runs, entry, now, SKEW_MARGIN_MS), entry.queue
                )
            except Exception:
                self.failures += 1
                self.failed("cron_entry")
                log.exception("cron: installing runs of %s/%s failed", entry.queue, entry.name)
        return created

    async def _install_runs(self, entry: CronEntry, now: int, margin_ms: int = 0) -> int:
        """Insert the entry's upcoming runs whose keys are free, within its bound; drop the
        runs it stores beyond the bound.

        Runs within `margin_ms` of now are left to earlier passes: a replica whose
        clock is behind must not re-create a run that another has delivered. Runs
        installed further ahead than the lookahead (an entry installed before these
        bounds, or whose lookahead was shortened) go, with a margin as wide, so that
        replicas whose clocks differ by less never delete each other's runs.
        """
        schedule = Schedule.from_json(json.loads(entry.schedule))
        limit = runs_allowed(len(entry.payload))
        self._warn_when_over_bound(entry, schedule, limit)
        lookahead = DEFAULT_LOOKAHEAD_MS if entry.lookahead_ms is None else entry.lookahead_ms
        start = now + margin_ms
        until = start + min(max(lookahead, MIN_LOOKAHEAD_MS), MAX_LOOKAHEAD_MS)
        # At least the next run, however far off.
        runs = next_runs(schedule, start, until=until, count=limit) or next_runs(
            schedule, start, count=1
        )
        keep_until = max([until, *runs]) + SKEW_MARGIN_MS
        offers = [
            Offer(
                key=run_key(entry.name, entry.config_hash, run),
                payload=entry.payload,
                scheduled_at=run,
                if_exists=IfExists.IGNORE,
                priority=entry.priority,
                group=entry.group,
                expires_at=None if entry.ttl_ms is None else expiry_after(run, entry.ttl_ms),
            )
            for run in runs
        ]
        # None: another replica changed or removed the entry meanwhile; nothing written.
        created = (
            await self.storage.cron.install_runs(
                entry, offers, now, limit=limit, keep_until=keep_until
            )
            or 0
        )
        if created:
            self.runs_installed(entry.queue, entry.name, created)
        return created

    def _warn_when_over_bound(self, entry: CronEntry, schedule: Schedule, limit: int) -> None:
        """Log, once per configuration, an entry stored before the bounds that they
        make skip runs (installing it today is refused, see _check_fits)."""
        needed = most_runs_within(schedule, RUNS_REACH_MS)
        if needed <= limit or (entry.queue, entry.name, entry.config_hash) in self._over_bound:
            return
        self._over_bound.add((entry.queue, entry.name, entry.config_hash))
        log.warning(
            "cron: %s/%s keeps at most %d runs of its %d-byte payload, fewer than the %d its "
            "schedule needs installed at once: some runs will be skipped. Install it again "
            "with a smaller payload or a longer period.",
            entry.queue,
            entry.name,
            limit,
            len(entry.payload),
            needed,
        )

    def _view(self, entry: CronEntry, after: int, count: int) -> CronView:
        """The entry with its next `count` runs after `after`: none while it is paused."""
        schedule = Schedule.from_json(json.loads(entry.schedule))
        runs = [] if entry.paused_at is not None else next_runs(schedule, after, count=count)
        return CronView(entry, schedule, runs)


def _check_fits(schedule: Schedule, payload: bytes) -> None:
    """Refuse an entry that cannot keep, within its bound, the runs its schedule needs
    installed at once (RUNS_REACH_MS): some of its runs would never be installed."""
    needed = most_runs_within(schedule, RUNS_REACH_MS)
    allowed = runs_allowed(len(payload))
    if needed <= allowed:
        return
    largest = MAX_RUN_BYTES_PER_ENTRY // needed
    raise CronEntryTooLarge(
        f"this schedule runs up to {needed} times within {RUNS_REACH_MS // 1000} s, and that "
        f"many runs must be installed at once; with a {len(payload)}-byte payload an entry "
        f"keeps at most {allowed} (at most {MAX_RUNS_PER_ENTRY} runs and "
        f"{MAX_RUN_BYTES_PER_ENTRY} bytes of payload): send at most {largest} bytes, "
        f"or run less often"
    )
