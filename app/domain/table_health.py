"""The health of the service's tables as the database tells it: rows that vacuum (or
InnoDB's purge) has not yet removed, what holds that cleanup back, and when it last ran.

Read at scrape time for /metrics (app/metrics/table_health.py); what each database can tell is in
docs/decisions/0024-table-health.md.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class TableVacuum:
    """One table's rows and vacuums, as PostgreSQL's statistics count them."""

    table: str
    live_rows: int
    # Deleted or updated row versions vacuum has not yet removed.
    dead_rows: int
    # Unix seconds of the last vacuum, manual or automatic; None: none since the
    # statistics were reset.
    last_vacuum_at: float | None
    # Whether autovacuum may vacuum the table: on for the server and not turned off for it.
    autovacuum: bool


@dataclass(frozen=True, slots=True)
class VacuumHolder:
    """The oldest holder of one kind (a transaction, a replication slot, …) that keeps
    vacuum from removing the rows deleted after it began. One per kind the database
    reports, whether or not anything of that kind holds now."""

    kind: str
    # How long it has held, in seconds (0: nothing holds); None: the database keeps no
    # start time for this kind, and `horizon` tells whether it moved.
    seconds: float | None
    # How many transactions old its horizon is (0: nothing holds); None: not counted on
    # this database.
    transactions: int | None = None
    # The transaction id it holds at, where `seconds` is None (None: nothing holds).
    horizon: int | None = None


@dataclass(frozen=True, slots=True)
class TableHealth:
    """What one read found; each part empty (or None) where the database has no such
    reading, or refused it to the service's user."""

    tables: tuple[TableVacuum, ...] = ()
    holders: tuple[VacuumHolder, ...] = ()
    # MariaDB: committed transactions whose undo log InnoDB's purge has not yet removed
    # (its history list, one per transaction that wrote).
    undo_history: int | None = None
