"""Create cron_entries: recurring schedules, one per name within a queue (decision 6).

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-26
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import mysql

from app.storage.table_options import MARIADB_TABLE_OPTIONS

revision: str = "0003"
down_revision: str | None = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "cron_entries",
        sa.Column("queue", sa.String(100), nullable=False),
        sa.Column("name", sa.String(100), nullable=False),
        sa.Column("schedule", sa.Text(), nullable=False),
        sa.Column(
            "payload",
            sa.LargeBinary().with_variant(mysql.LONGBLOB(), "mysql", "mariadb"),
            nullable=False,
        ),
        sa.Column("configHash", sa.String(16), nullable=False),
        sa.Column("lookaheadMs", sa.BigInteger(), nullable=True),
        sa.Column("createdAt", sa.BigInteger(), nullable=False),
        sa.Column("updatedAt", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("queue", "name", name="cron_entries__pk"),
        **MARIADB_TABLE_OPTIONS,
    )


def downgrade() -> None:
    op.drop_table("cron_entries")
