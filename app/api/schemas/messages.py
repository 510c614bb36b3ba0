"""The bodies and parameters of messages' routes: offers one at a time or in a batch,
updates, reads and lists."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import Path, Query
from pydantic import BaseModel, ConfigDict, Field, JsonValue, model_validator

from app.api.schemas.fields import (
    ANY_PAYLOAD,
    GROUP_DESCRIPTION,
    PRIORITY_DESCRIPTION,
    RFC3339,
    TIMES,
    MessageGroup,
    Number,
    Payload,
    Priority,
    RequestBody,
    Timestamp,
)
from app.domain.formats import KEY_PATTERN, KEY_PREFIX_PATTERN, parse_timestamp, seconds_to_ms
from app.domain.limits import MAX_BATCH
from app.domain.messages import (
    DEFAULT_PRIORITY,
    MAX_DELAY_SECONDS,
    MIN_TTL_SECONDS,
    IfExists,
    Outcome,
    State,
    When,
)
from app.domain.pages import ListState

MessageKey = Annotated[
    str,
    Path(
        pattern=KEY_PATTERN,
        description="Key: 1-200 characters, no control characters; may contain `/`",
    ),
]
StateFilter = Annotated[ListState, Query(description="`ready`, `scheduled`, `leased`, or `all`")]
KeyPrefix = Annotated[
    str | None,
    Query(
        pattern=KEY_PREFIX_PATTERN,
        description="Only keys that start with this; `%` and `_` are characters like any "
        "other. The list is then in key order (bytes of UTF-8)",
    ),
]
GroupFilter = Annotated[
    str | None,
    Query(pattern=KEY_PATTERN, description="Only the messages of this group"),
]


def _exclusive(number: str, timestamp: str) -> dict[str, Any]:
    """The schema of "not both `number` (seconds) and `timestamp` (RFC 3339) given"."""
    return {
        "not": {
            "required": [number, timestamp],
            "properties": {number: {"type": "number"}, timestamp: {"type": "string"}},
        }
    }


class _Scheduled(RequestBody):
    # `delay` and `scheduled_at` exclude each other, as do `ttl` and `expires_at`: the
    # schema says so, so that a request the schema allows is one the service takes (a
    # null is as if left out).
    model_config = ConfigDict(
        json_schema_extra={
            "allOf": [_exclusive("delay", "scheduled_at"), _exclusive("ttl", "expires_at")]
        }
    )

    payload: Payload = Field(description=ANY_PAYLOAD)
    scheduled_at: RFC3339 | None = Field(
        None,
        description="When the message is due: RFC 3339 with a zone (Z or an offset), "
        f"{TIMES}; may be in the past",
    )
    delay: Number | None = Field(
        None, ge=0, le=MAX_DELAY_SECONDS, description="Seconds from now until the message is due"
    )
    priority: Priority = Field(
        DEFAULT_PRIORITY,
        description=f"{PRIORITY_DESCRIPTION}; a changed priority is an update",
    )
    group: MessageGroup = Field(
        None, description=f"{GROUP_DESCRIPTION}; a changed group is an update"
    )
    expires_at: RFC3339 | None = Field(
        None,
        description="When the message expires: never delivered after it, it then moves to "
        "the queue's dead-letter queue (`expired`: true) or is removed. RFC 3339 with a "
        f"zone, {TIMES}; may be before the due time (it is then never delivered). A "
        "changed expiry is an update; none (or null) is none",
    )
    ttl: Number | None = Field(
        None,
        ge=MIN_TTL_SECONDS,
        le=MAX_DELAY_SECONDS,
        description="Seconds after the message is due until it expires (as `expires_at`; at "
        "the latest 9999-12-31T23:59:59.999Z)",
    )

    @model_validator(mode="after")
    def _one_way_to_say_when(self) -> _Scheduled:
        if self.scheduled_at is not None and self.delay is not None:
            raise ValueError("give either scheduled_at or delay, not both")
        if self.expires_at is not None and self.ttl is not None:
            raise ValueError("give either expires_at or ttl, not both")
        for timestamp in (self.scheduled_at, self.expires_at):
            if timestamp is not None:
                parse_timestamp(timestamp)
        return self

    def when(self) -> When:
        expires_at = None if self.expires_at is None else parse_timestamp(self.expires_at)
        ttl = None if self.ttl is None else seconds_to_ms(self.ttl)
        if self.scheduled_at is not None:
            scheduled_at = parse_timestamp(self.scheduled_at)
            return When(scheduled_at=scheduled_at, expires_at=expires_at, ttl=ttl)
        if self.delay is not None:
            return When(delay=seconds_to_ms(self.delay), expires_at=expires_at, ttl=ttl)
        return When(expires_at=expires_at, ttl=ttl)


class UpdateMessage(_Scheduled):
    """Body of `POST …/messages/{key}` (update only) and `POST …/messages` (new key)."""


class PutMessage(_Scheduled):
    """Body of `PUT …/messages/{key}`."""

    if_exists: IfExists = Field(
        IfExists.UPDATE, description="When the key exists: `update` it, or `ignore` this offer"
    )


class BatchItem(_Scheduled):
    key: str = Field(pattern=KEY_PATTERN)
    if_exists: IfExists | None = Field(None, description="Overrides the batch's `if_exists`")


class BatchRequest(RequestBody):
    messages: list[BatchItem] = Field(min_length=1, max_length=MAX_BATCH)
    if_exists: IfExists = IfExists.UPDATE


class OfferResponse(BaseModel):
    queue: str
    key: str
    outcome: Outcome
    scheduled_at: Timestamp


class Trace(BaseModel):
    """The W3C trace context of the request that offered or last updated a message."""

    traceparent: str = Field(
        description="The offer's `traceparent` header (W3C Trace Context): "
        "version-traceid-parentid-flags"
    )
    tracestate: str | None = Field(
        description="Its `tracestate` headers, joined by `,`; null: none came, or a "
        "malformed one was dropped"
    )


class MessageResponse(BaseModel):
    queue: str
    key: str
    payload: JsonValue
    scheduled_at: Timestamp = Field(
        description="When next due; for a leased message, when its lease ends"
    )
    scheduled_at_initially: Timestamp = Field(description="When the producer asked for it")
    created_at: Timestamp
    state: State
    deliveries: int = Field(
        description="How often it was handed to a worker in this queue, this delivery included"
    )
    dead_lettered_from: str | None = Field(
        description="For a dead letter, the queue it was moved from after its last delivery, "
        "where a redrive takes it back; an update keeps it only when its token may use that queue"
    )
    priority: int = Field(description=PRIORITY_DESCRIPTION)
    group: str | None = Field(description=GROUP_DESCRIPTION)
    expires_at: Timestamp | None = Field(
        description="When it expires (never delivered after it), or null: never"
    )
    expired: bool = Field(
        description="A dead letter moved here because its expiry passed (not its deliveries)"
    )
    trace: Trace | None = Field(
        description="The trace context its offer (or last update) came with, or null: none, "
        "or a malformed `traceparent`"
    )


class MessageListResponse(BaseModel):
    messages: list[MessageResponse]
    next: str | None = Field(
        description="Pass as `cursor` for the following page; null on the last page"
    )


class BatchResult(BaseModel):
    key: str
    outcome: Outcome


class BatchResponse(BaseModel):
    results: list[BatchResult]
    created: int
    updated: int
    ignored: int
