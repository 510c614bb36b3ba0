"""Trace context (docs/decisions/0029-trace-context.md): a message's `trace`.

- delayed_queue gains `trace`: the W3C trace context the message was offered with, its
  traceparent, then a newline and its tracestate if any (null: none).

A nullable column without a default, added last: PostgreSQL writes it in its catalog
alone (no table rewrite, whatever the table's size), MariaDB adds it in place (INSTANT,
its default algorithm for such a column since 10.3; no earlier revision names an
algorithm), and SQLite's ALTER TABLE ADD COLUMN changes only the table's definition.

Revision ID: 0015
Revises: 0014
Create Date: 2026-11-29
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision: str = "0015"
down_revision: str | None = "0014"
branch_labels = None
depends_on = None

# The traceparent's bound, a newline, the tracestate's (app/domain/trace.py); written out:
# a revision keeps the schema it made, whatever the code says later.
_TRACE_LENGTH = 1025


def upgrade() -> None:
    # recreate="never": an ALTER TABLE of its own on SQLite, never Alembic's copy of the
    # table, which would lose the groups' triggers (revision 0012) and the poll index's DESC.
    with op.batch_alter_table("delayed_queue", recreate="never") as table:
        table.add_column(sa.Column("trace", sa.String(_TRACE_LENGTH), nullable=True))


def downgrade() -> None:
    # On SQLite a DROP COLUMN of its own (3.35 and later), for the same reason.
    with op.batch_alter_table("delayed_queue", recreate="never") as table:
        table.drop_column("trace")
