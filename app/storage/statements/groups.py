"""The statements of message groups: marking a group for the keeper, and the keeper's pass
over one group (its row held, its front and first waiting messages read, messages moved
in or out of the front) (docs/decisions/0027-message-groups.md).

Built once as Core objects with bound parameters; a dialect's variant of one is in its
module (app/storage/dialects/<db>.py) under the same name.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import bindparam, delete, func, literal_column, select, union_all, update
from sqlalchemy.sql.dml import Insert

from app.domain.messages import DEFAULT_GROUP_CONCURRENCY, PRIORITIES, waiting_priority
from app.storage.statements.common import columns, in_queue
from app.storage.tables import delayed_queue as queue_table
from app.storage.tables import message_groups, queue_settings

__all__ = [
    "dirty_groups",
    "group_clean",
    "group_drop",
    "group_enter",
    "group_front",
    "group_hold",
    "group_leave",
    "group_mark",
    "group_rows_hold",
    "group_waiting",
    "queue_groups_mark",
    "starved_groups",
]

groups = message_groups.c
_the_group = (groups.queue == bindparam("queue")) & (groups.messageGroup == bindparam("group"))
_in_group = in_queue & (columns.messageGroup == bindparam("group"))

# Mark a group for the keeper ("queue", "group", since "now"), creating its row: an
# upsert, which every database says its own way; none here. A mark kept keeps its time.
group_mark: Insert | None = None
# Mark every group of a queue (its group_concurrency changed).
queue_groups_mark = (
    update(message_groups)
    .where(groups.queue == bindparam("queue"), groups.dirtyAt.is_(None))
    .values(dirtyAt=bindparam("now"))
)
# The groups marked since before "before", oldest mark first, at most "limit".
dirty_groups = (
    select(groups.queue, groups.messageGroup)
    .where(groups.dirtyAt <= bindparam("before"))
    .order_by(groups.dirtyAt)
    .limit(bindparam("limit"))
)

# The keeper holds a group's row while it changes the group's front; another keeper
# (another replica) skips it rather than wait.
group_hold = select(groups.dirtyAt).where(_the_group).with_for_update(skip_locked=True)
group_clean = update(message_groups).where(_the_group).values(dirtyAt=None)
group_drop = delete(message_groups).where(_the_group)

# A group's front: its messages stored at their own priority (at most its concurrency,
# unless that was lowered and leases still run).
group_front = select(columns.id, columns.lockUuid, columns.scheduledAt).where(
    _in_group, columns.priority >= 0
)
# Its first "limit" waiting messages of each priority, in due order (then id): ten short
# ranges of the group index, merged by the keeper.
group_waiting = union_all(
    *(
        select(
            (
                select(columns.id, columns.scheduledAt)
                .where(_in_group, columns.priority == literal_column(str(waiting_priority(p))))
                .order_by(columns.scheduledAt, columns.id)
                .limit(bindparam("limit"))
            ).subquery(f"waiting_{p}")
        )
        for p in PRIORITIES
    )
)


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


def _of_group(*conditions):
    return (
        select(literal_column("1"))
        .select_from(queue_table)
        .where(
            columns.pKind == groups.queue,
            columns.messageGroup == groups.messageGroup,
            *conditions,
        )
    )


# The keeper's check every second, for what no mark told it (an acknowledgement through
# another process, a crash between a commit and a pass): groups not marked whose front
# has room while messages wait, and groups left with no message.
_concurrency = func.coalesce(
    select(queue_settings.c.groupConcurrency)
    .where(queue_settings.c.queue == groups.queue)
    .scalar_subquery(),
    DEFAULT_GROUP_CONCURRENCY,
)
_front_size = (
    select(func.count())
    .select_from(queue_table)
    .where(
        columns.pKind == groups.queue,
        columns.messageGroup == groups.messageGroup,
        columns.priority >= 0,
    )
    .scalar_subquery()
)
starved_groups = (
    select(groups.queue, groups.messageGroup)
    .where(
        groups.dirtyAt.is_(None),
        (_of_group(columns.priority < 0).exists() & (_front_size < _concurrency))
        | ~_of_group().exists(),
    )
    .limit(bindparam("limit"))
)
