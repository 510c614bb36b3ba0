"""PostgreSQL: vacuum delayed_queue after a fixed number of dead rows, not a fraction.

A queue table swings from empty to millions of rows and back, and every
delivered message leaves dead tuples (its lease UPDATE and its DELETE). With the
default scale factor (20% of the rows at the last analyze) a drained table is
vacuumed late and polls scan dead index entries meanwhile. Here autovacuum runs
once 1,000 dead rows plus 1% of the table have gathered, without cost-based
pauses. fillfactor stays at 100: both columns a lease changes ("scheduledAt",
"lockUuid") are indexed, so no UPDATE of this table can be HOT and free space in
pages would buy nothing. Measured in bench/RESULTS.md.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-25
"""

from __future__ import annotations

from alembic import op

revision: str = "0002"
down_revision: str | None = "0001"
branch_labels = None
depends_on = None

_SETTINGS = {
    "autovacuum_vacuum_scale_factor": "0.01",
    "autovacuum_vacuum_threshold": "1000",
    "autovacuum_vacuum_insert_scale_factor": "0.01",
    "autovacuum_vacuum_insert_threshold": "1000",
    "autovacuum_analyze_scale_factor": "0.02",
    "autovacuum_analyze_threshold": "1000",
    "autovacuum_vacuum_cost_delay": "0",
}


def upgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        settings = ", ".join(f"{name} = {value}" for name, value in _SETTINGS.items())
        op.execute(f"ALTER TABLE delayed_queue SET ({settings})")


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute(f"ALTER TABLE delayed_queue RESET ({', '.join(_SETTINGS)})")
