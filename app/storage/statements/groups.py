"""The statements of message groups: the marks that say a group's front may have to change,
and the keeper's pass over one group (its row held, its marks taken, its front and first
waiting messages read, messages moved into or out of the front)
(docs/decisions/0027-message-groups.md).

Built once as Core objects with bound parameters; a dialect's variant of one is in its
module (app/storage/dialects/<db>.py) under the same name.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import bindparam, delete, insert, literal_column, select, union_all, update
from sqlalchemy.sql.dml import Insert

from app.domain.messages import PRIORITIES, waiting_priority
from app.storage.statements.common import columns, in_queue
from app.storage.tables import delayed_queue as queue_table
from app.storage.tables import group_marks, message_groups, queue_settings

__all__ = [
    "group_concurrency",
    "group_drop",
    "group_enlist",
    "group_enter",
    "group_front",
    "group_hold",
    "group_leave",
    "group_mark",
    "group_marks_take",
    "group_rows_hold",
    "group_waiting",
    "marked_groups",
    "queue_groups_mark",
]

groups = message_groups.c
marks = group_marks.c
_the_group = (groups.queue == bindparam("queue")) & (groups.messageGroup == bindparam("group"))
_in_group = in_queue & (columns.messageGroup == bindparam("group"))

# Mark a group ("queue", "group") in the writer's transaction. Triggers on the message
# table mark what leaves or comes back to a front (revision 0012); offers mark the groups
# of the messages they insert, one mark per group per statement.
group_mark = insert(group_marks).values(queue=bindparam("queue"), messageGroup=bindparam("group"))
# Every group of a queue marked (its group_concurrency changed), in the settings'
# transaction: a keeper that takes these marks reads the new concurrency.
queue_groups_mark = insert(group_marks).from_select(
    ["queue", "messageGroup"],
    select(groups.queue, groups.messageGroup).where(groups.queue == bindparam("queue")),
)
# A queue's group_concurrency (none: the default), read in the keeper's transaction.
group_concurrency = select(queue_settings.c.groupConcurrency).where(
    queue_settings.c.queue == bindparam("queue")
)
# The oldest marks' groups, up to "limit" marks (a group may come more than once).
marked_groups = select(marks.queue, marks.messageGroup).order_by(marks.id).limit(bindparam("limit"))

# The keeper's row of a group: made if missing (every database says "unless it exists"
# its own way; none here), then held while the keeper changes the group's front. Another
# keeper (another replica, or an offer's pass) waits for it: keepers hold groups in one
# order and never wait on a message's row, so none waits on one that waits on it.
group_enlist: Insert | None = None
group_hold = select(groups.queue).where(_the_group).with_for_update()
# Taken first, under the group's row: every change whose mark this deletes committed
# before, so the reads after it see them; a mark written later stays for the next pass.
group_marks_take = delete(group_marks).where(
    marks.queue == bindparam("queue"), marks.messageGroup == bindparam("group")
)
group_drop = delete(message_groups).where(_the_group)

# A group's front: its messages stored at their own priority (at most its concurrency,
# unless that was lowered while leases still run).
group_front = select(
    columns.id, columns.lockUuid, columns.scheduledAt, columns.scheduledAtInitially
).where(_in_group, columns.priority >= 0)


def build_waiting(index_hint: str | None = None) -> Any:
    """A group's first "limit" waiting messages of each priority, in due order (then id):
    ten short ranges of the group index, merged by the keeper; `index_hint` names that
    index where a database may otherwise take the poll's (MariaDB's variant)."""

    def waiting(priority: int) -> Any:
        rows = (
            select(columns.id, columns.scheduledAt, columns.scheduledAtInitially)
            .where(_in_group, columns.priority == literal_column(str(waiting_priority(priority))))
            .order_by(columns.scheduledAt, columns.id)
            .limit(bindparam("limit"))
        )
        if index_hint is not None:
            rows = rows.with_hint(queue_table, index_hint)
        return select(rows.subquery(f"waiting_{priority}"))

    return union_all(*(waiting(priority) for priority in PRIORITIES))


group_waiting = build_waiting()


def build_moves(listed: Any) -> dict[str, Any]:
    """The keeper's statements over a list of messages (`listed`: the id is one of the list
    bound as "ids"), as the room's and a dialect's variants name them: the messages it is
    about to move that nobody else holds, and the moves into and out of the front. The
    stored priority's sign flips (-1 - p both ways); into the front only a waiting
    message, out of it only one of the front that nobody holds."""
    flipped: dict[str, Any] = {"priority": literal_column("-1") - columns.priority}
    return {
        "group_rows_hold": select(columns.id).where(listed).with_for_update(skip_locked=True),
        "group_enter": update(queue_table).where(listed, columns.priority < 0).values(flipped),
        "group_leave": update(queue_table)
        .where(listed, columns.priority >= 0, columns.lockUuid.is_(None))
        .values(flipped),
    }


_moves = build_moves(columns.id.in_(bindparam("ids", expanding=True)))
group_rows_hold = _moves["group_rows_hold"]
group_enter = _moves["group_enter"]
group_leave = _moves["group_leave"]
