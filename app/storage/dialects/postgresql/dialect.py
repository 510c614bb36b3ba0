"""PostgreSQL: ON CONFLICT DO NOTHING, the poll as one UPDATE … FROM … RETURNING, lists
bound as arrays (the direct path has no expanding IN): its variants of the rooms'
statements (STATEMENTS), its own statements beside them, and how they run."""

from __future__ import annotations

import hashlib
from collections import Counter
from collections.abc import Callable, Hashable, Sequence
from functools import cache
from typing import Any, ClassVar, TypeVar

import psycopg
from psycopg.types.array import ListBinaryDumper
from sqlalchemy import (
    BigInteger,
    Column,
    Identity,
    LargeBinary,
    MetaData,
    SmallInteger,
    String,
    Table,
    bindparam,
    case,
    column,
    delete,
    event,
    func,
    literal_column,
    null,
    select,
    text,
    true,
    tuple_,
    update,
    values,
)
from sqlalchemy import insert as insert_into
from sqlalchemy.dialects.postgresql import ARRAY, insert
from sqlalchemy.dialects.postgresql.psycopg import dialect as postgresql_dialect
from sqlalchemy.engine import Engine, make_url
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.schema import CreateTable
from sqlalchemy.sql import ClauseElement, ColumnElement, Executable, Select
from sqlalchemy.sql.dml import Insert, ReturningDelete, Update

from app.domain.messages import (
    POLL_MESSAGE_ENVELOPE_BYTES,
    PRIORITIES,
    Finish,
    Offer,
)
from app.storage import claims
from app.storage.connection import Connection
from app.storage.dialects.base import (
    CONNECT_TIMEOUT_SECONDS,
    KEEPALIVE_IDLE_SECONDS,
    KEEPALIVE_INTERVAL_SECONDS,
    KEEPALIVE_PROBES,
    UNACKNOWLEDGED_SECONDS,
    Dialect,
    LockAcknowledgement,
    PeerEvents,
    PeerLink,
    first_line,
    first_of_each,
)
from app.storage.dialects.postgresql import table_health
from app.storage.dialects.postgresql.direct import DirectConnection, DirectPool
from app.storage.dialects.postgresql.peers import PostgresPeers
from app.storage.statements import Variants, leases, resolved
from app.storage.statements.common import (
    HISTORY_COLUMNS,
    HISTORY_SOURCE,
    Removal,
    by_lock,
    columns,
    history_values,
    in_queue,
    is_due,
    not_expired,
)
from app.storage.statements.cron import build_entry_runs
from app.storage.statements.groups import build_lists, build_skipping_moves
from app.storage.statements.leases import build_expiry, build_keyed_locks
from app.storage.statements.lists import KeyOrder
from app.storage.tables import (
    cron_run_keys_index,
    delivery_history,
    group_marks,
    message_groups,
)
from app.storage.tables import delayed_queue as queue_table

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
_PRIORITY_CANDIDATES = (
    select(
        columns.id,
        columns.priority,
        columns.scheduledAt.label("previous_scheduled_at"),
        columns.lockUuid.label("previous_lock_id"),
        columns.deliveries.label("previous_deliveries"),
        columns.firstDeliveredAt.label("previous_first_delivered_at"),
        columns.lastDeliveredAt.label("previous_last_delivered_at"),
        func.length(columns.payload).label("payload_bytes"),
    )
    .where(in_queue, columns.priority == _PRIORITIES.c.priority, is_due, not_expired)
    .order_by(columns.scheduledAt, columns.id)
    .limit(bindparam("limit"))
    .with_for_update(skip_locked=True)
    .lateral("candidates")
)


def _claim(limited: bool, many: bool) -> Update:
    locked = (
        select(*_PRIORITY_CANDIDATES.c)
        .select_from(_PRIORITIES.join(_PRIORITY_CANDIDATES, true()))
        .limit(bindparam("limit"))
        .subquery("locked")
    )
    picked, payloads_bytes, conditions = locked, locked.c.payload_bytes, []
    # A poll of one takes its message whatever its size: no sums (they cost its statement 15%).
    if many:
        # claims.ClaimedRow.answer_bytes: a row to dead-letter adds nothing to the answer.
        size = locked.c.payload_bytes + POLL_MESSAGE_ENVELOPE_BYTES
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
        statement = statement.ordered_values(*leases.claim_values_limited)
    else:
        statement = statement.values(leases.claim_values)
    return statement.returning(
        columns.id,
        columns.pKey,
        case((payloads_bytes <= leases.PAYLOAD_READ_BYTES, columns.payload)).label("payload"),
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
    )


# By (a delivery limit, more than one message).
_CLAIMS = {
    (limited, many): _claim(limited, many) for limited in (False, True) for many in (False, True)
}


def _unnested(name: str, *columns: tuple[str, str, Any], ordinality: str | None = None) -> Any:
    """Arrays bound one parameter each, unnested side by side as the rows of `name`: each
    column (its name, its parameter's, its element type) one array; with `ordinality`, a
    column of that name numbers the rows in order."""
    arrays = func.unnest(
        *(bindparam(parameter, type_=ARRAY(kind)) for _, parameter, kind in columns)
    )
    names = [column for column, _, _ in columns]
    if ordinality is None:
        return arrays.table_valued(*names).render_derived(name=name)
    return arrays.table_valued(*names, with_ordinality=ordinality).render_derived(name=name)


# A batch's rows as three arrays, one parameter each: PostgreSQL parses one small
# statement instead of one with six placeholders per row, and the driver adapts
# three lists instead of 1,200 values (~3x the rows per second of multi-VALUES).
_batch = _unnested(
    "batch",
    ("key", "keys", String),
    ("payload", "payloads", LargeBinary),
    ("scheduled_at", "scheduled_ats", BigInteger),
    ("priority", "priorities", SmallInteger),
    ("message_group", "groups", String),
    ("expires_at", "expires_ats", BigInteger),
)


def _insert_new_keys(
    key: ColumnElement[Any],
    payload: ColumnElement[Any],
    scheduled_at: ColumnElement[Any],
    priority: ColumnElement[Any],
    *,
    group: ColumnElement[Any] | None = None,
    expires_at: ColumnElement[Any] | None = None,
    queue: ColumnElement[Any] | None = None,
    now: ColumnElement[Any] | None = None,
    order_by: ColumnElement[Any] | None = None,
    returning: Sequence[ColumnElement[Any]] = (columns.pKey,),
) -> Any:
    """INSERT … SELECT of rows from a source (`key`, `payload`, … its columns; `queue` and
    `now` bound once unless the source has them; no `group` or `expires_at`, none) into
    the queue,
    skipping keys taken already; RETURNING `returning` of the rows that went in (their
    keys)."""
    rows = select(
        key,
        bindparam("queue", type_=String) if queue is None else queue,
        payload,
        scheduled_at,
        scheduled_at,
        bindparam("now", type_=BigInteger) if now is None else now,
        priority,
        null() if group is None else group,
        null() if expires_at is None else expires_at,
    )
    if order_by is not None:
        rows = rows.order_by(order_by)
    return (
        insert(queue_table)
        .from_select(
            [
                "pKey",
                "pKind",
                "payload",
                "scheduledAt",
                "scheduledAtInitially",
                "createdAt",
                "priority",
                "messageGroup",
                "expiresAt",
            ],
            rows,
        )
        .on_conflict_do_nothing(index_elements=["pKey", "pKind"])
        .returning(*returning)
    )


_insert_rows = _insert_new_keys(
    _batch.c.key,
    _batch.c.payload,
    _batch.c.scheduled_at,
    _batch.c.priority,
    group=_batch.c.message_group,
    expires_at=_batch.c.expires_at,
)


# The bulk path of offer_bulk (the import, decision 20): the first occurrences go to
# a staging table by COPY, then into the queue by one INSERT … SELECT … ON CONFLICT DO
# NOTHING RETURNING, in one transaction. Per row that is a COPY row (psycopg's C
# code) instead of four array elements, and one statement per BULK_ROWS rows
# instead of one per 200. The staging table is the session's own (TEMPORARY), made
# once per connection and emptied at every commit; it lives in no migration.
BULK_ROWS = 10_000
_staging = Table(
    "hourglass_offer_staging",
    MetaData(),
    # Input order: rows go into the queue in it, so ids (the poll's last tie-break)
    # follow the input as in the chunked path.
    Column("position", BigInteger, Identity(always=True), nullable=False),
    Column("key", String, nullable=False),
    Column("payload", LargeBinary, nullable=False),
    Column("scheduled_at", BigInteger, nullable=False),
    Column("priority", SmallInteger, nullable=False),
    Column("message_group", String, nullable=True),
    Column("expires_at", BigInteger, nullable=True),
    prefixes=["TEMPORARY"],
    postgresql_on_commit="DELETE ROWS",
)
# As text: the direct path runs SQL statements, not DDL elements.
_create_staging = text(
    str(CreateTable(_staging, if_not_exists=True).compile(dialect=postgresql_dialect()))
)
_copy_staging = (
    "COPY hourglass_offer_staging (key, payload, scheduled_at, priority, message_group, "
    "expires_at) "
    "FROM STDIN (FORMAT BINARY)"
)
_STAGING_TYPES = ("text", "bytea", "int8", "int2", "text", "int8")
_insert_staged = _insert_new_keys(
    _staging.c.key,
    _staging.c.payload,
    _staging.c.scheduled_at,
    _staging.c.priority,
    group=_staging.c.message_group,
    expires_at=_staging.c.expires_at,
    order_by=_staging.c.position,
)


async def _copy_rows(connection: Connection, rows: Sequence[tuple[Any, ...]]) -> None:
    """COPY `rows` into the staging table, in the connection's transaction."""
    assert isinstance(connection, DirectConnection)  # PostgreSQL's connections are
    await connection.copy_rows(_copy_staging, _STAGING_TYPES, rows)


# Rows per statement of a removal in pages (a purge): a page takes ~70 ms on this
# project's test machine, far within any statement bound, where one DELETE of a
# 1,000,000-row queue with its history rows takes ~6 s.
_PAGE_ROWS = 10_000
_REMOVAL_CURSOR = "removal_ids"


class _DeclareCursor(Executable, ClauseElement):
    """`DECLARE name NO SCROLL CURSOR FOR <select>`: a query read a page at a time, each
    FETCH its own statement."""

    inherit_cache = True

    def __init__(self, name: str, query: Select) -> None:
        self.name = name
        self.query = query


@compiles(_DeclareCursor)
def _compile_declare_cursor(element: _DeclareCursor, compiler: Any, **options: Any) -> str:
    query = compiler.process(element.query, **options)
    return f"DECLARE {element.name} NO SCROLL CURSOR FOR {query}"


_fetch_page = text(f"FETCH {_PAGE_ROWS} FROM {_REMOVAL_CURSOR}")
_close_cursor = text(f"CLOSE {_REMOVAL_CURSOR}")


@cache
def _removal_cursor(removal: Removal) -> _DeclareCursor:
    """The ids `removal` matches as its transaction begins to remove them, read on through
    a cursor, never again from the start: whatever the plan, and fresh statistics or not,
    no page sorts or scans again what the pages before it read."""
    return _DeclareCursor(_REMOVAL_CURSOR, select(columns.id).where(removal.where))


@cache
def _removal_page(removal: Removal, record: bool) -> Select:
    """Delete the rows of one page of ids (an array, "ids") that `removal` still matches,
    recording them in the history when `record`, in one statement; how many."""
    gone = (
        delete(queue_table)
        .where(columns.id == func.any(bindparam("ids", type_=ARRAY(BigInteger))))
        .where(removal.where)
        .returning(*(columns[name] for name in HISTORY_SOURCE))
        .cte("gone")
    )
    statement = select(func.count()).select_from(gone)
    if record:
        recorded = insert_into(delivery_history).from_select(
            HISTORY_COLUMNS, select(*history_values(gone.c))
        )
        statement = statement.add_cte(recorded.cte("recorded"))
    return statement


def _keys_in_queue(**selected: Any) -> Select:
    """common.keys_in_queue for PostgreSQL: "pKey" and the expressions `selected` (by
    label) of the rows of one queue under the keys bound as one array ("keys").

    One statement text whatever the number of keys, so neither SQLAlchemy nor
    psycopg re-renders 500 placeholders. Each key is looked up on its own in the
    unique index (a LATERAL subquery with LIMIT 1 cannot be flattened into a
    join): with `"pKey" = ANY(…)` and statistics taken while the queue was small,
    the planner read every row of the queue instead, 126 ms for 200 keys of a
    1,000,000-row queue against 0.8 ms.
    """
    keys = (
        func.unnest(bindparam("keys", type_=ARRAY(String)))
        .table_valued("key", name="keys")
        .render_derived()
    )
    stored = (
        select(columns.id, *(value.label(label) for label, value in selected.items()))
        .where(columns.pKey == keys.c.key, columns.pKind == bindparam("queue"))
        .limit(1)
        .lateral("stored")
    )
    return select(keys.c.key.label("pKey"), *(stored.c[label] for label in selected)).select_from(
        keys.join(stored, true())
    )


def _any_of(column: Any, name: str) -> Any:
    """`column` is one of the array bound as `name`: one statement text whatever the
    length of the list (the direct path has no expanding IN)."""
    return column == func.any(bindparam(name, type_=ARRAY(column.type)))


_keyed_locks = build_keyed_locks(listed=_any_of)


@cache
def _removed_keys(removal: Removal, record: bool) -> Select | ReturningDelete:
    """Delete what `removal` matches, recording it in the history when `record`, in one
    statement that returns the keys deleted: nothing can change the rows between."""
    if not record:
        return removal.delete.returning(columns.pKey)
    gone = (
        delete(queue_table)
        .where(removal.where)
        .returning(*(columns[name] for name in HISTORY_SOURCE))
        .cte("gone")
    )
    recorded = insert_into(delivery_history).from_select(
        HISTORY_COLUMNS, select(*history_values(gone.c))
    )
    return select(gone.c.pKey).add_cte(recorded.cte("recorded"))


# A release with each message due at its own time: the rows (read and locked in this
# transaction) and their times as two arrays, one statement whatever their number.
_due = _unnested("due", ("id", "ids", BigInteger), ("at", "ats", BigInteger))
_release_due = (
    update(queue_table)
    .where(columns.id == _due.c.id, by_lock)
    .values(scheduledAt=_due.c.at, lockUuid=null())
)


# The calls many callers share (app/storage/coalescing.py, decision 23), one statement
# each whatever their number: each caller's values as one element of arrays, unnested
# in order ("position"), the rows joined to them. A row matched by two callers' elements
# (one lock acknowledged twice, say) is changed once; the store gives it to the first.
_offers = _unnested(
    "offers",
    ("key", "keys", String),
    ("queue", "queues", String),
    ("payload", "payloads", LargeBinary),
    ("scheduled_at", "scheduled_ats", BigInteger),
    ("now", "nows", BigInteger),
    ("priority", "priorities", SmallInteger),
    ("expires_at", "expires_ats", BigInteger),
    ordinality="position",
)
# Every caller's new message unless its key is taken (a key offered twice goes in once,
# as the first: rows go in in the callers' order); the keys that went in, with their queue.
_insert_offers = _insert_new_keys(
    _offers.c.key,
    _offers.c.payload,
    _offers.c.scheduled_at,
    _offers.c.priority,
    expires_at=_offers.c.expires_at,
    queue=_offers.c.queue,
    now=_offers.c.now,
    order_by=_offers.c.position,
    returning=(columns.pKind, columns.pKey),
)
_locks = _unnested(
    "locks",
    ("queue", "queues", String),
    ("lock_id", "lock_ids", String),
    ("now", "nows", BigInteger),
)
_lock_keys = _unnested(
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
_ACKNOWLEDGED = {"outcome": Finish.ACKNOWLEDGED.value}
# By (keys named, history recorded).
_ACKNOWLEDGING = {
    (keyed, record): _acknowledging(keyed, record)
    for keyed in (False, True)
    for record in (False, True)
}
_release_locks = (
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


# Plan every execution for its own parameters. psycopg prepares a statement after
# five runs, and PostgreSQL may then switch to a generic plan built from the
# table's statistics at that moment: planned while a queue was empty, the
# existing-keys lookup became a sequential scan, and batch offers into a growing
# table ran at a fifth of their speed until the next ANALYZE (issue 3). A queue
# table goes from empty to millions of rows and back, so no plan made for one
# size is safe for another; planning these small statements costs microseconds.
SESSION_OPTIONS = "-c plan_cache_mode=force_custom_plan"

# SQLSTATEs worth running the transaction again for: serialization failure, deadlock.
_RETRYABLE_SQLSTATES = {"40001", "40P01"}
# A bound of the session was reached (503): lock_not_available (lock_timeout),
# query_canceled (statement_timeout), idle_in_transaction_session_timeout.
_BOUND_REACHED_SQLSTATES = {"55P03", "57014", "25P03"}
_STATEMENT_BOUNDS = {"55P03", "57014"}
_UNDEFINED_TABLE = "42P01"
_UNIQUE_VIOLATION = "23505"
_INSUFFICIENT_PRIVILEGE = "42501"


# A cron entry's runs, from the partial index of run keys in byte order (revision 0005):
# keys compared by its operator class's byte-wise operators (~<~, ~>~), and its
# condition stated word for word, since the planner uses a partial index only for a
# query that states its condition.
_entry_runs = build_entry_runs(
    after=columns.pKey.op("~>~", is_comparison=True),
    before=columns.pKey.op("~<~", is_comparison=True),
    also=[cron_run_keys_index.dialect_options["postgresql"]["where"]],
)

# The keeper's pass over many groups (docs/decisions/0027-message-groups.md): their rows
# made in one statement, and each group's first waiting messages, whatever their
# priorities, through a LATERAL subquery: one range of the due-order group index
# (tables.GROUP_DUE_INDEX) per group, its front's few messages passed over.
_listed_groups = (
    func.unnest(bindparam("groups", type_=ARRAY(String)))
    .table_valued("message_group", name="listed")
    .render_derived()
)
_groups_enlist = (
    insert(message_groups)
    .from_select(
        ["queue", "messageGroup"],
        select(bindparam("queue", type_=String), _listed_groups.c.message_group),
    )
    .on_conflict_do_nothing(index_elements=["queue", "messageGroup"])
)
_first_waiting = (
    select(columns.id, columns.scheduledAt, columns.scheduledAtInitially)
    .where(
        in_queue,
        columns.messageGroup == _listed_groups.c.message_group,
        columns.priority < 0,  # the group's front (at most its concurrency) is skipped
    )
    .order_by(columns.scheduledAt, columns.id)
    .limit(bindparam("limit"))
    .lateral("first_waiting")
)
_groups_waiting = select(
    _listed_groups.c.message_group.label("messageGroup"), *_first_waiting.c
).select_from(_listed_groups.join(_first_waiting, true()))


def _paired(name: str) -> Any:
    """statements.groups.paired for the direct path: the (id, group) pairs as two arrays,
    "<name>_ids" and "<name>_groups", unnested side by side."""
    pairs = _unnested(
        f"{name}_pairs",
        ("id", f"{name}_ids", BigInteger),
        ("message_group", f"{name}_groups", String),
    )
    return tuple_(columns.id, columns.messageGroup).in_(select(pairs.c.id, pairs.c.message_group))


# The ids as one array: the direct path has no expanding IN.
_ids = columns.id == func.any(bindparam("ids", type_=ARRAY(BigInteger)))

STATEMENTS: Variants = {
    "groups": {
        # The keeper's row of a group, unless it exists; of many groups, one statement.
        "group_enlist": insert(message_groups)
        .values(queue=bindparam("queue"), messageGroup=bindparam("group"))
        .on_conflict_do_nothing(index_elements=["queue", "messageGroup"]),
        "groups_enlist": _groups_enlist,
        "groups_mark": insert(group_marks).from_select(
            ["queue", "messageGroup"],
            select(bindparam("queue", type_=String), _listed_groups.c.message_group),
        ),
        "groups_waiting": _groups_waiting,
        # The lists as arrays (the direct path has no expanding IN).
        **build_lists(_any_of, _paired),
        **build_skipping_moves(_paired),
    },
    "messages": {
        # The INSERT that skips taken keys, and fails on any other error. A batch's
        # rows go in by _insert_rows instead (insert_many).
        "offer_insert": insert(queue_table)
        .on_conflict_do_nothing(index_elements=["pKey", "pKind"])
        .returning(columns.pKey),
        # The payload's SHA-256, not the payload: a re-sent key costs 32 bytes of answer,
        # not up to the payload limit.
        "stored_offers": _keys_in_queue(
            digest=func.sha256(columns.payload),
            scheduledAtInitially=columns.scheduledAtInitially,
            priority=columns.priority,
            messageGroup=columns.messageGroup,
            expiresAt=columns.expiresAt,
        ),
    },
    "leases": {
        # The poll as one UPDATE … FROM … RETURNING, by (a delivery limit, more than one
        # message): _claim, above.
        "claims": _CLAIMS,
        # The claim in one statement (claims) leaves nothing to select, then update: these
        # never run here (their expanding IN could not, on the direct path).
        "claim_candidates": None,
        "claim_update": None,
        "claim_update_limited": None,
        "claimed_payloads": select(columns.id, columns.payload).where(
            _ids, columns.lockUuid == bindparam("lock_id")
        ),
        # Keys as one array, each looked up on its own (_keys_in_queue).
        "existing_keys": _keys_in_queue(),
        # Keys and ids as arrays (_any_of).
        "keyed_locks": _keyed_locks,
        "expiry": build_expiry(_any_of),
    },
    "cron": {"entry_runs": _entry_runs},
    "lists": {
        "payloads_by_id": select(columns.id, columns.payload).where(_ids, in_queue),
        # Byte order whatever the database's collation: the operators of
        # varchar_pattern_ops, the operator class of the index that leads to it
        # (revision 0006).
        "keys_by_bytes": KeyOrder(
            after=columns.pKey.op("~>~", is_comparison=True),
            at_or_after=columns.pKey.op("~>=~", is_comparison=True),
            before=columns.pKey.op("~<~", is_comparison=True),
            ascending=literal_column('"pKey" USING ~<~'),
        ),
    },
    # The statistics of the tables and what holds back their vacuum.
    "table_health": table_health.VARIANTS,
}


class PostgreSQLDialect(Dialect):
    name = "postgresql"
    statements = resolved(STATEMENTS)
    removes_keys_in_one_statement = True
    shares_one_statement = True
    single_statement_options: ClassVar[dict[str, Any]] = {"isolation_level": "AUTOCOMMIT"}
    read_options: ClassVar[dict[str, Any]] = {"isolation_level": "AUTOCOMMIT"}
    claims_in_one_statement = True
    bulk_rows = BULK_ROWS

    def payload_digest(self, payload: bytes) -> bytes:
        return hashlib.sha256(payload).digest()

    def session_settings(self, *, statements: bool = True) -> dict[str, float]:
        bounds = self.bounds
        # A transaction left idle this long belongs to a client that went silent mid-way:
        # the server ends the session (25P03), and its row locks and snapshot go with it.
        settings: dict[str, float] = {
            "idle_in_transaction_session_timeout": _ms(bounds.answer_deadline)
        }
        if statements:
            settings |= {
                "lock_timeout": _ms(bounds.lock_wait),
                "statement_timeout": _ms(bounds.statement),
            }
        return settings

    def engine_options(self, *, statements: bool = True, url: str | None = None) -> dict[str, Any]:
        # The pool's and the peers' sessions (connect_arguments) and the engines': libpq
        # sends the options in its start-up packet, so no statement runs before them. A
        # URL's own `options` (`?options=-c search_path=…`) come first: a `connect_args`
        # value replaces the URL's, and where a setting is given twice the last one holds.
        bounds = self.session_settings(statements=statements)
        own = make_url(url).query.get("options") if url is not None else None
        options = f"{SESSION_OPTIONS} {server_options(bounds)}"
        return {
            "connect_args": {
                "connect_timeout": CONNECT_TIMEOUT_SECONDS,
                "options": f"{own} {options}" if isinstance(own, str) and own else options,
                "keepalives": 1,
                "keepalives_idle": KEEPALIVE_IDLE_SECONDS,
                "keepalives_interval": KEEPALIVE_INTERVAL_SECONDS,
                "keepalives_count": KEEPALIVE_PROBES,
                "tcp_user_timeout": UNACKNOWLEDGED_SECONDS * 1000,
            }
        }

    def configure_engine(self, engine: Engine) -> None:
        # A SQLAlchemy engine of this dialect is the start-up check's and the tests': send
        # list parameters in binary there too, as DirectPool does.
        @event.listens_for(engine, "connect")
        def _on_connect(dbapi_connection: Any, _record: object) -> None:
            connection = getattr(dbapi_connection, "driver_connection", dbapi_connection)
            connection.adapters.register_dumper(list, ListBinaryDumper)

    def connect_arguments(self, url: str) -> dict[str, Any]:
        """psycopg's keyword arguments for a connection to `url`, with the session's settings
        and bounds (engine_options)."""
        _, from_url = postgresql_dialect().create_connect_args(make_url(url))
        return {**from_url, **self.engine_options(url=url)["connect_args"]}

    def connections(self, url: str, size: int) -> DirectPool:
        """psycopg's asyncio connections, awaited directly (app/storage/dialects/postgresql_direct.py)."""
        return DirectPool(
            self.connect_arguments(url), size, self, connect_wait=self.bounds.lock_wait
        )

    def peers(self, url: str, woken: Callable[[str | None], None], events: PeerEvents) -> PeerLink:
        """LISTEN/NOTIFY on connections of their own, opened as the pool's are (decision 19)."""
        return PostgresPeers(self.connect_arguments(url), woken, events)

    async def insert_many(
        self, connection: Connection, insert_one: Insert, rows: list[dict[str, Any]]
    ) -> Sequence[str]:
        parameters = {
            "keys": [row["pKey"] for row in rows],
            "payloads": [row["payload"] for row in rows],
            "scheduled_ats": [row["scheduledAt"] for row in rows],
            "priorities": [row["priority"] for row in rows],
            "groups": [row["messageGroup"] for row in rows],
            "expires_ats": [row["expiresAt"] for row in rows],
            "queue": rows[0]["pKind"],
            "now": rows[0]["createdAt"],
        }
        return (await connection.execute(_insert_rows, parameters)).scalars().all()

    async def insert_offers(
        self, connection: Connection, insert_one: Insert, rows: Sequence[dict[str, Any]]
    ) -> list[bool]:
        parameters = {
            "keys": [row["pKey"] for row in rows],
            "queues": [row["pKind"] for row in rows],
            "payloads": [row["payload"] for row in rows],
            "scheduled_ats": [row["scheduledAt"] for row in rows],
            "nows": [row["createdAt"] for row in rows],
            "priorities": [row["priority"] for row in rows],
            "expires_ats": [row["expiresAt"] for row in rows],
        }
        inserted = await connection.execute(_insert_offers, parameters)
        return first_of_each(rows, {(row.pKind, row.pKey) for row in inserted})

    async def acknowledge_locks(
        self, connection: Connection, acknowledgements: Sequence[LockAcknowledgement], record: bool
    ) -> list[list[str]]:
        keyed = [each for each in acknowledgements if each.keys is not None]
        # Each lock (of each key) once, the first caller's: see _firsts.
        whole = _firsts(
            acknowledgements,
            lambda each: (each.queue, each.lock_id) if each.keys is None else None,
        )
        gone: list[tuple[str, str, str]] = []
        if whole:
            parameters = {
                "queues": [each.queue for each in whole],
                "lock_ids": [each.lock_id for each in whole],
                "nows": [each.now for each in whole],
            }
            rows = await connection.execute(
                _ACKNOWLEDGING[False, record], {**parameters, **_ACKNOWLEDGED}
            )
            gone += [(row.pKind, row.lockUuid, row.pKey) for row in rows]
        if keyed:
            named = _firsts(
                [(each, key) for each in keyed for key in each.keys or ()],
                lambda named: (named[0].queue, named[0].lock_id, named[1]),
            )
            parameters = {
                "queues": [each.queue for each, _ in named],
                "lock_ids": [each.lock_id for each, _ in named],
                "keys": [key for _, key in named],
                "nows": [each.now for each, _ in named],
            }
            rows = await connection.execute(
                _ACKNOWLEDGING[True, record], {**parameters, **_ACKNOWLEDGED}
            )
            gone += [(row.pKind, row.lockUuid, row.pKey) for row in rows]
        return _deleted_by_each(acknowledgements, gone)

    async def release_locks(
        self, connection: Connection, releases: Sequence[tuple[str, str, int]]
    ) -> list[int]:
        firsts = _firsts(releases, lambda release: release[:2])  # see _firsts
        parameters = {
            "queues": [queue for queue, _, _ in firsts],
            "lock_ids": [lock_id for _, lock_id, _ in firsts],
            "nows": [at for _, _, at in firsts],
        }
        rows = await connection.execute(_release_locks, parameters)
        released = Counter((row.pKind, row.lockUuid) for row in rows)
        counts = []
        for queue, lock_id, _ in releases:
            counts.append(released.pop((queue, lock_id), 0))  # a lock twice: the first
        return counts

    async def insert_bulk(
        self, connection: Connection, queue: str, offers: Sequence[Offer], now: int
    ) -> Sequence[str]:
        await connection.execute(_create_staging, {})
        await _copy_rows(
            connection,
            [
                (
                    offer.key,
                    offer.payload,
                    offer.scheduled_at,
                    offer.stored_priority,
                    offer.group,
                    offer.expires_at,
                )
                for offer in offers
            ],
        )
        inserted = await connection.execute(_insert_staged, {"queue": queue, "now": now})
        return inserted.scalars().all()

    async def claim(self, connection: Connection, parameters: dict) -> list[claims.ClaimedRow]:
        claim = self.statements.leases.claims
        statement = claim["max_deliveries" in parameters, parameters["limit"] > 1]
        return [
            claims.ClaimedRow(
                id=row.id,
                key=row.pKey,
                payload=row.payload,
                payload_bytes=row.payload_bytes,
                previous_scheduled_at=row.previous_scheduled_at,
                scheduled_at_initially=row.scheduledAtInitially,
                created_at=row.createdAt,
                previous_lock_id=row.previous_lock_id,
                previous_deliveries=row.previous_deliveries,
                previous_first_delivered_at=row.previous_first_delivered_at,
                previous_last_delivered_at=row.previous_last_delivered_at,
                dead_lettered_from=row.deadLetteredFrom,
                priority=row.priority,
                group=row.messageGroup,
                expires_at=row.expiresAt,
            )
            for row in await connection.execute(statement, parameters)
        ]

    def recorded_delete(self, removal: Removal) -> Insert:
        # One statement, so nothing can change the rows between recording and deleting:
        # WITH gone AS (DELETE … RETURNING …) INSERT INTO delivery_history SELECT … FROM gone.
        gone = (
            delete(queue_table)
            .where(removal.where)
            .returning(*(columns[name] for name in HISTORY_SOURCE))
            .cte("gone")
        )
        return (
            insert_into(delivery_history)
            .from_select(HISTORY_COLUMNS, select(*history_values(gone.c)))
            # SQLAlchemy keeps an INSERT's row count only when asked to.
            .execution_options(preserve_rowcount=True)
        )

    async def removed_keys(
        self, connection: Connection, removal: Removal, parameters: dict, *, record: bool
    ) -> list[str]:
        removed = await connection.execute(_removed_keys(removal, record), parameters)
        return list(removed.scalars())

    async def release_due(
        self, connection: Connection, parameters: dict, due: dict[int, int]
    ) -> None:
        if due:
            ids, ats = zip(*due.items(), strict=True)
            await connection.execute(
                _release_due, {**parameters, "ids": list(ids), "ats": list(ats)}
            )

    async def remove_in_pages(
        self, connection: Connection, removal: Removal, parameters: dict, *, record: bool
    ) -> int:
        # Rows offered meanwhile are not among the cursor's: they stay.
        await connection.execute(_removal_cursor(removal), parameters)
        removed = 0
        while ids := (await connection.execute(_fetch_page, {})).scalars().all():
            page = {**parameters, "ids": ids}
            removed += (
                await connection.execute(_removal_page(removal, record), page)
            ).scalar() or 0
        await connection.execute(_close_cursor, {})
        return removed

    def is_unique_violation(self, error: BaseException) -> bool:
        return getattr(error, "sqlstate", None) == _UNIQUE_VIOLATION

    def is_retryable(self, error: BaseException) -> bool:
        return getattr(error, "sqlstate", None) in _RETRYABLE_SQLSTATES

    def is_unavailable(self, error: BaseException, disconnected: bool) -> bool:
        # Connection failures, admin shutdown, cancelled statements: all OperationalError.
        if disconnected:
            return True
        if getattr(error, "sqlstate", None) in _BOUND_REACHED_SQLSTATES:
            return True
        driver_error = (psycopg.OperationalError, psycopg.InterfaceError)
        return isinstance(error, driver_error) and not self.is_retryable(error)

    def is_schema_missing(self, error: BaseException) -> bool:
        return getattr(error, "sqlstate", None) == _UNDEFINED_TABLE

    def is_bound_reached(self, error: BaseException) -> bool:
        # lock_timeout and statement_timeout; an idle transaction's timeout ends the session.
        return getattr(error, "sqlstate", None) in _STATEMENT_BOUNDS

    def is_refused(self, error: BaseException) -> bool:
        return getattr(error, "sqlstate", None) == _INSUFFICIENT_PRIVILEGE

    def connect_failure(self, error: DBAPIError) -> tuple[bool, str]:
        # psycopg gives no SQLSTATE for a failed connection, only libpq's text: `connection
        # failed: connection to server at "h", port 5432 failed: FATAL:  role "x" does not
        # exist` when the server said no, `… failed: Connection refused` when none answered.
        text = first_line(error.orig)
        reason = text.rpartition(" failed: ")[2] or text
        answered = reason.startswith("FATAL:")
        reason = reason.removeprefix("FATAL:").strip()
        return (not answered or reason.startswith(_NOT_YET_ACCEPTING)), reason


T = TypeVar("T")

# What a server says while it cannot take connections for a while (starting, recovering,
# full): waiting for it helps.
_NOT_YET_ACCEPTING = (
    "the database system is starting up",
    "the database system is not yet accepting connections",
    "the database system is in recovery mode",
    "the database system is shutting down",
    "sorry, too many clients already",
)


def _firsts(items: Sequence[T], identity: Callable[[T], Hashable | None]) -> list[T]:
    """The first item of each identity, in order (those whose identity is None left out).

    A row that two callers' elements of a shared statement name (one lock released or
    acknowledged twice, one key of a lock twice) joins both, and PostgreSQL changes it
    once, with the values of whichever joined row it meets first (under the hash join
    of a small table, the later caller's). The row would then be due at the later release's time, or recorded at
    the later acknowledgement's, while the answer gives it to the first. The later
    elements can change nothing the first does not, so only the first goes in."""
    seen: set[Hashable] = set()
    firsts = []
    for item in items:
        key = identity(item)
        if key is not None and key not in seen:
            seen.add(key)
            firsts.append(item)
    return firsts


def _deleted_by_each(
    acknowledgements: Sequence[LockAcknowledgement], gone: Sequence[tuple[str, str, str]]
) -> list[list[str]]:
    """For each acknowledgement, in order, the keys of `gone` (queue, lock, key: the rows
    deleted) that it asked for; a row two of them asked for is the first's."""
    left = set(gone)
    held: dict[tuple[str, str], list[str]] = {}
    for queue, lock_id, key in gone:
        held.setdefault((queue, lock_id), []).append(key)
    deleted = []
    for each in acknowledgements:
        asked = held.get((each.queue, each.lock_id), []) if each.keys is None else each.keys
        mine = [key for key in dict.fromkeys(asked) if (each.queue, each.lock_id, key) in left]
        left.difference_update((each.queue, each.lock_id, key) for key in mine)
        deleted.append(mine)
    return deleted


def server_options(settings: dict[str, float]) -> str:
    """Settings as libpq's `options` (and pgJDBC's): `-c name=value` each."""
    return " ".join(f"-c {name}={value}" for name, value in settings.items())


def _ms(seconds: float) -> int:
    """A duration setting's value: whole milliseconds, at least one (0 turns a bound off)."""
    return max(1, round(seconds * 1000))
