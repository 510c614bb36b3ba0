"""A message as JSON, exactly as the API shows it (docs/api/index.md): the poll's answer
renders its messages with these pieces, and push delivery sends one as a request's body
(docs/guide/push.md).

Stored payloads are already compact UTF-8 JSON (app/domain/payloads.py), so they stand
in the output as they are, never decoded and encoded again (app/api/rendering.py says
why). tests/unit/test_rendering.py checks each decodes to what its model would give.
"""

from __future__ import annotations

import json

from app.domain.formats import format_timestamp
from app.domain.messages import Delivery, Message, State
from app.domain.trace import Trace

json_string = json.JSONEncoder(ensure_ascii=False).encode


def delivery_tail(redelivery: bool, lease_expires_at: int) -> str:
    """The members a delivered message adds after its fields (each after a comma)."""
    kind = "redelivery" if redelivery else "first"
    return f',"delivery":"{kind}","lease_expires_at":"{format_timestamp(lease_expires_at)}"'


def delivered_message(delivery: Delivery, lease_expires_at: int) -> bytes:
    """One message of a poll's answer, as the poll renders it, in one piece."""
    return b"".join(
        message_pieces(
            delivery.message, State.LEASED, delivery_tail(delivery.redelivery, lease_expires_at)
        )
    )


def message_pieces(message: Message, state: State, tail: str) -> tuple[bytes, bytes, bytes]:
    """A message's fields in MessageResponse's order, then `tail` (more members, each
    after a comma, or none), in the pieces of object_pieces."""
    origin = message.dead_lettered_from
    group = message.group
    expires = message.expires_at
    return object_pieces(
        f'"queue":{json_string(message.queue)},"key":{json_string(message.key)}',
        message.payload,
        f'"scheduled_at":"{format_timestamp(message.scheduled_at)}"'
        f',"scheduled_at_initially":"{format_timestamp(message.scheduled_at_initially)}"'
        f',"created_at":"{format_timestamp(message.created_at)}","state":"{state.value}"'
        f',"deliveries":{message.deliveries}'
        f',"dead_lettered_from":{"null" if origin is None else json_string(origin)}'
        f',"priority":{message.priority}'
        f',"group":{"null" if group is None else json_string(group)}'
        f',"expires_at":{"null" if expires is None else _timestamp(expires)}'
        f',"expired":{"true" if message.expired else "false"}'
        f',"trace":{"null" if message.trace is None else _trace(message.trace)}{tail}',
    )


def _trace(trace: Trace) -> str:
    state = trace.tracestate
    return (
        f'{{"traceparent":{json_string(trace.traceparent)}'
        f',"tracestate":{"null" if state is None else json_string(state)}}}'
    )


def _timestamp(at: int) -> str:
    return f'"{format_timestamp(at)}"'


def object_pieces(before: str, payload: bytes, after: str) -> tuple[bytes, bytes, bytes]:
    """A JSON object with a stored payload as its "payload" member, in three pieces: the
    bytes up to the payload, the payload itself, and the bytes after it.

    `before` and `after` are the object's other members as JSON text (`"a":1,"b":2`),
    either possibly empty; the payload is never copied.
    """
    head = "{" + before + ("," if before else "") + '"payload":'
    rest = ("," + after if after else "") + "}"
    return head.encode(), payload, rest.encode()
