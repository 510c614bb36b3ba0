"""The delivery history: messages leaving a queue leave a row there (`Removals`), and
old rows are pruned in batches (`SqlHistory`)."""

from __future__ import annotations

from sqlalchemy.sql.dml import Insert

from app.domain.messages import Finish
from app.storage.connection import Connection
from app.storage.dialects import Dialect
from app.storage.runner import Runner
from app.storage.statements.common import Removal


class Removals:
    """Deletes messages, recording each in the history first when `record` is on; every
    room that removes messages (deletes, acknowledgements, purges, dead letters, cron
    runs) goes through here, so none forgets the history."""

    def __init__(self, runner: Runner, dialect: Dialect, *, record: bool) -> None:
        self.runner = runner
        self.dialect = dialect
        # Whether messages leaving a queue leave a row in delivery_history.
        self.record = record
        # One statement that records and deletes, where the dialect has one.
        statements = dialect.statements
        self._recorded_deletes: dict[Removal, Insert | None] = {
            removal: dialect.recorded_delete(removal)
            for removal in (
                statements.leases.lock_acknowledge,
                statements.messages.message_delete,
                statements.messages.queue_purge,
                statements.cron.entry_runs.delete_pending,
            )
        }

    async def remove(
        self, removal: Removal, parameters: dict, now: int, finish: Finish = Finish.DROPPED
    ) -> int:
        """Delete what `removal` matches, recording it in the history; how many rows."""
        if not self.record or self._recorded_deletes.get(removal) is not None:
            run = self.runner.autocommit  # one statement
        else:
            run = self.runner.transaction

        async def remove(connection: Connection) -> int:
            return await self.remove_on(connection, removal, parameters, now, finish)

        return await run(remove)

    async def remove_on(
        self,
        connection: Connection,
        removal: Removal,
        parameters: dict,
        now: int,
        finish: Finish = Finish.DROPPED,
    ) -> int:
        """`remove`, in the caller's transaction."""
        if not self.record:
            return (await connection.execute(removal.delete, parameters)).rowcount
        parameters = {**parameters, "outcome": finish.value, "now": now}
        recorded_delete = self._recorded_deletes.get(removal)
        if recorded_delete is not None:
            return (await connection.execute(recorded_delete, parameters)).rowcount
        return await self.dialect.remove_recorded(connection, removal, parameters)

    async def remove_keys(
        self, removal: Removal, parameters: dict, now: int, finish: Finish
    ) -> list[str]:
        """Delete what `removal` matches (at most the 1000 keys it names), recording it in
        the history as `finish`, as `remove` does; the keys deleted."""
        if self.record:
            parameters = {**parameters, "outcome": finish.value, "now": now}
        run = (
            self.runner.autocommit
            if self.dialect.removes_keys_in_one_statement
            else self.runner.transaction
        )

        async def remove(connection: Connection) -> list[str]:
            return await self.dialect.removed_keys(
                connection, removal, parameters, record=self.record
            )

        return await run(remove)

    async def remove_all(self, removal: Removal, parameters: dict, now: int) -> int:
        """Delete every row `removal` matches, however many, in one transaction (a purge),
        recorded as dropped; how many.

        Millions of rows in one DELETE would outlast the statement bound: the dialect
        removes them in pages."""
        if self.record:
            parameters = {**parameters, "outcome": Finish.DROPPED.value, "now": now}

        async def remove(connection: Connection) -> int:
            return await self.dialect.remove_in_pages(
                connection, removal, parameters, record=self.record
            )

        return await self.runner.transaction(remove)


class SqlHistory:
    """The history's upkeep."""

    def __init__(self, runner: Runner, dialect: Dialect) -> None:
        self.runner = runner
        self.statements = dialect.statements.history

    async def prune(self, before: int, batch: int) -> int:
        """Delete about `batch` history rows that finished before `before`; how many."""

        async def prune(connection: Connection) -> int:
            end = (
                await connection.execute(
                    self.statements.history_batch_end, {"before": before, "last": batch - 1}
                )
            ).first()
            if end is None:  # fewer than a batch left
                pruned = await connection.execute(
                    self.statements.history_prune_rest, {"before": before}
                )
                return pruned.rowcount
            pruned = await connection.execute(
                self.statements.history_prune_batch,
                {"upto_finished_at": end.finishedAt, "upto_id": end.id},
            )
            return pruned.rowcount

        return await self.runner.transaction(prune)
