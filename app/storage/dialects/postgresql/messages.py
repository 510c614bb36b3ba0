"""PostgreSQL's statements of the messages room: the INSERT that skips taken keys (ON
CONFLICT DO NOTHING), a batch's rows and many callers' offers as arrays, the bulk path's
staging table, and the stored offers a batch compares, by digest (its variants in
VARIANTS, its own statements beside them)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

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
    func,
    null,
    select,
    text,
)
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.dialects.postgresql.psycopg import dialect as postgresql_dialect
from sqlalchemy.schema import CreateTable
from sqlalchemy.sql import ColumnElement

from app.storage.dialects.postgresql.common import keys_in_queue, unnested
from app.storage.statements.common import columns
from app.storage.tables import delayed_queue as queue_table

# A batch's rows as three arrays, one parameter each: PostgreSQL parses one small
# statement instead of one with six placeholders per row, and the driver adapts
# three lists instead of 1,200 values (~3x the rows per second of multi-VALUES).
_batch = unnested(
    "batch",
    ("key", "keys", String),
    ("payload", "payloads", LargeBinary),
    ("scheduled_at", "scheduled_ats", BigInteger),
    ("priority", "priorities", SmallInteger),
    ("message_group", "groups", String),
    ("expires_at", "expires_ats", BigInteger),
    ("trace", "traces", String),
)


def _insert_new_keys(
    key: ColumnElement[Any],
    payload: ColumnElement[Any],
    scheduled_at: ColumnElement[Any],
    priority: ColumnElement[Any],
    *,
    group: ColumnElement[Any] | None = None,
    expires_at: ColumnElement[Any] | None = None,
    trace: ColumnElement[Any] | None = None,
    queue: ColumnElement[Any] | None = None,
    now: ColumnElement[Any] | None = None,
    order_by: ColumnElement[Any] | None = None,
    returning: Sequence[ColumnElement[Any]] = (columns.pKey,),
) -> Any:
    """INSERT … SELECT of rows from a source (`key`, `payload`, … its columns; `queue` and
    `now` bound once unless the source has them; no `group`, `expires_at` or `trace`, none)
    into the queue, skipping keys taken already; RETURNING `returning` of the rows that went in (their
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
        null() if trace is None else trace,
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
                "trace",
            ],
            rows,
        )
        .on_conflict_do_nothing(index_elements=["pKey", "pKind"])
        .returning(*returning)
    )


# A batch of one queue (insert_many).
insert_rows = _insert_new_keys(
    _batch.c.key,
    _batch.c.payload,
    _batch.c.scheduled_at,
    _batch.c.priority,
    group=_batch.c.message_group,
    expires_at=_batch.c.expires_at,
    trace=_batch.c.trace,
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
    Column("trace", String, nullable=True),
    prefixes=["TEMPORARY"],
    postgresql_on_commit="DELETE ROWS",
)
# As text: the direct path runs SQL statements, not DDL elements.
create_staging = text(
    str(CreateTable(_staging, if_not_exists=True).compile(dialect=postgresql_dialect()))
)
copy_staging = (
    "COPY hourglass_offer_staging (key, payload, scheduled_at, priority, message_group, "
    "expires_at, trace) "
    "FROM STDIN (FORMAT BINARY)"
)
STAGING_TYPES = ("text", "bytea", "int8", "int2", "text", "int8", "text")
insert_staged = _insert_new_keys(
    _staging.c.key,
    _staging.c.payload,
    _staging.c.scheduled_at,
    _staging.c.priority,
    group=_staging.c.message_group,
    expires_at=_staging.c.expires_at,
    trace=_staging.c.trace,
    order_by=_staging.c.position,
)


# The offers many callers share (app/storage/coalescing.py, decision 23), one statement
# whatever their number: each caller's values as one element of arrays, unnested in
# order ("position").
_offers = unnested(
    "offers",
    ("key", "keys", String),
    ("queue", "queues", String),
    ("payload", "payloads", LargeBinary),
    ("scheduled_at", "scheduled_ats", BigInteger),
    ("now", "nows", BigInteger),
    ("priority", "priorities", SmallInteger),
    ("expires_at", "expires_ats", BigInteger),
    ("trace", "traces", String),
    ordinality="position",
)
# Every caller's new message unless its key is taken (a key offered twice goes in once,
# as the first: rows go in in the callers' order); the keys that went in, with their queue.
insert_offers = _insert_new_keys(
    _offers.c.key,
    _offers.c.payload,
    _offers.c.scheduled_at,
    _offers.c.priority,
    expires_at=_offers.c.expires_at,
    trace=_offers.c.trace,
    queue=_offers.c.queue,
    now=_offers.c.now,
    order_by=_offers.c.position,
    returning=(columns.pKind, columns.pKey),
)

VARIANTS = {
    # The INSERT that skips taken keys, and fails on any other error. A batch's
    # rows go in by insert_rows instead (insert_many).
    "offer_insert": insert(queue_table)
    .on_conflict_do_nothing(index_elements=["pKey", "pKind"])
    .returning(columns.pKey),
    # The payload's SHA-256, not the payload: a re-sent key costs 32 bytes of answer,
    # not up to the payload limit.
    "stored_offers": keys_in_queue(
        digest=func.sha256(columns.payload),
        scheduledAtInitially=columns.scheduledAtInitially,
        priority=columns.priority,
        messageGroup=columns.messageGroup,
        expiresAt=columns.expiresAt,
    ),
}
