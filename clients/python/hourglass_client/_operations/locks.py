"""Polls and the locks they lease under: acknowledgements, extensions and releases."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from hourglass_client._operations.call import (
    Call,
    present,
    queue_path,
    read_found,
    read_json,
    segment,
)
from hourglass_client.models.leases import Ack, AckResult, Lease, ReleaseResult
from hourglass_client.models.times import Seconds, parse_time, seconds


def poll(
    queue: str,
    *,
    max: int = 1,
    wait: Seconds = 0,
    lease: Seconds | None = None,
    ack: Ack | str | None = None,
) -> Call[Lease]:
    """Lease up to `max` (1–1000) due messages for `lease` seconds (default: the queue's),
    waiting up to `wait` seconds (0–20) for one to come due.

    With `ack` (an `Ack`, or a lock id for all that lock still holds), the poll first
    acknowledges an earlier poll's messages, in the same request; that stands whatever the
    poll then finds (before a `wait` begins), and the lease's `acknowledgement` says what
    it deleted. A lock that holds nothing any more acknowledges nothing: no error.
    """
    body: dict[str, Any] = {"max": max, "wait": seconds(wait)}
    if lease is not None:
        body["lease"] = seconds(lease)
    if ack is not None:
        body["ack"] = (Ack(ack) if isinstance(ack, str) else ack).to_json()
    return Call(
        "POST",
        queue_path(queue, "poll"),
        read_json(Lease.from_json),
        json=body,
        # Never repeated once sent: a lost answer's claim stands (its messages leased to
        # nobody until the lease ends, their deliveries counted), and a repeat would claim
        # more on top of it.
        repeatable=False,
        wait=seconds(wait),
    )


def ack(queue: str, lock_id: str) -> Call[bool]:
    """Acknowledge (delete) every message the lock still holds: True, or False when it held
    none (acknowledged already, its lease taken by another poll, or updated since)."""
    return Call(
        "DELETE",
        queue_path(queue, "locks", segment(lock_id)),
        read_found,
        repeatable=True,
        accept=frozenset({404}),
    )


def ack_keys(queue: str, lock_id: str, keys: Sequence[str]) -> Call[AckResult]:
    """Acknowledge only these messages (1–1000 keys) of the lock; the others stay leased.
    Keys the lock no longer holds come back as `missing`."""
    return Call(
        "POST",
        queue_path(queue, "locks", segment(lock_id), "ack"),
        read_json(AckResult.from_json),
        json={"keys": list(keys)},
        repeatable=True,
    )


def extend(queue: str, lock_id: str, lease: Seconds) -> Call[datetime]:
    """Lease what the lock holds for `lease` more seconds from now; the new end of the lease.
    `NotFound` when the lock holds nothing any more."""
    return Call(
        "PATCH",
        queue_path(queue, "locks", segment(lock_id)),
        read_json(lambda data: parse_time(data["lease_expires_at"])),
        json={"lease": seconds(lease)},
        repeatable=True,
    )


def release(queue: str, lock_id: str, *, delay: Seconds | None = None) -> Call[bool]:
    """Give back every message the lock holds, due after `delay` (None: as the queue's `retry`
    setting says, or at once): True, or False when it held none."""
    return Call(
        "POST",
        queue_path(queue, "locks", segment(lock_id), "release"),
        read_found,
        json=present(delay=None if delay is None else seconds(delay)),
        repeatable=True,
        accept=frozenset({404}),
    )


def release_keys(
    queue: str, lock_id: str, keys: Sequence[str], *, delay: Seconds | None = None
) -> Call[ReleaseResult]:
    """Give back only these messages (1–1000 keys) of the lock, due after `delay` (None: as
    the queue's `retry` setting says); keys it no longer holds come back as `missing`."""
    body: dict[str, Any] = {"keys": list(keys)}
    if delay is not None:
        body["delay"] = seconds(delay)
    return Call(
        "POST",
        queue_path(queue, "locks", segment(lock_id), "release"),
        read_json(ReleaseResult.from_json),
        json=body,
        repeatable=True,
    )
