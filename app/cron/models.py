"""Cron entries as stored: frozen domain objects. Times are epoch ms."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


@dataclass(frozen=True, slots=True)
class CronEntry:
    """One recurring schedule, named within its queue.

    `schedule` is the schedule's JSON (rule and time zone, see Schedule.as_json);
    `payload` the stored form of the payload every run carries.
    """

    queue: str
    name: str
    schedule: str
    payload: bytes
    config_hash: str
    lookahead_ms: int | None
    created_at: int
    updated_at: int


class InstallOutcome(StrEnum):
    CREATED = "created"
    CHANGED = "changed"
    UNCHANGED = "unchanged"


@dataclass(frozen=True, slots=True)
class CronInstall:
    """What installing an entry did; `removed_runs` counts old runs it deleted."""

    outcome: InstallOutcome
    entry: CronEntry
    removed_runs: int
