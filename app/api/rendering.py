"""Hand-rendered JSON for the answers whose size grows with load: polls and batches.

A poll of 100 messages through the pydantic models decodes every stored
payload, validates it as a JsonValue, and encodes it again; a batch answer
builds a model per item. Stored payloads are already compact UTF-8 JSON
(app/queue/payloads.py), so a poll answer embeds their bytes as they are.
tests/unit/test_rendering.py checks that both decode to exactly what
PollResponse and BatchResponse would give.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Sequence

from fastapi import Response

from app.api.schemas import DeliveryKind, format_timestamp
from app.queue.models import Lease, Outcome, State

_string = json.JSONEncoder(ensure_ascii=False).encode
_compact = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode
_EMPTY = b'{"lock_id":null,"messages":[]}'


def poll_response(lease: Lease | None) -> Response:
    """The `200` answer of a poll, as application/json."""
    return Response(poll_body(lease), media_type="application/json")


def batch_response(keys: Sequence[str], outcomes: Sequence[Outcome]) -> Response:
    """The `200` answer of a batch offer, results in input order."""
    counts = Counter(outcomes)
    body = {
        "results": [
            {"key": key, "outcome": outcome.value}
            for key, outcome in zip(keys, outcomes, strict=True)
        ],
        "created": counts[Outcome.CREATED],
        "updated": counts[Outcome.UPDATED],
        "ignored": counts[Outcome.IGNORED],
    }
    return Response(_compact(body).encode(), media_type="application/json")


def poll_body(lease: Lease | None) -> bytes:
    if lease is None:
        return _EMPTY
    expires_at = _string(format_timestamp(lease.expires_at))
    # Every message of one poll shares its queue, state and lease end.
    state = f',"state":"{State.LEASED.value}"'
    tail = f'","lease_expires_at":{expires_at}}}'
    messages = []
    for delivery in lease.deliveries:
        message = delivery.message
        kind = DeliveryKind.REDELIVERY if delivery.redelivery else DeliveryKind.FIRST
        head = (
            f'{{"queue":{_string(message.queue)},"key":{_string(message.key)},"payload":'
        ).encode()
        origin = message.dead_lettered_from
        times = (
            f',"scheduled_at":"{format_timestamp(message.scheduled_at)}"'
            f',"scheduled_at_initially":"{format_timestamp(message.scheduled_at_initially)}"'
            f',"created_at":"{format_timestamp(message.created_at)}"{state}'
            f',"deliveries":{message.deliveries}'
            f',"dead_lettered_from":{"null" if origin is None else _string(origin)}'
            f',"delivery":"{kind.value}{tail}'
        ).encode()
        messages.append(head + message.payload + times)
    return (
        f'{{"lock_id":{_string(lease.lock_id)},"messages":['.encode() + b",".join(messages) + b"]}"
    )
