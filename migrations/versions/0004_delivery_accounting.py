"""Delivery accounting (decision 7): per-message delivery counts, queue settings, history.

delayed_queue gains `deliveries` (how often the message was handed to a worker in
its current queue), `firstDeliveredAt` and `lastDeliveredAt` (epoch ms), and
`deadLetteredFrom` (for a dead letter, the queue it came from). queue_settings
holds a queue's default lease, its delivery limit and its dead-letter queue.
delivery_history keeps one row per message that left a queue: acknowledged,
dead-lettered or dropped.

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-26
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from app.storage.table_options import MARIADB_TABLE_OPTIONS

revision: str = "0004"
down_revision: str | None = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("delayed_queue") as table:
        table.add_column(
            sa.Column("deliveries", sa.Integer(), nullable=False, server_default=sa.text("0"))
        )
        table.add_column(sa.Column("firstDeliveredAt", sa.BigInteger(), nullable=True))
        table.add_column(sa.Column("lastDeliveredAt", sa.BigInteger(), nullable=True))
        table.add_column(sa.Column("deadLetteredFrom", sa.String(100), nullable=True))

    op.create_table(
        "queue_settings",
        sa.Column("queue", sa.String(100), nullable=False),
        sa.Column("defaultLeaseMs", sa.BigInteger(), nullable=True),
        sa.Column("maxDeliveries", sa.Integer(), nullable=True),
        sa.Column("deadLetterQueue", sa.String(100), nullable=True),
        sa.Column("updatedAt", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("queue", name="queue_settings__pk"),
        **MARIADB_TABLE_OPTIONS,
    )

    op.create_table(
        "delivery_history",
        sa.Column(
            "id",
            sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
            primary_key=True,
            autoincrement=True,
        ),
        sa.Column("queue", sa.String(100), nullable=False),
        sa.Column("key", sa.String(200), nullable=False),
        sa.Column("scheduledAt", sa.BigInteger(), nullable=False),
        sa.Column("createdAt", sa.BigInteger(), nullable=False),
        sa.Column("firstDeliveredAt", sa.BigInteger(), nullable=True),
        sa.Column("lastDeliveredAt", sa.BigInteger(), nullable=True),
        sa.Column("deliveries", sa.Integer(), nullable=False),
        sa.Column("outcome", sa.String(16), nullable=False),
        sa.Column("finishedAt", sa.BigInteger(), nullable=False),
        **MARIADB_TABLE_OPTIONS,
    )
    op.create_index(
        "delivery_history__finished_at_id_idx", "delivery_history", ["finishedAt", "id"]
    )


def downgrade() -> None:
    op.drop_index("delivery_history__finished_at_id_idx", table_name="delivery_history")
    op.drop_table("delivery_history")
    op.drop_table("queue_settings")
    with op.batch_alter_table("delayed_queue") as table:
        table.drop_column("deadLetteredFrom")
        table.drop_column("lastDeliveredAt")
        table.drop_column("firstDeliveredAt")
        table.drop_column("deliveries")
