"""Cron entries: a queue's recurring schedules, their next runs, and what installing one did."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

from hourglass_client.models.times import optional_time, parse_time

InstallOutcome = Literal["created", "changed", "unchanged"]


@dataclass(frozen=True)
class CronEntry:
    """A recurring schedule of a queue (one of `cron`, `every`, `daily`) and its next runs."""

    queue: str
    name: str
    cron: str | None
    every: float | None
    daily: list[str] | None
    timezone: str
    payload: Any
    lookahead: float | None
    config_hash: str
    created_at: datetime
    updated_at: datetime
    next_runs: list[datetime]
    priority: int  # every run's
    group: str | None  # every run's; None: none
    # Seconds after each run is due until it expires; None: its runs never expire.
    ttl: float | None = field(default=None, kw_only=True)
    # Since when the entry has been paused (it installs no runs); None while it runs.
    paused_at: datetime | None = field(default=None, kw_only=True)

    @property
    def paused(self) -> bool:
        return self.paused_at is not None

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> CronEntry:
        return cls(**_cron_fields(data))


def _cron_fields(data: dict[str, Any]) -> dict[str, Any]:
    return {
        "queue": data["queue"],
        "name": data["name"],
        "cron": data.get("cron"),
        "every": data.get("every"),
        "daily": data.get("daily"),
        "timezone": data["timezone"],
        "payload": data["payload"],
        "lookahead": data.get("lookahead"),
        "config_hash": data["config_hash"],
        "created_at": parse_time(data["created_at"]),
        "updated_at": parse_time(data["updated_at"]),
        "next_runs": [parse_time(run) for run in data["next_runs"]],
        "priority": data.get("priority", 0),
        "group": data.get("group"),
        "ttl": data.get("ttl"),
        "paused_at": optional_time(data.get("paused_at")),
    }


@dataclass(frozen=True)
class CronInstallResult(CronEntry):
    """An installed entry, and whether it was `created`, `changed` or `unchanged`."""

    outcome: InstallOutcome

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> CronInstallResult:
        return cls(**_cron_fields(data), outcome=data["outcome"])
