"""The statements of message groups: the marks that say a group's front may have to change,
and the keeper's pass over many groups of a queue at once (their rows held, their marks
taken, their fronts and first waiting messages read, messages moved into or out of the
fronts) (docs/decisions/0027-message-groups.md).

Built once as Core objects with bound parameters; a dialect's variant of one is in its
modules (app/storage/dialects/<db>) under the same name. The lists ("groups", "ids")
are expanding INs here; PostgreSQL's direct path binds arrays instead (build_lists).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sqlalchemy import (
    and_,
    bindparam,
    delete,
    insert,
    literal_column,
    or_,
    select,
    tuple_,
    union_all,
    update,
)
from sqlalchemy.sql.dml import Insert

from app.domain.messages import PRIORITIES, waiting_priority
from app.storage.statements.common import columns, in_queue
from app.storage.tables import delayed_queue as queue_table
from app.storage.tables import group_marks, message_groups, queue_settings

__all__ = [
    "group_concurrency",
    "group_enlist",
    "group_enter",
    "group_enter_skipping",
    "group_leave",
    "group_leave_skipping",
    "group_mark",
    "group_rows_hold",
    "group_waiting",
    "groups_drop",
    "groups_enlist",
    "groups_front",
    "groups_hold",
    "groups_mark",
    "groups_marks_take",
    "groups_waiting",
    "marked_groups",
    "queue_groups_mark",
]

# Statements a dialect may leave out: the store then does their work one group at a time.
OPTIONAL = (
    "groups_enlist",
    "groups_mark",
    "groups_waiting",
    "group_enter_skipping",
    "group_leave_skipping",
)

groups = message_groups.c
marks = group_marks.c
_queue: Any = bindparam("queue")

# Mark a group ("queue", "group") in the writer's transaction. Triggers on the message
# table mark what leaves or comes back to a front (revision 0012); offers mark the groups
# of the messages they insert, one mark per group per statement.
group_mark = insert(group_marks).values(queue=_queue, messageGroup=bindparam("group"))
# Many groups ("groups") of one queue in one statement, where a dialect has it; else
# group_mark sent once with every group (an executemany).
groups_mark: Insert | None = None
# Every group of a queue marked (its group_concurrency changed), in the settings'
# transaction: a keeper that takes these marks reads the new concurrency.
queue_groups_mark = insert(group_marks).from_select(
    ["queue", "messageGroup"],
    select(groups.queue, groups.messageGroup).where(groups.queue == _queue),
)
# The oldest marks' groups, up to "limit" marks (a group may come more than once).
marked_groups = select(marks.queue, marks.messageGroup).order_by(marks.id).limit(bindparam("limit"))
# A queue's group_concurrency (none: the default), read in the keeper's transaction.
group_concurrency = select(queue_settings.c.groupConcurrency).where(
    queue_settings.c.queue == _queue
)

# The keeper's row of a group ("group"), unless it exists: every database says "unless it
# exists" its own way; none here. `groups_enlist`, of many ("groups") in one statement,
# where a dialect has it.
group_enlist: Insert | None = None
groups_enlist: Insert | None = None


def build_waiting(index_hint: str | None = None) -> Any:
    """A group's ("group") first "limit" waiting messages of each priority, in due order
    (then id): ten short ranges of the group index, merged by the keeper; `index_hint`
    names that index where a database may otherwise take the poll's (MariaDB's variant).
    `groups_waiting` reads many groups' at once, where a dialect has it."""

    def waiting(priority: int) -> Any:
        rows = (
            select(columns.id, columns.scheduledAt, columns.scheduledAtInitially)
            .where(
                in_queue,
                columns.messageGroup == bindparam("group"),
                columns.priority == literal_column(str(waiting_priority(priority))),
            )
            .order_by(columns.scheduledAt, columns.id)
            .limit(bindparam("limit"))
        )
        if index_hint is not None:
            rows = rows.with_hint(queue_table, index_hint)
        return select(rows.subquery(f"waiting_{priority}"))

    return union_all(*(waiting(priority) for priority in PRIORITIES))


group_waiting = build_waiting()
groups_waiting: Any = None


def listed(column: Any, name: str) -> Any:
    """`column` is one of the list bound as `name` (an expanding IN)."""
    return column.in_(bindparam(name, expanding=True))


def paired(name: str) -> Any:
    """A message is one of the (id, group) pairs bound as `name` (an expanding IN of
    pairs): still in the group the keeper planned its move in."""
    return tuple_(columns.id, columns.messageGroup).in_(bindparam(name, expanding=True))


# A move out of a front takes a front message nobody holds; into one, a waiting message;
# each still in the queue and the group it was planned in (an update or a redrive that
# committed since the pass read it has moved it, and marked the groups again).
_LEAVING = (columns.priority >= 0, columns.lockUuid.is_(None), in_queue)
_ENTERING = (columns.priority < 0, in_queue)


def build_lists(
    listed: Callable[[Any, str], Any] = listed, paired: Callable[[str], Any] = paired
) -> dict[str, Any]:
    """The keeper's statements over lists of groups ("groups") and of messages (ids
    "ids"; (id, group) pairs "leaving" and "entering"), as the room and a dialect's
    variants name them, bound by `listed` and `paired`.

    The groups' rows are held in one order (every keeper takes them so: none waits on one
    that waits on it) and waited for, never skipped: a pass needs them all. The messages
    to move are held only where nobody else holds them (SKIP LOCKED), and only while they
    still qualify (_LEAVING, _ENTERING): a keeper never waits on a message's row, and
    what it then moves by id is what it holds. A move flips the stored priority's sign
    (-1 - p both ways)."""
    of_groups = listed(groups.messageGroup, "groups")
    flipped: dict[str, Any] = {"priority": literal_column("-1") - columns.priority}
    return {
        "groups_hold": select(groups.messageGroup)
        .where(groups.queue == _queue, of_groups)
        .order_by(groups.messageGroup)
        .with_for_update(),
        # Taken first, under the groups' rows: every change whose mark this deletes
        # committed before, so the reads after it see them; a later mark stays.
        "groups_marks_take": delete(group_marks).where(
            marks.queue == _queue, listed(marks.messageGroup, "groups")
        ),
        # The groups' fronts: their messages stored at their own priority.
        "groups_front": select(
            columns.messageGroup,
            columns.id,
            columns.lockUuid,
            columns.scheduledAt,
            columns.scheduledAtInitially,
        ).where(in_queue, listed(columns.messageGroup, "groups"), columns.priority >= 0),
        "groups_drop": delete(message_groups).where(groups.queue == _queue, of_groups),
        "group_rows_hold": select(columns.id)
        .where(
            listed(columns.id, "ids"),  # the index that leads to them
            or_(
                and_(paired("leaving"), *_LEAVING),
                and_(paired("entering"), *_ENTERING),
            ),
        )
        .with_for_update(skip_locked=True),
        # By id, what the pass holds (group_rows_hold), or a message it brought in and
        # sends back.
        "group_enter": update(queue_table)
        .where(listed(columns.id, "ids"), columns.priority < 0)
        .values(flipped),
        "group_leave": update(queue_table)
        .where(listed(columns.id, "ids"), columns.priority >= 0)
        .values(flipped),
    }


def build_skipping_moves(paired: Callable[[str], Any] = paired) -> dict[str, Any]:
    """The moves into and out of fronts in one statement each, where a database can lock
    rows in a subquery of the UPDATE (PostgreSQL's variants): each takes the messages of
    its pairs ("leaving", "entering") nobody else holds that still qualify, moves them,
    and returns their ids. A statement instead of two (group_rows_hold, then the move)."""
    flipped: dict[str, Any] = {"priority": literal_column("-1") - columns.priority}

    def moving(pairs: str, conditions: tuple[Any, ...]) -> Any:
        free = (
            select(columns.id).where(paired(pairs), *conditions).with_for_update(skip_locked=True)
        )
        return update(queue_table).where(columns.id.in_(free)).values(flipped).returning(columns.id)

    return {
        "group_enter_skipping": moving("entering", _ENTERING),
        "group_leave_skipping": moving("leaving", _LEAVING),
    }


group_enter_skipping: Any = None
group_leave_skipping: Any = None

_lists = build_lists()
groups_hold = _lists["groups_hold"]
groups_marks_take = _lists["groups_marks_take"]
groups_front = _lists["groups_front"]
groups_drop = _lists["groups_drop"]
group_rows_hold = _lists["group_rows_hold"]
group_enter = _lists["group_enter"]
group_leave = _lists["group_leave"]
