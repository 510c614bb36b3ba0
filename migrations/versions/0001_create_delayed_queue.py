"""Create delayed_queue, the message table as first designed, with its three indexes.

Revision ID: 0001
Revises:
Create Date: 2026-11-25
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import mysql

from app.storage.table_options import MARIADB_TABLE_OPTIONS

revision: str = "0001"
down_revision: str | None = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "delayed_queue",
        sa.Column(
            "id",
            sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
            primary_key=True,
            autoincrement=True,
        ),
        sa.Column("pKey", sa.String(200), nullable=False),
        sa.Column("pKind", sa.String(100), nullable=False),
        sa.Column(
            "payload",
            sa.LargeBinary().with_variant(mysql.LONGBLOB(), "mysql", "mariadb"),
            nullable=False,
        ),
        sa.Column("scheduledAt", sa.BigInteger(), nullable=False),
        sa.Column("scheduledAtInitially", sa.BigInteger(), nullable=False),
        sa.Column("createdAt", sa.BigInteger(), nullable=False),
        sa.Column("lockUuid", sa.String(36), nullable=True),
        **MARIADB_TABLE_OPTIONS,
    )
    op.create_index("delayed_queue__key_kind_uq", "delayed_queue", ["pKey", "pKind"], unique=True)
    op.create_index(
        "delayed_queue__kind_scheduled_at_idx", "delayed_queue", ["pKind", "scheduledAt"]
    )
    op.create_index("delayed_queue__lock_uuid_id_idx", "delayed_queue", ["lockUuid", "id"])


def downgrade() -> None:
    op.drop_table("delayed_queue")
