"""The HTTP contract: request and response bodies, names and times, as pydantic models.

Times travel as RFC 3339 strings in UTC with milliseconds; inside they are
epoch milliseconds. Durations are seconds.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Any, Literal

from fastapi import Path, Query
from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    JsonValue,
    PlainSerializer,
    SkipValidation,
    Strict,
    WithJsonSchema,
    field_validator,
    model_validator,
)
from pydantic.json_schema import SkipJsonSchema
from pydantic_core import PydanticCustomError

from app.cron.service import MAX_LOOKAHEAD_MS
from app.domain.cron import InstallOutcome
from app.domain.formats import (
    CRON_NAME_PATTERN,
    KEY_PATTERN,
    KEY_PREFIX_PATTERN,
    QUEUE_PATTERN,
    RFC3339_PATTERN,
    format_timestamp,
    parse_timestamp,
    seconds_to_ms,
)
from app.domain.messages import (
    DEFAULT_GROUP_CONCURRENCY,
    DEFAULT_PRIORITY,
    MAX_DELAY_SECONDS,
    MAX_GROUP_CONCURRENCY,
    MAX_LEASED_LIMIT,
    MAX_PRIORITY,
    MAX_WAIT_SECONDS,
    MIN_TTL_SECONDS,
    Finish,
    IfExists,
    Outcome,
    State,
    When,
)
from app.domain.pages import CURSOR_PATTERN, MAX_PAGE
from app.domain.payloads import MAX_PAYLOAD_DEPTH
from app.domain.push import PUSH_URL_MAX, PUSH_URL_PATTERN
from app.domain.schedule import (
    CRON_EXPRESSION_PATTERN,
    DAILY_TIME_PATTERN,
    MAX_EVERY_SECONDS,
    MIN_EVERY_SECONDS,
    InvalidSchedule,
    Schedule,
)

MAX_LEASE_SECONDS = 12 * 3600
# A cron entry installs its runs at most a day ahead (app/cron/service.py).
MAX_LOOKAHEAD_SECONDS = MAX_LOOKAHEAD_MS // 1000
# Push delivery (SPEC §12): a request's bound, and requests at once per queue and replica.
DEFAULT_PUSH_TIMEOUT_SECONDS = 10.0
MAX_PUSH_TIMEOUT_SECONDS = 300
DEFAULT_PUSH_CONCURRENCY = 4
MAX_PUSH_CONCURRENCY = 100
MAX_BATCH = 1000
MAX_POLL = 1000
# Keys per per-key acknowledgement or release: a poll's most messages.
MAX_LOCK_KEYS = MAX_POLL
# Retry delays grow by at most this factor per delivery.
MAX_RETRY_MULTIPLIER = 100
MAX_DELIVERIES_LIMIT = 1000
# A queue's rate (docs/guide/flow-control.md): deliveries per window, and the window's length.
MAX_RATE_LIMIT = 100_000
MAX_RATE_PERIOD_SECONDS = 24 * 3600

QueueName = Annotated[
    str, Path(pattern=QUEUE_PATTERN, description="Queue name: `[A-Za-z0-9][A-Za-z0-9._-]{0,99}`")
]
CronName = Annotated[
    str,
    Path(
        pattern=CRON_NAME_PATTERN, description="Entry name: 1-100 characters, no control characters"
    ),
]
MessageKey = Annotated[
    str,
    Path(
        pattern=KEY_PATTERN,
        description="Key: 1-200 characters, no control characters; may contain `/`",
    ),
]

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
PageLimit = Annotated[
    int, Query(ge=1, le=MAX_PAGE, description=f"At most this many (1-{MAX_PAGE})")
]
Cursor = Annotated[
    str | None,
    Query(
        # base64url without padding, as app/domain/pages.py writes them. A key of 200
        # characters of 4 UTF-8 bytes each, escaped in JSON and base64: ~1.1 KB.
        pattern=CURSOR_PATTERN,
        max_length=2048,
        description="The `next` of the previous page; omit it for the first page. "
        "One this list did not hand out names no page: `404`",
    ),
]

Timestamp = Annotated[
    int,
    PlainSerializer(format_timestamp, return_type=str),
    WithJsonSchema(
        {"type": "string", "format": "date-time", "example": "2026-11-26T09:00:00.000Z"},
        mode="serialization",
    ),
]
# JSON numbers only: "60" or true must not pass for a number of seconds.
Number = Annotated[float, Strict()]


def _whole_number(value: object) -> object:
    # JSON Schema's `integer` is any number without a fraction, so 69.0 is one (and some
    # JSON encoders write whole floats so): take it as 69. Strings and booleans stay out.
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


# A JSON integer within bounds. The bounds come before the conversion so that the
# schema shows them (pydantic cannot read bounds placed after a validator).
PollMax = Annotated[int, Strict(), Field(ge=1, le=MAX_POLL), BeforeValidator(_whole_number)]
MaxDeliveries = Annotated[
    int, Strict(), Field(ge=1, le=MAX_DELIVERIES_LIMIT), BeforeValidator(_whole_number)
]
RedriveMax = Annotated[int, Strict(), Field(ge=1), BeforeValidator(_whole_number)]
GroupConcurrency = Annotated[
    int, Strict(), Field(ge=1, le=MAX_GROUP_CONCURRENCY), BeforeValidator(_whole_number)
]
MaxLeased = Annotated[
    int, Strict(), Field(ge=1, le=MAX_LEASED_LIMIT), BeforeValidator(_whole_number)
]
RateLimit = Annotated[int, Strict(), Field(ge=1, le=MAX_RATE_LIMIT), BeforeValidator(_whole_number)]
Priority = Annotated[
    int,
    Strict(),
    Field(ge=DEFAULT_PRIORITY, le=MAX_PRIORITY),
    BeforeValidator(_whole_number),
]
PRIORITY_DESCRIPTION = (
    f"{DEFAULT_PRIORITY}-{MAX_PRIORITY}: among the messages due at poll time, higher ones "
    "are delivered first, then earlier due ones"
)
GROUP_DESCRIPTION = (
    "1-200 characters, a key's rules: the message's group, if any. A queue leases at most "
    "its `group_concurrency` (default 1) of one group at once, in due-time order; null or "
    "none is no group"
)
MessageGroup = Annotated[str | None, Field(pattern=KEY_PATTERN)]
# What the time pattern allows, in words.
TIMES = (
    "years 0001-9999, in UTC too: on 0001-01-01 no offset ahead of UTC, on 9999-12-31 none behind"
)
RFC3339 = Annotated[
    str,
    Field(pattern=RFC3339_PATTERN, json_schema_extra={"format": "date-time"}),
]
# A payload in a request, as the body's JSON parser built it. pydantic does not walk it
# again: the domain checks every payload, whichever way it comes in, in one place
# (app/domain/payloads.py: NaN, nesting, size). pydantic's walk would also copy it
# (10-19 ms for 256 KiB, measured) and give up at 255 levels with an error of its own.
Payload = Annotated[JsonValue, SkipValidation]
ANY_PAYLOAD = f"Any JSON value, arrays and objects nested at most {MAX_PAYLOAD_DEPTH} levels deep"


class _Request(BaseModel):
    # A typo such as `delay_seconds` must not silently mean "now".
    model_config = ConfigDict(extra="forbid")


def _exclusive(number: str, timestamp: str) -> dict[str, Any]:
    """The schema of "not both `number` (seconds) and `timestamp` (RFC 3339) given"."""
    return {
        "not": {
            "required": [number, timestamp],
            "properties": {number: {"type": "number"}, timestamp: {"type": "string"}},
        }
    }


class _Scheduled(_Request):
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


class BatchRequest(_Request):
    messages: list[BatchItem] = Field(min_length=1, max_length=MAX_BATCH)
    if_exists: IfExists = IfExists.UPDATE


LockKeys = Annotated[
    list[Annotated[str, Field(pattern=KEY_PATTERN)]],
    Field(
        min_length=1,
        max_length=MAX_LOCK_KEYS,
        description=f"1-{MAX_LOCK_KEYS} keys of the lock's messages; a key repeated counts "
        "once, where it first appears",
    ),
]


class PollAcknowledgement(_Request):
    """What a poll acknowledges before it claims: every message an earlier poll's lock still
    holds, or some of them by key."""

    lock_id: str = Field(description="The `lock_id` of an earlier poll of this queue")
    keys: LockKeys | None = Field(
        None,
        description="Acknowledge only these of the lock's messages, as `POST …/locks/{lock_id}"
        "/ack` does; without it, every message the lock still holds, as `DELETE …/locks/"
        "{lock_id}` does",
    )


class PollRequest(_Request):
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


class ExtendRequest(_Request):
    lease: Number = Field(ge=1, le=MAX_LEASE_SECONDS, description="New lease, in seconds from now")


class AcknowledgeRequest(_Request):
    keys: LockKeys


class AcknowledgeResponse(BaseModel):
    acknowledged: list[str] = Field(description="Deleted: the lock held them; in request order")
    missing: list[str] = Field(
        description="Not held by the lock (acknowledged, updated since, or their lease ran "
        "out and another poll took them, or never): nothing of them changed"
    )


class ReleaseRequest(_Request):
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


class OfferResponse(BaseModel):
    queue: str
    key: str
    outcome: Outcome
    scheduled_at: Timestamp


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


class MessageListResponse(BaseModel):
    messages: list[MessageResponse]
    next: str | None = Field(
        description="Pass as `cursor` for the following page; null on the last page"
    )


class HistoryEntryResponse(BaseModel):
    key: str
    outcome: Finish = Field(description="How the message left the queue")
    scheduled_at: Timestamp = Field(description="When the producer asked for it")
    created_at: Timestamp
    first_delivered_at: Timestamp | None
    last_delivered_at: Timestamp | None
    deliveries: int = Field(description="How often it was handed to a worker in this queue")
    finished_at: Timestamp = Field(description="When it left the queue")


class HistoryResponse(BaseModel):
    entries: list[HistoryEntryResponse]
    next: str | None = Field(
        description="Pass as `cursor` for the following (older) page; null on the last page"
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


class BatchResult(BaseModel):
    key: str
    outcome: Outcome


class BatchResponse(BaseModel):
    results: list[BatchResult]
    created: int
    updated: int
    ignored: int


class ExtendResponse(BaseModel):
    lease_expires_at: Timestamp


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


class RetrySettings(_Request):
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


Concurrency = Annotated[
    int, Strict(), Field(ge=1, le=MAX_PUSH_CONCURRENCY), BeforeValidator(_whole_number)
]


class PushSettings(_Request):
    """Where a queue pushes its due messages: each one is POSTed to `url` (SPEC §12)."""

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


class RateSettings(_Request):
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


class QueueSettingsRequest(_Request):
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


class RedriveRequest(_Request):
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


class CronInstallRequest(_Request):
    """Body of `PUT …/cron/{name}`: exactly one of `cron`, `every` and `daily`."""

    # Exactly one schedule, in the schema too (a null is as if left out).
    model_config = ConfigDict(
        json_schema_extra={
            "oneOf": [
                {"required": ["cron"], "properties": {"cron": {"type": "string"}}},
                {"required": ["every"], "properties": {"every": {"type": "number"}}},
                {"required": ["daily"], "properties": {"daily": {"type": "array"}}},
            ]
        }
    )

    payload: Payload = Field(description=f"{ANY_PAYLOAD}: every run carries it")
    cron: str | None = Field(
        None,
        pattern=CRON_EXPRESSION_PATTERN,
        description="A 5-field cron expression, e.g. `0 2 * * 1-5`: minute, hour, day of the "
        "month (or `L`, `LW`), month (or `JAN`…), weekday (0-7 or `SUN`…, `5L`, `MON#2`), "
        "apart by spaces or tabs; `*`, lists, ranges and steps. One with a range backwards "
        "(`5-3`) or a day no month has (`0 0 30 2 *`) is `422`",
    )
    every: Number | None = Field(
        None,
        ge=MIN_EVERY_SECONDS,
        le=MAX_EVERY_SECONDS,
        description="Seconds between runs, on multiples of the period since the epoch",
    )
    daily: list[Annotated[str, Field(pattern=DAILY_TIME_PATTERN)]] | None = Field(
        None, min_length=1, description='Local times, `["HH:MM", …]` (00:00-23:59)'
    )
    timezone: str = Field(
        "UTC",
        description="IANA time zone the schedule is read in; a name the service's time zone "
        "database does not know is `422`",
    )
    priority: Priority = Field(
        DEFAULT_PRIORITY,
        description=f"Every run's priority ({PRIORITY_DESCRIPTION}); part of the "
        "configuration: a change replaces the runs not yet delivered",
    )
    group: MessageGroup = Field(
        None,
        description=f"Every run's group ({GROUP_DESCRIPTION}); part of the configuration",
    )
    ttl: Number | None = Field(
        None,
        ge=MIN_TTL_SECONDS,
        le=MAX_DELAY_SECONDS,
        description="Seconds after each run is due until it expires (never delivered after "
        "it: it then moves to the queue's dead-letter queue, `expired`: true, or is removed; "
        "at the latest 9999-12-31T23:59:59.999Z); none (or null): runs do not expire. Part "
        "of the configuration. An entry takes no `expires_at` (`422`): one time for every "
        "run would expire all the runs after it",
    )
    # Not a field of an entry (docs/decisions/0028-expiry.md): declared, out of the schema,
    # only so that a body giving it is refused with words saying why, not as any unknown
    # field. Any value, null too: a producer that sends it expects it to mean something.
    expires_at: SkipJsonSchema[JsonValue] = Field(None, exclude=True)
    lookahead: Number | None = Field(
        None,
        gt=0,
        le=MAX_LOOKAHEAD_SECONDS,
        description=(
            "Seconds ahead to keep runs installed (default: an hour; taken as at least five "
            "minutes): at least the next run, and never more runs than the entry may keep"
        ),
    )

    @field_validator("expires_at", mode="before")
    @classmethod
    def _ttl_only(cls, value: object) -> None:
        raise PydanticCustomError(
            "extra_forbidden",
            "a cron entry takes no expires_at: give ttl, the seconds after each run is due "
            "until it expires (one time for every run would expire all the runs after it)",
        )

    @model_validator(mode="after")
    def _a_schedule_that_can_run(self) -> CronInstallRequest:
        self.schedule()
        return self

    def schedule(self) -> Schedule:
        try:
            return Schedule(
                cron=self.cron,
                every=self.every,
                daily=tuple(self.daily) if self.daily is not None else None,
                timezone=self.timezone,
            )
        except InvalidSchedule as error:
            raise ValueError(str(error)) from error


class CronEntryResponse(BaseModel):
    queue: str
    name: str
    cron: str | None
    every: float | None
    daily: list[str] | None
    timezone: str
    payload: JsonValue
    lookahead: float | None = Field(description="Seconds; null for the default")
    priority: int = Field(description="Every run's priority")
    group: str | None = Field(description="Every run's group; null: none")
    ttl: float | None = Field(
        description="Seconds after each run is due until it expires; null: runs do not expire"
    )
    config_hash: str = Field(
        description="Identifies schedule, time zone, payload, priority, group and ttl"
    )
    created_at: Timestamp
    updated_at: Timestamp
    paused: bool = Field(description="Paused: it installs no runs until resumed")
    paused_at: Timestamp | None = Field(description="Since when it has been paused")
    next_runs: list[Timestamp] = Field(description="The next runs it installs (none while paused)")


class CronInstallResponse(CronEntryResponse):
    outcome: InstallOutcome


class CronListResponse(BaseModel):
    entries: list[CronEntryResponse]


class HealthResponse(BaseModel):
    status: Literal["ok"]


class ReadyResponse(BaseModel):
    status: Literal["ready"]
    schema_revision: str


class Problem(BaseModel):
    """An error, as `application/problem+json` (RFC 9457)."""

    model_config = ConfigDict(extra="allow")

    type: str
    title: str
    status: int
    detail: str
