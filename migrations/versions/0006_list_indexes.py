"""Indexes that lead to each page of a list (decision 13).

- Messages by due time: the keyset is (scheduledAt, id), and many messages may be due
  in the same millisecond (an import scheduled for 09:00), so the queue's due-time
  index gains "id" as its last column: ("pKind", "scheduledAt", "id") replaces
  ("pKind", "scheduledAt"); polls use it as before. MariaDB and SQLite had the id
  at the end of every secondary index already (the primary key, the rowid).
- Messages by key prefix, in key order: ("pKind", "pKey"), the key in byte order; on
  PostgreSQL by the operator class varchar_pattern_ops, whose ~<~ and ~>=~ compare
  bytes whatever the database's collation (as revision 0005's cron index does).
- A queue's delivery history, newest first, of every key, of one, or of one outcome:
  ("queue", "finishedAt", "id"), ("queue", "key", "finishedAt", "id") and ("queue",
  "outcome", "finishedAt", "id"). Without the last, a page of a rare outcome read
  every row of the queue's history until it had found its rows (a page of dead
  letters, one row in 200, read 10,000 rows: decision 13).

The indexes are built inside the upgrade's transaction, so writes wait while they
read the tables (about a second per million rows here).

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-26
"""

from __future__ import annotations

from alembic import op

revision: str = "0006"
down_revision: str | None = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index(
        "delayed_queue__kind_scheduled_at_id_idx",
        "delayed_queue",
        ["pKind", "scheduledAt", "id"],
    )
    op.drop_index("delayed_queue__kind_scheduled_at_idx", table_name="delayed_queue")
    op.create_index(
        "delayed_queue__kind_key_idx",
        "delayed_queue",
        ["pKind", "pKey"],
        postgresql_ops={"pKey": "varchar_pattern_ops"},
    )
    op.create_index(
        "delivery_history__queue_finished_at_id_idx",
        "delivery_history",
        ["queue", "finishedAt", "id"],
    )
    op.create_index(
        "delivery_history__queue_key_finished_at_id_idx",
        "delivery_history",
        ["queue", "key", "finishedAt", "id"],
    )
    op.create_index(
        "delivery_history__queue_outcome_finished_at_id_idx",
        "delivery_history",
        ["queue", "outcome", "finishedAt", "id"],
    )


def downgrade() -> None:
    op.drop_index(
        "delivery_history__queue_outcome_finished_at_id_idx", table_name="delivery_history"
    )
    op.drop_index("delivery_history__queue_key_finished_at_id_idx", table_name="delivery_history")
    op.drop_index("delivery_history__queue_finished_at_id_idx", table_name="delivery_history")
    op.drop_index("delayed_queue__kind_key_idx", table_name="delayed_queue")
    op.create_index(
        "delayed_queue__kind_scheduled_at_idx", "delayed_queue", ["pKind", "scheduledAt"]
    )
    op.drop_index("delayed_queue__kind_scheduled_at_id_idx", table_name="delayed_queue")
