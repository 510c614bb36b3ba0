"""The statements of leases: a poll's claim, the dead letters it holds back, redrive, and
acknowledge, extend and release by lock id (all that a lock holds, or some of its keys).

Built once as Core objects with bound parameters; a dialect's variant of one is in its
modules (app/storage/dialects/<db>) under the same name. What a claim returns and how
it runs without RETURNING is app/storage/claims.py.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from sqlalchemy import (
    BigInteger,
    String,
    bindparam,
    case,
    delete,
    func,
    insert,
    literal_column,
    null,
    select,
    update,
)
from sqlalchemy.sql import Select
from sqlalchemy.sql.dml import Update

from app.domain.messages import PRIORITIES
from app.storage.statements.common import (
    Removal,
    by_key,
    by_lock,
    columns,
    in_queue,
    is_due,
    keys_in_queue,
    not_expired,
    removal,
    starting_over,
    waiting_again,
)
from app.storage.tables import delayed_queue as queue_table
from app.storage.tables import delivery_starts, queue_settings

__all__ = [
    "CLAIM_ORDER",
    "PAYLOAD_READ_BYTES",
    "claim_candidates",
    "claim_give_back",
    "claim_update",
    "claim_update_limited",
    "claim_values",
    "claim_values_limited",
    "claimed_payloads",
    "claims",
    "dead_letter_keys",
    "dead_letter_move",
    "dead_letter_record",
    "existing_keys",
    "expiry",
    "keyed_locks",
    "limits_leased",
    "limits_lock",
    "limits_started",
    "limits_started_insert",
    "limits_started_prune",
    "lock_acknowledge",
    "lock_extend",
    "lock_held_rows",
    "lock_lease_ends",
    "lock_release",
    "message_held",
    "redrive_candidates",
    "redrive_move",
]

# Among a queue's due messages a poll takes the highest priority first, then the
# earliest due, then the lowest id: the order of the poll's index (revision 0009).
# "Due" is a prefix of each priority's range of that index, not one range: the
# poll reads the ten ranges, highest first, and stops once it has its rows
# (docs/decisions/0017-priorities.md). Here as `priority IN (9, …, 0)`, written
# out, which MariaDB and SQLite read as ten ranges in the index's order (priority
# DESC), so no sort; PostgreSQL (15) cannot, and reads one range per priority
# through a LATERAL subquery instead (its dialect).
CLAIM_ORDER = (columns.priority.desc(), columns.scheduledAt, columns.id)
any_priority = columns.priority.in_([literal_column(str(value)) for value in PRIORITIES])
# Poll: the due rows in CLAIM_ORDER, skipping rows another transaction holds, each
# with the length of its payload (length() counts the bytes of a binary value on
# every database; SQLite 3.40 has no octet_length), and its payload only when it
# is at most "inline_payload_bytes": a poll takes the rows whose answer fits (see
# app/storage/claims.py: answer_length), and reads the other payloads of those only, after, in results
# of about PAYLOAD_READ_BYTES.
_payload_bytes = func.length(columns.payload)
claim_candidates = (
    select(
        columns.id,
        columns.pKey,
        columns.scheduledAt,
        columns.scheduledAtInitially,
        columns.createdAt,
        columns.lockUuid,
        columns.deliveries,
        columns.firstDeliveredAt,
        columns.lastDeliveredAt,
        columns.deadLetteredFrom,
        columns.priority,
        columns.messageGroup,
        columns.expiresAt,
        columns.trace,
        _payload_bytes.label("payload_bytes"),
        case((_payload_bytes <= bindparam("inline_payload_bytes"), columns.payload)).label(
            "payload"
        ),
    )
    .where(in_queue, any_priority, is_due, not_expired)
    .order_by(*CLAIM_ORDER)
    .limit(bindparam("limit"))
    .with_for_update(skip_locked=True)
)
# What a poll sets on each row it takes: the lease, and the delivery counts.
claim_values = {
    "scheduledAt": bindparam("lease_until"),
    "lockUuid": bindparam("lock_id"),
    "deliveries": columns.deliveries + 1,
    "firstDeliveredAt": func.coalesce(columns.firstDeliveredAt, bindparam("now")),
    "lastDeliveredAt": bindparam("now"),
}
# The same in a queue with a delivery limit ("max_deliveries"): a row that has
# reached it is not delivered but held under a second lock id ("dead_lock_id")
# until "dead_hold_until", not counted, and the store then moves it to the
# dead-letter queue. Should that move not happen (the process dies, the database
# goes away), the row comes back when the hold ends and the next poll moves it.
# Queues without a limit keep the plain statement: PostgreSQL plans each poll
# afresh (force_custom_plan), and the CASEs cost max=1 polls ~10%.
# The CASEs read "deliveries" before it is set: MariaDB evaluates SET clauses
# left to right, so it comes last (ordered_values), where every database agrees.
_deliverable = columns.deliveries < bindparam("max_deliveries")
claim_values_limited = (
    (
        columns.scheduledAt,
        case((_deliverable, bindparam("lease_until")), else_=bindparam("dead_hold_until")),
    ),
    (columns.lockUuid, case((_deliverable, bindparam("lock_id")), else_=bindparam("dead_lock_id"))),
    (
        columns.firstDeliveredAt,
        case(
            (_deliverable, func.coalesce(columns.firstDeliveredAt, bindparam("now"))),
            else_=columns.firstDeliveredAt,
        ),
    ),
    (
        columns.lastDeliveredAt,
        case((_deliverable, bindparam("now")), else_=columns.lastDeliveredAt),
    ),
    (columns.deliveries, case((_deliverable, columns.deliveries + 1), else_=columns.deliveries)),
)
_claimed_ids = columns.id.in_(bindparam("ids", expanding=True))
claim_update = update(queue_table).where(_claimed_ids).values(claim_values)
claim_update_limited = update(queue_table).where(_claimed_ids).ordered_values(*claim_values_limited)

# The claim as one statement (UPDATE … RETURNING), by (a delivery limit, more than one
# message), where a dialect has it (PostgreSQL's variant); none here, and a poll selects
# claim_candidates, then runs claim_update or claim_update_limited on those whose
# answer fits (app/storage/claims.py: claim_select_then_update).
claims: Mapping[tuple[bool, bool], Update] = {}

# A claim in a queue with `max_leased` or `rate` (docs/decisions/0026-concurrency-and-rate-limits.md)
# runs in one transaction that first locks the queue's settings row: the claims of that
# queue then take turns on every replica and process, and each reads the limits as they
# are now, then counts, after the claim before it committed, what they leave room for.
# Queues without limits never run these: their claim is as it was.
limits_lock = (
    select(queue_settings.c.maxLeased, queue_settings.c.rateLimit, queue_settings.c.ratePeriodMs)
    .where(queue_settings.c.queue == bindparam("queue"))
    .with_for_update()
)
# Its leases that have not run out, and when the first of them does: a message is leased
# while a lock holds it and its lease (`scheduledAt`) ends after now. Read through the
# partial index of leased messages (revision 0013), which holds no message waiting to be
# due (PostgreSQL and SQLite; MariaDB's variant reads its lock index).
_live_leases = (columns.pKind == bindparam("queue"), columns.lockUuid.is_not(None))
limits_leased = select(func.count(), func.min(columns.scheduledAt)).where(
    *_live_leases, columns.scheduledAt > bindparam("now")
)
# The deliveries begun in the rate's window (after "window_start", now minus the period),
# and when the oldest of those rows began; then the claim's own row, and the rows that
# have left the window pruned, in the same transaction.
_starts = delivery_starts.c
_in_window = (_starts.queue == bindparam("queue"), _starts.startedAt > bindparam("window_start"))
limits_started = select(
    func.coalesce(func.sum(_starts.deliveries), 0), func.min(_starts.startedAt)
).where(*_in_window)
limits_started_insert = insert(delivery_starts)
limits_started_prune = delete(delivery_starts).where(
    _starts.queue == bindparam("queue"), _starts.startedAt <= bindparam("window_start")
)

# A poll that cannot answer gives back a row it took, by id ("claimed_id"), while its
# lock still holds it: every column the claim set as it was (an expired lease still
# belongs to its holder until a poll takes it, so its lock comes back too).
claim_give_back = (
    update(queue_table)
    .where(columns.id == bindparam("claimed_id"), columns.lockUuid == bindparam("lock_id"))
    .values(
        scheduledAt=bindparam("previous_scheduled_at"),
        lockUuid=bindparam("previous_lock_id", type_=String),
        deliveries=bindparam("previous_deliveries"),
        firstDeliveredAt=bindparam("previous_first_delivered_at", type_=BigInteger),
        lastDeliveredAt=bindparam("previous_last_delivered_at", type_=BigInteger),
    )
)

# The payloads of the rows a poll took, by id, while its lock still holds them.
claimed_payloads = select(columns.id, columns.payload).where(
    _claimed_ids, columns.lockUuid == bindparam("lock_id")
)
# A driver holds a whole result while it turns it into Python bytes (PostgreSQL's text
# protocol as hex, twice the payloads' size; MariaDB's client every row of it): a poll
# reads payloads in results of about this many bytes (one larger payload alone), so a
# big poll holds little more than its answer. One payload of the default largest size
# fits, and so does a poll of 1000 messages of up to 262 bytes (in one statement on
# PostgreSQL); a larger read made a 16 MiB answer cost 1.18x its size, not 1.10x.
PAYLOAD_READ_BYTES = 256 * 1024

# Which of these keys exist already (a list bound as "keys"): a dead letter's and a
# redriven message's key in the queue they go to.
existing_keys = keys_in_queue(columns.pKey)

# Dead-lettering what a poll held under its second lock id, one key at a time:
# record it, then move it (key and payload kept) into the dead-letter queue as a
# new message due now, which does not expire ("expired_at": when it expired, for one
# the expiry sweep moves; null for one past its delivery limit). A key the dead-letter
# queue holds already is replaced, unless a worker holds that message: then this one
# waits for the next try.
_dead_held = (columns.lockUuid == bindparam("dead_lock_id")) & in_queue
_dead_held_key = _dead_held & (columns.pKey == bindparam("key"))
dead_letter_keys = select(columns.pKey).where(_dead_held).with_for_update()
dead_letter_record = removal(_dead_held_key).record
dead_letter_move = (
    update(queue_table)
    .where(_dead_held_key)
    .values(
        {
            **starting_over(bindparam("now")),
            "pKind": bindparam("dead_letter_queue"),
            "deadLetteredFrom": bindparam("queue"),
            "priority": waiting_again,
            "expiredAt": bindparam("expired_at", type_=BigInteger),
        }
    )
)
# Whether a worker holds the message under `key` now (leased, lease not run out).
message_held = select(columns.lockUuid.is_not(None) & ~is_due).where(by_key).with_for_update()

# Redrive: a dead-letter queue's messages that no worker holds, oldest row first,
# then each moved back (to the queue it came from, or another) as a new message due now.
redrive_candidates = (
    select(columns.id, columns.pKey, columns.deadLetteredFrom)
    .where(in_queue, columns.lockUuid.is_(None) | is_due, columns.id > bindparam("after"))
    .order_by(columns.id)
    .limit(bindparam("limit"))
    .with_for_update(skip_locked=True)
)
redrive_move = (
    update(queue_table)
    .where(by_key)
    .values(
        pKind=bindparam("target"),
        deadLetteredFrom=null(),
        priority=waiting_again,
        **starting_over(bindparam("now")),
    )
)

# Acknowledge, extend, release: whatever the lock still holds in this queue.
lock_acknowledge = removal(by_lock)
lock_extend = update(queue_table).where(by_lock).values(scheduledAt=bindparam("until"))
# When the leases of what a lock holds end: an extend in a queue with `max_leased` revives
# one already run out only while the limit has room for it
# (docs/decisions/0026-concurrency-and-rate-limits.md).
lock_lease_ends = select(columns.scheduledAt).where(by_lock)
# A released message must come back as a redelivery, and redelivery is read as
# scheduledAt != scheduledAtInitially. They can only match when released with no
# delay in the very millisecond it first came due: then make it due 1 ms earlier,
# which changes nothing for a message that is due now anyway.
lock_release = (
    update(queue_table)
    .where(by_lock)
    .values(
        scheduledAt=case(
            (columns.scheduledAtInitially == bindparam("at"), bindparam("at") - 1),
            else_=bindparam("at"),
        ),
        lockUuid=null(),
    )
)

# A release whose messages are each due at their own time (the queue's retry delays
# grow with each message's deliveries): what the lock holds, locked, read first; the
# store works out each due time, then writes them (KeyedLocks.release_rows).
_held_rows = select(
    columns.id, columns.pKey, columns.deliveries, columns.scheduledAtInitially
).order_by(columns.id)  # locked in id order, as every such release locks them
lock_held_rows = _held_rows.where(by_lock).with_for_update()


def listed(column: Any, name: str) -> Any:
    """`column` is one of the list bound as `name` (an expanding IN)."""
    return column.in_(bindparam(name, expanding=True))


@dataclass(frozen=True, eq=False)
class KeyedLocks:
    """The statements over some keys of what one lock holds (per-key acknowledge and
    release, decision 14): the lock ("lock_id") and queue ("queue") as for the whole lock,
    the keys bound as one list ("keys"). A key the lock no longer holds (acknowledged,
    updated since, or its lease run out and taken by another poll) matches nothing,
    exactly as the whole lock's statements fence it."""

    # Deleting those keys' rows, recorded as acknowledged (through Removals).
    acknowledge: Removal
    # Those keys' rows, locked, with what a release needs (id, key, deliveries, first due).
    held: Select
    # Releasing rows by id ("ids", read by `held` or lock_held_rows in this transaction)
    # while the lock holds them: due at "at", held by nobody.
    release_rows: Update


def build_keyed_locks(listed: Callable[[Any, str], Any] = listed) -> KeyedLocks:
    """KeyedLocks whose lists are bound by `listed` (a dialect without expanding IN binds
    an array)."""
    of_keys = by_lock & listed(columns.pKey, "keys")
    return KeyedLocks(
        acknowledge=removal(of_keys),
        held=_held_rows.where(of_keys).with_for_update(),
        release_rows=update(queue_table)
        .where(listed(columns.id, "ids"), by_lock)
        .values(scheduledAt=bindparam("at"), lockUuid=null()),
    )


# Some keys of what one lock holds: per-key acknowledge and release (an expanding IN
# here; PostgreSQL's direct path binds arrays instead, its variant).
keyed_locks = build_keyed_locks()


@dataclass(frozen=True, eq=False)
class Expiry:
    """The statements of the expiry sweep (docs/decisions/0028-expiry.md): the messages
    whose expiry ("expires_at" is at most "now") has passed, read through the expiry index
    (revision 0014) across every queue, the earliest first."""

    # Whether any has expired (an idle sweep's one read, in autocommit).
    due: Select
    # Up to "limit" of them, locked, skipping rows another transaction holds (another
    # replica's sweep, a poll, an acknowledgement): each its id and queue.
    candidates: Select
    # Those of one queue ("ids") held for the move to its dead-letter queue under a lock id
    # nobody else knows ("dead_lock_id"): the holder of a lease loses it at once.
    hold: Update
    # Deleting those of them ("ids") still in "queue", recorded in the history as expired
    # (through Removals).
    remove: Removal
    # Of some queues ("queues"), those whose settings give a dead-letter queue: a delivery
    # limit (dead letters go to `{queue}.dead` unless named) or a named one.
    dead_letter_queues: Select


_expired = columns.expiresAt <= bindparam("now")


def build_expiry(listed: Callable[[Any, str], Any] = listed) -> Expiry:
    """Expiry whose lists are bound by `listed` (a dialect without expanding IN binds an
    array)."""
    settings = queue_settings.c
    return Expiry(
        due=select(columns.id).where(_expired).limit(1),
        candidates=select(columns.id, columns.pKind)
        .where(_expired)
        .order_by(columns.expiresAt)
        .limit(bindparam("limit"))
        .with_for_update(skip_locked=True),
        hold=update(queue_table)
        .where(listed(columns.id, "ids"))
        .values(lockUuid=bindparam("dead_lock_id")),
        remove=removal(listed(columns.id, "ids") & in_queue),
        dead_letter_queues=select(
            settings.queue, settings.maxDeliveries, settings.deadLetterQueue
        ).where(
            listed(settings.queue, "queues"),
            settings.maxDeliveries.is_not(None) | settings.deadLetterQueue.is_not(None),
        ),
    )


expiry = build_expiry()
