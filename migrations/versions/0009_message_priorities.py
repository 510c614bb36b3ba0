"""Priorities (decision 17): a message's `priority`, 0-9, higher first.

- delayed_queue gains `priority` (SMALLINT, not null, default 0): every existing row
  reads as priority 0. PostgreSQL (11+) and MariaDB (10.3+) add a column with a
  constant default without rewriting the table; SQLite rebuilds it (batch mode).
- The poll's index, ("pKind", "priority" DESC, "scheduledAt", "id"): among a queue's
  due messages the poll takes the highest priority first, then the earliest due,
  then the lowest id, and "due" is a prefix of each priority's range of it, so a
  poll reads one range per priority and stops once it has its messages
  (docs/decisions/0017-priorities.md). DESC: MariaDB reads the ten ranges of
  `priority IN (9, …, 0)` in the index's order, which is then the poll's. The
  (pKind, scheduledAt, id) index stays: lists by due time, stats and the next due
  time read it.
- cron_entries gains `priority` (default 0): the priority of every run an entry
  installs, part of its configuration hash when it is not 0 (so the hashes of
  existing entries, and the keys of their runs, stay as they are).

The index is built inside the upgrade's transaction, so writes wait while it reads
the table (about a second per million rows here, as revision 0006's).

Revision ID: 0009
Revises: 0008
Create Date: 2026-11-26
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision: str = "0009"
down_revision: str | None = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("delayed_queue") as table:
        table.add_column(
            sa.Column("priority", sa.SmallInteger(), nullable=False, server_default=sa.text("0"))
        )
    op.create_index(
        "delayed_queue__kind_priority_scheduled_at_id_idx",
        "delayed_queue",
        ["pKind", sa.column("priority").desc(), "scheduledAt", "id"],
    )
    with op.batch_alter_table("cron_entries") as table:
        table.add_column(
            sa.Column("priority", sa.SmallInteger(), nullable=False, server_default=sa.text("0"))
        )


def downgrade() -> None:
    with op.batch_alter_table("cron_entries") as table:
        table.drop_column("priority")
    op.drop_index("delayed_queue__kind_priority_scheduled_at_id_idx", table_name="delayed_queue")
    with op.batch_alter_table("delayed_queue") as table:
        table.drop_column("priority")
