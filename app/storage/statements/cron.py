"""The statements of cron: entries by queue and name, and the runs an entry keeps
installed (one range of keys in byte order, read and deleted as one).

Built once as Core objects with bound parameters; a dialect's variant of one is in its
modules (app/storage/dialects/<db>) under the same name.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import BigInteger, String, and_, bindparam, delete, insert, select, update
from sqlalchemy.sql import Select

from app.storage.statements.common import Removal, columns, removal
from app.storage.tables import cron_entries

__all__ = [
    "cron_delete",
    "cron_insert",
    "cron_list_all",
    "cron_list_queue",
    "cron_names",
    "cron_pause",
    "cron_queues",
    "cron_select",
    "cron_select_for_update",
    "cron_update",
    "entry_runs",
]


@dataclass(frozen=True, eq=False)
class EntryRuns:
    """The statements over one cron entry's runs (of one configuration, or of all)."""

    keys: Select  # the keys of its runs, whatever their state
    delete_pending: Removal  # its runs no worker holds (one in flight stays with its worker)
    # its runs never delivered (a pause: one delivered, then released to retry, stays)
    delete_undelivered: Removal


def build_entry_runs(
    after: Callable[[Any], Any] = columns.pKey.__gt__,
    before: Callable[[Any], Any] = columns.pKey.__lt__,
    also: Sequence[Any] = (),
    unindexed: Callable[[Any], Any] = lambda column: column,
) -> EntryRuns:
    """EntryRuns of the keys strictly between "after_key" and "before_key" in byte
    order that match the LIKE "pattern", in the queue "queue".

    A dialect whose `<` and `>` on keys do not compare bytes gives `after` and `before`
    that do, and `also`, further conditions its indexes need; `unindexed` wraps the
    other columns compared, to keep their indexes out of the plan. The bounds
    (app/domain/cron.py: run_key_range) make an entry's runs one range of an index,
    whatever else the queue holds: a LIKE alone was a scan of the queue (an uninstall
    took 1.7-2.2 s beside 100,000 messages on MariaDB, 37 ms on PostgreSQL).
    The pattern (run_key_pattern) then drops the runs of entries named `name/…`, whose
    keys are in the range too. Both compare case-sensitively.
    """
    matching = and_(
        unindexed(columns.pKind) == bindparam("queue"),
        after(bindparam("after_key", type_=String)),
        before(bindparam("before_key", type_=String)),
        columns.pKey.like(bindparam("pattern"), escape="\\"),
        *also,
    )
    pending = unindexed(columns.lockUuid).is_(None)
    undelivered = pending & (unindexed(columns.deliveries) == 0)
    return EntryRuns(
        keys=select(columns.pKey).where(matching),
        delete_pending=removal(matching & pending, keys_after="after_key"),
        delete_undelivered=removal(matching & undelivered, keys_after="after_key"),
    )


# A cron entry's runs, read and deleted as one range of keys in byte order: MariaDB's
# keys compare byte by byte (utf8mb4_nopad_bin), SQLite's too (BINARY).
entry_runs = build_entry_runs()

cron = cron_entries.c
# Not "queue" and "name": an UPDATE reserves its columns' names for their new values.
_cron_entry = (cron.queue == bindparam("entry_queue")) & (cron.name == bindparam("entry_name"))
cron_select = select(cron_entries).where(_cron_entry)
cron_select_for_update = cron_select.with_for_update()
cron_insert = insert(cron_entries)
cron_update = (
    update(cron_entries)
    .where(_cron_entry)
    .values(
        schedule=bindparam("new_schedule"),
        payload=bindparam("new_payload"),
        configHash=bindparam("new_config_hash"),
        lookaheadMs=bindparam("new_lookahead_ms"),
        priority=bindparam("new_priority"),
        messageGroup=bindparam("new_group"),
        ttlMs=bindparam("new_ttl_ms", type_=BigInteger),
        updatedAt=bindparam("now"),
    )
)
# Paused since "paused_at", or running again ("paused_at" null).
cron_pause = (
    update(cron_entries)
    .where(_cron_entry)
    .values(pausedAt=bindparam("paused_at", type_=BigInteger))
)
cron_delete = delete(cron_entries).where(_cron_entry)
cron_list_queue = select(cron_entries).where(cron.queue == bindparam("queue")).order_by(cron.name)
cron_list_all = select(cron_entries).order_by(cron.queue, cron.name)
# The queues that have entries (a queue's stats list them too).
cron_queues = select(cron.queue).distinct()
cron_names = select(cron.queue, cron.name)
