"""What every room's statements share: the message table's columns and the conditions on
them (in_queue, by_key, by_lock, is_due), a removal and the history row it records, a
message that starts over, rows by a list of keys; and the store's own readiness read."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy import (
    BigInteger,
    String,
    bindparam,
    case,
    column,
    delete,
    insert,
    literal_column,
    null,
    select,
    table,
)
from sqlalchemy.sql import Select
from sqlalchemy.sql.dml import Delete, Insert

from app.storage.tables import delayed_queue as queue_table
from app.storage.tables import delivery_history

columns = queue_table.c
history = delivery_history.c

in_queue = columns.pKind == bindparam("queue")
by_key = (columns.pKey == bindparam("key")) & in_queue
by_lock = (columns.lockUuid == bindparam("lock_id")) & in_queue
is_due = columns.scheduledAt <= bindparam("now")
# Not past its expiry: a message whose expiry has passed is never delivered again, though
# the expiry sweep may not have removed it yet (docs/decisions/0028-expiry.md).
not_expired = columns.expiresAt.is_(None) | (columns.expiresAt > bindparam("now"))

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
    history first (both in one transaction; PostgreSQL does both in one statement);
    `keys`, the keys it matches (read first where writers are serialized: SQLite).

    `keys_after` names the parameter of a removal whose rows are the keys after it in
    one range of the (`pKey`, `pKind`) index: a removal too large for one statement
    (MariaDB's) then goes on in pages of that index, each starting where the last ended.
    """

    where: Any
    delete: Delete
    record: Insert
    keys: Select
    keys_after: str | None = None


def removal(where: Any, keys_after: str | None = None) -> Removal:
    return Removal(
        where,
        delete(queue_table).where(where),
        insert(delivery_history).from_select(
            HISTORY_COLUMNS, select(*history_values(columns)).where(where)
        ),
        select(columns.pKey).where(where),
        keys_after,
    )


# A grouped message in a group's front goes back to wait (its stored priority p becomes
# -1 - p), where it starts over in another queue: the groups' keeper decides its place
# there (docs/decisions/0027-message-groups.md).
waiting_again = case(
    (
        columns.messageGroup.is_not(None) & (columns.priority >= 0),
        literal_column("-1") - columns.priority,
    ),
    else_=columns.priority,
)


def starting_over(due: Any) -> dict[str, Any]:
    """The columns of a message that starts a new life (an update, a dead letter, a
    redriven one): due at `due` as asked, held by nobody, no delivery counted yet, and
    no expiry (a dead letter does not expire; an update says its own)."""
    return {
        "scheduledAt": due,
        "scheduledAtInitially": due,
        "lockUuid": null(),
        "deliveries": 0,
        "firstDeliveredAt": null(),
        "lastDeliveredAt": null(),
        "expiresAt": null(),
        "expiredAt": null(),
    }


def keys_in_queue(*selected: Any) -> Select:
    """`selected` of the rows of one queue whose keys are in the list bound as "keys"."""
    return select(*selected).where(in_queue, columns.pKey.in_(bindparam("keys", expanding=True)))


# The revision Alembic recorded (readiness): its table, without Alembic's machinery,
# so the read goes the way of every other statement, bounds included.
schema_revision: Select[Any] = select(column("version_num")).select_from(table("alembic_version"))
