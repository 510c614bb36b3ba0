"""Concurrency and rate limits (docs/guide/flow-control.md): a queue's `max_leased` and `rate`.

- queue_settings gains `maxLeased` (messages leased at once at most), `rateLimit` and
  `ratePeriodMs` (deliveries begun in any window of that many milliseconds at most, both
  set or both null); null everywhere: no bound, as every existing row gets.
- delivery_starts: the deliveries begun in queues with a rate, a row per claim that
  delivered (when, how many), pruned by the queue's claims once older than its period.
- On PostgreSQL and SQLite, a partial index of leased messages by queue and lease end
  (`WHERE "lockUuid" IS NOT NULL`): a claim in a queue with `max_leased` counts its leases
  that have not run out from it, and an offer (no lock) adds no entry. MariaDB has no
  partial indexes and counts through the lock index (docs/decisions/0026-concurrency-and-rate-limits.md).
  Built inside the upgrade's transaction, as revision 0009's: it holds only leased rows.

Revision ID: 0013
Revises: 0012
Create Date: 2026-11-29
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from app.storage.table_options import MARIADB_TABLE_OPTIONS

revision: str = "0013"
down_revision: str | None = "0012"
branch_labels = None
depends_on = None

_LEASED_INDEX = "delayed_queue__kind_leased_until_idx"


def upgrade() -> None:
    with op.batch_alter_table("queue_settings") as table:
        table.add_column(sa.Column("maxLeased", sa.Integer(), nullable=True))
        table.add_column(sa.Column("rateLimit", sa.Integer(), nullable=True))
        table.add_column(sa.Column("ratePeriodMs", sa.BigInteger(), nullable=True))
    op.create_table(
        "delivery_starts",
        sa.Column(
            "id",
            sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
            primary_key=True,
            autoincrement=True,
        ),
        sa.Column("queue", sa.String(100), nullable=False),
        sa.Column("startedAt", sa.BigInteger(), nullable=False),
        sa.Column("deliveries", sa.Integer(), nullable=False),
        **MARIADB_TABLE_OPTIONS,
    )
    op.create_index(
        "delivery_starts__queue_started_at_idx", "delivery_starts", ["queue", "startedAt"]
    )
    if op.get_context().dialect.name in ("postgresql", "sqlite"):
        leased = sa.text('"lockUuid" IS NOT NULL')
        op.create_index(
            _LEASED_INDEX,
            "delayed_queue",
            ["pKind", "scheduledAt"],
            postgresql_where=leased,
            sqlite_where=leased,
        )


def downgrade() -> None:
    if op.get_context().dialect.name in ("postgresql", "sqlite"):
        op.drop_index(_LEASED_INDEX, table_name="delayed_queue")
    op.drop_index("delivery_starts__queue_started_at_idx", table_name="delivery_starts")
    op.drop_table("delivery_starts")
    with op.batch_alter_table("queue_settings") as table:
        table.drop_column("ratePeriodMs")
        table.drop_column("rateLimit")
        table.drop_column("maxLeased")
