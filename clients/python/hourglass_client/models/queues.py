"""Queues: their stats, their settings (retry policy, push target, rate) and redrives."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from hourglass_client.models.times import optional_time


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
            optional_time(data.get("oldest_ready_at")),
            optional_time(data.get("next_scheduled_at")),
            optional_time(data.get("paused_at")),
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
    """Where the service pushes a queue's due messages instead of waiting for polls: `POST
    url` per message, `timeout` seconds each at most, up to `concurrency` at once per
    replica (docs/guide/push.md)."""

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
            optional_time(data.get("updated_at")),
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
