"""The statements of the tables' health: what the database tells of its own upkeep of the
message and history tables (read at scrape time for /metrics).

No statement is shared: each database has its own views of its upkeep, so every one here
is None, and a dialect that has the reading gives its variant under the same name in its
modules (app/storage/dialects/<db>); one that has not leaves it None, and storage reads
nothing there (docs/decisions/0024-table-health.md says what each database offers).
Each answers in the columns named below.
"""

from __future__ import annotations

from typing import Any

__all__ = ["table_vacuums", "undo_history", "vacuum_holders"]

# Readings a database without them leaves None (every one of this room's).
OPTIONAL = frozenset(__all__)

# One row per table of the service: "table", "live_rows", "dead_rows", "last_vacuum_at"
# (unix seconds or NULL), "autovacuum" (a boolean).
table_vacuums: Any = None
# One row per kind of holder the database reports, whether or not one holds now: "kind",
# "seconds", "transactions", "horizon" (app/domain/table_health.py's VacuumHolder).
vacuum_holders: Any = None
# One row, one value: the committed transactions whose undo log the database has not yet
# purged.
undo_history: Any = None
