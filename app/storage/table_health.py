"""The tables' health as the database tells it (app/domain/table_health.py): each reading
its dialect has, on one connection. A reading the database refuses to the service's user
(MariaDB's views of InnoDB need the PROCESS privilege) is left out, said once in the log,
and tried again at the next read, so a privilege granted later is seen without a restart."""

from __future__ import annotations

import logging
from typing import Any

from app.domain.table_health import TableHealth, TableVacuum, VacuumHolder
from app.storage.connection import Connection
from app.storage.dialects import Dialect
from app.storage.dialects.base import first_line
from app.storage.runner import Runner

log = logging.getLogger(__name__)


class SqlTableHealth:
    """The database's own account of its upkeep of the service's tables."""

    def __init__(self, runner: Runner, dialect: Dialect) -> None:
        self.runner = runner
        self.dialect = dialect
        self.statements = dialect.statements.table_health
        self._refused: set[str] = set()  # readings whose refusal was logged

    async def read(self) -> TableHealth:
        """What the database tells now; an empty TableHealth where it tells nothing."""
        readings = ("table_vacuums", "vacuum_holders", "undo_history")
        if all(getattr(self.statements, reading) is None for reading in readings):
            return TableHealth()  # SQLite: no statement, no connection

        async def read(connection: Connection) -> TableHealth:
            tables = await self._rows(connection, "table_vacuums")
            holders = await self._rows(connection, "vacuum_holders")
            undo = await self._rows(connection, "undo_history")
            return TableHealth(
                tables=tuple(_vacuum_of(row) for row in tables or ()),
                holders=tuple(_holder_of(row) for row in holders or ()),
                undo_history=int(undo[0][0]) if undo else None,
            )

        return await self.runner.read(read)

    async def _rows(self, connection: Connection, reading: str) -> list[Any] | None:
        """The rows of the dialect's statement for `reading`; None where it has none, or
        the database refused it."""
        statement = getattr(self.statements, reading)
        if statement is None:
            return None
        try:
            return (await connection.execute(statement, {})).all()
        except Exception as error:
            if not self.dialect.is_refused(error):
                raise
            if reading not in self._refused:
                self._refused.add(reading)
                log.warning(
                    "the tables' health leaves out %s: the database refuses it to the "
                    "service's user (%s); see docs/decisions/0024-table-health.md",
                    reading,
                    first_line(error),
                )
            return None


def _vacuum_of(row: Any) -> TableVacuum:
    return TableVacuum(
        table=row.table,
        live_rows=int(row.live_rows),
        dead_rows=int(row.dead_rows),
        last_vacuum_at=None if row.last_vacuum_at is None else float(row.last_vacuum_at),
        autovacuum=bool(row.autovacuum),
    )


def _holder_of(row: Any) -> VacuumHolder:
    return VacuumHolder(
        kind=row.kind,
        seconds=None if row.seconds is None else float(row.seconds),
        transactions=None if row.transactions is None else int(row.transactions),
        horizon=None if row.horizon is None else int(row.horizon),
    )
