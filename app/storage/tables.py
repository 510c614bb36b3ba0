"""The database tables as SQLAlchemy Core objects; Alembic's target metadata."""

from __future__ import annotations

from sqlalchemy import (
    BigInteger,
    Column,
    Double,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    PrimaryKeyConstraint,
    SmallInteger,
    String,
    Table,
    Text,
    column,
    literal_column,
    text,
)
from sqlalchemy.dialects import mysql

from app.domain.trace import MAX_TRACEPARENT, MAX_TRACESTATE
from app.storage.table_options import MARIADB_TABLE_OPTIONS

metadata = MetaData()

# A stored trace context at its longest: both headers at their bound, and the newline.
TRACE_LENGTH = MAX_TRACEPARENT + 1 + MAX_TRACESTATE

# SQLite only auto-increments an INTEGER PRIMARY KEY (the rowid alias).
_ID_TYPE = BigInteger().with_variant(Integer(), "sqlite")
# MariaDB's plain BLOB stops at 64 KiB; payloads may be up to the configured limit.
_PAYLOAD_TYPE = LargeBinary().with_variant(mysql.LONGBLOB(), "mysql", "mariadb")


# The index of acknowledgements, extends and releases by lock id.
LOCK_INDEX = "delayed_queue__lock_uuid_id_idx"
# The index every poll reads (revision 0009; app/storage/statements/leases.py: CLAIM_ORDER).
POLL_INDEX = "delayed_queue__kind_priority_scheduled_at_id_idx"

# The seed design's table, column for column. Times are epoch milliseconds.
# `pKind` is the queue name. `scheduledAt` is when the row is next due: for a
# leased row, when its lease runs out. `lockUuid` is the lease holder, if any.
delayed_queue = Table(
    "delayed_queue",
    metadata,
    Column("id", _ID_TYPE, primary_key=True, autoincrement=True),
    Column("pKey", String(200), nullable=False),
    Column("pKind", String(100), nullable=False),
    Column("payload", _PAYLOAD_TYPE, nullable=False),
    Column("scheduledAt", BigInteger, nullable=False),
    Column("scheduledAtInitially", BigInteger, nullable=False),
    Column("createdAt", BigInteger, nullable=False),
    Column("lockUuid", String(36), nullable=True),
    # Added by revision 0004 (decision 7): deliveries in the current queue, when the
    # first and the last happened, and for a dead letter the queue it came from.
    Column("deliveries", Integer, nullable=False, server_default=text("0")),
    Column("firstDeliveredAt", BigInteger, nullable=True),
    Column("lastDeliveredAt", BigInteger, nullable=True),
    Column("deadLetteredFrom", String(100), nullable=True),
    # Added by revision 0009 (decision 17): 0-9, higher first among due messages.
    Column("priority", SmallInteger, nullable=False, server_default=text("0")),
    # Added by revision 0012: the message's group, if any. A grouped message not among
    # its group's next ones waits with its priority p stored as -1 - p, outside the
    # poll's ranges (docs/decisions/0027-message-groups.md).
    Column("messageGroup", String(200), nullable=True),
    # Added by revision 0014: when the message expires (never delivered after it; null:
    # never), and on a dead letter that expired, when it did
    # (docs/decisions/0028-expiry.md).
    Column("expiresAt", BigInteger, nullable=True),
    Column("expiredAt", BigInteger, nullable=True),
    # Added by revision 0015: the W3C trace context its offer came with, the traceparent
    # then, after a newline, the tracestate if any; null: none
    # (docs/decisions/0029-trace-context.md).
    Column("trace", String(TRACE_LENGTH), nullable=True),
    Index("delayed_queue__key_kind_uq", "pKey", "pKind", unique=True),
    # Polls and lists by due time (revision 0006 added "id": a page's keyset is
    # (scheduledAt, id), and many messages may be due in the same millisecond).
    Index("delayed_queue__kind_scheduled_at_id_idx", "pKind", "scheduledAt", "id"),
    # Lists by key prefix (revision 0006), keys in byte order: on PostgreSQL by the
    # operator class that compares bytes whatever the collation (see below).
    Index(
        "delayed_queue__kind_key_idx",
        "pKind",
        "pKey",
        postgresql_ops={"pKey": "varchar_pattern_ops"},
    ),
    Index(LOCK_INDEX, "lockUuid", "id"),
    # Polls (revision 0009): due messages by priority, highest first, then due time and
    # id; "due" is a prefix of each priority's range (docs/decisions/0017-priorities.md).
    Index(
        POLL_INDEX,
        "pKind",
        column("priority").desc(),
        "scheduledAt",
        "id",
    ),
    **MARIADB_TABLE_OPTIONS,  # InnoDB, utf8mb4, keys compared exactly
)

# A group's messages (revision 0012): its front (priority >= 0) and its waiting ones in
# due order, a range each per priority; only grouped rows where the database has
# partial indexes (PostgreSQL, SQLite).
GROUP_INDEX = "delayed_queue__kind_group_priority_scheduled_at_id_idx"
group_index = Index(
    GROUP_INDEX,
    delayed_queue.c.pKind,
    delayed_queue.c.messageGroup,
    delayed_queue.c.priority,
    delayed_queue.c.scheduledAt,
    delayed_queue.c.id,
    postgresql_where=delayed_queue.c.messageGroup.is_not(None),
    sqlite_where=delayed_queue.c.messageGroup.is_not(None),
)

# PostgreSQL only (revision 0012): a group's messages in due order, from which the
# keeper reads each group's first waiting ones with one probe (the index above takes
# one per priority). Only grouped rows, as the index above.
GROUP_DUE_INDEX = "delayed_queue__kind_group_scheduled_at_id_idx"
group_due_index = Index(
    GROUP_DUE_INDEX,
    delayed_queue.c.pKind,
    delayed_queue.c.messageGroup,
    delayed_queue.c.scheduledAt,
    delayed_queue.c.id,
    postgresql_where=delayed_queue.c.messageGroup.is_not(None),
    info={"only_on": "postgresql"},  # migrations/env.py compares it there only
).ddl_if(dialect="postgresql")

# PostgreSQL only (revision 0005): the keys of cron runs, in byte order within each
# queue. A cron entry's runs are one range of keys (app/storage/statements/cron.py: entry_runs),
# but a range of the unique (pKey, pKind) index follows the database's collation, and
# under a linguistic one (en_US.UTF-8, the usual default) the keys that start with
# `a/` are not one range of it: "a/z" sorts after "a0" there. Partial, so that
# messages whose keys do not have a run key's shape (`…/<16>/<19>`) cost it only a
# LIKE per insert (no difference measured beyond noise: migrations/versions/0005).
# MariaDB and SQLite compare keys byte by byte already (utf8mb4_nopad_bin, BINARY).
CRON_RUN_KEY_SHAPE = "%/" + "_" * 16 + "/" + "_" * 19
cron_run_keys_index = Index(
    "delayed_queue__cron_run_keys_idx",
    delayed_queue.c.pKind,
    delayed_queue.c.pKey,
    postgresql_ops={"pKey": "varchar_pattern_ops"},  # byte order, whatever the collation
    postgresql_where=delayed_queue.c.pKey.like(literal_column(f"'{CRON_RUN_KEY_SHAPE}'")),
    info={"only_on": "postgresql"},  # migrations/env.py compares it there only
).ddl_if(dialect="postgresql")

# The leased messages of each queue by lease end (revision 0013), on PostgreSQL and
# SQLite: a claim in a queue with `max_leased` counts the leases that have not run out
# (docs/decisions/0026-concurrency-and-rate-limits.md). Partial, so an offer (no lock)
# adds no entry; MariaDB has no partial indexes, and reads its lock index instead.
LEASED_INDEX = "delayed_queue__kind_leased_until_idx"
leased_index = Index(
    LEASED_INDEX,
    delayed_queue.c.pKind,
    delayed_queue.c.scheduledAt,
    postgresql_where=delayed_queue.c.lockUuid.is_not(None),
    sqlite_where=delayed_queue.c.lockUuid.is_not(None),
    info={"only_on": ("postgresql", "sqlite")},  # migrations/env.py compares it there only
).ddl_if(dialect=("postgresql", "sqlite"))  # type: ignore[arg-type]  # a tuple is documented

# The messages that expire, by when (revision 0014): the expiry sweep reads the earliest
# (docs/decisions/0028-expiry.md). Partial on PostgreSQL and SQLite, so a message without
# an expiry adds no entry; MariaDB has no partial indexes and indexes every row.
EXPIRY_INDEX = "delayed_queue__expires_at_idx"
expiry_index = Index(
    EXPIRY_INDEX,
    delayed_queue.c.expiresAt,
    postgresql_where=delayed_queue.c.expiresAt.is_not(None),
    sqlite_where=delayed_queue.c.expiresAt.is_not(None),
)

# Cron entries (decision 6), one per name within a queue. `schedule` is the
# schedule's JSON (rule and time zone); `configHash` identifies schedule, zone
# and payload, and is part of every run's message key. Times are epoch ms.
cron_entries = Table(
    "cron_entries",
    metadata,
    Column("queue", String(100), nullable=False),
    Column("name", String(100), nullable=False),
    Column("schedule", Text, nullable=False),
    Column("payload", _PAYLOAD_TYPE, nullable=False),
    Column("configHash", String(16), nullable=False),
    Column("lookaheadMs", BigInteger, nullable=True),
    # Added by revision 0009 (decision 17): the priority of every run it installs.
    Column("priority", SmallInteger, nullable=False, server_default=text("0")),
    Column("createdAt", BigInteger, nullable=False),
    Column("updatedAt", BigInteger, nullable=False),
    # Added by revision 0011 (decision 25): when the entry was paused; null while it runs.
    Column("pausedAt", BigInteger, nullable=True),
    # Added by revision 0012: the group of every run it installs, if any.
    Column("messageGroup", String(200), nullable=True),
    # Added by revision 0014: every run it installs expires this long after it is due.
    Column("ttlMs", BigInteger, nullable=True),
    PrimaryKeyConstraint("queue", "name", name="cron_entries__pk"),
    **MARIADB_TABLE_OPTIONS,  # InnoDB, utf8mb4, keys compared exactly
)

# Per-queue settings (lease, delivery limit, dead-letter queue, and what later revisions
# added below); a queue without a row has the defaults.
queue_settings = Table(
    "queue_settings",
    metadata,
    Column("queue", String(100), nullable=False),
    Column("defaultLeaseMs", BigInteger, nullable=True),
    Column("maxDeliveries", Integer, nullable=True),
    Column("deadLetterQueue", String(100), nullable=True),
    Column("updatedAt", BigInteger, nullable=False),
    # Added by revision 0007 (decision 14): the delays of releases that name none
    # (app/domain/messages.py: RetryPolicy), all four set or all null (no policy).
    # DOUBLE, not FLOAT: MariaDB's FLOAT has 24 bits, and 1.1 would read back as 1.10000002.
    Column("retryInitialDelayMs", BigInteger, nullable=True),
    Column("retryMaxDelayMs", BigInteger, nullable=True),
    Column("retryMultiplier", Double, nullable=True),
    Column("retryJitter", Double, nullable=True),
    # Added by revision 0008 (decision 16): where the queue pushes its messages
    # (app/domain/messages.py: PushTarget), all three set or all null (no push).
    Column("pushUrl", String(2048), nullable=True),
    Column("pushTimeoutMs", BigInteger, nullable=True),
    Column("pushConcurrency", Integer, nullable=True),
    # Added by revision 0012: how many of one group may be leased at once (null: 1).
    Column("groupConcurrency", Integer, nullable=True),
    # Added by revision 0013 (docs/decisions/0026-concurrency-and-rate-limits.md): messages
    # leased at once at most, and deliveries begun per period at most (both rate columns
    # set, or both null); null: no bound.
    Column("maxLeased", Integer, nullable=True),
    Column("rateLimit", Integer, nullable=True),
    Column("ratePeriodMs", BigInteger, nullable=True),
    PrimaryKeyConstraint("queue", name="queue_settings__pk"),
    **MARIADB_TABLE_OPTIONS,  # InnoDB, utf8mb4, keys compared exactly
)

# One row per group that holds messages (revision 0012), which the groups' keeper holds
# while it changes the group's front (docs/decisions/0027-message-groups.md).
message_groups = Table(
    "message_groups",
    metadata,
    Column("queue", String(100), nullable=False),
    Column("messageGroup", String(200), nullable=False),
    PrimaryKeyConstraint("queue", "messageGroup", name="message_groups__pk"),
    **MARIADB_TABLE_OPTIONS,  # InnoDB, utf8mb4, keys compared exactly
)

# The groups whose front may have to change (revision 0012): a row per change, written in
# the transaction that made it (by the offers, and by triggers on the message table for
# what leaves or comes back to a front), taken by the keeper. Rows only ever go in and
# out: writers never wait on each other here.
group_marks = Table(
    "group_marks",
    metadata,
    Column("id", _ID_TYPE, primary_key=True, autoincrement=True),
    Column("queue", String(100), nullable=False),
    Column("messageGroup", String(200), nullable=False),
    Index("group_marks__queue_group_idx", "queue", "messageGroup"),
    **MARIADB_TABLE_OPTIONS,  # InnoDB, utf8mb4, keys compared exactly
)

# The paused queues (revision 0011), one row each, since when (epoch ms); a
# queue delivers nothing while it has one (docs/decisions/0025-pause-and-resume.md).
queue_pauses = Table(
    "queue_pauses",
    metadata,
    Column("queue", String(100), nullable=False),
    Column("pausedAt", BigInteger, nullable=False),
    PrimaryKeyConstraint("queue", name="queue_pauses__pk"),
    **MARIADB_TABLE_OPTIONS,  # InnoDB, utf8mb4, keys compared exactly
)

# The deliveries begun in queues with a rate (revision 0013): one row per claim that
# delivered, when (epoch ms) and how many, written in the claim's transaction; a
# queue's rows older than its period are pruned by its claims
# (docs/decisions/0026-concurrency-and-rate-limits.md).
delivery_starts = Table(
    "delivery_starts",
    metadata,
    Column("id", _ID_TYPE, primary_key=True, autoincrement=True),
    Column("queue", String(100), nullable=False),
    Column("startedAt", BigInteger, nullable=False),
    Column("deliveries", Integer, nullable=False),
    Index("delivery_starts__queue_started_at_idx", "queue", "startedAt"),
    **MARIADB_TABLE_OPTIONS,  # InnoDB, utf8mb4, keys compared exactly
)

# One row per message that left a queue (decision 7): acknowledged, dead-lettered or
# dropped, written in the transaction that removed it. `scheduledAt` is the time
# the producer asked for; `outcome` is a FinishOutcome (app/domain/messages.py).
delivery_history = Table(
    "delivery_history",
    metadata,
    Column("id", _ID_TYPE, primary_key=True, autoincrement=True),
    Column("queue", String(100), nullable=False),
    Column("key", String(200), nullable=False),
    Column("scheduledAt", BigInteger, nullable=False),
    Column("createdAt", BigInteger, nullable=False),
    Column("firstDeliveredAt", BigInteger, nullable=True),
    Column("lastDeliveredAt", BigInteger, nullable=True),
    Column("deliveries", Integer, nullable=False),
    Column("outcome", String(16), nullable=False),
    Column("finishedAt", BigInteger, nullable=False),
    Index("delivery_history__finished_at_id_idx", "finishedAt", "id"),
    # A queue's history, newest first, of every key, of one key, or of one outcome
    # (revision 0006).
    Index("delivery_history__queue_finished_at_id_idx", "queue", "finishedAt", "id"),
    Index("delivery_history__queue_key_finished_at_id_idx", "queue", "key", "finishedAt", "id"),
    Index(
        "delivery_history__queue_outcome_finished_at_id_idx",
        "queue",
        "outcome",
        "finishedAt",
        "id",
    ),
    **MARIADB_TABLE_OPTIONS,  # InnoDB, utf8mb4, keys compared exactly
)
