"""Times and durations as the API writes them: aware UTC datetimes, durations in seconds."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

Seconds = float | int | timedelta
"""A duration: seconds as a number, or a timedelta."""


def seconds(duration: Seconds) -> float:
    """A duration as the API's seconds."""
    if isinstance(duration, timedelta):
        return duration.total_seconds()
    return float(duration)


def format_time(moment: datetime) -> str:
    """`moment` as the API writes times: RFC 3339 in UTC with milliseconds.

    A naive datetime is refused: the API needs to know its zone, and guessing local
    time or UTC would move messages by hours without a word.
    """
    if moment.tzinfo is None or moment.utcoffset() is None:
        raise ValueError(f"{moment!r} has no time zone: give it a tzinfo (e.g. datetime.UTC)")
    utc = moment.astimezone(UTC)
    return utc.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def parse_time(text: str) -> datetime:
    """An API time (`2026-11-26T09:00:00.000Z`) as an aware datetime in UTC."""
    return datetime.fromisoformat(text).astimezone(UTC)


def optional_time(text: str | None) -> datetime | None:
    return None if text is None else parse_time(text)
