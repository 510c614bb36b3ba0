"""Storage: every storage operation, in rooms by what they store, over one runner.

`storage.messages` (offers, reads, deletes, stats, purges), `storage.leases`
(polls, dead letters, redrive, acknowledge, extend, release), `storage.expiry`
(messages whose expiry passed), `storage.cron`
(cron entries and their runs), `storage.settings` (each queue's own settings),
`storage.groups` (message groups' fronts, for their keeper),
`storage.history` (its upkeep), `storage.lists` (pages of messages and of
history) and `storage.table_health` (what the database tells of its upkeep of the
tables). Their methods take the current time as an
argument, return frozen domain objects, never rows, and raise the domain's
exceptions, never a driver's. Each service sees the rooms it uses through its
ports (app/queue/ports.py, app/cron/ports.py).
"""

from __future__ import annotations

from collections.abc import Callable

from app.storage.connection import Connections, SchemaMissing
from app.storage.cron_entries import SqlCronEntries
from app.storage.dead_letters import DeadLetters
from app.storage.dialects import Dialect
from app.storage.expiry import SqlExpiry
from app.storage.groups import SqlGroups
from app.storage.history import Removals, SqlHistory
from app.storage.inserts import Inserts
from app.storage.leases import SqlLeases
from app.storage.lists import SqlLists
from app.storage.messages import SqlMessages
from app.storage.queue_settings import SqlSettings
from app.storage.runner import Runner
from app.storage.statements.common import schema_revision
from app.storage.table_health import SqlTableHealth


class Storage:
    """The rooms over SQLAlchemy Core statements, awaited on `connections`; `dialect`
    supplies what differs per database."""

    def __init__(
        self, connections: Connections, dialect: Dialect, *, record_history: bool = True
    ) -> None:
        self.connections = connections
        self.dialect = dialect
        # The one way their statements run: transactions, retries.
        self.runner = Runner(connections, dialect)
        removals = Removals(self.runner, dialect, record=record_history)
        # New messages go in the same way whether offered or installed by cron.
        inserts = Inserts(dialect)
        self.messages = SqlMessages(self.runner, dialect, removals, inserts)
        # A poll's dead letters and the expiry sweep's go the same way.
        dead_letters = DeadLetters(self.runner, dialect, removals)
        self.leases = SqlLeases(self.runner, dialect, removals, dead_letters)
        self.expiry = SqlExpiry(self.runner, dialect, removals, dead_letters)
        self.cron = SqlCronEntries(self.runner, dialect, removals, inserts)
        self.settings = SqlSettings(self.runner, dialect)
        self.groups = SqlGroups(self.runner, dialect)
        self.history = SqlHistory(self.runner, dialect)
        self.lists = SqlLists(self.runner, dialect)
        self.table_health = SqlTableHealth(self.runner, dialect)

    async def schema_revision(self) -> str | None:
        """The Alembic revision the database is at, or None before the first migration."""
        try:
            return await self.runner.scalar(schema_revision, {})
        except SchemaMissing:
            return None  # no alembic_version table: never migrated

    def listen_statements(self, listener: Callable[[str], object]) -> None:
        """Call `listener(sql)` after every statement sent to the database, with its text."""
        self.runner.listen_statements(listener)

    async def close(self) -> None:
        """Close every connection."""
        await self.runner.close()
