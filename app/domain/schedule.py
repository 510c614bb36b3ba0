"""Cron arithmetic, pure: when a schedule runs, and the keys and hash of its runs.

Times are epoch milliseconds (UTC instants); a schedule's wall-clock rules are
read in its IANA time zone. Daylight saving follows cron's convention, as
cronsim implements it: a local time that does not exist that day (spring
forward) runs once, at the first instant after the gap; a local time that
happens twice (fall back) runs once, at its first occurrence. A cron expression
whose hour field is a wildcard or a step runs in both occurrences of a repeated
hour, since each is a different hour of the day's real time.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, time, timedelta
from functools import lru_cache
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError, available_timezones

from cronsim import CronSim, CronSimError

from app.domain.cron import HASH_LENGTH
from app.domain.formats import from_epoch_ms, to_epoch_ms

DAILY_TIME_PATTERN = r"^([01][0-9]|2[0-3]):[0-5][0-9]$"
_DAILY_TIME = re.compile(DAILY_TIME_PATTERN)


def _cron_expression_pattern() -> str:
    """The 5-field expressions cronsim reads, field by field, as a JSON Schema pattern.

    Its grammar (cronsim's Field.parse): a field is terms apart by `,`; a term is `*`, a
    value or a range `a-b` of values, each maybe stepped (`/n`, n >= 1); values are
    numbers in the field's range (any leading zeros) or, for months and weekdays, names
    in any case; a day of the month may be `L` or `LW`, a weekday `nL` or `value#n`
    (n 1-5). What no pattern can say is left to cronsim: a range forward (`5-1` is
    refused) and a day some month has (`0 0 30 2 *`). Fields are apart by spaces or tabs.
    """

    def any_case(word: str) -> str:
        return "".join(f"[{letter.upper()}{letter.lower()}]" for letter in word)

    def names(words: str) -> str:
        return "".join(f"|{any_case(word)}" for word in words.split())

    def field(number: str, words: str = "", bases: str = "", terms: str = "") -> str:
        value = f"(?:{number}{names(words)})"
        base = f"(?:\\*|{value}(?:-{value})?{bases})"
        term = f"(?:{base}(?:/0*[1-9][0-9]*)?{terms})"
        return f"{term}(?:,{term})*"

    months = "JAN FEB MAR APR MAY JUN JUL AUG SEP OCT NOV DEC"
    weekdays = "SUN MON TUE WED THU FRI SAT"
    weekday = f"(?:0*[0-7]{names(weekdays)})"
    fields = (
        field("0*[1-5]?[0-9]"),  # minute
        field("0*(?:1?[0-9]|2[0-3])"),  # hour
        field("0*(?:[1-9]|[12][0-9]|3[01])", bases=f"|{any_case('LW')}|{any_case('L')}"),
        field("0*(?:[1-9]|1[0-2])", months),
        field("0*[0-7]", weekdays, terms=f"|0*[0-7]{any_case('L')}|{weekday}#0*[1-5]"),
    )
    return "^[ \\t]*" + "[ \\t]+".join(fields) + "[ \\t]*$"


# A cron expression as the schema states it (and the service checks first).
CRON_EXPRESSION_PATTERN = _cron_expression_pattern()
# Runs are printable instants (years 0001-9999) whose local day exists in every zone:
# a daily schedule looks a day back, and a zone is up to 14 hours off UTC. So runs fall
# after the first of these and at the latest on the second.
EARLIEST_AFTER_MS = to_epoch_ms(datetime(1, 1, 3, tzinfo=UTC))
LATEST_RUN_MS = to_epoch_ms(datetime(9999, 12, 30, tzinfo=UTC))
# Cron expressions and daily times run on whole minutes, at least a minute apart.
_MINUTE_MS = 60_000
# Shortest and longest `every`: a second (cron's own grain is a minute), a century.
MIN_EVERY_SECONDS = 1
MAX_EVERY_SECONDS = 100 * 366 * 24 * 3600


class InvalidSchedule(ValueError):
    """A schedule that cannot run: bad expression, unknown zone, bad period or time."""


@dataclass(frozen=True, slots=True)
class Schedule:
    """Exactly one of `cron` (5 fields), `every` (seconds, > 0) and `daily` ("HH:MM" times)."""

    cron: str | None = None
    every: float | None = None
    daily: tuple[str, ...] | None = None
    timezone: str = "UTC"

    def __post_init__(self) -> None:
        given = [kind for kind in ("cron", "every", "daily") if getattr(self, kind) is not None]
        if len(given) != 1:
            raise InvalidSchedule("give exactly one of cron, every and daily")
        if self.timezone not in _zone_names():  # not "localtime": replicas' hosts differ
            raise InvalidSchedule(f"unknown time zone {self.timezone!r}: use an IANA name")
        try:
            zone = ZoneInfo(self.timezone)
        except (ZoneInfoNotFoundError, ValueError) as error:
            raise InvalidSchedule(f"unknown time zone {self.timezone!r}") from error
        if self.cron is not None:
            if len(self.cron.split()) != 5:
                raise InvalidSchedule(f"a cron expression has 5 fields, not {self.cron!r}")
            try:
                CronSim(self.cron, datetime.now(zone))
            except CronSimError as error:
                raise InvalidSchedule(f"invalid cron expression {self.cron!r}: {error}") from error
        if self.every is not None and not MIN_EVERY_SECONDS <= self.every <= MAX_EVERY_SECONDS:
            raise InvalidSchedule(
                f"every is {MIN_EVERY_SECONDS} to {MAX_EVERY_SECONDS} seconds, not {self.every!r}"
            )
        if self.daily is not None:
            if not self.daily:
                raise InvalidSchedule("daily needs at least one time")
            for entry in self.daily:
                if not isinstance(entry, str) or not _DAILY_TIME.fullmatch(entry):
                    raise InvalidSchedule(f"daily times are HH:MM (00:00-23:59), not {entry!r}")

    @classmethod
    def from_json(cls, stored: dict[str, Any]) -> Schedule:
        """The schedule `as_json` gave."""
        daily = stored.get("daily")
        return cls(
            cron=stored.get("cron"),
            every=stored.get("every"),
            daily=tuple(daily) if daily is not None else None,
            timezone=stored.get("timezone", "UTC"),
        )

    @property
    def zone(self) -> ZoneInfo:
        return ZoneInfo(self.timezone)

    def as_json(self) -> dict[str, Any]:
        """The schedule as it is stored and hashed."""
        if self.cron is not None:
            rule: dict[str, Any] = {"cron": self.cron}
        elif self.every is not None:
            rule = {"every": self.every}
        else:
            rule = {"daily": sorted(set(self.daily or ()))}
        return {**rule, "timezone": self.timezone}


@lru_cache(maxsize=1)
def _zone_names() -> frozenset[str]:
    # Not the host-dependent entries of the zone database's directory.
    return (frozenset(available_timezones()) | {"UTC"}) - {"localtime", "posixrules", "Factory"}


def next_runs(
    schedule: Schedule, after: int, until: int | None = None, count: int | None = None
) -> list[int]:
    """The instants (epoch ms) the schedule runs strictly after `after`, in order.

    Stops at `until` (inclusive) or after `count` runs, whichever comes first;
    one of them must be given. Runs fall after EARLIEST_AFTER_MS (0001-01-03 UTC):
    from an earlier `after`, the first is the first after that. No run falls after
    LATEST_RUN_MS (9999-12-30 UTC): after that, and from any later `after`, there
    are none.
    """
    if until is None and count is None:
        raise ValueError("give until or count")
    # Any printable `after` has its runs, as the schema promises: the first days of
    # year 1 have none (as the last of year 9999), rather than no answer.
    after = max(after, EARLIEST_AFTER_MS)
    runs: list[int] = []
    last = after
    for run in _runs_after(schedule, after):
        if run <= last:
            # cronsim can step back into the first copy of a repeated hour (fall
            # back): that instant has passed; installing it again would deliver
            # the run again on every pass.
            continue
        if run > LATEST_RUN_MS:
            break
        if (until is not None and run > until) or (count is not None and len(runs) >= count):
            break
        runs.append(run)
        last = run
    return runs


def _runs_after(schedule: Schedule, after: int) -> Iterator[int]:
    try:
        if schedule.every is not None:
            yield from _every(round(schedule.every * 1000), after)
        elif schedule.cron is not None:
            start = from_epoch_ms(after).astimezone(schedule.zone)
            for moment in CronSim(schedule.cron, start):
                yield to_epoch_ms(moment)
        else:
            yield from _daily(tuple(schedule.daily or ()), schedule.zone, after)
    except OverflowError:
        # The search for the next run went past year 9999, where datetime ends: cronsim
        # steps a month or a year at a time (`0 0 1 1 *` after 9999-01-01 looks for
        # 10000-01-01), and a daily schedule converts whole local days. No run is left.
        return


def _every(period_ms: int, after: int) -> Iterator[int]:
    """Multiples of the period since the epoch: a 1-hour period runs on the hour (UTC)."""
    run = (after // period_ms + 1) * period_ms
    while True:
        yield run
        run += period_ms


def _daily(times: tuple[str, ...], zone: ZoneInfo, after: int) -> Iterator[int]:
    wall_times = sorted({time(int(entry[:2]), int(entry[3:])) for entry in times})
    day = from_epoch_ms(after).astimezone(zone).date() - timedelta(days=1)
    last = after
    while True:
        for wall in wall_times:
            run = _local_instant(datetime.combine(day, wall), zone)
            if run > last:  # two times in one gap land on one instant: run it once
                last = run
                yield run
        day += timedelta(days=1)


def _local_instant(wall: datetime, zone: ZoneInfo) -> int:
    """The instant a naive local wall time means in `zone`.

    A repeated wall time means its first occurrence (fold=0). A wall time in a
    gap means the first instant after the gap: the first later minute that exists.
    """
    candidate = wall
    for _ in range(48 * 60):  # a whole skipped day (Pacific/Apia, 2011-12-30) included
        aware = candidate.replace(tzinfo=zone, fold=0)
        if aware.astimezone(UTC).astimezone(zone).replace(tzinfo=None) == candidate:
            return to_epoch_ms(aware)
        candidate += timedelta(minutes=1)
    raise AssertionError(f"no valid local time within two days after {wall} in {zone}")


def most_runs_within(schedule: Schedule, span_ms: int) -> int:
    """The most runs the schedule can have in any span of `span_ms`: an `every` period
    fits `span / period` times (rounded up), a cron expression or a daily list runs on
    whole minutes, at most once a minute."""
    grain = round(schedule.every * 1000) if schedule.every is not None else _MINUTE_MS
    return -(-span_ms // grain)


def config_hash(
    schedule: Schedule,
    payload: bytes,
    priority: int = 0,
    group: str | None = None,
    ttl_ms: int | None = None,
) -> str:
    """What identifies an entry's configuration: its schedule, zone, payload, priority,
    group and ttl (ms).

    Priority 0, no group and no ttl add nothing, so an entry installed before priorities,
    groups or expiry existed keeps its hash, and the keys of the runs it installed."""
    canonical = json.dumps(schedule.as_json(), sort_keys=True, separators=(",", ":")).encode()
    ranked = f"\npriority={priority}".encode() if priority else b""
    grouped = b"\ngroup=" + json.dumps(group).encode() if group is not None else b""
    expiring = f"\nttl_ms={ttl_ms}".encode() if ttl_ms is not None else b""
    return hashlib.sha256(canonical + b"\n" + payload + ranked + grouped + expiring).hexdigest()[
        :HASH_LENGTH
    ]
