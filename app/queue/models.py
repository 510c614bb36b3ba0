"""Frozen domain objects that storage returns and the API renders. Times are epoch ms."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any


class Outcome(StrEnum):
    """What an offer did."""

    CREATED = "created"
    UPDATED = "updated"
    IGNORED = "ignored"


class IfExists(StrEnum):
    """What an offer does when its key already exists."""

    UPDATE = "update"
    IGNORE = "ignore"


class State(StrEnum):
    """Where a message stands at a given instant."""

    SCHEDULED = "scheduled"
    READY = "ready"
    LEASED = "leased"


@dataclass(frozen=True, slots=True)
class Message:
    """A stored message. `scheduled_at` is when it is next due (lease end when leased)."""

    queue: str
    key: str
    payload: bytes
    scheduled_at: int
    scheduled_at_initially: int
    created_at: int
    locked: bool

    def state(self, now: int) -> State:
        """`ready` once due (an expired lease is pollable again), else `leased` or `scheduled`."""
        if self.scheduled_at <= now:
            return State.READY
        return State.LEASED if self.locked else State.SCHEDULED


@dataclass(frozen=True, slots=True)
class Delivery:
    """A message handed to a worker by a poll."""

    message: Message
    redelivery: bool


@dataclass(frozen=True, slots=True)
class Lease:
    """The result of a poll: one lock id held over every delivered message."""

    lock_id: str
    expires_at: int
    deliveries: tuple[Delivery, ...]


@dataclass(frozen=True, slots=True)
class Offer:
    """One message to schedule: the unit of single and batch offers."""

    key: str
    payload: bytes
    scheduled_at: int
    if_exists: IfExists = IfExists.UPDATE


@dataclass(frozen=True, slots=True)
class OfferOutcome:
    """What an offer did, and when the message it leaves stored was asked for."""

    outcome: Outcome
    scheduled_at: int


@dataclass(frozen=True, slots=True)
class When:
    """When a message is due: at `scheduled_at`, after `delay` (ms), or now."""

    scheduled_at: int | None = None
    delay: int | None = None

    def resolve(self, now: int) -> int:
        if self.scheduled_at is not None:
            return self.scheduled_at
        return now + (self.delay or 0)


@dataclass(frozen=True, slots=True)
class OfferRequest:
    """One message as a producer sends it: the payload is still a JSON value."""

    key: str
    payload: Any
    when: When = When()
    if_exists: IfExists = IfExists.UPDATE


@dataclass(frozen=True, slots=True)
class OfferResult:
    """The answer to one offer."""

    queue: str
    key: str
    outcome: Outcome
    scheduled_at: int


@dataclass(frozen=True, slots=True)
class QueueStats:
    """Counts of a queue's messages by state at one instant."""

    queue: str
    messages: int
    ready: int
    scheduled: int
    leased: int
    oldest_ready_at: int | None
    next_scheduled_at: int | None
