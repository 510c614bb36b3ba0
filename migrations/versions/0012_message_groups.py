"""Message groups (docs/flow-control.md): a message's group, the groups' rows, and the
queue setting `groupConcurrency`.

A grouped message not among its group's next ones waits with its priority p stored as
-1 - p, outside the poll's ranges; the new index reads a group's front and its waiting
messages in due order, and holds grouped rows only where the database has partial
indexes (docs/decisions/0027-message-groups.md).

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
    op.create_table(
        "message_groups",
        sa.Column("queue", sa.String(100), nullable=False),
        sa.Column("messageGroup", sa.String(200), nullable=False),
        sa.Column("dirtyAt", sa.BigInteger(), nullable=True),
        sa.PrimaryKeyConstraint("queue", "messageGroup", name="message_groups__pk"),
        **MARIADB_TABLE_OPTIONS,
    )
    with op.batch_alter_table("queue_settings") as table:
        table.add_column(sa.Column("groupConcurrency", sa.Integer(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("queue_settings") as table:
        table.drop_column("groupConcurrency")
    op.drop_table("message_groups")
    op.drop_index(
        "delayed_queue__kind_group_priority_scheduled_at_id_idx", table_name="delayed_queue"
    )
    with op.batch_alter_table("delayed_queue") as table:
        table.drop_column("messageGroup")
