"""Hand-rendered JSON: the answers whose size grows with load (polls and batches), every
answer that carries a stored payload, and the hot routes' small answers (offers,
acknowledgements and releases by key, extensions: decision 22, bytes built once, as their
models would render them).

A poll of 100 messages through the pydantic models decodes every stored
payload, validates it as a JsonValue, and encodes it again; a batch answer
builds a model per item. Stored payloads are already compact UTF-8 JSON
(app/domain/payloads.py), so every answer that shows one embeds its bytes as
they are, and a large poll answer is streamed from them without copying them
into one body. That also means any payload the database holds can be read: pydantic
renders no more than 253 levels and Python's json reads about 990, while rows
stored before the nesting limit (or by an import before it) may be deeper.
tests/unit/test_rendering.py checks that each decodes to exactly what its
model would give.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import AsyncIterator, Sequence

from fastapi import Response
from fastapi.responses import StreamingResponse
from pydantic import BaseModel

from app.api.schemas.locks import DeliveryKind
from app.domain.formats import format_timestamp
from app.domain.messages import KeyedOutcome, Lease, Message, OfferResult, Outcome, State
from app.domain.rendering import delivery_tail, json_string, message_pieces, object_pieces

_compact = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode
_EMPTY = b'{"lock_id":null,"messages":[]}'
# A poll's answer larger than this is streamed, in writes of about this size, each
# payload sent as it was read: built whole it was one more copy of everything
# (with the pieces it is built from, 4-5x the answer at the peak), and the socket's
# buffer a further one for a slow reader. Flow control holds back each next write.
_WRITE_BYTES = 64 * 1024


def poll_response(lease: Lease | None, acknowledged: KeyedOutcome | None = None) -> Response:
    """The `200` answer of a poll, as application/json; streamed when larger than a write.
    With `acknowledged` (the poll carried `ack`), its two lists follow the messages."""
    pieces = _poll_pieces(lease)
    if acknowledged is not None:
        # Both end in "}": the last piece is the answer's closing brace.
        pieces[-1] = pieces[-1][:-1] + _acknowledged_members(acknowledged)
    return _answer(pieces)


def _acknowledged_members(outcome: KeyedOutcome) -> bytes:
    """`,"acknowledged":[…],"missing":[…]}`: what a poll's `ack` did, closing its answer."""
    return (
        f',"acknowledged":{_compact(outcome.done)},"missing":{_compact(outcome.missing)}}}'
    ).encode()


def _answer(pieces: list[bytes]) -> Response:
    """`pieces` as one application/json answer, streamed when larger than a write."""
    length = sum(map(len, pieces))
    if length <= _WRITE_BYTES:
        return json_response(b"".join(pieces))
    return StreamingResponse(
        _writes(pieces), media_type="application/json", headers={"content-length": str(length)}
    )


def message_response(message: Message, state: State) -> Response:
    """The `200` answer of `GET …/messages/{key}`."""
    return json_response(b"".join(message_pieces(message, state, "")))


def message_list_response(messages: Sequence[tuple[Message, State]], next: str | None) -> Response:
    """The `200` answer of a list of messages; streamed when larger than a write."""
    pieces = [b'{"messages":[']
    for number, (message, state) in enumerate(messages):
        if number:
            pieces.append(b",")
        pieces += message_pieces(message, state, "")
    pieces.append(f'],"next":{"null" if next is None else json_string(next)}}}'.encode())
    return _answer(pieces)


def with_payload(answer: BaseModel, payload: bytes) -> bytes:
    """`answer` as JSON in its model's field order, the stored `payload` bytes standing
    as its `payload` field (whatever value the model holds there is left out)."""
    names = list(type(answer).model_fields)
    at = names.index("payload")
    before, after = (
        answer.model_dump_json(include=set(side))[1:-1] for side in (names[:at], names[at + 1 :])
    )
    return b"".join(object_pieces(before, payload, after))


def offer_response(result: OfferResult, status_code: int = 200) -> Response:
    """The answer of a single offer or update, as OfferResponse renders it."""
    return json_response(
        (
            f'{{"queue":{json_string(result.queue)},"key":{json_string(result.key)},'
            f'"outcome":"{result.outcome.value}",'
            f'"scheduled_at":"{format_timestamp(result.scheduled_at)}"}}'
        ).encode(),
        status_code,
    )


def keyed_response(done: str, outcome: KeyedOutcome) -> Response:
    """The `200` answer of an acknowledgement (`done`: "acknowledged") or a release
    ("released") by key: `{done: [keys], "missing": [keys]}`."""
    return json_response(
        f'{{"{done}":{_compact(outcome.done)},"missing":{_compact(outcome.missing)}}}'.encode()
    )


def extend_response(lease_expires_at: int) -> Response:
    """The `200` answer of an extension."""
    return json_response(f'{{"lease_expires_at":"{format_timestamp(lease_expires_at)}"}}'.encode())


def json_response(body: bytes, status_code: int = 200) -> Response:
    """An answer already rendered as JSON."""
    return Response(body, status_code=status_code, media_type="application/json")


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
    return json_response(_compact(body).encode())


def _poll_pieces(lease: Lease | None) -> list[bytes]:
    """A poll's answer in pieces: each stored payload as it is, between the bytes around it."""
    if lease is None:
        return [_EMPTY]
    # Every message of one poll shares its lease end.
    tails = {
        kind: delivery_tail(kind is DeliveryKind.REDELIVERY, lease.expires_at)
        for kind in DeliveryKind
    }
    pieces = [f'{{"lock_id":{json_string(lease.lock_id)},"messages":['.encode()]
    for number, delivery in enumerate(lease.deliveries):
        if number:
            pieces.append(b",")
        kind = DeliveryKind.REDELIVERY if delivery.redelivery else DeliveryKind.FIRST
        pieces += message_pieces(delivery.message, State.LEASED, tails[kind])
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
