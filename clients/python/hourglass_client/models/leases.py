"""Leases: the messages a poll hands out under a lock, what a poll acknowledges on its
way, and what acknowledging or releasing keys of a lock did."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal, TypeVar

from hourglass_client.models.messages import Message, Trace
from hourglass_client.models.times import parse_time

DeliveryKind = Literal["first", "redelivery"]

T = TypeVar("T")


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
                    "trace": None
                    if (trace := item.get("trace")) is None
                    else Trace.from_json(trace),
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
