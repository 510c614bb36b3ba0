"""Message groups (docs/guide/flow-control.md): a message's group, the keeper's rows and marks,
the triggers that mark a group when a message leaves or comes back to its front, the
queue setting `groupConcurrency`, and a cron entry's group.

On SQLite a later revision that rebuilds `delayed_queue` (Alembic's batch mode copies
the table) drops its triggers: such a revision must create them again.

A grouped message not in its group's front waits with its priority p stored as -1 - p,
outside the poll's ranges; the new index reads a group's front and its waiting messages
in due order, and holds grouped rows only where the database has partial indexes
(docs/decisions/0027-message-groups.md).

Revision ID: 0012
Revises: 0011
Create Date: 2026-11-29
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from app.storage.table_options import MARIADB_TABLE_OPTIONS

revision: str = "0012"
down_revision: str | None = "0011"
branch_labels = None
depends_on = None

_GROUPED = sa.text('"messageGroup" IS NOT NULL')

# When a group is marked, as each database's trigger conditions say it (OLD and NEW are the
# row before and after). A message leaves the front: deleted, moved to another queue or
# group, sent back to wait, or released (its place is weighed again). A waiting message
# changes: it came from the front, from another queue or group, or its due time moved.
# A poll that leases a front message, or a keeper that brings one in, marks nothing.
_LEFT = (
    "OLD.{group} IS NOT NULL AND OLD.priority >= 0 AND ("
    "NEW.{kind} <> OLD.{kind} OR NOT (NEW.{group} {same} OLD.{group}) OR NEW.priority < 0 "
    "OR (OLD.{lock} IS NOT NULL AND NEW.{lock} IS NULL))"
)
_CHANGED = (
    "NEW.{group} IS NOT NULL AND NEW.priority < 0 AND ("
    "OLD.priority >= 0 OR NEW.{kind} <> OLD.{kind} OR NOT (NEW.{group} {same} OLD.{group}) "
    "OR NEW.{due} <> OLD.{due})"
)
_DELETED = "OLD.{group} IS NOT NULL AND OLD.priority >= 0"


def _names(quote: str, same: str) -> dict[str, str]:
    return {
        "group": f"{quote}messageGroup{quote}",
        "kind": f"{quote}pKind{quote}",
        "lock": f"{quote}lockUuid{quote}",
        "due": f"{quote}scheduledAt{quote}",
        "same": same,
    }


def _mark(row: str, quote: str) -> str:
    return (
        f"INSERT INTO group_marks (queue, {quote}messageGroup{quote}) "
        f"VALUES ({row}.{quote}pKind{quote}, {row}.{quote}messageGroup{quote})"
    )


def _create_triggers(dialect: str) -> None:
    if dialect == "postgresql":
        names = _names('"', "IS NOT DISTINCT FROM")
        for row in ("OLD", "NEW"):
            op.execute(
                f"CREATE FUNCTION delayed_queue__mark_{row.lower()}_group() RETURNS trigger "
                f"LANGUAGE plpgsql AS $$ BEGIN {_mark(row, chr(34))}; RETURN NULL; END $$"
            )
        for name, event, condition, row in (
            ("group_left", "UPDATE", _LEFT, "old"),
            ("group_changed", "UPDATE", _CHANGED, "new"),
            ("group_deleted", "DELETE", _DELETED, "old"),
        ):
            op.execute(
                f"CREATE TRIGGER delayed_queue__{name} AFTER {event} ON delayed_queue "
                f"FOR EACH ROW WHEN ({condition.format(**names)}) "
                f"EXECUTE FUNCTION delayed_queue__mark_{row}_group()"
            )
    elif dialect == "sqlite":
        names = _names('"', "IS")
        for name, event, condition, row in (
            ("group_left", "UPDATE", _LEFT, "OLD"),
            ("group_changed", "UPDATE", _CHANGED, "NEW"),
            ("group_deleted", "DELETE", _DELETED, "OLD"),
        ):
            op.execute(
                f"CREATE TRIGGER delayed_queue__{name} AFTER {event} ON delayed_queue "
                f"FOR EACH ROW WHEN {condition.format(**names)} "
                f"BEGIN {_mark(row, chr(34))}; END"
            )
    else:  # MariaDB: one trigger per event, its conditions in the body
        names = _names("`", "<=>")
        op.execute(
            "CREATE TRIGGER delayed_queue__group_changed AFTER UPDATE ON delayed_queue "
            f"FOR EACH ROW BEGIN "
            f"IF {_LEFT.format(**names)} THEN {_mark('OLD', '`')}; END IF; "
            f"IF {_CHANGED.format(**names)} THEN {_mark('NEW', '`')}; END IF; "
            "END"
        )
        op.execute(
            "CREATE TRIGGER delayed_queue__group_deleted AFTER DELETE ON delayed_queue "
            f"FOR EACH ROW BEGIN IF {_DELETED.format(**names)} THEN {_mark('OLD', '`')}; "
            "END IF; END"
        )


def _drop_triggers(dialect: str) -> None:
    triggers: tuple[str, ...] = ("group_changed", "group_deleted")
    if dialect not in ("mariadb", "mysql"):
        triggers = ("group_left", *triggers)
    for name in triggers:
        on = " ON delayed_queue" if dialect == "postgresql" else ""
        op.execute(f"DROP TRIGGER IF EXISTS delayed_queue__{name}{on}")
    if dialect == "postgresql":
        for row in ("old", "new"):
            op.execute(f"DROP FUNCTION IF EXISTS delayed_queue__mark_{row}_group()")


def upgrade() -> None:
    with op.batch_alter_table("delayed_queue") as table:
        table.add_column(sa.Column("messageGroup", sa.String(200), nullable=True))
    op.create_index(
        "delayed_queue__kind_group_priority_scheduled_at_id_idx",
        "delayed_queue",
        ["pKind", "messageGroup", "priority", "scheduledAt", "id"],
        postgresql_where=_GROUPED,
        sqlite_where=_GROUPED,
    )
    if op.get_bind().dialect.name == "postgresql":
        # A group's messages in due order: the keeper's one probe per group for its
        # first waiting messages.
        op.create_index(
            "delayed_queue__kind_group_scheduled_at_id_idx",
            "delayed_queue",
            ["pKind", "messageGroup", "scheduledAt", "id"],
            postgresql_where=_GROUPED,
        )
    op.create_table(
        "message_groups",
        sa.Column("queue", sa.String(100), nullable=False),
        sa.Column("messageGroup", sa.String(200), nullable=False),
        sa.PrimaryKeyConstraint("queue", "messageGroup", name="message_groups__pk"),
        **MARIADB_TABLE_OPTIONS,
    )
    op.create_table(
        "group_marks",
        sa.Column(
            "id",
            sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
            primary_key=True,
            autoincrement=True,
        ),
        sa.Column("queue", sa.String(100), nullable=False),
        sa.Column("messageGroup", sa.String(200), nullable=False),
        **MARIADB_TABLE_OPTIONS,
    )
    op.create_index("group_marks__queue_group_idx", "group_marks", ["queue", "messageGroup"])
    _create_triggers(op.get_bind().dialect.name)
    with op.batch_alter_table("queue_settings") as table:
        table.add_column(sa.Column("groupConcurrency", sa.Integer(), nullable=True))
    with op.batch_alter_table("cron_entries") as table:
        table.add_column(sa.Column("messageGroup", sa.String(200), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("cron_entries") as table:
        table.drop_column("messageGroup")
    with op.batch_alter_table("queue_settings") as table:
        table.drop_column("groupConcurrency")
    _drop_triggers(op.get_bind().dialect.name)
    op.drop_table("group_marks")
    op.drop_table("message_groups")
    if op.get_bind().dialect.name == "postgresql":
        op.drop_index("delayed_queue__kind_group_scheduled_at_id_idx", table_name="delayed_queue")
    op.drop_index(
        "delayed_queue__kind_group_priority_scheduled_at_id_idx", table_name="delayed_queue"
    )
    with op.batch_alter_table("delayed_queue") as table:
        table.drop_column("messageGroup")
