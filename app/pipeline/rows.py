"""One input row checked by the HTTP API's rules for an offer (docs/api/index.md), in plain Python.

The import runs this on Spark's executors, so a row the service would refuse is
refused here for the same reason, by the same code the API uses: the name and
key patterns and the RFC 3339 parsing of app/domain/formats.py, and the payload
encoding of app/domain/payloads.py.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from functools import lru_cache

from app.domain.errors import InvalidPayload, PayloadTooDeep, PayloadTooLarge
from app.domain.formats import (
    KEY_PATTERN,
    QUEUE_PATTERN,
    RFC3339_PATTERN,
    parse_timestamp,
    seconds_to_ms,
)
from app.domain.messages import (
    DEFAULT_PRIORITY,
    MAX_DELAY_SECONDS,
    MIN_TTL_SECONDS,
    expiry_after,
)
from app.domain.payloads import encode_payload

# An input row's fields, in the order check_row takes them (all text).
FIELDS = ("queue", "key", "payload", "scheduled_at", "priority", "group", "expires_at", "ttl")
_QUEUE = re.compile(QUEUE_PATTERN)
# One decoder for every row (json.loads with an option builds one per call).
_DECODER = json.JSONDecoder(parse_constant=lambda name: _not_json(name))
_KEY = re.compile(KEY_PATTERN)
_RFC3339 = re.compile(RFC3339_PATTERN)
# A priority as the API takes it, 0-9, a JSON integer or a whole number written with a
# fraction (5.0, as a float column reads as text); as text, so "5" from a CSV too.
_PRIORITY = re.compile(r"[0-9](?:\.0+)?")
# A ttl as the API takes it: a JSON number (a numeric column reads as one: 5, 5.0, 1.0E-4).
_NUMBER = re.compile(r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?")


class Reason:
    """Why a row was rejected: the `reason` column of the rejects dataset."""

    MISSING_QUEUE = "missing_queue"
    INVALID_QUEUE = "invalid_queue"
    MISSING_KEY = "missing_key"
    INVALID_KEY = "invalid_key"
    MISSING_PAYLOAD = "missing_payload"
    INVALID_PAYLOAD = "invalid_payload"
    PAYLOAD_TOO_LARGE = "payload_too_large"
    PAYLOAD_TOO_DEEP = "payload_too_deep"  # arrays and objects nested past the API's limit
    INVALID_SCHEDULED_AT = "invalid_scheduled_at"
    INVALID_PRIORITY = "invalid_priority"  # not a whole number 0-9
    INVALID_GROUP = "invalid_group"  # over 200 characters, or a control character
    # An expires_at that is no RFC 3339 time with a zone; a ttl that is no number of
    # seconds from 0.001 to 100 years; or both given (docs/decisions/0028-expiry.md).
    INVALID_EXPIRY = "invalid_expiry"
    DUPLICATE_KEY = "duplicate_key"
    UNKNOWN_FIELD = "unknown_field"  # a JSON line with a field no column takes


@dataclass(frozen=True, slots=True)
class Checked:
    """A row as it would be stored, or the reason it cannot be."""

    reason: str | None
    payload: bytes | None = None
    scheduled_at: int | None = None  # epoch ms
    priority: int = DEFAULT_PRIORITY
    group: str | None = None
    expires_at: int | None = None  # epoch ms; None: never


def check_row(
    queue: str | None,
    key: str | None,
    payload: str | None,
    scheduled_at: str | None,
    priority: str | None = None,
    group: str | None = None,
    expires_at: str | None = None,
    ttl: str | None = None,
    *,
    now_ms: int,
    max_payload_bytes: int,
) -> Checked:
    """`payload` is JSON text; `scheduled_at` RFC 3339 with a zone, or None for now;
    `priority` a whole number 0-9 as text, or None for the default; `group` a key's
    text (docs/guide/flow-control.md), or None (or empty, as an empty CSV field) for none;
    the expiry `expires_at`, RFC 3339 with a zone, or `ttl`, seconds after the row is
    due as a number's text, not both, or neither (None or empty) for none."""
    if not queue:
        return Checked(Reason.MISSING_QUEUE)
    if not _valid_queue(queue):
        return Checked(Reason.INVALID_QUEUE)
    if key is None or key == "":
        return Checked(Reason.MISSING_KEY)
    if not _KEY.fullmatch(key):
        return Checked(Reason.INVALID_KEY)
    if payload is None:
        return Checked(Reason.MISSING_PAYLOAD)
    try:
        stored = encode_payload(_DECODER.decode(payload), max_payload_bytes)
    except (ValueError, InvalidPayload):
        return Checked(Reason.INVALID_PAYLOAD)
    except PayloadTooLarge:
        return Checked(Reason.PAYLOAD_TOO_LARGE)
    # The parser recurses: text nested deeper than its stack allows (~990 levels) is
    # deeper than the limit, which encode_payload checks for everything shallower.
    except (RecursionError, PayloadTooDeep):
        return Checked(Reason.PAYLOAD_TOO_DEEP)
    due = now_ms
    if scheduled_at is not None and scheduled_at != "":
        parsed = _due(scheduled_at)
        if parsed is None:
            return Checked(Reason.INVALID_SCHEDULED_AT)
        due = parsed
    if priority is None or priority == "":
        ranked = DEFAULT_PRIORITY
    elif _PRIORITY.fullmatch(priority):
        ranked = int(priority[0])
    else:
        return Checked(Reason.INVALID_PRIORITY)
    if group == "":
        group = None
    elif group is not None and not _valid_group(group):
        return Checked(Reason.INVALID_GROUP)
    expires: int | None = None
    if expires_at is not None and expires_at != "":
        if ttl is not None and ttl != "":
            return Checked(Reason.INVALID_EXPIRY)  # as the API: one or the other
        expires = _due(expires_at)
        if expires is None:
            return Checked(Reason.INVALID_EXPIRY)
    elif ttl is not None and ttl != "":
        ttl_ms = _ttl_ms(ttl)
        if ttl_ms is None:
            return Checked(Reason.INVALID_EXPIRY)
        expires = expiry_after(due, ttl_ms)
    return Checked(None, stored, due, ranked, group, expires)


# Bulk data repeats its queues and times: check each distinct one once per worker.
@lru_cache(maxsize=1024)
def _valid_queue(queue: str) -> bool:
    return _QUEUE.fullmatch(queue) is not None


# Groups repeat too: many messages to one group is what a group is for.
@lru_cache(maxsize=65536)
def _valid_group(group: str) -> bool:
    return _KEY.fullmatch(group) is not None


@lru_cache(maxsize=65536)
def _due(scheduled_at: str) -> int | None:
    """Epoch ms of an RFC 3339 time with a zone, or None if it is not one."""
    if not _RFC3339.fullmatch(scheduled_at):
        return None
    try:
        return parse_timestamp(scheduled_at)
    except (ValueError, OverflowError):
        return None


@lru_cache(maxsize=65536)
def _ttl_ms(ttl: str) -> int | None:
    """A ttl's ms, as the API takes `ttl` (a JSON number of seconds, 0.001 to 100 years),
    or None if it is not one."""
    if not _NUMBER.fullmatch(ttl):
        return None
    seconds = float(ttl)  # inf past a double's range: beyond the bound
    if not MIN_TTL_SECONDS <= seconds <= MAX_DELAY_SECONDS:
        return None
    return seconds_to_ms(seconds)


def _not_json(name: str) -> None:
    raise ValueError(f"{name} is not JSON")


def json_text(value: object) -> str:
    """JSON text of a value read from a JSON line (the payload, whatever its type)."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
