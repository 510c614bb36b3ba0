"""Cron entries, and the runs each keeps installed as ordinary messages."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from app.domain.cron import (
    CronEntry,
    CronInstall,
    InstallOutcome,
    kept_run_count,
    run_key,
    run_key_pattern,
    run_key_range,
    runs_to_install,
)
from app.domain.messages import Offer
from app.storage.connection import Connection
from app.storage.dialects import Dialect
from app.storage.history import Removals
from app.storage.inserts import Inserts
from app.storage.runner import Runner


class SqlCronEntries:
    """Cron entries by queue and name."""

    def __init__(
        self, runner: Runner, dialect: Dialect, removals: Removals, inserts: Inserts
    ) -> None:
        self.runner = runner
        self.dialect = dialect
        self.removals = removals
        self.inserts = inserts
        self.statements = dialect.statements.cron

    async def install(self, entry: CronEntry) -> CronInstall:
        """Create or replace an entry; a new configuration deletes the old one's pending runs."""
        self.dialect.check_payload(entry.payload)
        # A replica that created the entry first makes this one replace it.

        async def install(connection: Connection) -> CronInstall:
            return await self._install(connection, entry)

        return await self.runner.transaction_over_keys(install, f"on cron entry {entry.name!r}")

    async def _install(self, connection: Connection, entry: CronEntry) -> CronInstall:
        # Locks the entry's row: a replica installing runs of it (share lock) finishes first.
        key = {"entry_queue": entry.queue, "entry_name": entry.name}
        row = (await connection.execute(self.statements.cron_select_for_update, key)).first()
        if row is None:
            await connection.execute(self.statements.cron_insert, _cron_row(entry))
            return CronInstall(InstallOutcome.CREATED, entry, 0)
        stored = _cron_entry(row)
        if (stored.config_hash, stored.lookahead_ms) == (entry.config_hash, entry.lookahead_ms):
            return CronInstall(InstallOutcome.UNCHANGED, stored, 0)
        await connection.execute(
            self.statements.cron_update,
            {
                **key,
                "new_schedule": entry.schedule,
                "new_payload": entry.payload,
                "new_config_hash": entry.config_hash,
                "new_lookahead_ms": entry.lookahead_ms,
                "new_priority": entry.priority,
                "new_group": entry.group,
                "new_ttl_ms": entry.ttl_ms,
                "now": entry.updated_at,
            },
        )
        removed = 0
        if stored.config_hash != entry.config_hash:
            removed = await self.removals.remove_on(
                connection,
                self.statements.entry_runs.delete_pending,
                _runs_of(entry.queue, entry.name, stored.config_hash),
                entry.updated_at,
            )
        changed = dataclasses.replace(
            entry, created_at=stored.created_at, paused_at=stored.paused_at
        )
        return CronInstall(InstallOutcome.CHANGED, changed, removed)

    async def uninstall(self, queue: str, name: str, now: int) -> int | None:
        """Delete the entry and its pending runs; how many runs, or None when there was no entry."""

        async def uninstall(connection: Connection) -> int | None:
            entry_key = {"entry_queue": queue, "entry_name": name}
            if not (await connection.execute(self.statements.cron_delete, entry_key)).rowcount:
                return None
            return await self.removals.remove_on(
                connection, self.statements.entry_runs.delete_pending, _runs_of(queue, name), now
            )

        return await self.runner.transaction(uninstall)

    async def pause(self, queue: str, name: str, now: int) -> CronEntry | None:
        """Pause the entry (since `now`, or since its first pause) and delete its runs never
        delivered (one a worker holds, or one delivered and released to retry, stays); the
        entry, or None when there is none."""

        async def pause(connection: Connection) -> CronEntry | None:
            key = {"entry_queue": queue, "entry_name": name}
            row = (await connection.execute(self.statements.cron_select_for_update, key)).first()
            if row is None:
                return None
            entry = _cron_entry(row)
            if entry.paused_at is None:
                entry = dataclasses.replace(entry, paused_at=now)
                await connection.execute(self.statements.cron_pause, {**key, "paused_at": now})
            await self.removals.remove_on(
                connection,
                self.statements.entry_runs.delete_undelivered,
                _runs_of(queue, name),
                now,
            )
            return entry

        return await self.runner.transaction(pause)

    async def resume(self, queue: str, name: str) -> CronEntry | None:
        """Let the entry run again; the entry, or None when there is none."""

        async def resume(connection: Connection) -> CronEntry | None:
            key = {"entry_queue": queue, "entry_name": name}
            row = (await connection.execute(self.statements.cron_select_for_update, key)).first()
            if row is None:
                return None
            if row.pausedAt is not None:
                await connection.execute(self.statements.cron_pause, {**key, "paused_at": None})
            return dataclasses.replace(_cron_entry(row), paused_at=None)

        return await self.runner.transaction(resume)

    async def install_runs(
        self, entry: CronEntry, runs: Sequence[Offer], now: int, *, limit: int, keep_until: int
    ) -> int | None:
        """Bring the entry's runs under `limit` and add the first of `runs` that fit; how
        many went in, or None when the entry was changed, paused or removed meanwhile (then
        nothing is written).

        The entry's stored runs (of its configuration, in any state) lose those due after
        `keep_until` and, past `limit`, the latest not yet due (app/domain/cron.py:
        kept_run_count); then `runs` (earliest first) whose keys are free go in while
        fewer than `limit` are stored. The entry's row is locked for the transaction:
        replicas installing runs of one entry take turns, so the count is exact, and a
        change or an uninstall waits, and its delete of the old runs then sees these.
        """
        key = {"entry_queue": entry.queue, "entry_name": entry.name}
        of_configuration = _runs_of(entry.queue, entry.name, entry.config_hash)
        statements = self.statements.entry_runs

        async def install(connection: Connection) -> int | None:
            current = (
                await connection.execute(self.statements.cron_select_for_update, key)
            ).first()
            if current is None or current.configHash != entry.config_hash:
                return None
            if current.pausedAt is not None:
                return None
            stored = sorted((await connection.execute(statements.keys, of_configuration)).scalars())
            kept = kept_run_count(
                stored,
                limit,
                due_until=run_key(entry.name, entry.config_hash, now),
                keep_until=run_key(entry.name, entry.config_hash, keep_until),
            )
            removed = 0
            if kept < len(stored):
                after = {"after_key": stored[kept - 1]} if kept else {}
                removed = await self.removals.remove_on(
                    connection, statements.delete_pending, {**of_configuration, **after}, now
                )
            fresh = runs_to_install(
                stored, [run.key for run in runs], limit - (len(stored) - removed)
            )
            chosen = set(fresh)
            installed = 0
            for chunk in self.inserts.chunks([run for run in runs if run.key in chosen]):
                installed += len(await self.inserts.many(connection, entry.queue, chunk, now))
            return installed

        return await self.runner.transaction(install)

    async def get(self, queue: str, name: str) -> CronEntry | None:
        key = {"entry_queue": queue, "entry_name": name}
        row = await self.runner.first(self.statements.cron_select, key)
        return None if row is None else _cron_entry(row)

    async def entries(self, queue: str | None = None) -> list[CronEntry]:
        """The entries of one queue, or of every queue, by queue and name."""
        if queue is None:
            rows = await self.runner.rows(self.statements.cron_list_all, {})
        else:
            rows = await self.runner.rows(self.statements.cron_list_queue, {"queue": queue})
        return [_cron_entry(row) for row in rows]

    async def names(self) -> list[tuple[str, str]]:
        """The (queue, name) of every entry."""
        return [
            (row.queue, row.name) for row in await self.runner.rows(self.statements.cron_names, {})
        ]


def _cron_row(entry: CronEntry) -> dict[str, Any]:
    return {
        "queue": entry.queue,
        "name": entry.name,
        "schedule": entry.schedule,
        "payload": entry.payload,
        "configHash": entry.config_hash,
        "lookaheadMs": entry.lookahead_ms,
        "createdAt": entry.created_at,
        "updatedAt": entry.updated_at,
        "priority": entry.priority,
        "pausedAt": entry.paused_at,
        "messageGroup": entry.group,
        "ttlMs": entry.ttl_ms,
    }


def _cron_entry(row: Any) -> CronEntry:
    return CronEntry(
        queue=row.queue,
        name=row.name,
        schedule=row.schedule,
        payload=row.payload,
        config_hash=row.configHash,
        lookahead_ms=row.lookaheadMs,
        created_at=row.createdAt,
        updated_at=row.updatedAt,
        priority=row.priority,
        paused_at=row.pausedAt,
        group=row.messageGroup,
        ttl_ms=row.ttlMs,
    )


def _runs_of(queue: str, name: str, config_hash: str | None = None) -> dict[str, Any]:
    """Parameters of the EntryRuns statements for an entry's runs (of one configuration)."""
    after_key, before_key = run_key_range(name, config_hash)
    return {
        "queue": queue,
        "after_key": after_key,
        "before_key": before_key,
        "pattern": run_key_pattern(name, config_hash),
    }
