"""A queue's retry delays (decision 14): queue_settings gains the policy that
makes a message released without a delay due again after a growing one.

`retryInitialDelayMs` and `retryMaxDelayMs` (milliseconds),
`retryMultiplier` and `retryJitter` (DOUBLE: MariaDB's FLOAT would read 1.1 back as
1.10000002). All four null, as every existing row gets, means no policy: a release
without a delay makes its messages due at once, as before.

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-27
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision: str = "0007"
down_revision: str | None = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("queue_settings") as table:
        table.add_column(sa.Column("retryInitialDelayMs", sa.BigInteger(), nullable=True))
        table.add_column(sa.Column("retryMaxDelayMs", sa.BigInteger(), nullable=True))
        table.add_column(sa.Column("retryMultiplier", sa.Double(), nullable=True))
        table.add_column(sa.Column("retryJitter", sa.Double(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("queue_settings") as table:
        table.drop_column("retryJitter")
        table.drop_column("retryMultiplier")
        table.drop_column("retryMaxDelayMs")
        table.drop_column("retryInitialDelayMs")
