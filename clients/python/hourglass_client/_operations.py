"""Every /v1 operation once, without I/O: the request it sends and how its answer is read.

`Client` and `AsyncClient` (client.py) are two thin transports over this table: each
of their methods is an operation below, sent and parsed by the transport. An
operation also says whether it is safe to send again when its answer may have been
lost (`repeatable`), which is what the transports' retries go by.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Generic, TypeVar
from urllib.parse import quote

import httpx

from hourglass_client.models.cron import CronEntry, CronInstallResult
from hourglass_client.models.leases import Ack, AckResult, Lease, ReleaseResult
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
from hourglass_client.models.queues import (
    PushTarget,
    QueueSettings,
    QueueStats,
    Rate,
    RedriveResult,
    RetryPolicy,
)
from hourglass_client.models.times import Seconds, format_time, parse_time, seconds

T = TypeVar("T")

_NO_BODY: Any = object()


@dataclass(frozen=True)
class Call(Generic[T]):
    """One request and the reading of its answer."""

    method: str
    path: str
    parse: Callable[[httpx.Response], T]
    json: Any = _NO_BODY
    params: dict[str, str | int] = field(default_factory=dict)
    # Safe to send again when a `503` says it was not done, or its answer was lost:
    # repeating it changes nothing a first success would not have (see the README).
    repeatable: bool = False
    # Statuses besides 2xx that `parse` reads (an acknowledgement's 404: nothing held).
    accept: frozenset[int] = frozenset()
    # Seconds the service may hold the request before answering (a long poll's wait).
    wait: float = 0.0

    @property
    def has_body(self) -> bool:
        return self.json is not _NO_BODY


def _segment(value: str) -> str:
    """`value` as one path segment: `/`, `%`, `?`… encoded, and `.`/`..` kept from meaning a
    directory (a key may be any of these)."""
    quoted = quote(value, safe="")
    if quoted.strip(".") == "":
        quoted = quoted.replace(".", "%2E")
    return quoted


def _queue_path(queue: str, *parts: str) -> str:
    return "/".join(("/v1/queues", _segment(queue), *parts))


def _json(reader: Callable[[dict[str, Any]], T]) -> Callable[[httpx.Response], T]:
    return lambda response: reader(response.json())


def _nothing(_response: httpx.Response) -> None:
    return None


def _found(response: httpx.Response) -> bool:
    return response.status_code != 404


# Messages


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
    body.update(_present(priority=priority, group=group))
    return Call(
        "PUT",
        _queue_path(queue, "messages", _segment(key)),
        _json(OfferResult.from_json),
        json=body,
        repeatable=scheduled_at is not None,
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
        _queue_path(queue, "messages", _segment(key)),
        _json(OfferResult.from_json),
        json={
            "payload": payload,
            **schedule(scheduled_at, delay),
            **expiry(expires_at, ttl),
            **_present(priority=priority, group=group),
        },
        repeatable=scheduled_at is not None,
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
        _queue_path(queue, "messages"),
        _json(OfferResult.from_json),
        json={
            "payload": payload,
            **schedule(scheduled_at, delay),
            **expiry(expires_at, ttl),
            **_present(priority=priority, group=group),
        },
    )


def get(queue: str, key: str) -> Call[Message]:
    """The message stored under `key`; `NotFound` when there is none."""
    return Call(
        "GET",
        _queue_path(queue, "messages", _segment(key)),
        _json(Message.from_json),
        repeatable=True,
    )


def delete(queue: str, key: str) -> Call[None]:
    """Delete the message under `key`; `NotFound` when there is none. Not retried: a repeat
    could delete a message offered under the same key in between."""
    return Call("DELETE", _queue_path(queue, "messages", _segment(key)), _nothing)


def batch(queue: str, offers: Sequence[Offer], if_exists: IfExists = "update") -> Call[BatchResult]:
    """Offer up to 1000 messages in one request (`Client.offer_many` takes any number)."""
    return Call(
        "POST",
        _queue_path(queue, "batch"),
        _json(BatchResult.from_json),
        json={"messages": [item.to_json() for item in offers], "if_exists": if_exists},
        # Each key once: a key offered twice with two payloads is not a no-op again (the
        # repeat's first offer of it updates the stored second).
        repeatable=all(item.scheduled_at is not None for item in offers)
        and len({item.key for item in offers}) == len(offers),
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
    params = _present(state=state, prefix=prefix, group=group, limit=limit, cursor=cursor)
    return Call(
        "GET",
        _queue_path(queue, "messages"),
        _json(
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
    params = _present(key=key, outcome=outcome, limit=limit, cursor=cursor)
    return Call(
        "GET",
        _queue_path(queue, "history"),
        _json(
            lambda data: Page(
                [HistoryEntry.from_json(item) for item in data["entries"]], data["next"]
            )
        ),
        params=params,
        repeatable=True,
    )


# Polling and leases


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
        _queue_path(queue, "poll"),
        _json(Lease.from_json),
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
        _queue_path(queue, "locks", _segment(lock_id)),
        _found,
        repeatable=True,
        accept=frozenset({404}),
    )


def ack_keys(queue: str, lock_id: str, keys: Sequence[str]) -> Call[AckResult]:
    """Acknowledge only these messages (1–1000 keys) of the lock; the others stay leased.
    Keys the lock no longer holds come back as `missing`."""
    return Call(
        "POST",
        _queue_path(queue, "locks", _segment(lock_id), "ack"),
        _json(AckResult.from_json),
        json={"keys": list(keys)},
        repeatable=True,
    )


def extend(queue: str, lock_id: str, lease: Seconds) -> Call[datetime]:
    """Lease what the lock holds for `lease` more seconds from now; the new end of the lease.
    `NotFound` when the lock holds nothing any more."""
    return Call(
        "PATCH",
        _queue_path(queue, "locks", _segment(lock_id)),
        _json(lambda data: parse_time(data["lease_expires_at"])),
        json={"lease": seconds(lease)},
        repeatable=True,
    )


def release(queue: str, lock_id: str, *, delay: Seconds | None = None) -> Call[bool]:
    """Give back every message the lock holds, due after `delay` (None: as the queue's `retry`
    setting says, or at once): True, or False when it held none."""
    return Call(
        "POST",
        _queue_path(queue, "locks", _segment(lock_id), "release"),
        _found,
        json=_present(delay=None if delay is None else seconds(delay)),
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
        _queue_path(queue, "locks", _segment(lock_id), "release"),
        _json(ReleaseResult.from_json),
        json=body,
        repeatable=True,
    )


# Queues


def queues() -> Call[list[QueueStats]]:
    """The stats of every queue that holds messages or cron entries (that the token may see)."""
    return Call(
        "GET",
        "/v1/queues",
        _json(lambda data: [QueueStats.from_json(item) for item in data["queues"]]),
        repeatable=True,
    )


def stats(queue: str) -> Call[QueueStats]:
    """How many messages the queue holds, by state (zeros for an unknown queue)."""
    return Call("GET", _queue_path(queue), _json(QueueStats.from_json), repeatable=True)


def pause(queue: str) -> Call[QueueStats]:
    """Pause the queue: it delivers nothing (polls answer empty, push sends nothing) until
    resumed, on every replica within a second; offers, acknowledgements and the rest go on.
    Pausing a paused queue is no error."""
    return Call("POST", _queue_path(queue, "pause"), _json(QueueStats.from_json))


def resume(queue: str) -> Call[QueueStats]:
    """Resume a paused queue (no error when it is not paused); polls waiting on it wake."""
    return Call("POST", _queue_path(queue, "resume"), _json(QueueStats.from_json))


def purge(queue: str) -> Call[int]:
    """Delete every message of the queue; how many. Never retried."""
    return Call(
        "DELETE",
        _queue_path(queue),
        _json(lambda data: int(data["deleted"])),
        params={"confirm": queue},
    )


def get_settings(queue: str) -> Call[QueueSettings]:
    """The queue's settings as they apply, defaults filled in."""
    return Call(
        "GET", _queue_path(queue, "settings"), _json(QueueSettings.from_json), repeatable=True
    )


def put_settings(
    queue: str,
    *,
    default_lease: Seconds | None = None,
    max_deliveries: int | None = None,
    dead_letter_queue: str | None = None,
    retry: RetryPolicy | None = None,
    push: PushTarget | None = None,
    group_concurrency: int | None = None,
    max_leased: int | None = None,
    rate: Rate | None = None,
) -> Call[QueueSettings]:
    """Replace the queue's settings whole: what is left out (None) goes back to its default
    (no retry policy, no push, one message of a group leased at once, no bound on leases
    at once or on the rate)."""
    body = _present(
        default_lease=None if default_lease is None else seconds(default_lease),
        max_deliveries=max_deliveries,
        dead_letter_queue=dead_letter_queue,
        retry=None if retry is None else retry.to_json(),
        push=None if push is None else push.to_json(),
        group_concurrency=group_concurrency,
        max_leased=max_leased,
        rate=None if rate is None else rate.to_json(),
    )
    return Call(
        "PUT",
        _queue_path(queue, "settings"),
        _json(QueueSettings.from_json),
        json=body,
        repeatable=True,
    )


def redrive(queue: str, *, to: str | None = None, max: int | None = None) -> Call[RedriveResult]:
    """Move the dead letters of `queue` back, due now: each to the queue it came from, or all
    `to` one queue; at most `max`. Never retried."""
    return Call(
        "POST",
        _queue_path(queue, "redrive"),
        _json(RedriveResult.from_json),
        json=_present(to=to, max=max),
    )


# Cron


def install_cron(
    queue: str,
    name: str,
    payload: Any,
    *,
    cron: str | None = None,
    every: Seconds | None = None,
    daily: Sequence[str] | None = None,
    timezone: str | None = None,
    lookahead: Seconds | None = None,
    priority: int | None = None,
    group: str | None = None,
    ttl: Seconds | None = None,
) -> Call[CronInstallResult]:
    """Install (or change) a recurring schedule: exactly one of `cron` (a 5-field expression),
    `every` (seconds) and `daily` (`["HH:MM", …]`), read in `timezone` (IANA; default UTC);
    every run at `priority` (0-9; None: 0), in `group` (None: none), expiring `ttl` after
    it is due (None: never)."""
    body = _present(
        payload=payload,
        cron=cron,
        every=None if every is None else seconds(every),
        daily=None if daily is None else list(daily),
        timezone=timezone,
        lookahead=None if lookahead is None else seconds(lookahead),
        priority=priority,
        group=group,
        ttl=None if ttl is None else seconds(ttl),
    )
    body["payload"] = payload  # a payload of null is a payload
    return Call(
        "PUT",
        _queue_path(queue, "cron", _segment(name)),
        _json(CronInstallResult.from_json),
        json=body,
        repeatable=True,
    )


def cron_entries(queue: str) -> Call[list[CronEntry]]:
    """The queue's cron entries, each with its next runs."""
    return Call(
        "GET",
        _queue_path(queue, "cron"),
        _json(lambda data: [CronEntry.from_json(item) for item in data["entries"]]),
        repeatable=True,
    )


def get_cron(
    queue: str, name: str, *, after: datetime | None = None, count: int | None = None
) -> Call[CronEntry]:
    """One cron entry, with its next `count` runs (default 5) after `after` (default now)."""
    params = _present(after=None if after is None else format_time(after), count=count)
    return Call(
        "GET",
        _queue_path(queue, "cron", _segment(name)),
        _json(CronEntry.from_json),
        params=params,
        repeatable=True,
    )


def pause_cron(queue: str, name: str) -> Call[CronEntry]:
    """Pause a cron entry: it installs no runs, and its runs not yet delivered go;
    `NotFound` when there is none."""
    return _cron_switch(queue, name, "pause")


def resume_cron(queue: str, name: str) -> Call[CronEntry]:
    """Resume a cron entry: it installs its runs from now on, none of those it missed."""
    return _cron_switch(queue, name, "resume")


def _cron_switch(queue: str, name: str, action: str) -> Call[CronEntry]:
    # Not repeated, as a queue's pause and resume: one sent again after the opposite made
    # meanwhile would undo it (and a pause delete the runs that resume installed).
    path = _queue_path(queue, "cron", _segment(name), action)
    return Call("POST", path, _json(CronEntry.from_json))


def uninstall_cron(queue: str, name: str) -> Call[None]:
    """Delete a cron entry and its runs not yet delivered; `NotFound` when there is none."""
    return Call("DELETE", _queue_path(queue, "cron", _segment(name)), _nothing)


def _present(**fields: Any) -> dict[str, Any]:
    """The fields that were given (not None)."""
    return {name: value for name, value in fields.items() if value is not None}
