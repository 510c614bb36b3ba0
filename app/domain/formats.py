"""Names and times as the contract writes them: the patterns of queue names, keys and
cron entry names, and RFC 3339 times in UTC with milliseconds (epoch ms inside)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from functools import lru_cache

QUEUE_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$"
# 1-200 characters, none of Unicode category Cc (U+0000-U+001F, U+007F-U+009F).
KEY_PATTERN = r"^[^\x00-\x1f\x7f-\x9f]{1,200}$"
# The start of a key, or nothing.
KEY_PREFIX_PATTERN = r"^[^\x00-\x1f\x7f-\x9f]{0,200}$"
CRON_NAME_PATTERN = r"^[^\x00-\x1f\x7f-\x9f]{1,100}$"

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MILLISECOND = timedelta(milliseconds=1)
# The instants a time field can print as (years 0001-9999 in UTC).
EARLIEST_MS = (datetime(1, 1, 1, tzinfo=UTC) - _EPOCH) // _MILLISECOND
LATEST_MS = (datetime(9999, 12, 31, 23, 59, 59, 999_000, tzinfo=UTC) - _EPOCH) // _MILLISECOND


# RFC 3339 date-time (seconds required, any fraction, a zone: Z or an offset) of an
# instant that prints back in UTC (years 0001-9999): on 0001-01-01 no offset ahead of
# UTC, on 9999-12-31 none behind it. Written out so that the schema says what the
# service takes (clients and schemathesis read it); whether the day exists in its month
# is the `date-time` format's part, and datetime's. No lookahead: ECMA and Python alike.
def _rfc3339_pattern() -> str:
    any_day = "(?:0[1-9]|[12][0-9]|3[01])"
    any_date = f"(?:0[1-9]|1[0-2])-{any_day}"
    years_between = (  # 0002-9998
        "(?:000[2-9]|00[1-9][0-9]|0[1-9][0-9]{2}|[1-8][0-9]{3}|9[0-8][0-9]{2}|99[0-8][0-9]|999[0-8])"
    )
    time = r"[Tt](?:[01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](?:\.[0-9]+)?"
    offset = "(?:[01][0-9]|2[0-3]):[0-5][0-9]"
    zone = f"(?:[Zz]|[+-]{offset})"
    dates = "|".join(
        (
            f"{years_between}-{any_date}{time}{zone}",
            # Year 0001 after its first day; its first day not ahead of UTC.
            f"0001-(?:01-(?:0[2-9]|[12][0-9]|3[01])|(?:0[2-9]|1[0-2])-{any_day}){time}{zone}",
            f"0001-01-01{time}(?:[Zz]|[+]00:00|-{offset})",
            # Year 9999 before its last day; its last day not behind UTC.
            f"9999-(?:(?:0[1-9]|1[01])-{any_day}|12-(?:0[1-9]|[12][0-9]|30)){time}{zone}",
            f"9999-12-31{time}(?:[Zz]|-00:00|[+]{offset})",
        )
    )
    return f"^(?:{dates})$"


RFC3339_PATTERN = _rfc3339_pattern()


# A poll of many messages prints the same few instants again and again (one lease
# end, a batch's creation time): remember recent ones.
@lru_cache(maxsize=16384)
def format_timestamp(epoch_ms: int) -> str:
    """`2026-11-26T09:00:00.000Z` for an epoch-millisecond instant."""
    moment = from_epoch_ms(epoch_ms)
    return (
        f"{moment.year:04d}-{moment.month:02d}-{moment.day:02d}T"
        f"{moment.hour:02d}:{moment.minute:02d}:{moment.second:02d}."
        f"{moment.microsecond // 1000:03d}Z"
    )


def from_epoch_ms(epoch_ms: int) -> datetime:
    """The UTC datetime of an epoch-millisecond instant."""
    return _EPOCH + timedelta(milliseconds=epoch_ms)


def to_epoch_ms(moment: datetime) -> int:
    """Epoch milliseconds of an aware datetime (sub-millisecond digits dropped)."""
    return (moment - _EPOCH) // _MILLISECOND


def seconds_to_ms(seconds: float) -> int:
    return round(seconds * 1000)


def parse_timestamp(text: str) -> int:
    """Epoch ms of an RFC 3339 time (already matched by RFC3339_PATTERN); ValueError if impossible."""
    epoch_ms = to_epoch_ms(datetime.fromisoformat(text.upper()))
    if not EARLIEST_MS <= epoch_ms <= LATEST_MS:
        raise ValueError("the time must fall between 0001-01-01 and 9999-12-31 in UTC")
    return epoch_ms
