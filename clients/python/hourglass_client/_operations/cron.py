"""Cron entries: install, list, read, pause, resume and uninstall a queue's recurring schedules."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from hourglass_client._operations.call import (
    Call,
    present,
    queue_path,
    read_json,
    read_nothing,
    segment,
)
from hourglass_client.models.cron import CronEntry, CronInstallResult
from hourglass_client.models.times import Seconds, format_time, seconds


def install_cron(
    queue: str,
    name: str,
    payload: Any,
    *,
    cron: str | None = None,
    every: Seconds | None = None,
    daily: Sequence[str] | None = None,
    timezone: str | None = None,
    lookahead: Seconds | None = None,
    priority: int | None = None,
    group: str | None = None,
    ttl: Seconds | None = None,
) -> Call[CronInstallResult]:
    """Install (or change) a recurring schedule: exactly one of `cron` (a 5-field expression),
    `every` (seconds) and `daily` (`["HH:MM", …]`), read in `timezone` (IANA; default UTC);
    every run at `priority` (0-9; None: 0), in `group` (None: none), expiring `ttl` after
    it is due (None: never)."""
    body = present(
        payload=payload,
        cron=cron,
        every=None if every is None else seconds(every),
        daily=None if daily is None else list(daily),
        timezone=timezone,
        lookahead=None if lookahead is None else seconds(lookahead),
        priority=priority,
        group=group,
        ttl=None if ttl is None else seconds(ttl),
    )
    body["payload"] = payload  # a payload of null is a payload
    return Call(
        "PUT",
        queue_path(queue, "cron", segment(name)),
        read_json(CronInstallResult.from_json),
        json=body,
        repeatable=True,
    )


def cron_entries(queue: str) -> Call[list[CronEntry]]:
    """The queue's cron entries, each with its next runs."""
    return Call(
        "GET",
        queue_path(queue, "cron"),
        read_json(lambda data: [CronEntry.from_json(item) for item in data["entries"]]),
        repeatable=True,
    )


def get_cron(
    queue: str, name: str, *, after: datetime | None = None, count: int | None = None
) -> Call[CronEntry]:
    """One cron entry, with its next `count` runs (default 5) after `after` (default now)."""
    params = present(after=None if after is None else format_time(after), count=count)
    return Call(
        "GET",
        queue_path(queue, "cron", segment(name)),
        read_json(CronEntry.from_json),
        params=params,
        repeatable=True,
    )


def pause_cron(queue: str, name: str) -> Call[CronEntry]:
    """Pause a cron entry: it installs no runs, and its runs not yet delivered go;
    `NotFound` when there is none."""
    return _cron_switch(queue, name, "pause")


def resume_cron(queue: str, name: str) -> Call[CronEntry]:
    """Resume a cron entry: it installs its runs from now on, none of those it missed."""
    return _cron_switch(queue, name, "resume")


def _cron_switch(queue: str, name: str, action: str) -> Call[CronEntry]:
    # Not repeated, as a queue's pause and resume: one sent again after the opposite made
    # meanwhile would undo it (and a pause delete the runs that resume installed).
    path = queue_path(queue, "cron", segment(name), action)
    return Call("POST", path, read_json(CronEntry.from_json))


def uninstall_cron(queue: str, name: str) -> Call[None]:
    """Delete a cron entry and its runs not yet delivered; `NotFound` when there is none."""
    return Call("DELETE", queue_path(queue, "cron", segment(name)), read_nothing)
