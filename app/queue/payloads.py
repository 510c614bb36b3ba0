"""How payloads are stored: compact UTF-8 JSON of the value as sent."""

from __future__ import annotations

import json
from typing import Any

from app.queue.errors import InvalidPayload, PayloadTooLarge

_encoder = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), allow_nan=False)


def encode_payload(value: Any, max_bytes: int) -> bytes:
    """The stored form of a JSON value; PayloadTooLarge past `max_bytes`."""
    try:
        encoded = _encoder.encode(value).encode()
    except ValueError as error:  # NaN or Infinity: not JSON, though Python's parser takes them
        raise InvalidPayload(f"payload is not valid JSON: {error}") from error
    if len(encoded) > max_bytes:
        raise PayloadTooLarge(f"payload is {len(encoded)} bytes encoded; the limit is {max_bytes}")
    return encoded


def decode_payload(stored: bytes) -> Any:
    """The JSON value a stored payload holds."""
    return json.loads(stored)
