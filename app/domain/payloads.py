"""How payloads are stored: compact UTF-8 JSON of the value as sent, checked once for every
way in (offers, batches, updates, cron entries, the pipeline's import)."""

from __future__ import annotations

import json
from typing import Any

from app.domain.errors import InvalidPayload, PayloadTooDeep, PayloadTooLarge

# How deep arrays and objects may nest in a payload (`[[1]]` is 2). Far under every
# parser on a payload's way: Python's json (the service's and Python clients') stops
# near its recursion limit, ~990 levels less the caller's stack; pydantic validates
# 254 and renders 253, and its JSON parser reads 200. An answer wraps a payload in
# at most 3 more levels (a poll, a cron list), so the deepest answer, 103, also fits
# serde_json's default of 128.
MAX_PAYLOAD_DEPTH = 100
_CONTAINERS = (dict, list, tuple)  # what the encoder writes as objects and arrays

_encoder = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), allow_nan=False)


def encode_payload(value: Any, max_bytes: int, *, nesting_checked: bool = False) -> bytes:
    """The stored form of a JSON value: InvalidPayload if it is none, PayloadTooDeep past
    MAX_PAYLOAD_DEPTH levels, PayloadTooLarge past `max_bytes` encoded.

    `nesting_checked`: the caller knows the value nests no deeper than the limit (the
    import counts a text's brackets), so it is not measured again."""
    # Measured before encoding: the encoder recurses, and may give up on a value the
    # request's parser (higher up the stack) could still build.
    if not nesting_checked and nesting_depth(value, MAX_PAYLOAD_DEPTH) > MAX_PAYLOAD_DEPTH:
        raise PayloadTooDeep(
            f"payload nests arrays and objects more than {MAX_PAYLOAD_DEPTH} levels deep"
        )
    try:
        encoded = _encoder.encode(value).encode()
    # NaN or Infinity (Python's parser takes them), a lone surrogate, or no JSON type at all.
    except (ValueError, TypeError) as error:
        raise InvalidPayload(f"payload is not valid JSON: {error}") from error
    if len(encoded) > max_bytes:
        raise PayloadTooLarge(f"payload is {len(encoded)} bytes encoded; the limit is {max_bytes}")
    return encoded


def nesting_depth(value: Any, limit: int) -> int:
    """How deep arrays and objects nest in `value` (`1` is 0, `[]` 1, `{"a": [1]}` 2),
    counted a level at a time, without recursion, and no further than `limit` + 1."""
    depth = 0
    level = [value] if isinstance(value, _CONTAINERS) else []
    while level and depth <= limit:
        depth += 1
        level = [
            child
            for container in level
            for child in (container.values() if isinstance(container, dict) else container)
            if isinstance(child, _CONTAINERS)
        ]
    return depth
