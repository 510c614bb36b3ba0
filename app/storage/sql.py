"""The documented statements, built once as Core objects with bound parameters.

Every dialect runs these; a dialect module replaces only the clause it must
(the insert that ignores duplicates, the one-statement claim on PostgreSQL).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import (
    BigInteger,
    String,
    and_,
    bindparam,
    case,
    column,
    delete,
    func,
    insert,
    null,
    select,
    table,
    update,
)
from sqlalchemy.engine import Connection
from sqlalchemy.sql import Select
from sqlalchemy.sql.dml import Delete, Insert

from app.domain.messages import POLL_MESSAGE_ENVELOPE_BYTES
from app.storage.tables import cron_entries, delivery_history, queue_settings
from app.storage.tables import delayed_queue as queue_table

columns = queue_table.c
history = delivery_history.c

_in_queue = columns.pKind == bindparam("queue")
_by_key = (columns.pKey == bindparam("key")) & _in_queue
_by_lock = (columns.lockUuid == bindparam("lock_id")) & _in_queue
_is_due = columns.scheduledAt <= bindparam("now")

# The history's columns, and what a removed row gives them: the time the producer
# asked for, the delivery counts, how it ended (bound as "outcome") and when ("now").
HISTORY_COLUMNS = (
    "queue",
    "key",
    "scheduledAt",
    "createdAt",
    "firstDeliveredAt",
    "lastDeliveredAt",
    "deliveries",
    "outcome",
    "finishedAt",
)


# The message table's columns a history row takes, in HISTORY_COLUMNS' order.
HISTORY_SOURCE = (
    "pKind",
    "pKey",
    "scheduledAtInitially",
    "createdAt",
    "firstDeliveredAt",
    "lastDeliveredAt",
    "deliveries",
)


def history_values(rows) -> tuple:
    """The history's values for each of `rows` (the message table, or rows it returned)."""
    return (
        rows.pKind,
        rows.pKey,
        rows.scheduledAtInitially,
        rows.createdAt,
        rows.firstDeliveredAt,
        rows.lastDeliveredAt,
        rows.deliveries,
        bindparam("outcome", type_=String),
        bindparam("now", type_=BigInteger),
    )


@dataclass(frozen=True, eq=False)
class Removal:
    """Deleting the messages that match `where`, and the INSERT that records them in the
    history first (both in one transaction; PostgreSQL does both in one statement).

    `keys_after` names the parameter of a removal whose rows are the keys after it in
    one range of the (`pKey`, `pKind`) index: a removal too large for one statement
    (MariaDB's) then goes on in pages of that index, each starting where the last ended.
    """

    where: Any
    delete: Delete
    record: Insert
    keys_after: str | None = None


def removal(where: Any, keys_after: str | None = None) -> Removal:
    return Removal(
        where,
        delete(queue_table).where(where),
        insert(delivery_history).from_select(
            HISTORY_COLUMNS, select(*history_values(columns)).where(where)
        ),
        keys_after,
    )


def _starting_over(due: Any) -> dict[str, Any]:
    """The columns of a message that starts a new life (an update, a dead letter, a
    redriven one): due at `due` as asked, held by nobody, no delivery counted yet."""
    return {
        "scheduledAt": due,
        "scheduledAtInitially": due,
        "lockUuid": null(),
        "deliveries": 0,
        "firstDeliveredAt": null(),
        "lastDeliveredAt": null(),
    }


# Offer, the update path: lock the row, then compare-and-swap on the values read.
# An update rewrites payload and schedule and clears the lock, so the current
# holder's acknowledgement no longer deletes the new message. The new content
# starts a new life: its deliveries are counted from zero (a message that failed
# three times and is then corrected gets its full allowance of deliveries). A dead
# letter corrected in place keeps the queue it came from, for a redrive, when the
# request may use that queue; otherwise it loses it ("new_origin" is null), so a
# token limited to the dead-letter queue cannot put its content on the way back to
# a queue it may not write. The origin is part of the swap's comparison, so what is
# kept is what was judged.
offer_select_for_update = (
    select(
        columns.payload, columns.scheduledAtInitially, columns.createdAt, columns.deadLetteredFrom
    )
    .where(_by_key)
    .with_for_update()
)
offer_update = (
    update(queue_table)
    .where(
        _by_key,
        columns.scheduledAtInitially == bindparam("old_scheduled_at_initially"),
        columns.createdAt == bindparam("old_created_at"),
        columns.deadLetteredFrom.is_not_distinct_from(bindparam("old_origin")),
    )
    .values(
        payload=bindparam("new_payload"),
        createdAt=bindparam("now"),
        deadLetteredFrom=bindparam("new_origin"),
        **_starting_over(bindparam("new_scheduled_at")),
    )
)

# Offer with if_exists=ignore, when the key exists: the time the stored message asked for.
offer_stored_schedule = select(columns.scheduledAtInitially).where(_by_key)


def keys_in_queue(*selected: Any) -> Select:
    """`selected` of the rows of one queue whose keys are in the list bound as "keys"."""
    return select(*selected).where(_in_queue, columns.pKey.in_(bindparam("keys", expanding=True)))


# Which of these keys exist already (dead letters, redrive).
existing_keys = keys_in_queue(columns.pKey)
# Batch offer: what is stored under keys that exist, to tell the unchanged ones; a
# dialect with a hash function compares digests instead of whole payloads.
stored_offers = keys_in_queue(
    columns.pKey, columns.payload.label("digest"), columns.scheduledAtInitially
)

# Poll: the due rows, oldest first, skipping rows another transaction holds, each
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
        _payload_bytes.label("payload_bytes"),
        case((_payload_bytes <= bindparam("inline_payload_bytes"), columns.payload)).label(
            "payload"
        ),
    )
    .where(_in_queue, _is_due)
    .order_by(columns.scheduledAt)
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
_dead_held = (columns.lockUuid == bindparam("dead_lock_id")) & _in_queue
_dead_held_key = _dead_held & (columns.pKey == bindparam("key"))
dead_letter_keys = select(columns.pKey).where(_dead_held).with_for_update()
dead_letter_record = removal(_dead_held_key).record
dead_letter_move = (
    update(queue_table)
    .where(_dead_held_key)
    .values(
        pKind=bindparam("dead_letter_queue"),
        deadLetteredFrom=bindparam("queue"),
        **_starting_over(bindparam("now")),
    )
)
# Whether a worker holds the message under `key` now (leased, lease not run out).
message_held = select(columns.lockUuid.is_not(None) & ~_is_due).where(_by_key).with_for_update()

# Redrive: a dead-letter queue's messages that no worker holds, oldest row first,
# then each moved back (to the queue it came from, or another) as a new message due now.
redrive_candidates = (
    select(columns.id, columns.pKey, columns.deadLetteredFrom)
    .where(_in_queue, columns.lockUuid.is_(None) | _is_due, columns.id > bindparam("after"))
    .order_by(columns.id)
    .limit(bindparam("limit"))
    .with_for_update(skip_locked=True)
)
redrive_move = (
    update(queue_table)
    .where(_by_key)
    .values(
        pKind=bindparam("target"),
        deadLetteredFrom=null(),
        **_starting_over(bindparam("now")),
    )
)

# Acknowledge, extend, release: whatever the lock still holds in this queue.
lock_acknowledge = removal(_by_lock)
lock_extend = update(queue_table).where(_by_lock).values(scheduledAt=bindparam("until"))
# A released message must come back as a redelivery, and redelivery is read as
# scheduledAt != scheduledAtInitially. They can only match when released with no
# delay in the very millisecond it first came due: then make it due 1 ms earlier,
# which changes nothing for a message that is due now anyway.
lock_release = (
    update(queue_table)
    .where(_by_lock)
    .values(
        scheduledAt=case(
            (columns.scheduledAtInitially == bindparam("at"), bindparam("at") - 1),
            else_=bindparam("at"),
        ),
        lockUuid=null(),
    )
)

message_get = select(
    columns.pKey,
    columns.payload,
    columns.scheduledAt,
    columns.scheduledAtInitially,
    columns.createdAt,
    columns.lockUuid.is_not(None).label("locked"),
    columns.deliveries,
    columns.deadLetteredFrom,
).where(_by_key)
message_delete = removal(_by_key)

# When a queue next has something to deliver (a due message or an ending lease).
queue_next_due = select(func.min(columns.scheduledAt)).where(_in_queue)
queue_purge = removal(_in_queue)


@dataclass(frozen=True, eq=False)
class EntryRuns:
    """The statements over one cron entry's runs (of one configuration, or of all)."""

    keys: Select  # the keys of its runs, whatever their state
    delete_pending: Removal  # its runs no worker holds (one in flight stays with its worker)


def entry_runs(
    after: Callable[[Any], Any] = columns.pKey.__gt__,
    before: Callable[[Any], Any] = columns.pKey.__lt__,
    also: Sequence[Any] = (),
    unindexed: Callable[[Any], Any] = lambda column: column,
) -> EntryRuns:
    """EntryRuns of the keys strictly between "after_key" and "before_key" in byte
    order that match the LIKE "pattern", in the queue "queue".

    A dialect whose `<` and `>` on keys do not compare bytes gives `after` and `before`
    that do, and `also`, further conditions its indexes need; `unindexed` wraps the
    other columns compared, to keep their indexes out of the plan. The bounds
    (app/cron/schedule.py: run_key_range) make an entry's runs one range of an index,
    whatever else the queue holds: a LIKE alone was a scan of the queue (issue 14: an
    uninstall took 1.7-2.2 s beside 100,000 messages on MariaDB, 37 ms on PostgreSQL).
    The pattern (run_key_pattern) then drops the runs of entries named `name/…`, whose
    keys are in the range too. Both compare case-sensitively.
    """
    matching = and_(
        unindexed(columns.pKind) == bindparam("queue"),
        after(bindparam("after_key", type_=String)),
        before(bindparam("before_key", type_=String)),
        columns.pKey.like(bindparam("pattern"), escape="\\"),
        *also,
    )
    pending = unindexed(columns.lockUuid).is_(None)
    return EntryRuns(
        keys=select(columns.pKey).where(matching),
        delete_pending=removal(matching & pending, keys_after="after_key"),
    )


# MariaDB's keys compare byte by byte (utf8mb4_nopad_bin), SQLite's too (BINARY).
runs = entry_runs()

cron = cron_entries.c
# Not "queue" and "name": an UPDATE reserves its columns' names for their new values.
_cron_entry = (cron.queue == bindparam("entry_queue")) & (cron.name == bindparam("entry_name"))
cron_select = select(cron_entries).where(_cron_entry)
cron_select_for_update = cron_select.with_for_update()
cron_insert = insert(cron_entries)
cron_update = (
    update(cron_entries)
    .where(_cron_entry)
    .values(
        schedule=bindparam("new_schedule"),
        payload=bindparam("new_payload"),
        configHash=bindparam("new_config_hash"),
        lookaheadMs=bindparam("new_lookahead_ms"),
        updatedAt=bindparam("now"),
    )
)
cron_delete = delete(cron_entries).where(_cron_entry)
cron_list_queue = select(cron_entries).where(cron.queue == bindparam("queue")).order_by(cron.name)
cron_list_all = select(cron_entries).order_by(cron.queue, cron.name)
cron_queues = select(cron.queue).distinct()
cron_names = select(cron.queue, cron.name)


settings = queue_settings.c
settings_select = select(queue_settings).where(settings.queue == bindparam("queue"))
settings_queues = select(settings.queue)
settings_insert = insert(queue_settings)
# Not "queue": an UPDATE reserves its columns' names for their new values.
settings_update = (
    update(queue_settings)
    .where(settings.queue == bindparam("settings_queue"))
    .values(
        defaultLeaseMs=bindparam("new_default_lease_ms"),
        maxDeliveries=bindparam("new_max_deliveries"),
        deadLetterQueue=bindparam("new_dead_letter_queue"),
        updatedAt=bindparam("now"),
    )
)

# Pruning the history in batches without a list of ids (PostgreSQL's direct path
# binds no expanding IN, and MariaDB has no LIMIT in an IN subquery): find the
# batch's last row by (finishedAt, id), then delete every expired row up to it.
history_batch_end = (
    select(history.finishedAt, history.id)
    .where(history.finishedAt < bindparam("before"))
    .order_by(history.finishedAt, history.id)
    .limit(1)
    .offset(bindparam("last"))
)
# The batch's end row finished before the cutoff, so its bound is the only one:
# SQLite then reads the index up to it, not up to the cutoff.
history_prune_batch = delete(delivery_history).where(
    history.finishedAt <= bindparam("upto_finished_at"),
    (history.finishedAt < bindparam("upto_finished_at")) | (history.id <= bindparam("upto_id")),
)
history_prune_rest = delete(delivery_history).where(history.finishedAt < bindparam("before"))


# The revision Alembic recorded (readiness): its table, without Alembic's machinery,
# so the read goes the way of every other statement, bounds included.
schema_revision = select(column("version_num")).select_from(table("alembic_version"))


def _count(condition) -> object:
    return func.coalesce(func.sum(case((condition, 1), else_=0)), 0)


_ready = _is_due
_leased = ~_is_due & columns.lockUuid.is_not(None)
_scheduled = ~_is_due & columns.lockUuid.is_(None)
_queue_stats_columns = (
    columns.pKind,
    func.count().label("messages"),
    _count(_ready).label("ready"),
    _count(_scheduled).label("scheduled"),
    _count(_leased).label("leased"),
    func.min(case((_ready, columns.scheduledAt))).label("oldest_ready_at"),
    func.min(case((_scheduled, columns.scheduledAt))).label("next_scheduled_at"),
)
queue_stats = select(*_queue_stats_columns).where(_in_queue).group_by(columns.pKind)
queues_stats = select(*_queue_stats_columns).group_by(columns.pKind).order_by(columns.pKind)


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
    """How many of the rows of `sizes` (answer bytes each, oldest first) a poll takes:
    those whose answer up to and including them fits in `max_bytes`, and the first
    delivered one always (with any not delivered before it, which count 0). The
    PostgreSQL dialect says the same in SQL."""
    running = 0
    for taken, size in enumerate(sizes):
        running += size
        if running > max_bytes and running != size:
            return taken
    return len(sizes)


def read_payloads(
    connection: Connection, statement: Select, rows: Sequence[ClaimedRow], lock_id: str
) -> dict[int, bytes]:
    """The payloads of `rows` that `lock_id` still holds, by id, read by `statement` (ids
    and a lock) in results of about PAYLOAD_READ_BYTES."""
    payloads: dict[int, bytes] = {}
    start = 0
    while start < len(rows):
        end, size = start + 1, rows[start].payload_bytes
        while end < len(rows) and size + rows[end].payload_bytes <= PAYLOAD_READ_BYTES:
            size += rows[end].payload_bytes
            end += 1
        ids = [row.id for row in rows[start:end]]
        found = connection.execute(statement, {"ids": ids, "lock_id": lock_id})
        payloads.update((row.id, row.payload) for row in found)
        start = end
    return payloads


def claim_select_then_update(connection: Connection, parameters: dict) -> list[ClaimedRow]:
    """Poll for databases without `UPDATE … RETURNING`, in one transaction: select the
    candidates, then update those whose answer fits. The select reads a candidate's
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
        )
        for row in connection.execute(claim_candidates, {**parameters, **inline})
    ]
    sizes = [row.answer_bytes(parameters.get("max_deliveries")) for row in rows]
    rows = rows[: answer_length(sizes, parameters["max_bytes"])]
    if not rows:
        return []
    update = claim_update_limited if "max_deliveries" in parameters else claim_update
    connection.execute(update, {**parameters, "ids": [row.id for row in rows]})
    return rows
