"""The bodies of queues' routes: stats, purges, settings (retry delays, push, rate and
the rest) and redrives."""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, BeforeValidator, Field, Strict

from app.api.schemas.fields import Number, RequestBody, Timestamp, whole_number
from app.domain.formats import QUEUE_PATTERN
from app.domain.limits import (
    MAX_DELIVERIES_LIMIT,
    MAX_LEASE_SECONDS,
    MAX_RATE_LIMIT,
    MAX_RATE_PERIOD_SECONDS,
    MAX_RETRY_MULTIPLIER,
)
from app.domain.messages import (
    DEFAULT_GROUP_CONCURRENCY,
    MAX_DELAY_SECONDS,
    MAX_GROUP_CONCURRENCY,
    MAX_LEASED_LIMIT,
)
from app.domain.push import (
    DEFAULT_PUSH_CONCURRENCY,
    DEFAULT_PUSH_TIMEOUT_SECONDS,
    MAX_PUSH_CONCURRENCY,
    MAX_PUSH_TIMEOUT_SECONDS,
    PUSH_URL_MAX,
    PUSH_URL_PATTERN,
)

MaxDeliveries = Annotated[
    int, Strict(), Field(ge=1, le=MAX_DELIVERIES_LIMIT), BeforeValidator(whole_number)
]
RedriveMax = Annotated[int, Strict(), Field(ge=1), BeforeValidator(whole_number)]
GroupConcurrency = Annotated[
    int, Strict(), Field(ge=1, le=MAX_GROUP_CONCURRENCY), BeforeValidator(whole_number)
]
MaxLeased = Annotated[
    int, Strict(), Field(ge=1, le=MAX_LEASED_LIMIT), BeforeValidator(whole_number)
]
RateLimit = Annotated[int, Strict(), Field(ge=1, le=MAX_RATE_LIMIT), BeforeValidator(whole_number)]
Concurrency = Annotated[
    int, Strict(), Field(ge=1, le=MAX_PUSH_CONCURRENCY), BeforeValidator(whole_number)
]


class QueueStatsResponse(BaseModel):
    queue: str
    messages: int
    ready: int = Field(description="Due and not leased (an ended lease counts as ready)")
    scheduled: int = Field(description="Not yet due")
    leased: int
    oldest_ready_at: Timestamp | None
    next_scheduled_at: Timestamp | None
    paused: bool = Field(
        description="Paused: the queue delivers nothing (polls answer empty, push sends "
        "nothing) until resumed, and takes everything else"
    )
    paused_at: Timestamp | None = Field(description="Since when it has been paused")


class QueueListResponse(BaseModel):
    queues: list[QueueStatsResponse]


class PurgeResponse(BaseModel):
    deleted: int


class RetrySettings(RequestBody):
    """A queue's retry delays: a message released without a `delay` after its n-th delivery
    is due again after `min(max_delay, initial_delay × multiplier^(n−1))`, spread uniformly
    over ±`jitter` of that (so a capped delay may reach `max_delay × (1 + jitter)`)."""

    initial_delay: Number = Field(
        ge=0.001, le=MAX_DELAY_SECONDS, description="Seconds after the first delivery"
    )
    max_delay: Number = Field(
        ge=0.001,
        le=MAX_DELAY_SECONDS,
        description="Seconds at most, before jitter (under `initial_delay`: every delay is "
        "`max_delay`)",
    )
    multiplier: Number = Field(
        2.0, ge=1, le=MAX_RETRY_MULTIPLIER, description="Growth per delivery (1: constant)"
    )
    jitter: Number = Field(
        0.0, ge=0, le=1, description="Spread, as a fraction of the delay either way (0: none)"
    )


class RetryResponse(BaseModel):
    initial_delay: float = Field(description="Seconds")
    max_delay: float = Field(description="Seconds")
    multiplier: float
    jitter: float


class PushSettings(RequestBody):
    """Where a queue pushes its due messages: each one is POSTed to `url` (docs/guide/push.md)."""

    url: str = Field(
        max_length=PUSH_URL_MAX,
        pattern=PUSH_URL_PATTERN,
        description="http:// or https://, without user or password, matching a prefix of the "
        "service's HOURGLASS_PUSH_ALLOWED (unset: no queue may push)",
    )
    timeout: Number = Field(
        DEFAULT_PUSH_TIMEOUT_SECONDS,
        gt=0,
        le=MAX_PUSH_TIMEOUT_SECONDS,
        description="Seconds the whole request may take (connecting, sending, the answer); "
        "a message is leased for this plus 5 s while it is pushed",
    )
    concurrency: Concurrency = Field(
        DEFAULT_PUSH_CONCURRENCY, description="Requests in flight at once, per replica"
    )


class PushResponse(BaseModel):
    url: str
    timeout: float = Field(description="Seconds")
    concurrency: int


class RateSettings(RequestBody):
    """A queue's rate: in any window of `period` seconds, at most `limit` deliveries begin,
    across every replica and process (docs/guide/flow-control.md)."""

    limit: RateLimit = Field(description="Deliveries begun per window, at most")
    period: Number = Field(
        ge=0.001,
        le=MAX_RATE_PERIOD_SECONDS,
        description="The window's length in seconds (whole milliseconds)",
    )


class RateResponse(BaseModel):
    limit: int
    period: float = Field(description="Seconds")


class QueueSettingsRequest(RequestBody):
    """Body of `PUT …/settings`: a field left out (or null) goes back to its default."""

    default_lease: Number | None = Field(
        None,
        ge=1,
        le=MAX_LEASE_SECONDS,
        description="Seconds a poll leases messages for when it names no lease "
        "(default: the service's HOURGLASS_DEFAULT_LEASE)",
    )
    max_deliveries: MaxDeliveries | None = Field(
        None,
        description="Deliveries a message gets; due again after the last, it moves to the "
        "dead-letter queue (default: no limit)",
    )
    dead_letter_queue: str | None = Field(
        None, pattern=QUEUE_PATTERN, description="Where dead letters go (default: `{queue}.dead`)"
    )
    retry: RetrySettings | None = Field(
        None,
        description="Delays of messages released without a `delay` (default: none, due at once)",
    )
    push: PushSettings | None = Field(
        None,
        description="Push the queue's due messages to an HTTP endpoint (default: none; "
        "pollers may take them too)",
    )
    group_concurrency: GroupConcurrency | None = Field(
        None,
        description=f"How many messages of one group are leased at once (default: "
        f"{DEFAULT_GROUP_CONCURRENCY}); a lower one takes effect as leases end",
    )
    max_leased: MaxLeased | None = Field(
        None,
        description="Messages of the queue leased at once, at most, across every replica and "
        "process: a poll takes what is left (possibly nothing), a long poll waits for room "
        "(default: no bound)",
    )
    rate: RateSettings | None = Field(
        None,
        description="Deliveries begun per window, at most, across every replica and process "
        "(default: no bound)",
    )


class QueueSettingsResponse(BaseModel):
    """A queue's settings as they apply, defaults filled in."""

    queue: str
    default_lease: float = Field(description="Seconds")
    max_deliveries: int | None = Field(description="null: no limit")
    dead_letter_queue: str
    retry: RetryResponse | None = Field(description="null: released messages are due at once")
    push: PushResponse | None = Field(description="null: the queue does not push")
    group_concurrency: int = Field(description="Messages of one group leased at once, at most")
    max_leased: int | None = Field(description="null: no bound on messages leased at once")
    rate: RateResponse | None = Field(description="null: no bound on deliveries per window")
    updated_at: Timestamp | None = Field(description="null: the queue has never been configured")


class RedriveRequest(RequestBody):
    to: str | None = Field(
        None,
        pattern=QUEUE_PATTERN,
        description="Move every message here (default: each back to the queue it came from); "
        "this queue itself moves nothing (every key is taken there: skipped)",
    )
    max: RedriveMax | None = Field(None, description="At most this many (default: all)")


class RedriveResponse(BaseModel):
    moved: int = Field(description="Messages moved, each due now with its deliveries at 0")
    skipped: int = Field(
        description="Messages left: their key is taken in the target queue, "
        "or they came from no queue and no `to` was given"
    )
    forbidden: int = Field(
        description="Messages left because the queue each would go back to is outside the "
        "token's queues (always 0 for a token limited to no queues); the others still move"
    )
