"""The statements of messages: offers (the insert that skips taken keys, the update's
compare-and-swap, a batch's stored offers), reading and deleting one by key, a queue's
next due time and stats, and purging a queue.

Built once as Core objects with bound parameters; a dialect's variant of one is in its
modules (app/storage/dialects/<db>) under the same name.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import (
    BigInteger,
    String,
    bindparam,
    case,
    func,
    literal_column,
    select,
    union_all,
    update,
)
from sqlalchemy.sql import ColumnElement
from sqlalchemy.sql.dml import Insert

from app.domain.messages import PRIORITIES
from app.storage.statements.common import (
    by_key,
    columns,
    in_queue,
    is_due,
    keys_in_queue,
    removal,
    starting_over,
)
from app.storage.tables import delayed_queue as queue_table

__all__ = [
    "MESSAGE_COLUMNS",
    "message_delete",
    "message_get",
    "offer_insert",
    "offer_select_for_update",
    "offer_stored_schedule",
    "offer_update",
    "queue_next_due",
    "queue_purge",
    "queue_stats",
    "queues_stats",
    "stored_offers",
]

# Offer, the first try: INSERT unless the key is taken, RETURNING the key when it went in
# (rowcount is not reliable for every driver); sent with many rows (a batch, a cron
# entry's runs), one multi-row VALUES. Every database says "unless taken" its own way
# (ON CONFLICT DO NOTHING on SQLite and PostgreSQL, INSERT IGNORE on MariaDB), so each
# dialect gives its variant; there is none here.
offer_insert: Insert | None = None

# Offer, the update path: lock the row, then compare-and-swap on the values read.
# An update rewrites payload and schedule (and the trace context: the message is now what
# the updating request said, though a trace alone never makes an update) and clears the lock, so the current
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
        columns.payload,
        columns.scheduledAtInitially,
        columns.priority,
        columns.messageGroup,
        columns.expiresAt,
        columns.createdAt,
        columns.deadLetteredFrom,
    )
    .where(by_key)
    .with_for_update()
)
offer_update = (
    update(queue_table)
    .where(
        by_key,
        columns.scheduledAtInitially == bindparam("old_scheduled_at_initially"),
        columns.createdAt == bindparam("old_created_at"),
        columns.deadLetteredFrom.is_not_distinct_from(bindparam("old_origin")),
    )
    .values(
        {
            **starting_over(bindparam("new_scheduled_at")),
            "payload": bindparam("new_payload"),
            "priority": bindparam("new_priority"),
            "messageGroup": bindparam("new_group"),
            "expiresAt": bindparam("new_expires_at", type_=BigInteger),
            "trace": bindparam("new_trace", type_=String),
            "createdAt": bindparam("now"),
            "deadLetteredFrom": bindparam("new_origin"),
        }
    )
)

# Offer with if_exists=ignore, when the key exists: the time the stored message asked for.
offer_stored_schedule = select(columns.scheduledAtInitially).where(by_key)

# Batch offer: what is stored under keys that exist, to tell the unchanged ones; a
# dialect with a hash function compares digests instead of whole payloads
# (Dialect.payload_digest).
stored_offers = keys_in_queue(
    columns.pKey,
    columns.payload.label("digest"),
    columns.scheduledAtInitially,
    columns.priority,
    columns.messageGroup,
    columns.expiresAt,
)

# What a Message shows (storage/messages.py: message_of), its payload besides.
MESSAGE_COLUMNS = (
    columns.pKey,
    columns.scheduledAt,
    columns.scheduledAtInitially,
    columns.createdAt,
    columns.lockUuid.is_not(None).label("locked"),
    columns.deliveries,
    columns.deadLetteredFrom,
    columns.priority,
    columns.messageGroup,
    columns.expiresAt,
    columns.expiredAt.is_not(None).label("expired"),
    columns.trace,
)
message_get = select(columns.payload, *MESSAGE_COLUMNS).where(by_key)
message_delete = removal(by_key)

# When a queue next has something to deliver (a due message or an ending lease): the
# earliest of each priority's range of the poll's index, ten probes. A message waiting
# behind its group's front (stored priority < 0) is not one a poll can take: a poll
# waiting for it would look again at once, and again (docs/decisions/0027-message-groups.md).
_earliest = [
    select(func.min(columns.scheduledAt).label("due")).where(
        in_queue, columns.priority == literal_column(str(priority))
    )
    for priority in PRIORITIES
]
_earliest_of_each = union_all(*_earliest).subquery("earliest")
queue_next_due = select(func.min(_earliest_of_each.c.due))
queue_purge = removal(in_queue)


def _count(condition: Any) -> ColumnElement[int]:
    return func.coalesce(func.sum(case((condition, 1), else_=0)), 0)


_ready = is_due
_leased = ~is_due & columns.lockUuid.is_not(None)
_scheduled = ~is_due & columns.lockUuid.is_(None)
_queue_stats_columns = (
    columns.pKind,
    func.count().label("messages"),
    _count(_ready).label("ready"),
    _count(_scheduled).label("scheduled"),
    _count(_leased).label("leased"),
    func.min(case((_ready, columns.scheduledAt))).label("oldest_ready_at"),
    func.min(case((_scheduled, columns.scheduledAt))).label("next_scheduled_at"),
)
queue_stats = select(*_queue_stats_columns).where(in_queue).group_by(columns.pKind)
queues_stats = select(*_queue_stats_columns).group_by(columns.pKind).order_by(columns.pKind)
