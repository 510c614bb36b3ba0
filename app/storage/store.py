"""Storage: every storage operation, in rooms by what they store, over one runner.

`storage.messages` (offers, reads, deletes, stats, purges), `storage.leases`
(polls, dead letters, redrive, acknowledge, extend, release), `storage.cron`
(cron entries and their runs), `storage.settings` (each queue's own settings),
`storage.history` (its upkeep) and `storage.lists` (pages of messages and of
history). Their methods take the current time as an
argument, return frozen domain objects, never rows, and raise the domain's
exceptions, never a driver's. Each service sees the rooms it uses through its
ports (app/queue/ports.py, app/cron/ports.py).
"""

from __future__ import annotations

from collections.abc import Callable

from sqlalchemy import exc
from sqlalchemy.engine import Connection, Engine

from app.storage import sql
from app.storage.cron_entries import SqlCronEntries
from app.storage.dialects import Dialect
from app.storage.history import Removals, SqlHistory
from app.storage.leases import SqlLeases
from app.storage.lists import SqlLists
from app.storage.messages import SqlMessages
from app.storage.queue_settings import SqlSettings
from app.storage.runner import Runner


class Storage:
    """The rooms over SQLAlchemy Core; `dialect` supplies what differs per database."""

    def __init__(self, engine: Engine, dialect: Dialect, *, record_history: bool = True) -> None:
        self.engine = engine
        self.dialect = dialect
        # The one way their statements run: transactions, retries, bounds, error translation.
        self.runner = Runner(engine, dialect)
        # True when calls must run on the event loop, inside sqlalchemy.util.greenlet_spawn;
        # False when they block, and belong on a thread.
        self.runs_on_event_loop = self.runner.runs_on_event_loop
        removals = Removals(self.runner, dialect, record=record_history)
        self.messages = SqlMessages(self.runner, dialect, removals)
        self.leases = SqlLeases(self.runner, dialect, removals)
        self.cron = SqlCronEntries(self.runner, dialect, removals, self.messages.inserts)
        self.settings = SqlSettings(self.runner)
        self.history = SqlHistory(self.runner)
        self.lists = SqlLists(self.runner, dialect)

    def schema_revision(self) -> str | None:
        """The Alembic revision the database is at, or None before the first migration."""

        def read(connection: Connection) -> str | None:
            try:
                return connection.execute(sql.schema_revision, {}).scalar()
            except exc.DBAPIError as error:
                if self.dialect.is_schema_missing(error):
                    return None  # no alembic_version table: never migrated
                raise

        return self.runner.read(read)

    def listen_statements(self, listener: Callable[[], object]) -> None:
        """Call `listener` after every statement sent to the database."""
        self.runner.listen_statements(listener)

    def close(self) -> None:
        """Close every pooled connection."""
        self.runner.close()
