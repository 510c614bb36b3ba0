"""Queues as a whole: the list of them, and a queue's stats, pause and resume, purge,
settings and redrive."""

from __future__ import annotations

from hourglass_client._operations.call import Call, present, queue_path, read_json
from hourglass_client.models.queues import (
    PushTarget,
    QueueSettings,
    QueueStats,
    Rate,
    RedriveResult,
    RetryPolicy,
)
from hourglass_client.models.times import Seconds, seconds


def queues() -> Call[list[QueueStats]]:
    """The stats of every queue that holds messages or cron entries (that the token may see)."""
    return Call(
        "GET",
        "/v1/queues",
        read_json(lambda data: [QueueStats.from_json(item) for item in data["queues"]]),
        repeatable=True,
    )


def stats(queue: str) -> Call[QueueStats]:
    """How many messages the queue holds, by state (zeros for an unknown queue)."""
    return Call("GET", queue_path(queue), read_json(QueueStats.from_json), repeatable=True)


def pause(queue: str) -> Call[QueueStats]:
    """Pause the queue: it delivers nothing (polls answer empty, push sends nothing) until
    resumed, on every replica within a second; offers, acknowledgements and the rest go on.
    Pausing a paused queue is no error."""
    return Call("POST", queue_path(queue, "pause"), read_json(QueueStats.from_json))


def resume(queue: str) -> Call[QueueStats]:
    """Resume a paused queue (no error when it is not paused); polls waiting on it wake."""
    return Call("POST", queue_path(queue, "resume"), read_json(QueueStats.from_json))


def purge(queue: str) -> Call[int]:
    """Delete every message of the queue; how many. Never retried."""
    return Call(
        "DELETE",
        queue_path(queue),
        read_json(lambda data: int(data["deleted"])),
        params={"confirm": queue},
    )


def get_settings(queue: str) -> Call[QueueSettings]:
    """The queue's settings as they apply, defaults filled in."""
    return Call(
        "GET", queue_path(queue, "settings"), read_json(QueueSettings.from_json), repeatable=True
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
    body = present(
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
        queue_path(queue, "settings"),
        read_json(QueueSettings.from_json),
        json=body,
        repeatable=True,
    )


def redrive(queue: str, *, to: str | None = None, max: int | None = None) -> Call[RedriveResult]:
    """Move the dead letters of `queue` back, due now: each to the queue it came from, or all
    `to` one queue; at most `max`. Never retried."""
    return Call(
        "POST",
        queue_path(queue, "redrive"),
        read_json(RedriveResult.from_json),
        json=present(to=to, max=max),
    )
