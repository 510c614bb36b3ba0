"""The statements of leases: a poll's claim (and its row type), the dead letters it
holds back, redrive, and acknowledge, extend and release by lock id (all that a lock
holds, or some of its keys).

Built once as Core objects with bound parameters, like app/storage/sql.py, whose
columns and conditions they share; a dialect replaces only the clause it must.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import (
    BigInteger,
    String,
    bindparam,
    case,
    func,
    literal_column,
    null,
    select,
    update,
)
from sqlalchemy.sql import Select
from sqlalchemy.sql.dml import Update

from app.domain.messages import POLL_MESSAGE_ENVELOPE_BYTES, PRIORITIES
from app.storage import sql
from app.storage.connection import Connection
from app.storage.sql import Removal, columns, removal
from app.storage.tables import delayed_queue as queue_table

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
# answer_length), and reads the other payloads of those only, after, in results
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
        _payload_bytes.label("payload_bytes"),
        case((_payload_bytes <= bindparam("inline_payload_bytes"), columns.payload)).label(
            "payload"
        ),
    )
    .where(sql.in_queue, any_priority, sql.is_due)
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

# A poll that cannot answer gives back a row it took, by id ("claimed_id"), while its
# lock still holds it: every column the claim set as it was (an expired lease still
# belongs to its holder until a poll takes it, SPEC §2, so its lock comes back too).
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

# Dead-lettering what a poll held under its second lock id, one key at a time:
# record it, then move it (key and payload kept) into the dead-letter queue as a
# new message due now. A key the dead-letter queue holds already is replaced,
# unless a worker holds that message: then this one waits for the next try.
_dead_held = (columns.lockUuid == bindparam("dead_lock_id")) & sql.in_queue
_dead_held_key = _dead_held & (columns.pKey == bindparam("key"))
dead_letter_keys = select(columns.pKey).where(_dead_held).with_for_update()
dead_letter_record = removal(_dead_held_key).record
dead_letter_move = (
    update(queue_table)
    .where(_dead_held_key)
    .values(
        pKind=bindparam("dead_letter_queue"),
        deadLetteredFrom=bindparam("queue"),
        **sql.starting_over(bindparam("now")),
    )
)
# Whether a worker holds the message under `key` now (leased, lease not run out).
message_held = (
    select(columns.lockUuid.is_not(None) & ~sql.is_due).where(sql.by_key).with_for_update()
)

# Redrive: a dead-letter queue's messages that no worker holds, oldest row first,
# then each moved back (to the queue it came from, or another) as a new message due now.
redrive_candidates = (
    select(columns.id, columns.pKey, columns.deadLetteredFrom)
    .where(sql.in_queue, columns.lockUuid.is_(None) | sql.is_due, columns.id > bindparam("after"))
    .order_by(columns.id)
    .limit(bindparam("limit"))
    .with_for_update(skip_locked=True)
)
redrive_move = (
    update(queue_table)
    .where(sql.by_key)
    .values(
        pKind=bindparam("target"),
        deadLetteredFrom=null(),
        **sql.starting_over(bindparam("now")),
    )
)

# Acknowledge, extend, release: whatever the lock still holds in this queue.
lock_acknowledge = removal(sql.by_lock)
lock_extend = update(queue_table).where(sql.by_lock).values(scheduledAt=bindparam("until"))
# A released message must come back as a redelivery, and redelivery is read as
# scheduledAt != scheduledAtInitially. They can only match when released with no
# delay in the very millisecond it first came due: then make it due 1 ms earlier,
# which changes nothing for a message that is due now anyway.
lock_release = (
    update(queue_table)
    .where(sql.by_lock)
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
lock_held_rows = _held_rows.where(sql.by_lock).with_for_update()


def listed(column: Any, name: str) -> Any:
    """`column` is one of the list bound as `name` (an expanding IN)."""
    return column.in_(bindparam(name, expanding=True))


@dataclass(frozen=True, eq=False)
class KeyedLocks:
    """The statements over some keys of what one lock holds (per-key acknowledge and
    release, SPEC §10): the lock ("lock_id") and queue ("queue") as for the whole lock,
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


def keyed_locks(listed: Callable[[Any, str], Any] = listed) -> KeyedLocks:
    """KeyedLocks whose lists are bound by `listed` (a dialect without expanding IN binds
    an array)."""
    of_keys = sql.by_lock & listed(columns.pKey, "keys")
    return KeyedLocks(
        acknowledge=removal(of_keys),
        held=_held_rows.where(of_keys).with_for_update(),
        release_rows=update(queue_table)
        .where(listed(columns.id, "ids"), sql.by_lock)
        .values(scheduledAt=bindparam("at"), lockUuid=null()),
    )


async def release_due(
    connection: Connection, statement: Update, parameters: dict, due: dict[int, int]
) -> None:
    """Release the rows `due` maps (id → due time) with `statement` (KeyedLocks.release_rows),
    one statement per distinct due time: one for a release with a fixed delay, one per
    delivery count for a policy without jitter."""
    by_time: dict[int, list[int]] = {}
    for row_id, at in due.items():
        by_time.setdefault(at, []).append(row_id)
    for at, ids in by_time.items():
        await connection.execute(statement, {**parameters, "at": at, "ids": ids})


@dataclass(frozen=True, slots=True)
class ClaimedRow:
    """A row taken by a poll, with what the poll set (`scheduledAt`, the lock and the
    delivery counts) as it was before.

    `payload` is None until read (see read_payloads); `payload_bytes` is its length."""

    id: int
    key: str
    payload: bytes | None
    payload_bytes: int
    previous_scheduled_at: int
    scheduled_at_initially: int
    created_at: int
    previous_lock_id: str | None
    previous_deliveries: int
    previous_first_delivered_at: int | None
    previous_last_delivered_at: int | None
    dead_lettered_from: str | None
    priority: int

    def delivered(self, max_deliveries: int | None) -> bool:
        """Whether a poll in a queue with that delivery limit (None: none) delivers this
        row, rather than holding it to dead-letter."""
        return max_deliveries is None or self.previous_deliveries < max_deliveries

    def answer_bytes(self, max_deliveries: int | None) -> int:
        """What the row adds to the answer of a poll in a queue with that delivery limit,
        at most: its payload and the fields around it, or nothing when it is not delivered."""
        if not self.delivered(max_deliveries):
            return 0
        return self.payload_bytes + POLL_MESSAGE_ENVELOPE_BYTES


def answer_length(sizes: Sequence[int], max_bytes: int) -> int:
    """How many of the rows of `sizes` (answer bytes each, in CLAIM_ORDER) a poll takes:
    those whose answer up to and including them fits in `max_bytes`, and the first
    delivered one always (with any not delivered before it, which count 0). The
    PostgreSQL dialect says the same in SQL."""
    running = 0
    for taken, size in enumerate(sizes):
        running += size
        if running > max_bytes and running != size:
            return taken
    return len(sizes)


async def read_payloads(
    connection: Connection,
    statement: Select[Any],
    sized: Sequence[tuple[int, int]],
    parameters: dict[str, Any],
) -> dict[int, bytes]:
    """The payloads that `statement` (ids bound as "ids", and `parameters`) finds of the rows
    `sized` lists as (id, payload bytes), by id, read in results of about
    PAYLOAD_READ_BYTES."""
    payloads: dict[int, bytes] = {}
    start = 0
    while start < len(sized):
        end, size = start + 1, sized[start][1]
        while end < len(sized) and size + sized[end][1] <= PAYLOAD_READ_BYTES:
            size += sized[end][1]
            end += 1
        ids = [row_id for row_id, _ in sized[start:end]]
        found = await connection.execute(statement, {**parameters, "ids": ids})
        payloads.update((row.id, row.payload) for row in found)
        start = end
    return payloads


async def claim_select_then_update(
    connection: Connection, candidates: Select, parameters: dict
) -> list[ClaimedRow]:
    """Poll for databases without `UPDATE … RETURNING`, in one transaction: select the
    candidates (`candidates`: claim_candidates, or a dialect's form of it), then update
    those whose answer fits. The select reads a candidate's
    payload when it is small enough that all of them fit in one read's
    PAYLOAD_READ_BYTES: every poll of small messages makes these two statements (as
    before the bound), and one cut short reads little for nothing; the store reads
    the other payloads after."""
    inline = {"inline_payload_bytes": PAYLOAD_READ_BYTES // parameters["limit"]}
    rows = [
        ClaimedRow(
            id=row.id,
            key=row.pKey,
            payload=row.payload,
            payload_bytes=row.payload_bytes,
            previous_scheduled_at=row.scheduledAt,
            scheduled_at_initially=row.scheduledAtInitially,
            created_at=row.createdAt,
            previous_lock_id=row.lockUuid,
            previous_deliveries=row.deliveries,
            previous_first_delivered_at=row.firstDeliveredAt,
            previous_last_delivered_at=row.lastDeliveredAt,
            dead_lettered_from=row.deadLetteredFrom,
            priority=row.priority,
        )
        for row in await connection.execute(candidates, {**parameters, **inline})
    ]
    sizes = [row.answer_bytes(parameters.get("max_deliveries")) for row in rows]
    rows = rows[: answer_length(sizes, parameters["max_bytes"])]
    if not rows:
        return []
    update = claim_update_limited if "max_deliveries" in parameters else claim_update
    await connection.execute(update, {**parameters, "ids": [row.id for row in rows]})
    return rows
