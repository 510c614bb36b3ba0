"""Messages as offered and stored: offers and their outcomes, batches, stored messages,
their delivery history, and pages of lists."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, Generic, Literal, TypeVar

from hourglass_client.models.times import (
    Seconds,
    format_time,
    optional_time,
    parse_time,
    seconds,
)

State = Literal["scheduled", "ready", "leased"]
ListState = Literal["all", "ready", "scheduled", "leased"]
Outcome = Literal["created", "updated", "ignored"]
IfExists = Literal["update", "ignore"]
Finish = Literal["acknowledged", "dead_lettered", "dropped", "expired"]

T = TypeVar("T")


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
class Trace:
    """The W3C trace context a message was offered in: its producer's `traceparent` and
    `tracestate` headers, as the service stored them."""

    traceparent: str
    tracestate: str | None = None

    @classmethod
    def from_json(cls, data: dict[str, Any] | None) -> Trace | None:
        """The trace of a message's `trace` field (None: none, or a service from before it)."""
        return None if data is None else cls(data["traceparent"], data.get("tracestate"))


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
    # The trace context it was offered in; None: none (or a service from before traces).
    trace: Trace | None

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
        "expires_at": optional_time(data.get("expires_at")),
        "expired": data.get("expired", False),
        "trace": Trace.from_json(data.get("trace")),
    }


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
            optional_time(data.get("first_delivered_at")),
            optional_time(data.get("last_delivered_at")),
            data["deliveries"],
            parse_time(data["finished_at"]),
        )


@dataclass(frozen=True)
class Page(Generic[T]):
    """One page of a list; pass `next` as `cursor` for the following one (None: the last)."""

    items: list[T]
    next: str | None
