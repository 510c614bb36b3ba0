"""PostgreSQL: the planner counts ten priorities, so that a poll always reads the poll's index.

A poll's claim locks each priority's due rows in a LATERAL subquery whose condition
`priority = <the list's priority>` the planner sees as an unknown value. Its
selectivity is then 1 / (distinct priorities in the statistics), and on a table
whose messages all have one priority (most tables: 0) that is 1: the poll's index
("pKind", priority DESC, "scheduledAt", id) and the lists' ("pKind", "scheduledAt",
id), the priority a filter, cost exactly the same, and which one the planner takes
turns on the last ANALYZE. With the lists' index, each of the nine empty priorities
walks every due row of the queue: a poll of 100 over 300,000 due messages took ~1 s
instead of ~10 ms, and a 400,000-message drain fell from ~11,000 to ~400 msg/s,
from one analyze to the next (measured: bench/RESULTS.md).

Declaring the column's distinct values as the ten a priority can take (0-9) makes
the planner count a tenth of the rows per priority: the lists' index then costs
about twice the poll's for a claim, whatever the analyze saw. ANALYZE here applies it
at once where the table holds rows (it samples at most 30,000); on an empty table the
first analyze that sees rows does, and every analyze after keeps it.
tests/storage/test_poll_plans.py holds the margin.

Revision ID: 0010
Revises: 0009
Create Date: 2026-11-28
"""

from __future__ import annotations

from alembic import op

revision: str = "0010"
down_revision: str | None = "0009"
branch_labels = None
depends_on = None

PRIORITIES = 10  # 0-9 (app/domain/messages.py: PRIORITIES)


def upgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute(
            f"ALTER TABLE delayed_queue ALTER COLUMN priority SET (n_distinct = {PRIORITIES})"
        )
        op.execute("ANALYZE delayed_queue")


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute("ALTER TABLE delayed_queue ALTER COLUMN priority RESET (n_distinct)")
        op.execute("ANALYZE delayed_queue")
