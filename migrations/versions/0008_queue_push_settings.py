"""Push delivery (decision 16): queue_settings gains the queue's push target.

`pushUrl` (the URL each due message is POSTed to; null: the queue does not push),
`pushTimeoutMs` (the whole request's bound, milliseconds) and `pushConcurrency`
(requests at once per replica), set together or all null, as every existing row gets.

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-28
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision: str = "0008"
down_revision: str | None = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("queue_settings") as table:
        table.add_column(sa.Column("pushUrl", sa.String(2048), nullable=True))
        table.add_column(sa.Column("pushTimeoutMs", sa.BigInteger(), nullable=True))
        table.add_column(sa.Column("pushConcurrency", sa.Integer(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("queue_settings") as table:
        table.drop_column("pushConcurrency")
        table.drop_column("pushTimeoutMs")
        table.drop_column("pushUrl")
