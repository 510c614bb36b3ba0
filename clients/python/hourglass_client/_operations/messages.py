"""Messages: offers (one, or a batch), updates, reads, deletes, lists and history."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from hourglass_client._operations.call import (
    Call,
    present,
    queue_path,
    read_json,
    read_nothing,
    segment,
)
from hourglass_client.models.messages import (
    BatchResult,
    Finish,
    HistoryEntry,
    IfExists,
    ListState,
    Message,
    Offer,
    OfferResult,
    Page,
    expiry,
    schedule,
)
from hourglass_client.models.times import Seconds


def offer(
    queue: str,
    key: str,
    payload: Any,
    *,
    scheduled_at: datetime | None = None,
    delay: Seconds | None = None,
    if_exists: IfExists = "update",
    priority: int | None = None,
    group: str | None = None,
    expires_at: datetime | None = None,
    ttl: Seconds | None = None,
) -> Call[OfferResult]:
    """Offer a message under `key`, due at `scheduled_at` or after `delay` (neither: now),
    at `priority` (0-9, higher first among due messages; None: the service's default, 0),
    in `group` (1-200 characters, a key's rules; None: no group): the queue leases at most
    its `group_concurrency` of one group at once, in due order. It expires at `expires_at`
    or `ttl` after it is due (neither: never): never delivered after that, it moves to the
    queue's dead-letter queue or is removed.

    An existing key is updated (`if_exists="update"`) or left as it is (`"ignore"`).
    Retried when it may be repeated: only with `scheduled_at` (a `delay` counts from
    each request, so a repeat would move the message; a `ttl` counts from the due time,
    so it moves with it, or not at all).
    """
    body = {
        "payload": payload,
        **schedule(scheduled_at, delay),
        **expiry(expires_at, ttl),
        "if_exists": if_exists,
    }
    body.update(present(priority=priority, group=group))
    return Call(
        "PUT",
        queue_path(queue, "messages", segment(key)),
        read_json(OfferResult.from_json),
        json=body,
        repeatable=scheduled_at is not None,
        traced=True,
    )


def update(
    queue: str,
    key: str,
    payload: Any,
    *,
    scheduled_at: datetime | None = None,
    delay: Seconds | None = None,
    priority: int | None = None,
    group: str | None = None,
    expires_at: datetime | None = None,
    ttl: Seconds | None = None,
) -> Call[OfferResult]:
    """Update an existing message: its payload, time, priority, group and expiry, as `offer`
    takes them (an expiry left out is none); `NotFound` when the key does not exist."""
    return Call(
        "POST",
        queue_path(queue, "messages", segment(key)),
        read_json(OfferResult.from_json),
        json={
            "payload": payload,
            **schedule(scheduled_at, delay),
            **expiry(expires_at, ttl),
            **present(priority=priority, group=group),
        },
        repeatable=scheduled_at is not None,
        traced=True,
    )


def create(
    queue: str,
    payload: Any,
    *,
    scheduled_at: datetime | None = None,
    delay: Seconds | None = None,
    priority: int | None = None,
    group: str | None = None,
    expires_at: datetime | None = None,
    ttl: Seconds | None = None,
) -> Call[OfferResult]:
    """Create a message under a key the service makes up (never retried: a repeat would
    create a second message)."""
    return Call(
        "POST",
        queue_path(queue, "messages"),
        read_json(OfferResult.from_json),
        json={
            "payload": payload,
            **schedule(scheduled_at, delay),
            **expiry(expires_at, ttl),
            **present(priority=priority, group=group),
        },
        traced=True,
    )


def get(queue: str, key: str) -> Call[Message]:
    """The message stored under `key`; `NotFound` when there is none."""
    return Call(
        "GET",
        queue_path(queue, "messages", segment(key)),
        read_json(Message.from_json),
        repeatable=True,
    )


def delete(queue: str, key: str) -> Call[None]:
    """Delete the message under `key`; `NotFound` when there is none. Not retried: a repeat
    could delete a message offered under the same key in between."""
    return Call("DELETE", queue_path(queue, "messages", segment(key)), read_nothing)


def batch(queue: str, offers: Sequence[Offer], if_exists: IfExists = "update") -> Call[BatchResult]:
    """Offer up to 1000 messages in one request (`Client.offer_many` takes any number)."""
    return Call(
        "POST",
        queue_path(queue, "batch"),
        read_json(BatchResult.from_json),
        json={"messages": [item.to_json() for item in offers], "if_exists": if_exists},
        # Each key once: a key offered twice with two payloads is not a no-op again (the
        # repeat's first offer of it updates the stored second).
        repeatable=all(item.scheduled_at is not None for item in offers)
        and len({item.key for item in offers}) == len(offers),
        traced=True,
    )


def list_messages(
    queue: str,
    *,
    state: ListState | None = None,
    prefix: str | None = None,
    group: str | None = None,
    limit: int | None = None,
    cursor: str | None = None,
) -> Call[Page[Message]]:
    """A page of the queue's messages: by due time, or by key with a key `prefix`; only
    those of `group` if given.

    `state` is `ready`, `scheduled`, `leased` or `all` (default); `limit` 1–500 (50).
    Pass the page's `next` as `cursor` for the following one.
    """
    params = present(state=state, prefix=prefix, group=group, limit=limit, cursor=cursor)
    return Call(
        "GET",
        queue_path(queue, "messages"),
        read_json(
            lambda data: Page([Message.from_json(item) for item in data["messages"]], data["next"])
        ),
        params=params,
        repeatable=True,
    )


def history(
    queue: str,
    *,
    key: str | None = None,
    outcome: Finish | None = None,
    limit: int | None = None,
    cursor: str | None = None,
) -> Call[Page[HistoryEntry]]:
    """A page of the queue's delivery history, newest first, of one `key` or `outcome` if given."""
    params = present(key=key, outcome=outcome, limit=limit, cursor=cursor)
    return Call(
        "GET",
        queue_path(queue, "history"),
        read_json(
            lambda data: Page(
                [HistoryEntry.from_json(item) for item in data["entries"]], data["next"]
            )
        ),
        params=params,
        repeatable=True,
    )
