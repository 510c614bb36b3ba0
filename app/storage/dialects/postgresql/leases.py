"""PostgreSQL's statements of the leases room: the poll's claim as one UPDATE … FROM …
RETURNING, keys and ids bound as arrays, and the acknowledgements and releases many
callers share, one statement each (its variants in VARIANTS, its own statements beside
them)."""

from __future__ import annotations

from sqlalchemy import (
    BigInteger,
    SmallInteger,
    String,
    bindparam,
    case,
    column,
    delete,
    func,
    literal_column,
    null,
    select,
    true,
    update,
    values,
)
from sqlalchemy import insert as insert_into
from sqlalchemy.sql import ColumnElement, Select
from sqlalchemy.sql.dml import Update

from app.domain.messages import POLL_MESSAGE_ENVELOPE_BYTES, PRIORITIES, Finish
from app.domain.trace import RENDERED_PER_STORED
from app.storage.dialects.postgresql.common import any_of, ids, keys_in_queue, unnested
from app.storage.statements.common import (
    HISTORY_COLUMNS,
    HISTORY_SOURCE,
    by_lock,
    columns,
    history_values,
    in_queue,
    is_due,
    not_expired,
)
from app.storage.statements.leases import (
    PAYLOAD_READ_BYTES,
    build_expiry,
    build_keyed_locks,
    claim_values,
    claim_values_limited,
)
from app.storage.tables import delayed_queue as queue_table
from app.storage.tables import delivery_history

# One round trip: lock the due rows (skipping those other polls hold), keep those whose
# answer fits (claims.answer_length, as running sums oldest first), lease them, and
# return each row with its scheduledAt from *before* the lease, which tells a
# redelivery from a first delivery per message. Rows past the answer's bound are
# locked only while the statement runs: never leased, nor counted. A payload comes
# back inline while the payloads up to it fit in leases.PAYLOAD_READ_BYTES (every poll
# of small messages); the store reads the rest after it (claims.read_payloads).
#
# The rows come in leases.CLAIM_ORDER (highest priority, earliest due, lowest id),
# one range of the poll's index per priority: the VALUES list holds the priorities,
# highest first, and a LATERAL subquery locks each one's due rows in due order. A
# LATERAL subquery can only be the inner side of a nested loop over the list, and
# neither that loop nor the scan of the list reorders rows, so the outer LIMIT takes
# the first rows in the claim's order, and each range is read (and its rows locked)
# only when the rows before it fall short: a poll of one over a due priority-9
# message reads one range and locks one row. (A plain ORDER BY priority DESC over
# the index would walk the future messages of every higher priority before the due
# ones of a lower one; PostgreSQL 15 reads `priority = ANY(…)` as no ordered range.)
# tests/storage/test_poll_plans.py holds PostgreSQL to this plan; revision 0010 tells the
# planner there are ten priorities, without which it may as well walk the lists' index.
_PRIORITIES = values(column("priority", SmallInteger), name="priorities", literal_binds=True).data(
    [(priority,) for priority in PRIORITIES]
)


def _priority_candidates(traced: bool) -> Select:
    """The due rows of one priority, locked: their ids, what the poll sets as it was, the
    length of their payloads, and with `traced` what their trace context adds to the answer
    (claims.message_bytes: a poll of many counts it, a poll of one need not)."""
    trace_bytes: ColumnElement[int] = literal_column(str(RENDERED_PER_STORED)) * func.coalesce(
        func.length(columns.trace), literal_column("0")
    )
    return (
        select(
            columns.id,
            columns.priority,
            columns.scheduledAt.label("previous_scheduled_at"),
            columns.lockUuid.label("previous_lock_id"),
            columns.deliveries.label("previous_deliveries"),
            columns.firstDeliveredAt.label("previous_first_delivered_at"),
            columns.lastDeliveredAt.label("previous_last_delivered_at"),
            func.length(columns.payload).label("payload_bytes"),
            *((trace_bytes.label("trace_bytes"),) if traced else ()),
        )
        .where(in_queue, columns.priority == _PRIORITIES.c.priority, is_due, not_expired)
        .order_by(columns.scheduledAt, columns.id)
        .limit(bindparam("limit"))
        .with_for_update(skip_locked=True)
    )


def _claim(limited: bool, many: bool) -> Update:
    candidates = _priority_candidates(traced=many).lateral("candidates")
    locked = (
        select(*candidates.c)
        .select_from(_PRIORITIES.join(candidates, true()))
        .limit(bindparam("limit"))
        .subquery("locked")
    )
    picked, payloads_bytes, conditions = locked, locked.c.payload_bytes, []
    # A poll of one takes its message whatever its size: no sums (they cost its statement 15%).
    if many:
        # claims.ClaimedRow.answer_bytes: a row to dead-letter adds nothing to the answer.
        size = locked.c.payload_bytes + POLL_MESSAGE_ENVELOPE_BYTES + locked.c.trace_bytes
        if limited:
            size = case((locked.c.previous_deliveries < bindparam("max_deliveries"), size), else_=0)
        # In the order the rows were locked, each row's sums up to and including itself
        # (ROWS: rows due in the same millisecond are not added up together).
        order = (locked.c.priority.desc(), locked.c.previous_scheduled_at, locked.c.id)
        rows = (None, 0)
        picked = select(
            *locked.c,
            size.label("size"),
            func.sum(size).over(order_by=order, rows=rows).label("answer_bytes"),
            func.sum(locked.c.payload_bytes)
            .over(order_by=order, rows=rows)
            .label("payloads_bytes"),
        ).subquery("picked")
        payloads_bytes = picked.c.payloads_bytes
        conditions.append(
            (picked.c.answer_bytes <= bindparam("max_bytes", type_=BigInteger))
            | (picked.c.answer_bytes == picked.c.size)
        )
    statement = update(queue_table).where(columns.id == picked.c.id, *conditions)
    if limited:
        statement = statement.ordered_values(*claim_values_limited)
    else:
        statement = statement.values(claim_values)
    return statement.returning(
        columns.id,
        columns.pKey,
        case((payloads_bytes <= PAYLOAD_READ_BYTES, columns.payload)).label("payload"),
        picked.c.payload_bytes,
        picked.c.previous_scheduled_at,
        columns.scheduledAtInitially,
        columns.createdAt,
        picked.c.previous_lock_id,
        picked.c.previous_deliveries,
        picked.c.previous_first_delivered_at,
        picked.c.previous_last_delivered_at,
        columns.deadLetteredFrom,
        columns.priority,
        columns.messageGroup,
        columns.expiresAt,
        columns.trace,
    )


# By (a delivery limit, more than one message).
_CLAIMS = {
    (limited, many): _claim(limited, many) for limited in (False, True) for many in (False, True)
}


# A release with each message due at its own time: the rows (read and locked in this
# transaction) and their times as two arrays, one statement whatever their number.
_due = unnested("due", ("id", "ids", BigInteger), ("at", "ats", BigInteger))
release_due = (
    update(queue_table)
    .where(columns.id == _due.c.id, by_lock)
    .values(scheduledAt=_due.c.at, lockUuid=null())
)


# The acknowledgements and releases many callers share (app/storage/coalescing.py,
# decision 23), one statement each whatever their number: each caller's values as one
# element of arrays, the rows joined to them. A row matched by two callers' elements
# (one lock acknowledged twice, say) is changed once; the store gives it to the first.
_locks = unnested(
    "locks",
    ("queue", "queues", String),
    ("lock_id", "lock_ids", String),
    ("now", "nows", BigInteger),
)
_lock_keys = unnested(
    "lock_keys",
    ("queue", "queues", String),
    ("lock_id", "lock_ids", String),
    ("key", "keys", String),
    ("now", "nows", BigInteger),
)


def _acknowledging(keyed: bool, record: bool) -> Select:
    """Delete what each caller's lock holds (of its keys when `keyed`), recording it in the
    history as acknowledged, at each caller's own time, when `record`; the rows deleted
    (queue, lock, key)."""
    held = _lock_keys if keyed else _locks
    matching = [columns.pKind == held.c.queue, columns.lockUuid == held.c.lock_id]
    if keyed:
        matching.append(columns.pKey == held.c.key)
    gone = (
        delete(queue_table)
        .where(*matching)
        .returning(
            *(columns[name] for name in HISTORY_SOURCE),
            columns.lockUuid,
            held.c.now.label("finished_at"),
        )
        .cte("gone")
    )
    statement = select(gone.c.pKind, gone.c.lockUuid, gone.c.pKey)
    if record:
        values = history_values(gone.c)[:-1] + (gone.c.finished_at,)
        recorded = insert_into(delivery_history).from_select(HISTORY_COLUMNS, select(*values))
        statement = statement.add_cte(recorded.cte("recorded"))
    return statement


# How the history records the rows (unused where it records nothing).
ACKNOWLEDGED = {"outcome": Finish.ACKNOWLEDGED.value}
# By (keys named, history recorded).
ACKNOWLEDGING = {
    (keyed, record): _acknowledging(keyed, record)
    for keyed in (False, True)
    for record in (False, True)
}
release_locks = (
    update(queue_table)
    .where(columns.pKind == _locks.c.queue, columns.lockUuid == _locks.c.lock_id)
    .values(
        # As the leases room's lock_release: a released message must read as a redelivery.
        scheduledAt=case(
            (columns.scheduledAtInitially == _locks.c.now, _locks.c.now - 1),
            else_=_locks.c.now,
        ),
        lockUuid=null(),
    )
    # The lock each row was released from (its column is null now).
    .returning(columns.pKind, _locks.c.lock_id.label("lockUuid"))
)

VARIANTS = {
    # The poll as one UPDATE … FROM … RETURNING, by (a delivery limit, more than one
    # message): _claim, above.
    "claims": _CLAIMS,
    # The claim in one statement (claims) leaves nothing to select, then update: these
    # never run here (their expanding IN could not, on the direct path).
    "claim_candidates": None,
    "claim_update": None,
    "claim_update_limited": None,
    "claimed_payloads": select(columns.id, columns.payload).where(
        ids, columns.lockUuid == bindparam("lock_id")
    ),
    # Keys as one array, each looked up on its own (common.keys_in_queue).
    "existing_keys": keys_in_queue(),
    # Keys and ids as arrays (common.any_of).
    "keyed_locks": build_keyed_locks(listed=any_of),
    "expiry": build_expiry(any_of),
}
