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
from sqlalchemy.sql import ColumnElement, Select
from sqlalchemy.sql.dml import Delete, Insert

from app.storage.tables import cron_entries, delivery_history, queue_settings
from app.storage.tables import delayed_queue as queue_table

columns = queue_table.c
history = delivery_history.c

in_queue = columns.pKind == bindparam("queue")
by_key = (columns.pKey == bindparam("key")) & in_queue
by_lock = (columns.lockUuid == bindparam("lock_id")) & in_queue
is_due = columns.scheduledAt <= bindparam("now")

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


def starting_over(due: Any) -> dict[str, Any]:
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
        columns.payload,
        columns.scheduledAtInitially,
        columns.priority,
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
        payload=bindparam("new_payload"),
        priority=bindparam("new_priority"),
        createdAt=bindparam("now"),
        deadLetteredFrom=bindparam("new_origin"),
        **starting_over(bindparam("new_scheduled_at")),
    )
)

# Offer with if_exists=ignore, when the key exists: the time the stored message asked for.
offer_stored_schedule = select(columns.scheduledAtInitially).where(by_key)


def keys_in_queue(*selected: Any) -> Select:
    """`selected` of the rows of one queue whose keys are in the list bound as "keys"."""
    return select(*selected).where(in_queue, columns.pKey.in_(bindparam("keys", expanding=True)))


# Which of these keys exist already (dead letters, redrive).
existing_keys = keys_in_queue(columns.pKey)
# Batch offer: what is stored under keys that exist, to tell the unchanged ones; a
# dialect with a hash function compares digests instead of whole payloads.
stored_offers = keys_in_queue(
    columns.pKey, columns.payload.label("digest"), columns.scheduledAtInitially, columns.priority
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
)
message_get = select(columns.payload, *MESSAGE_COLUMNS).where(by_key)
message_delete = removal(by_key)
# Payloads by id (a list reads those too large to come with its rows after them).
payloads_by_id = select(columns.id, columns.payload).where(
    columns.id.in_(bindparam("ids", expanding=True)), in_queue
)

# When a queue next has something to deliver (a due message or an ending lease).
queue_next_due = select(func.min(columns.scheduledAt)).where(in_queue)
queue_purge = removal(in_queue)


@dataclass(frozen=True)
class KeyOrder:
    """The message key compared (`after`, `at_or_after`, `before` a bound parameter) and
    sorted (`ascending`) in byte order; here the column's own order, which is byte
    order on MariaDB (utf8mb4_nopad_bin) and SQLite (BINARY)."""

    after: Callable[[Any], Any] = columns.pKey.__gt__
    at_or_after: Callable[[Any], Any] = columns.pKey.__ge__
    before: Callable[[Any], Any] = columns.pKey.__lt__
    ascending: Any = columns.pKey


@dataclass(frozen=True)
class ListReads:
    """What a list's page tells a planner that cannot find its index alone (MariaDB's,
    SQLite's).

    `expanded`: "(a, b) > (x, y)" is written out as "a > x OR (a = x AND b > y)",
    which the optimizer reads as a range of ("pKind", a, b); a row comparison it
    reads as no range at all, so a page after a cursor read the queue from its
    start. `forced`: the page names the index that leads to it (FORCE INDEX),
    whose range it then reads; left to itself the optimizer may read the queue by
    "pKind" alone (ref) whenever the page's range looks as large as the queue, and
    so read every row before the page. `split` (SQLite's): a page after a cursor is
    read as two ranges, the rest of the cursor's millisecond by id and the
    milliseconds beyond it; SQLite seeks a row comparison by its first column only,
    so a page from the middle of many messages due in one millisecond (or history
    rows of one purge) read every one before it. All measured in decision 13."""

    expanded: bool = False
    forced: bool = False
    split: bool = False


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
        priority=bindparam("new_priority"),
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
# The push dispatcher's refresh (every few seconds per replica): the few rows that push.
settings_pushing = (
    select(queue_settings).where(settings.pushUrl.is_not(None)).order_by(settings.queue)
)
settings_insert = insert(queue_settings)
# Not "queue": an UPDATE reserves its columns' names for their new values.
settings_update = (
    update(queue_settings)
    .where(settings.queue == bindparam("settings_queue"))
    .values(
        defaultLeaseMs=bindparam("new_default_lease_ms"),
        maxDeliveries=bindparam("new_max_deliveries"),
        deadLetterQueue=bindparam("new_dead_letter_queue"),
        retryInitialDelayMs=bindparam("new_retry_initial_delay_ms"),
        retryMaxDelayMs=bindparam("new_retry_max_delay_ms"),
        retryMultiplier=bindparam("new_retry_multiplier"),
        retryJitter=bindparam("new_retry_jitter"),
        pushUrl=bindparam("new_push_url"),
        pushTimeoutMs=bindparam("new_push_timeout_ms"),
        pushConcurrency=bindparam("new_push_concurrency"),
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
schema_revision: Select[Any] = select(column("version_num")).select_from(table("alembic_version"))


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
