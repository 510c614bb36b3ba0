"""The row checks of app/pipeline/rows.py over a whole Arrow batch at once.

The import's executors check each batch here: names, keys, times, priorities, groups
and expiries by pyarrow.compute (the API's own patterns, from app/domain/formats.py,
run by Arrow's RE2, and RFC 3339 times turned into epoch ms with integer arithmetic);
payloads in Python, one JSON decode and compact encode per row
(app/domain/payloads.py's encode_payload, as the API stores them), the only
part with no vectorised equivalent that stores the same bytes. Each row gets the
reason check_row would give it, and a valid row the same stored form;
tests/unit/test_pipeline_batches.py holds the two to each other.

The per-row check measured 2.7 µs of the import's ~8 µs of Python per row, and the
tuples and objects around it most of the rest (docs/decisions/0020-bulk-import-path.md).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from app.domain.errors import InvalidPayload, PayloadTooDeep, PayloadTooLarge
from app.domain.formats import (
    EARLIEST_MS,
    KEY_PATTERN,
    LATEST_MS,
    QUEUE_PATTERN,
    RFC3339_PATTERN,
)
from app.domain.messages import DEFAULT_PRIORITY, MAX_DELAY_SECONDS, MIN_TTL_SECONDS
from app.domain.payloads import MAX_PAYLOAD_DEPTH, encode_payload
from app.pipeline.rows import _DECODER, _NUMBER, _PRIORITY, FIELDS, Reason

# The parts of a time RFC3339_PATTERN took already: its fields at fixed places.
_TIME_PARTS = (
    r"^(?P<year>[0-9]{4})-(?P<month>[0-9]{2})-(?P<day>[0-9]{2})[Tt]"
    r"(?P<hour>[0-9]{2}):(?P<minute>[0-9]{2}):(?P<second>[0-9]{2})"
    r"(?P<fraction>(?:\.[0-9]+)?)(?P<zone>[Zz]|[+-][0-9]{2}:[0-9]{2})$"
)
# Arrays and objects open with these: a payload with no more of them than the
# nesting limit cannot nest deeper, so its depth need not be measured.
_OPENERS = r"[\[{]"
_DAY_MS = 86_400_000
# JSON texts whose stored form is their own bytes, told apart without Python: compact
# (no whitespace outside strings), one level at most (a scalar, or an array or object
# of scalars), strings without escapes or control characters, integers written as
# Python writes them (no -0, and short of any digit limit), the literals. The
# encoder writes each of these back as it is, with one exception: an object that
# repeats a key, which Python reduces to the last one (checked per row, below).
_STRING = r'"[^"\\\x00-\x1f]*"'
_SCALAR = rf"(?:{_STRING}|0|-?[1-9][0-9]{{0,15}}|true|false|null)"
_AS_STORED = (
    rf"^(?:{_SCALAR}|\[(?:{_SCALAR}(?:,{_SCALAR})*)?\]"
    rf"|\{{(?:{_STRING}:{_SCALAR}(?:,{_STRING}:{_SCALAR})*)?\}})$"
)


@dataclass(frozen=True)
class Verdicts:
    """A batch's rows checked: per row a reason (None: valid) and, for a valid row, its
    stored payload, due time (epoch ms), priority, group (null: none) and expiry (epoch
    ms; null: none)."""

    reasons: pa.Array  # string
    payloads: list[bytes | None]
    due: pa.Array  # int64
    priorities: pa.Array  # int64
    groups: pa.Array  # string
    expiries: pa.Array  # int64


def check_batch(batch: pa.RecordBatch, *, now_ms: int, max_payload_bytes: int) -> Verdicts:
    """The verdicts of a normalized batch (transforms.NORMALIZED's columns): a row with
    an `input_error` keeps it as its reason; the others are checked as check_row does,
    in its order, so a row with several faults gets the reason of the first."""
    queue, key, payload, scheduled_at, priority, group, expires_at, ttl, input_error = (
        batch.column(name) for name in (*FIELDS, "input_error")
    )
    reasons = input_error.cast(pa.string())

    def reject(where: pa.Array, reason: str) -> None:
        nonlocal reasons
        where = pc.and_(pc.is_null(reasons), pc.fill_null(where, False))
        reasons = pc.if_else(where, pa.scalar(reason), reasons)

    reject(_blank(queue), Reason.MISSING_QUEUE)
    reject(pc.invert(pc.match_substring_regex(queue, QUEUE_PATTERN)), Reason.INVALID_QUEUE)
    reject(_blank(key), Reason.MISSING_KEY)
    reject(pc.invert(pc.match_substring_regex(key, KEY_PATTERN)), Reason.INVALID_KEY)
    reject(pc.is_null(payload), Reason.MISSING_PAYLOAD)

    payloads: list[bytes | None] = [None] * len(batch)
    payload_reasons: list[str | None] = [None] * len(batch)
    unjudged = pc.is_null(reasons)
    as_stored = pc.and_(
        unjudged, pc.fill_null(pc.match_substring_regex(payload, _AS_STORED), False)
    )
    encoded_bytes = pc.binary_length(payload)
    rows = pc.indices_nonzero(unjudged).to_pylist()
    texts = pc.filter(payload, unjudged).to_pylist()
    for row, text, stored, size, deep in zip(
        rows,
        texts,
        pc.filter(as_stored, unjudged).to_pylist(),
        pc.filter(encoded_bytes, unjudged).to_pylist(),
        pc.filter(
            pc.greater(pc.count_substring_regex(payload, _OPENERS), MAX_PAYLOAD_DEPTH), unjudged
        ).to_pylist(),
        strict=True,
    ):
        # Each key of such an object ends in `":`, so an object with as many entries as
        # the text has `":` repeats no key (a string value may start with a colon: then
        # it takes the long way, to the same result).
        if stored and (text[0] != "{" or len(_DECODER.raw_decode(text)[0]) == text.count('":')):
            if size > max_payload_bytes:
                payload_reasons[row] = Reason.PAYLOAD_TOO_LARGE
            else:
                payloads[row] = text.encode()
            continue
        try:
            payloads[row] = encode_payload(
                _DECODER.decode(text), max_payload_bytes, nesting_checked=not deep
            )
        except (ValueError, InvalidPayload):
            payload_reasons[row] = Reason.INVALID_PAYLOAD
        except PayloadTooLarge:
            payload_reasons[row] = Reason.PAYLOAD_TOO_LARGE
        # As check_row: text nested deeper than the parser's stack is deeper than the limit.
        except (RecursionError, PayloadTooDeep):
            payload_reasons[row] = Reason.PAYLOAD_TOO_DEEP
    reasons = pc.coalesce(reasons, pa.array(payload_reasons, pa.string()))

    due = _distinct_epoch_ms(scheduled_at)
    given = pc.invert(_blank(scheduled_at))
    reject(pc.and_(given, pc.is_null(due)), Reason.INVALID_SCHEDULED_AT)
    due = pc.if_else(given, due, pa.scalar(now_ms, pa.int64()))

    priority_given = pc.invert(_blank(priority))
    whole = pc.fill_null(pc.match_substring_regex(priority, f"^{_PRIORITY.pattern}$"), False)
    reject(pc.and_(priority_given, pc.invert(whole)), Reason.INVALID_PRIORITY)
    # Its first digit; the rest is a fraction of zeros.
    digit = pc.utf8_slice_codeunits(pc.if_else(whole, priority, pa.scalar("0")), 0, 1)
    priorities = pc.if_else(
        priority_given, pc.cast(digit, pa.int64()), pa.scalar(DEFAULT_PRIORITY, pa.int64())
    )

    # An empty group is none, as an empty CSV field is null; any other is a key's text.
    group_given = pc.invert(_blank(group))
    reject(
        pc.and_(group_given, pc.invert(pc.match_substring_regex(group, KEY_PATTERN))),
        Reason.INVALID_GROUP,
    )
    groups = pc.if_else(group_given, group, pa.scalar(None, pa.string()))

    # An expiry at a time, or a ttl after the row is due (at the latest LATEST_MS, as
    # app/domain/messages.py's expiry_after); as the API, not both.
    at_given = pc.invert(_blank(expires_at))
    ttl_given = pc.invert(_blank(ttl))
    at = _distinct_epoch_ms(expires_at)
    ttl_ms = _ttl_ms(ttl)
    reject(pc.and_(at_given, ttl_given), Reason.INVALID_EXPIRY)
    reject(pc.and_(at_given, pc.is_null(at)), Reason.INVALID_EXPIRY)
    reject(pc.and_(ttl_given, pc.is_null(ttl_ms)), Reason.INVALID_EXPIRY)
    after = pc.min_element_wise(
        pc.add(due, ttl_ms), pa.scalar(LATEST_MS, pa.int64()), skip_nulls=False
    )
    expiries = pc.if_else(at_given, at, pc.if_else(ttl_given, after, pa.scalar(None, pa.int64())))
    return Verdicts(reasons, payloads, due, priorities, groups, expiries)


def _blank(values: pa.Array) -> pa.Array:
    """Null or empty text."""
    return pc.fill_null(pc.equal(values, ""), True)


def _distinct_epoch_ms(times: pa.Array) -> pa.Array:
    """_epoch_ms of each time; bulk data repeats its times, so each distinct one is
    worked out once."""
    distinct = pc.dictionary_encode(times)
    return pc.take(_epoch_ms(distinct.dictionary), distinct.indices)


def _ttl_ms(texts: pa.Array) -> pa.Array:
    """Each ttl's ms (app/pipeline/rows.py's _ttl_ms, over a column): a JSON number of
    seconds within the API's bounds, rounded to the millisecond half to even as Python's
    round is; null for anything else."""
    number = pc.fill_null(pc.match_substring_regex(texts, f"^{_NUMBER.pattern}$"), False)
    # Arrow reads a number's text to the same double as Python's float (both round
    # correctly), inf past a double's range too.
    seconds = pc.cast(pc.if_else(number, texts, pa.scalar(None, pa.string())), pa.float64())
    within = pc.and_(
        pc.greater_equal(seconds, MIN_TTL_SECONDS), pc.less_equal(seconds, MAX_DELAY_SECONDS)
    )
    values = seconds.to_numpy(zero_copy_only=False)
    valid = pc.fill_null(within, False).to_numpy(zero_copy_only=False)
    milliseconds = np.rint(np.where(valid, values, 0) * 1000).astype(np.int64)
    return pa.array(milliseconds, pa.int64(), mask=~valid)


def _epoch_ms(times: pa.Array) -> pa.Array:
    """Epoch ms of each RFC 3339 time with a zone (app/domain/formats.py's parse_timestamp,
    over a column); null for anything else, or a day its month does not have."""
    matched = pc.match_substring_regex(times, RFC3339_PATTERN)
    parts = pc.extract_regex(pc.if_else(matched, times, pa.scalar(None, pa.string())), _TIME_PARTS)
    if len(times) == 0:
        return pa.array([], pa.int64())

    def number(name: str) -> np.ndarray:
        return _digits(pc.struct_field(parts, name), 0, None)

    year, month, day = number("year"), number("month"), number("day")
    # Milliseconds: the first three digits of the fraction (datetime keeps six, and
    # epoch ms are floored from those: the same three).
    fraction = pc.struct_field(parts, "fraction")
    milliseconds = pc.utf8_slice_codeunits(
        pc.binary_join_element_wise(pc.utf8_slice_codeunits(fraction, 1), "000", ""), 0, 3
    )
    millisecond = _digits(milliseconds, 0, None)
    # The zone as an offset: Z is +00:00.
    zone = pc.struct_field(parts, "zone")
    offset = pc.if_else(
        pc.fill_null(pc.match_substring_regex(zone, "^[Zz]$"), True), pa.scalar("+00:00"), zone
    )
    behind = pc.starts_with(offset, "-").to_numpy(zero_copy_only=False)
    offset_minutes = _digits(offset, 1, 3) * 60 + _digits(offset, 4, 6)
    offset_minutes = np.where(behind, -offset_minutes, offset_minutes)

    leap = ((year % 4 == 0) & (year % 100 != 0)) | (year % 400 == 0)
    month_days = np.array([31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31])[
        np.clip(month, 1, 12) - 1
    ] + ((month == 2) & leap)
    # Days since 1970-01-01 of a proleptic Gregorian date (years from 1, so no
    # negative division).
    shifted = year - (month <= 2)
    era = shifted // 400
    year_of_era = shifted - era * 400
    day_of_year = (153 * np.where(month > 2, month - 3, month + 9) + 2) // 5 + day - 1
    day_of_era = year_of_era * 365 + year_of_era // 4 - year_of_era // 100 + day_of_year
    days = era * 146_097 + day_of_era - 719_468
    epoch_ms = (
        days * _DAY_MS
        + number("hour") * 3_600_000
        + number("minute") * 60_000
        + number("second") * 1000
        + millisecond
        - offset_minutes * 60_000
    )
    valid = (
        pc.fill_null(pc.is_valid(parts), False).to_numpy(zero_copy_only=False)
        & (day <= month_days)
        & (epoch_ms >= EARLIEST_MS)
        & (epoch_ms <= LATEST_MS)
    )
    return pa.array(epoch_ms, pa.int64(), mask=~valid)


def _digits(texts: pa.Array, start: int, stop: int | None) -> np.ndarray:
    """The number written by each text's code units `start` to `stop`; 0 where there are
    none (a row that is no time: masked out by the caller)."""
    part = pc.utf8_slice_codeunits(texts, start, stop)
    part = pc.if_else(pc.equal(part, ""), pa.scalar("0"), part)
    return pc.fill_null(pc.cast(part, pa.int64()), 0).to_numpy(zero_copy_only=False)


# A valid row: queue, key, stored payload, due, priority, group, expiry, then the row's
# own fields (FIELDS: a duplicate goes to the rejects as read).
Valid = tuple[str, str, bytes, int, int, str | None, int | None, tuple]
# What an offer needs of a winner: queue, key, stored payload, due, priority, group, expiry.
Winner = tuple[str, str, bytes, int, int, str | None, int | None]


class KeyGroups:
    """transforms.judge's rule for duplicate keys, batch by batch: of the valid rows of one
    (queue, key), which come together (transforms.co_locate), the one due last wins, then
    the one with the greatest stored payload, then the highest priority, then the greatest
    group (none before any), then the latest expiry (none before any); the others are
    duplicates. A group may go on in the next batch, so the last one is held back until
    the next batch or `finish`."""

    def __init__(self) -> None:
        self._held: Valid | None = None

    def add(self, batch: pa.RecordBatch, verdicts: Verdicts) -> tuple[list[Winner], list[tuple]]:
        """The winners of the groups that ended, and the duplicates' own fields."""
        valid = pc.indices_nonzero(pc.is_null(verdicts.reasons))
        if len(valid) == 0:
            return [], []
        queues = pc.take(batch.column("queue"), valid)
        keys = pc.take(batch.column("key"), valid)
        indices = valid.to_pylist()
        columns = (
            queues.to_pylist(),
            keys.to_pylist(),
            [verdicts.payloads[index] for index in indices],
            pc.take(verdicts.due, valid).to_pylist(),
            pc.take(verdicts.priorities, valid).to_pylist(),
            pc.take(verdicts.groups, valid).to_pylist(),
            pc.take(verdicts.expiries, valid).to_pylist(),
        )
        last = len(indices) - 1
        held = self._held
        repeats = (
            len(indices) > 1
            and pc.any(
                pc.and_(pc.equal(queues[1:], queues[:-1]), pc.equal(keys[1:], keys[:-1]))
            ).as_py()
        )
        if not repeats and (held is None or held[:2] != (columns[0][0], columns[1][0])):
            # Every key once, and none going on from the last batch: all but the
            # last row win now; it may go on in the next batch.
            winners: list[Winner] = [] if held is None else [held[:7]]
            winners.extend(zip(*(column[:last] for column in columns), strict=True))
            self._held = (*(column[last] for column in columns), _fields(batch, indices[last]))
            return winners, []
        winners, duplicates = [], []
        for position, row in enumerate(zip(*columns, strict=True)):
            candidate: Valid = (*row, _fields(batch, indices[position]))
            if held is None or held[:2] != candidate[:2]:
                if held is not None:
                    winners.append(held[:7])
                held = candidate
                continue
            loser = candidate
            if _rank(candidate) > _rank(held):
                loser, held = held, candidate
            duplicates.append(loser[7])
        self._held = held
        return winners, duplicates

    def finish(self) -> list[Winner]:
        """The winner of the last group."""
        held, self._held = self._held, None
        return [] if held is None else [held[:7]]


def _rank(row: Valid) -> tuple[int, bytes, int, str, bool, int]:
    """transforms._rank: due, then stored payload, then priority, then group, then expiry."""
    return row[3], row[2], row[4], row[5] or "", row[6] is not None, row[6] or 0


def _fields(batch: pa.RecordBatch, index: int) -> tuple:
    return tuple(batch.column(name)[index].as_py() for name in FIELDS)
