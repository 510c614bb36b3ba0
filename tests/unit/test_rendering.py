"""The hand-rendered answers decode to exactly what their models give."""

from __future__ import annotations

import asyncio
import json

import pytest
from fastapi.responses import StreamingResponse
from pydantic import BaseModel, JsonValue

from app.api.rendering import (
    batch_response,
    extend_response,
    keyed_response,
    message_list_response,
    message_response,
    offer_response,
    poll_response,
    with_payload,
)
from app.api.schemas.cron import CronEntryResponse
from app.api.schemas.locks import (
    AcknowledgeResponse,
    DeliveredMessage,
    DeliveryKind,
    ExtendResponse,
    PollResponse,
    ReleaseResponse,
)
from app.api.schemas.messages import (
    BatchResponse,
    BatchResult,
    MessageResponse,
    OfferResponse,
)
from app.api.schemas.messages import (
    Trace as TraceModel,
)
from app.domain.messages import (
    Delivery,
    KeyedOutcome,
    Lease,
    Message,
    OfferResult,
    Outcome,
    State,
)
from app.domain.pages import KeyPosition, encode_cursor
from app.domain.payloads import encode_payload
from app.domain.trace import MAX_TRACEPARENT, MAX_TRACESTATE, Trace, trace_of
from app.storage.claims import message_bytes
from app.storage.lists import PAGE_ENVELOPE_BYTES

PAYLOADS = [
    None,
    0,
    -1.5e300,
    "",
    'Zürich \u2603 \U0001f600 "quoted" back\\slash \n new line \u2028',
    [1, [2, [3]], {"deep": {"er": [None, True, False]}}],
    {"text": "x" * 500, "unicode": "日本語", "nested": {"a": [], "b": {}}},
]
KEYS = ["plain", "with/slashes/and spaces", "ünïcødé-\u2603", 'quote"and\\backslash', "k" * 200]


TRACES = [
    None,
    Trace("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"),
    Trace("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00", 'a=1,k=say "hi" \\o/'),
]


def _lease(redelivery: bool) -> Lease:
    deliveries = tuple(
        Delivery(
            message=Message(
                queue="q.name-1",
                key=key,
                payload=encode_payload(payload, 1 << 20),
                scheduled_at=1_795_683_600_000 + index,
                scheduled_at_initially=1_795_683_000_123,
                created_at=-62_135_596_800_000,  # 0001-01-01T00:00:00.000Z
                locked=True,
                deliveries=index + 1,
                dead_lettered_from='q."from"' if index % 2 else None,
                priority=index % 10,
                group=None if index % 3 else f'g"{index}"',
                expires_at=None if index % 2 else 1_795_683_600_000 + 7 * index,
                expired=index % 4 == 1,
                trace=TRACES[index % len(TRACES)],
            ),
            redelivery=redelivery and index % 2 == 0,
        )
        for index, (key, payload) in enumerate(zip(KEYS * 2, PAYLOADS * 2, strict=False))
    )
    return Lease(
        lock_id="6f1c2d3e-4a5b-4c6d-8e7f-0123456789ab",
        expires_at=253_402_300_799_999,
        deliveries=deliveries,
    )


def _fields(message: Message, state: State) -> dict:
    """A message's fields as MessageResponse takes them."""
    return {
        "queue": message.queue,
        "key": message.key,
        "payload": json.loads(message.payload),
        "scheduled_at": message.scheduled_at,
        "scheduled_at_initially": message.scheduled_at_initially,
        "created_at": message.created_at,
        "state": state,
        "deliveries": message.deliveries,
        "dead_lettered_from": message.dead_lettered_from,
        "priority": message.priority,
        "group": message.group,
        "expires_at": message.expires_at,
        "expired": message.expired,
        "trace": None
        if message.trace is None
        else TraceModel(traceparent=message.trace.traceparent, tracestate=message.trace.tracestate),
    }


def _through_the_model(lease: Lease | None, acknowledged: KeyedOutcome | None = None) -> dict:
    # The two lists of a poll's `ack` are set only in the answer to a poll that carried one.
    fields: dict = {}
    if acknowledged is not None:
        fields = {"acknowledged": list(acknowledged.done), "missing": list(acknowledged.missing)}
    if lease is None:
        return PollResponse(lock_id=None, messages=[], **fields).model_dump(
            mode="json", exclude_unset=True
        )
    return PollResponse(
        lock_id=lease.lock_id,
        messages=[
            DeliveredMessage(
                **_fields(delivery.message, State.LEASED),
                delivery=DeliveryKind.REDELIVERY if delivery.redelivery else DeliveryKind.FIRST,
                lease_expires_at=lease.expires_at,
            )
            for delivery in lease.deliveries
        ],
        **fields,
    ).model_dump(mode="json", exclude_unset=True)


async def _streamed(response: StreamingResponse) -> bytes:
    return b"".join([chunk async for chunk in response.body_iterator])


def _poll_answer(lease: Lease | None, acknowledged: KeyedOutcome | None = None) -> bytes:
    """The body of a poll's answer, streamed or not."""
    response = poll_response(lease, acknowledged)
    if isinstance(response, StreamingResponse):
        return asyncio.run(_streamed(response))
    return response.body


@pytest.mark.parametrize(
    "lease", [None, _lease(False), _lease(True)], ids=["empty", "first", "mixed"]
)
def test_the_rendered_poll_answer_equals_the_models(lease):
    body = _poll_answer(lease)
    assert json.loads(body) == _through_the_model(lease)
    assert list(json.loads(body)) == ["lock_id", "messages"]
    if lease is not None:
        assert list(json.loads(body)["messages"][0]) == list(
            _through_the_model(lease)["messages"][0]
        )


ACKNOWLEDGED = [
    KeyedOutcome((), ()),
    KeyedOutcome(("a", 'quote " and ü', "user/42"), ("missing \\ key",)),
]


@pytest.mark.parametrize("acknowledged", ACKNOWLEDGED, ids=["nothing", "some"])
@pytest.mark.parametrize(
    "lease", [None, _lease(False), _lease(True)], ids=["empty", "first", "mixed"]
)
def test_a_poll_answer_with_its_acknowledgement_equals_the_models(lease, acknowledged):
    body = _poll_answer(lease, acknowledged)
    assert json.loads(body) == _through_the_model(lease, acknowledged)
    assert list(json.loads(body)) == ["lock_id", "messages", "acknowledged", "missing"]


@pytest.mark.parametrize("state", list(State))
def test_a_rendered_message_equals_the_model(state):
    for delivery in _lease(False).deliveries:
        body = message_response(delivery.message, state).body
        model = MessageResponse(**_fields(delivery.message, state)).model_dump(mode="json")
        assert json.loads(body) == model
        assert list(json.loads(body)) == list(model)


@pytest.mark.parametrize("payload", PAYLOADS)
def test_a_model_with_a_stored_payload_equals_the_model(payload):
    fields = {
        "queue": "q",
        "name": 'nightly/"report"',
        "cron": None,
        "every": 60.0,
        "daily": None,
        "timezone": "UTC",
        "priority": 7,
        "group": 'g"1"',
        "ttl": 90.5,
        "lookahead": None,
        "config_hash": "0123456789abcdef",
        "created_at": 0,
        "updated_at": 1,
        "paused": False,
        "paused_at": None,
        "next_runs": [60_000, 120_000],
    }
    rendered = json.loads(
        with_payload(CronEntryResponse(**fields, payload=None), encode_payload(payload, 1 << 20))
    )
    model = CronEntryResponse(**fields, payload=payload).model_dump(mode="json")
    assert rendered == model
    assert list(rendered) == list(model)


class _OnlyPayload(BaseModel):
    payload: JsonValue


class _PayloadFirst(BaseModel):
    payload: JsonValue
    after: int


class _PayloadLast(BaseModel):
    before: str
    payload: JsonValue


@pytest.mark.parametrize(
    "model",
    [
        _OnlyPayload(payload=None),
        _PayloadFirst(payload=None, after=1),
        _PayloadLast(before='"', payload=None),
    ],
    ids=["only", "first", "last"],
)
def test_a_stored_payload_takes_its_place_in_any_model(model):
    rendered = json.loads(with_payload(model, b'{"stored":[1,2]}'))
    expected = model.model_copy(update={"payload": {"stored": [1, 2]}}).model_dump(mode="json")
    assert rendered == expected
    assert list(rendered) == list(expected)


def test_the_rendered_batch_answer_equals_the_models():
    keys = KEYS + ["plain"]
    outcomes = [
        Outcome.CREATED,
        Outcome.UPDATED,
        Outcome.IGNORED,
        Outcome.CREATED,
        Outcome.IGNORED,
        Outcome.IGNORED,
    ]
    rendered = json.loads(batch_response(keys, outcomes).body)
    model = BatchResponse(
        results=[
            BatchResult(key=key, outcome=outcome)
            for key, outcome in zip(keys, outcomes, strict=True)
        ],
        created=2,
        updated=1,
        ignored=3,
    ).model_dump(mode="json")
    assert rendered == model
    assert list(rendered) == list(model)


# Trace context as wide as the service keeps it: a later version's traceparent at its
# bound, a tracestate of backslashes (each escaped in JSON) at its own.
WIDEST_TRACE = trace_of(
    ["cc-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-" + "f" * (MAX_TRACEPARENT - 56)],
    ["a=" + "\\" * 254, "b=" + "\\" * (MAX_TRACESTATE - 256 - 3)],
)
assert WIDEST_TRACE is not None and WIDEST_TRACE.tracestate is not None
assert len(WIDEST_TRACE.traceparent) == MAX_TRACEPARENT
assert len(WIDEST_TRACE.tracestate) == MAX_TRACESTATE
# Wide for its stored length: version 00's traceparent, a tracestate of quotes.
ESCAPED_TRACE = trace_of(
    ["00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"],
    ["a=" + '"' * 254, "b=" + '"' * (MAX_TRACESTATE - 256 - 3)],
)
assert ESCAPED_TRACE is not None and ESCAPED_TRACE.tracestate is not None
assert len(ESCAPED_TRACE.tracestate) == MAX_TRACESTATE


def _widest_lease(payloads: list[bytes], trace: Trace | None = WIDEST_TRACE) -> Lease:
    """Messages whose fields around the payload are as wide as the API allows: the
    longest queue names, key and group, in characters of 4 bytes, deliveries past 2**31,
    and `trace` (the widest trace context unless told)."""
    key = "\U0001f600" * 199 + '"'
    queue = "q" * 100
    return Lease(
        lock_id="6f1c2d3e-4a5b-4c6d-8e7f-0123456789ab",
        expires_at=253_402_300_799_999,
        deliveries=tuple(
            Delivery(
                Message(
                    queue=queue,
                    key=key,
                    payload=payload,
                    scheduled_at=253_402_300_799_999,
                    scheduled_at_initially=-62_135_596_800_000,
                    created_at=-62_135_596_800_000,
                    locked=True,
                    deliveries=2**63 - 1,
                    dead_lettered_from="d" * 100,
                    group=key,
                    expires_at=253_402_300_799_999,
                    expired=True,
                    trace=trace,
                ),
                redelivery=True,
            )
            for payload in payloads
        ),
    )


@pytest.mark.parametrize(
    "trace",
    [
        None,
        WIDEST_TRACE,
        ESCAPED_TRACE,
        Trace("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"),
        Trace("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "a=b"),
    ],
    ids=["untraced", "widest", "escaped", "traceparent", "short tracestate"],
)
@pytest.mark.parametrize("count", [1, 2, 1000])
def test_a_poll_answer_is_within_what_the_store_counts_for_its_messages(count, trace):
    # The store cuts a poll by this count (claims.message_bytes: the payload, an envelope,
    # and the trace context by its stored length) before any payload is read: the
    # rendered answer must never be larger.
    payloads = [b'"' + b"p" * index + b'"' for index in range(count)]
    body = _poll_answer(_widest_lease(payloads, trace))
    stored = None if trace is None else trace.stored()
    assert len(body) <= sum(message_bytes(len(payload), stored) for payload in payloads)


@pytest.mark.parametrize(
    "trace", [None, WIDEST_TRACE, ESCAPED_TRACE], ids=["untraced", "widest", "escaped"]
)
@pytest.mark.parametrize("count", [1, 2, 5, 1000])
def test_a_list_page_is_within_what_the_store_counts_for_it(count, trace):
    # A page is cut as a poll is (claims.message_bytes per message), less what its own
    # envelope and the longest next cursor take (storage/lists.py): never larger.
    payloads = [b'"' + b"p" * index + b'"' for index in range(count)]
    lease = _widest_lease(payloads, trace)
    cursor = encode_cursor(KeyPosition(lease.deliveries[-1].message.key))
    response = message_list_response(
        [(delivery.message, State.LEASED) for delivery in lease.deliveries], cursor
    )
    body = (
        asyncio.run(_streamed(response))
        if isinstance(response, StreamingResponse)
        else response.body
    )
    stored = None if trace is None else trace.stored()
    counted = sum(message_bytes(len(payload), stored) for payload in payloads)
    assert len(body) <= PAGE_ENVELOPE_BYTES + counted


def test_a_large_poll_answer_is_streamed_with_its_length():
    lease = _widest_lease([b'"' + bytes([97 + index]) * 100_000 + b'"' for index in range(5)])
    response = poll_response(lease)
    assert isinstance(response, StreamingResponse)
    body = asyncio.run(_streamed(response))
    assert response.headers["content-length"] == str(len(body))
    assert json.loads(body) == _through_the_model(lease)
    assert not isinstance(poll_response(_lease(False)), StreamingResponse)  # one write
    acknowledged = ACKNOWLEDGED[1]
    streamed = asyncio.run(_streamed(poll_response(lease, acknowledged)))
    assert json.loads(streamed) == _through_the_model(lease, acknowledged)


# The hot routes' answers (app/api/lean.py), byte for byte what their models render.


@pytest.mark.parametrize("key", KEYS)
@pytest.mark.parametrize("outcome", list(Outcome))
def test_a_rendered_offer_is_the_models_bytes(key, outcome):
    result = OfferResult("q.name-1", key, outcome, 1_795_683_600_123)
    model = OfferResponse(
        queue=result.queue, key=key, outcome=outcome, scheduled_at=result.scheduled_at
    )
    response = offer_response(result, 201)
    assert response.status_code == 201 and response.media_type == "application/json"
    assert response.body == model.model_dump_json().encode()


@pytest.mark.parametrize(
    "outcome", [KeyedOutcome((), ()), KeyedOutcome(tuple(KEYS), ()), KeyedOutcome((), ("a",))]
)
def test_rendered_keyed_answers_are_the_models_bytes(outcome):
    done, missing = list(outcome.done), list(outcome.missing)
    acknowledged = AcknowledgeResponse(acknowledged=done, missing=missing)
    released = ReleaseResponse(released=done, missing=missing)
    assert keyed_response("acknowledged", outcome).body == acknowledged.model_dump_json().encode()
    assert keyed_response("released", outcome).body == released.model_dump_json().encode()


def test_a_rendered_extension_is_the_models_bytes():
    for moment in (0, 1_795_683_600_123, 253_402_300_799_999):
        model = ExtendResponse(lease_expires_at=moment)
        assert extend_response(moment).body == model.model_dump_json().encode()
