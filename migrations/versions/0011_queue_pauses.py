"""Pause and resume (docs/guide/flow-control.md): which queues and cron entries are paused, and since when.

`queue_pauses` holds a row per paused queue (any name: queues exist implicitly, and a
queue's settings are a separate matter, replaced whole by a PUT that knows nothing of
pauses); resuming deletes it. `cron_entries` gains `pausedAt`: null while the entry runs.
Times are epoch milliseconds (docs/decisions/0025-pause-and-resume.md).

Revision ID: 0011
Revises: 0010
Create Date: 2026-11-29
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from app.storage.table_options import MARIADB_TABLE_OPTIONS

revision: str = "0011"
down_revision: str | None = "0010"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "queue_pauses",
        sa.Column("queue", sa.String(100), nullable=False),
        sa.Column("pausedAt", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("queue", name="queue_pauses__pk"),
        **MARIADB_TABLE_OPTIONS,
    )
    with op.batch_alter_table("cron_entries") as table:
        table.add_column(sa.Column("pausedAt", sa.BigInteger(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("cron_entries") as table:
        table.drop_column("pausedAt")
    op.drop_table("queue_pauses")
