"""What the API answers, as frozen dataclasses; times as aware UTC datetimes, durations in seconds."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Generic, Literal, TypeVar

State = Literal["scheduled", "ready", "leased"]
ListState = Literal["all", "ready", "scheduled", "leased"]
DeliveryKind = Literal["first", "redelivery"]
Outcome = Literal["created", "updated", "ignored"]
IfExists = Literal["update", "ignore"]
InstallOutcome = Literal["created", "changed", "unchanged"]
Finish = Literal["acknowledged", "dead_lettered", "dropped", "expired"]

Seconds = float | int | timedelta
"""A duration: seconds as a number, or a timedelta."""

T = TypeVar("T")


def seconds(duration: Seconds) -> float:
    """A duration as the API's seconds."""
    if isinstance(duration, timedelta):
        return duration.total_seconds()
    return float(duration)


def format_time(moment: datetime) -> str:
    """`moment` as the API writes times: RFC 3339 in UTC with milliseconds.

    A naive datetime is refused: the API needs to know its zone, and guessing local
    time or UTC would move messages by hours without a word.
    """
    if moment.tzinfo is None or moment.utcoffset() is None:
        raise ValueError(f"{moment!r} has no time zone: give it a tzinfo (e.g. datetime.UTC)")
    utc = moment.astimezone(UTC)
    return utc.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def parse_time(text: str) -> datetime:
    """An API time (`2026-11-26T09:00:00.000Z`) as an aware datetime in UTC."""
    return datetime.fromisoformat(text).astimezone(UTC)


def _optional_time(text: str | None) -> datetime | None:
    return None if text is None else parse_time(text)


@dataclass(frozen=True)
class OfferResult:
    """What an offer did: `created`, `updated` or `ignored`, and when the stored message is due."""

    queue: str
    key: str
    outcome: Outcome
    scheduled_at: datetime

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> OfferResult:
        return cls(data["queue"], data["key"], data["outcome"], parse_time(data["scheduled_at"]))


@dataclass(frozen=True)
class Offer:
    """One offer of `Client.offer_many`: a key, its payload, and when it is due (`scheduled_at`
    or `delay`; neither means now), at `priority` (0-9; None: 0), in `group` (None: none),
    expiring at `expires_at` or `ttl` after it is due (neither: never). `if_exists`
    overrides the call's."""

    key: str
    payload: Any
    scheduled_at: datetime | None = None
    delay: Seconds | None = None
    if_exists: IfExists | None = None
    priority: int | None = None
    group: str | None = None
    expires_at: datetime | None = None
    ttl: Seconds | None = None

    def to_json(self) -> dict[str, Any]:
        item: dict[str, Any] = {"key": self.key, "payload": self.payload}
        item.update(schedule(self.scheduled_at, self.delay))
        item.update(expiry(self.expires_at, self.ttl))
        if self.if_exists is not None:
            item["if_exists"] = self.if_exists
        if self.priority is not None:
            item["priority"] = self.priority
        if self.group is not None:
            item["group"] = self.group
        return item


def schedule(scheduled_at: datetime | None, delay: Seconds | None) -> dict[str, Any]:
    """The body fields that say when a message is due."""
    if scheduled_at is not None and delay is not None:
        raise ValueError("give scheduled_at or delay, not both")
    if scheduled_at is not None:
        return {"scheduled_at": format_time(scheduled_at)}
    if delay is not None:
        return {"delay": seconds(delay)}
    return {}


def expiry(expires_at: datetime | None, ttl: Seconds | None) -> dict[str, Any]:
    """The body fields that say when a message expires: at `expires_at`, or `ttl` after it
    is due (the service turns that into a time when it takes the offer)."""
    if expires_at is not None and ttl is not None:
        raise ValueError("give expires_at or ttl, not both")
    if expires_at is not None:
        return {"expires_at": format_time(expires_at)}
    if ttl is not None:
        return {"ttl": seconds(ttl)}
    return {}


@dataclass(frozen=True)
class BatchOutcome:
    """One offer's outcome in a batch."""

    key: str
    outcome: Outcome


@dataclass(frozen=True)
class BatchResult:
    """Outcomes of a batch (or of all the batches of `offer_many`), in input order, and their counts."""

    results: list[BatchOutcome]
    created: int
    updated: int
    ignored: int

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> BatchResult:
        return cls(
            [BatchOutcome(item["key"], item["outcome"]) for item in data["results"]],
            data["created"],
            data["updated"],
            data["ignored"],
        )

    @classmethod
    def combined(cls, parts: list[BatchResult]) -> BatchResult:
        return cls(
            [outcome for part in parts for outcome in part.results],
            sum(part.created for part in parts),
            sum(part.updated for part in parts),
            sum(part.ignored for part in parts),
        )


@dataclass(frozen=True)
class Message:
    """A message as stored. `scheduled_at` is when it is next due (for a leased message, when
    its lease ends); `scheduled_at_initially` is the time its producer asked for."""

    queue: str
    key: str
    payload: Any
    scheduled_at: datetime
    scheduled_at_initially: datetime
    created_at: datetime
    state: State
    deliveries: int
    dead_lettered_from: str | None
    # 0-9: among due messages, higher ones are delivered first.
    priority: int
    # None: no group. A queue leases at most its `group_concurrency` of one group at once.
    group: str | None
    # When it expires (never delivered after it; it then moves to the dead-letter queue or
    # is removed); None: never. Moving a message to a dead-letter queue clears it.
    expires_at: datetime | None
    # A dead letter moved here because its expiry passed (not because of its deliveries).
    expired: bool

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Message:
        return cls(**_message_fields(data))


def _message_fields(data: dict[str, Any]) -> dict[str, Any]:
    return {
        "queue": data["queue"],
        "key": data["key"],
        "payload": data["payload"],
        "scheduled_at": parse_time(data["scheduled_at"]),
        "scheduled_at_initially": parse_time(data["scheduled_at_initially"]),
        "created_at": parse_time(data["created_at"]),
        "state": data["state"],
        "deliveries": data.get("deliveries", 0),
        "dead_lettered_from": data.get("dead_lettered_from"),
        "priority": data.get("priority", 0),
        "group": data.get("group"),
        "expires_at": _optional_time(data.get("expires_at")),
        "expired": data.get("expired", False),
    }


def _built(cls: type[T], fields: dict[str, Any]) -> T:
    """An instance of the frozen dataclass `cls` with every one of its `fields`, made without
    its `__init__`, which sets each field through `object.__setattr__`: several times
    slower, and a poll answers up to 1000 messages."""
    instance = object.__new__(cls)
    instance.__dict__.update(fields)
    return instance


@dataclass(frozen=True)
class DeliveredMessage(Message):
    """A message as a poll hands it out: under `lock_id`, until `lease_expires_at`."""

    delivery: DeliveryKind
    lease_expires_at: datetime
    lock_id: str

    @property
    def redelivery(self) -> bool:
        """Whether it was leased before (its lease ran out, or it was released)."""
        return self.delivery == "redelivery"


@dataclass(frozen=True)
class Ack:
    """What a poll acknowledges before it claims (`poll(…, ack=…)`): every message the lock
    `lock_id` still holds, as `ack` does, or only `keys` of them (1–1000), as `ack_keys`."""

    lock_id: str
    keys: Sequence[str] | None = None

    def to_json(self) -> dict[str, Any]:
        body: dict[str, Any] = {"lock_id": self.lock_id}
        if self.keys is not None:
            body["keys"] = list(self.keys)
        return body


@dataclass(frozen=True)
class Lease:
    """A poll's answer: the messages leased under one `lock_id` (None and no messages when
    nothing was due), and, when the poll carried an `ack`, what that acknowledged."""

    lock_id: str | None
    messages: list[DeliveredMessage]
    # None when the poll carried no `ack`. For a whole lock, `acknowledged` is what it still
    # held (in no particular order) and `missing` is empty.
    acknowledgement: AckResult | None = None

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Lease:
        lock_id = data["lock_id"]
        # Each time is parsed once per answer: its messages share their lease's end (their
        # `scheduled_at` too), and messages offered together share their times.
        times: dict[str, datetime] = {}

        def time(text: str) -> datetime:
            parsed = times.get(text)
            if parsed is None:
                parsed = times[text] = parse_time(text)
            return parsed

        def optional_time(text: str | None) -> datetime | None:
            return None if text is None else time(text)

        messages = [
            _built(
                DeliveredMessage,
                {
                    "queue": item["queue"],
                    "key": item["key"],
                    "payload": item["payload"],
                    "scheduled_at": time(item["scheduled_at"]),
                    "scheduled_at_initially": time(item["scheduled_at_initially"]),
                    "created_at": time(item["created_at"]),
                    "state": item["state"],
                    "deliveries": item.get("deliveries", 0),
                    "dead_lettered_from": item.get("dead_lettered_from"),
                    "priority": item.get("priority", 0),
                    "group": item.get("group"),
                    "expires_at": optional_time(item.get("expires_at")),
                    "expired": item.get("expired", False),
                    "delivery": item["delivery"],
                    "lease_expires_at": time(item["lease_expires_at"]),
                    "lock_id": lock_id,
                },
            )
            for item in data["messages"]
        ]
        acknowledgement = AckResult.from_json(data) if "acknowledged" in data else None
        return cls(lock_id, messages, acknowledgement)

    def __len__(self) -> int:
        return len(self.messages)

    @property
    def keys(self) -> list[str]:
        return [message.key for message in self.messages]


@dataclass(frozen=True)
class AckResult:
    """A per-key acknowledgement: the keys deleted, and those the lock no longer held (the
    client repeats an acknowledgement whose answer was lost: what its first attempt
    deleted is `missing` then)."""

    acknowledged: list[str]
    missing: list[str]

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> AckResult:
        return cls(list(data["acknowledged"]), list(data["missing"]))


@dataclass(frozen=True)
class ReleaseResult:
    """A per-key release: the keys given back, and those the lock no longer held."""

    released: list[str]
    missing: list[str]

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ReleaseResult:
        return cls(list(data["released"]), list(data["missing"]))


@dataclass(frozen=True)
class QueueStats:
    """How many messages a queue holds, by state."""

    queue: str
    messages: int
    ready: int
    scheduled: int
    leased: int
    oldest_ready_at: datetime | None
    next_scheduled_at: datetime | None
    # Since when the queue has been paused (it delivers nothing); None while it delivers.
    paused_at: datetime | None = None

    @property
    def paused(self) -> bool:
        return self.paused_at is not None

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> QueueStats:
        return cls(
            data["queue"],
            data["messages"],
            data["ready"],
            data["scheduled"],
            data["leased"],
            _optional_time(data.get("oldest_ready_at")),
            _optional_time(data.get("next_scheduled_at")),
            _optional_time(data.get("paused_at")),
        )


@dataclass(frozen=True)
class RetryPolicy:
    """A queue's retry delays: a release without a delay makes a message due after
    `min(max_delay, initial_delay × multiplier^(deliveries−1))`, spread by ±`jitter`."""

    initial_delay: float
    max_delay: float
    multiplier: float = 2.0
    jitter: float = 0.0

    def to_json(self) -> dict[str, Any]:
        return {
            "initial_delay": self.initial_delay,
            "max_delay": self.max_delay,
            "multiplier": self.multiplier,
            "jitter": self.jitter,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any] | None) -> RetryPolicy | None:
        if data is None:
            return None
        return cls(data["initial_delay"], data["max_delay"], data["multiplier"], data["jitter"])


@dataclass(frozen=True)
class PushTarget:
    """Where the service pushes a queue's due messages (SPEC §12): `POST url` per message,
    `timeout` seconds each at most, up to `concurrency` at once per replica."""

    url: str
    timeout: float = 10.0
    concurrency: int = 4

    def to_json(self) -> dict[str, Any]:
        return {"url": self.url, "timeout": self.timeout, "concurrency": self.concurrency}

    @classmethod
    def from_json(cls, data: dict[str, Any] | None) -> PushTarget | None:
        if data is None:
            return None
        return cls(data["url"], data["timeout"], data["concurrency"])


@dataclass(frozen=True)
class Rate:
    """A queue's rate: in any window of `period` seconds at most `limit` deliveries begin,
    across every replica of the service."""

    limit: int
    period: float

    def to_json(self) -> dict[str, Any]:
        return {"limit": self.limit, "period": self.period}

    @classmethod
    def from_json(cls, data: dict[str, Any] | None) -> Rate | None:
        if data is None:
            return None
        return cls(data["limit"], data["period"])


@dataclass(frozen=True)
class QueueSettings:
    """A queue's settings as they apply, defaults filled in (`updated_at` None: never set;
    `max_leased` and `rate` None: no bound)."""

    queue: str
    default_lease: float
    max_deliveries: int | None
    dead_letter_queue: str
    retry: RetryPolicy | None
    updated_at: datetime | None
    push: PushTarget | None = None
    # At most this many messages of one group leased at once (1-1000).
    group_concurrency: int = 1
    max_leased: int | None = None
    rate: Rate | None = None

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> QueueSettings:
        return cls(
            data["queue"],
            data["default_lease"],
            data.get("max_deliveries"),
            data["dead_letter_queue"],
            RetryPolicy.from_json(data.get("retry")),
            _optional_time(data.get("updated_at")),
            PushTarget.from_json(data.get("push")),
            data.get("group_concurrency", 1),
            data.get("max_leased"),
            Rate.from_json(data.get("rate")),
        )


@dataclass(frozen=True)
class RedriveResult:
    """A redrive: messages moved back, left because their key was taken, and left because
    the token may not use their queue of origin."""

    moved: int
    skipped: int
    forbidden: int

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> RedriveResult:
        return cls(data["moved"], data["skipped"], data["forbidden"])


@dataclass(frozen=True)
class CronEntry:
    """A recurring schedule of a queue (one of `cron`, `every`, `daily`) and its next runs."""

    queue: str
    name: str
    cron: str | None
    every: float | None
    daily: list[str] | None
    timezone: str
    payload: Any
    lookahead: float | None
    config_hash: str
    created_at: datetime
    updated_at: datetime
    next_runs: list[datetime]
    priority: int  # every run's
    group: str | None  # every run's; None: none
    # Seconds after each run is due until it expires; None: its runs never expire.
    ttl: float | None = field(default=None, kw_only=True)
    # Since when the entry has been paused (it installs no runs); None while it runs.
    paused_at: datetime | None = field(default=None, kw_only=True)

    @property
    def paused(self) -> bool:
        return self.paused_at is not None

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> CronEntry:
        return cls(**_cron_fields(data))


def _cron_fields(data: dict[str, Any]) -> dict[str, Any]:
    return {
        "queue": data["queue"],
        "name": data["name"],
        "cron": data.get("cron"),
        "every": data.get("every"),
        "daily": data.get("daily"),
        "timezone": data["timezone"],
        "payload": data["payload"],
        "lookahead": data.get("lookahead"),
        "config_hash": data["config_hash"],
        "created_at": parse_time(data["created_at"]),
        "updated_at": parse_time(data["updated_at"]),
        "next_runs": [parse_time(run) for run in data["next_runs"]],
        "priority": data.get("priority", 0),
        "group": data.get("group"),
        "ttl": data.get("ttl"),
        "paused_at": _optional_time(data.get("paused_at")),
    }


@dataclass(frozen=True)
class CronInstallResult(CronEntry):
    """An installed entry, and whether it was `created`, `changed` or `unchanged`."""

    outcome: InstallOutcome

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> CronInstallResult:
        return cls(**_cron_fields(data), outcome=data["outcome"])


@dataclass(frozen=True)
class HistoryEntry:
    """A row of a queue's delivery history: how one message left it."""

    key: str
    outcome: Finish
    scheduled_at: datetime
    created_at: datetime
    first_delivered_at: datetime | None
    last_delivered_at: datetime | None
    deliveries: int
    finished_at: datetime

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> HistoryEntry:
        return cls(
            data["key"],
            data["outcome"],
            parse_time(data["scheduled_at"]),
            parse_time(data["created_at"]),
            _optional_time(data.get("first_delivered_at")),
            _optional_time(data.get("last_delivered_at")),
            data["deliveries"],
            parse_time(data["finished_at"]),
        )


@dataclass(frozen=True)
class Page(Generic[T]):
    """One page of a list; pass `next` as `cursor` for the following one (None: the last)."""

    items: list[T]
    next: str | None
