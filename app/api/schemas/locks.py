"""The bodies of polling's and leases' routes: polls (with an acknowledgement first),
acknowledgements, extensions and releases, whole locks or some of their keys."""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated

from pydantic import BaseModel, BeforeValidator, Field, Strict

from app.api.schemas.fields import Number, RequestBody, Timestamp, whole_number
from app.api.schemas.messages import MessageResponse
from app.domain.formats import KEY_PATTERN
from app.domain.limits import MAX_LEASE_SECONDS, MAX_LOCK_KEYS, MAX_POLL
from app.domain.messages import MAX_DELAY_SECONDS, MAX_WAIT_SECONDS

PollMax = Annotated[int, Strict(), Field(ge=1, le=MAX_POLL), BeforeValidator(whole_number)]
LockKeys = Annotated[
    list[Annotated[str, Field(pattern=KEY_PATTERN)]],
    Field(
        min_length=1,
        max_length=MAX_LOCK_KEYS,
        description=f"1-{MAX_LOCK_KEYS} keys of the lock's messages; a key repeated counts "
        "once, where it first appears",
    ),
]


class PollAcknowledgement(RequestBody):
    """What a poll acknowledges before it claims: every message an earlier poll's lock still
    holds, or some of them by key."""

    lock_id: str = Field(description="The `lock_id` of an earlier poll of this queue")
    keys: LockKeys | None = Field(
        None,
        description="Acknowledge only these of the lock's messages, as `POST …/locks/{lock_id}"
        "/ack` does; without it, every message the lock still holds, as `DELETE …/locks/"
        "{lock_id}` does",
    )


class PollRequest(RequestBody):
    max: PollMax = Field(
        1,
        description="At most this many messages; fewer when more would take the answer past "
        "the server's HOURGLASS_MAX_POLL_BYTES (the first due message always comes)",
    )
    wait: Number = Field(
        0, ge=0, le=MAX_WAIT_SECONDS, description="Seconds to wait for a message when none is due"
    )
    lease: Number | None = Field(
        None,
        ge=1,
        le=MAX_LEASE_SECONDS,
        description="Seconds before unacknowledged messages come back",
    )
    ack: PollAcknowledgement | None = Field(
        None,
        description="Acknowledge these first, in a transaction of their own that commits "
        "whether or not the poll then finds anything (before a `wait` begins); the answer "
        "then says what was acknowledged. A lock that holds nothing (any more), or of "
        "another queue, acknowledges nothing, and the poll goes on",
    )


class ExtendRequest(RequestBody):
    lease: Number = Field(ge=1, le=MAX_LEASE_SECONDS, description="New lease, in seconds from now")


class AcknowledgeRequest(RequestBody):
    keys: LockKeys


class AcknowledgeResponse(BaseModel):
    acknowledged: list[str] = Field(description="Deleted: the lock held them; in request order")
    missing: list[str] = Field(
        description="Not held by the lock (acknowledged, updated since, or their lease ran "
        "out and another poll took them, or never): nothing of them changed"
    )


class ReleaseRequest(RequestBody):
    delay: Number | None = Field(
        None,
        ge=0,
        le=MAX_DELAY_SECONDS,
        description="Seconds from now until the messages are due again; without it, the "
        "queue's `retry` delay of each message (due at once when the queue has none). "
        "An explicit delay, 0 too, always wins",
    )
    keys: LockKeys | None = Field(
        None,
        description="Release only these of the lock's messages (answer `200`); without it, "
        "all it holds (answer `204`)",
    )


class ReleaseResponse(BaseModel):
    released: list[str] = Field(description="Given back: the lock held them; in request order")
    missing: list[str] = Field(
        description="Not held by the lock (see acknowledge): nothing of them changed"
    )


class DeliveryKind(StrEnum):
    FIRST = "first"
    REDELIVERY = "redelivery"


class DeliveredMessage(MessageResponse):
    delivery: DeliveryKind
    lease_expires_at: Timestamp


class PollResponse(BaseModel):
    lock_id: str | None = Field(description="Acknowledge, extend or release the messages with it")
    messages: list[DeliveredMessage]
    acknowledged: list[str] = Field(
        default_factory=list,
        description="Only when the poll carried `ack`: the keys it deleted (in request order "
        "for `keys`; in no particular order for a whole lock)",
    )
    missing: list[str] = Field(
        default_factory=list,
        description="Only when the poll carried `ack`: of its `keys`, those the lock did not "
        "hold (see acknowledging by key), nothing of them changed; always empty for a whole lock",
    )


class ExtendResponse(BaseModel):
    lease_expires_at: Timestamp
