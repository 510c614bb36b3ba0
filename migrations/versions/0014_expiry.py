"""Expiry (docs/guide/flow-control.md#expiry): a message's `expires_at`.

- delayed_queue gains `expiresAt` (epoch ms after which the message is never delivered
  again; null: never) and `expiredAt` (on a dead letter that expired, when it did: the
  message shows `"expired": true`).
- An index of the messages that expire, by that time, which the expiry sweep reads
  (docs/decisions/0028-expiry.md): partial on PostgreSQL and SQLite (only messages that
  expire, so an offer without an expiry adds no entry); MariaDB has no partial indexes,
  and indexes every row's (mostly null) `expiresAt`. Built inside the upgrade's
  transaction: on an existing table it holds nothing until messages carry an expiry.
- cron_entries gains `ttlMs`: each run it installs expires that long after it is due.

Revision ID: 0014
Revises: 0013
Create Date: 2026-11-29
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision: str = "0014"
down_revision: str | None = "0013"
branch_labels = None
depends_on = None

_EXPIRY_INDEX = "delayed_queue__expires_at_idx"


def upgrade() -> None:
    with op.batch_alter_table("delayed_queue") as table:
        table.add_column(sa.Column("expiresAt", sa.BigInteger(), nullable=True))
        table.add_column(sa.Column("expiredAt", sa.BigInteger(), nullable=True))
    expires = sa.text('"expiresAt" IS NOT NULL')
    op.create_index(
        _EXPIRY_INDEX,
        "delayed_queue",
        ["expiresAt"],
        postgresql_where=expires,
        sqlite_where=expires,
    )
    with op.batch_alter_table("cron_entries") as table:
        table.add_column(sa.Column("ttlMs", sa.BigInteger(), nullable=True))


def downgrade() -> None:
    # The releases before this one know no history outcome `expired`: their lists would
    # fail on it. What expired left its queue as dropped messages do.
    op.execute("UPDATE delivery_history SET outcome = 'dropped' WHERE outcome = 'expired'")
    # recreate="never": on SQLite a DROP COLUMN of its own (3.35 and later), not Alembic's
    # copy of the table, which would lose the groups' triggers (revision 0012) and the
    # poll index's DESC.
    with op.batch_alter_table("cron_entries", recreate="never") as table:
        table.drop_column("ttlMs")
    op.drop_index(_EXPIRY_INDEX, table_name="delayed_queue")
    with op.batch_alter_table("delayed_queue", recreate="never") as table:
        table.drop_column("expiredAt")
        table.drop_column("expiresAt")
