"""Hand-rendered JSON for the answers whose size grows with load: polls and batches.

A poll of 100 messages through the pydantic models decodes every stored
payload, validates it as a JsonValue, and encodes it again; a batch answer
builds a model per item. Stored payloads are already compact UTF-8 JSON
(app/queue/payloads.py), so a poll answer embeds their bytes as they are, and
a large one is streamed from them without copying them into one body.
tests/unit/test_rendering.py checks that both decode to exactly what
PollResponse and BatchResponse would give.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import AsyncIterator, Sequence

from fastapi import Response
from fastapi.responses import StreamingResponse

from app.api.schemas import DeliveryKind, format_timestamp
from app.queue.models import Lease, Outcome, State

_string = json.JSONEncoder(ensure_ascii=False).encode
_compact = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode
_EMPTY = b'{"lock_id":null,"messages":[]}'
# A poll's answer larger than this is streamed, in writes of about this size, each
# payload sent as it was read: built whole it was one more copy of everything
# (with the pieces it is built from, 4-5x the answer at the peak), and the socket's
# buffer a further one for a slow reader. Flow control holds back each next write.
_WRITE_BYTES = 64 * 1024


def poll_response(lease: Lease | None) -> Response:
    """The `200` answer of a poll, as application/json; streamed when larger than a write."""
    pieces = _poll_pieces(lease)
    length = sum(map(len, pieces))
    if length <= _WRITE_BYTES:
        return Response(b"".join(pieces), media_type="application/json")
    return StreamingResponse(
        _writes(pieces), media_type="application/json", headers={"content-length": str(length)}
    )


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
    """The whole answer of a poll."""
    return b"".join(_poll_pieces(lease))


def _poll_pieces(lease: Lease | None) -> list[bytes]:
    """A poll's answer in pieces: each stored payload as it is, between the bytes around it."""
    if lease is None:
        return [_EMPTY]
    expires_at = _string(format_timestamp(lease.expires_at))
    # Every message of one poll shares its queue, state and lease end.
    state = f',"state":"{State.LEASED.value}"'
    tail = f'","lease_expires_at":{expires_at}}}'
    pieces = [f'{{"lock_id":{_string(lease.lock_id)},"messages":['.encode()]
    separator = ""
    for delivery in lease.deliveries:
        message = delivery.message
        kind = DeliveryKind.REDELIVERY if delivery.redelivery else DeliveryKind.FIRST
        queue, key = _string(message.queue), _string(message.key)
        head = f'{separator}{{"queue":{queue},"key":{key},"payload":'
        origin = message.dead_lettered_from
        times = (
            f',"scheduled_at":"{format_timestamp(message.scheduled_at)}"'
            f',"scheduled_at_initially":"{format_timestamp(message.scheduled_at_initially)}"'
            f',"created_at":"{format_timestamp(message.created_at)}"{state}'
            f',"deliveries":{message.deliveries}'
            f',"dead_lettered_from":{"null" if origin is None else _string(origin)}'
            f',"delivery":"{kind.value}{tail}'
        )
        pieces += (head.encode(), message.payload, times.encode())
        separator = ","
    pieces.append(b"]}")
    return pieces


async def _writes(pieces: list[bytes]) -> AsyncIterator[bytes]:
    """`pieces` as writes of about _WRITE_BYTES: small ones joined, a large payload as it is."""
    pending: list[bytes] = []
    pending_bytes = 0
    for piece in pieces:
        if len(piece) >= _WRITE_BYTES:
            if pending:
                yield b"".join(pending)
                pending, pending_bytes = [], 0
            yield piece
            continue
        pending.append(piece)
        pending_bytes += len(piece)
        if pending_bytes >= _WRITE_BYTES:
            yield b"".join(pending)
            pending, pending_bytes = [], 0
    if pending:
        yield b"".join(pending)
