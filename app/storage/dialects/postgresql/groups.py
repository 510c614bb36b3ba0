"""PostgreSQL's statements of the groups room: the keeper's pass over many groups in one
statement each, their lists bound as arrays (its variants in VARIANTS)."""

from __future__ import annotations

from typing import Any

from sqlalchemy import BigInteger, String, bindparam, func, select, true, tuple_
from sqlalchemy.dialects.postgresql import ARRAY, insert

from app.storage.dialects.postgresql.common import any_of, unnested
from app.storage.statements.common import columns, in_queue
from app.storage.statements.groups import build_lists, build_skipping_moves
from app.storage.tables import group_marks, message_groups

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
    pairs = unnested(
        f"{name}_pairs",
        ("id", f"{name}_ids", BigInteger),
        ("message_group", f"{name}_groups", String),
    )
    return tuple_(columns.id, columns.messageGroup).in_(select(pairs.c.id, pairs.c.message_group))


VARIANTS = {
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
    **build_lists(any_of, _paired),
    **build_skipping_moves(_paired),
}
