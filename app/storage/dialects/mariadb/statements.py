"""MariaDB's variants of the rooms' statements (STATEMENTS): INSERT IGNORE and no-op
updates where a key may be taken, indexes named where its optimizer would choose worse,
and InnoDB's purge as the tables' health."""

from __future__ import annotations

from sqlalchemy import bindparam, column, func, literal, literal_column, null, select, table
from sqlalchemy.dialects.mysql import insert

from app.storage.statements import Variants, leases
from app.storage.statements.common import columns, keys_in_queue
from app.storage.statements.cron import build_entry_runs
from app.storage.statements.groups import build_waiting
from app.storage.statements.lists import ListReads
from app.storage.tables import GROUP_INDEX, LOCK_INDEX, POLL_INDEX, message_groups
from app.storage.tables import delayed_queue as queue_table

_innodb_transactions = table(
    "INNODB_TRX",
    column("trx_started"),
    column("trx_mysql_thread_id"),
    schema="information_schema",
)
_innodb_metrics = table(
    "INNODB_METRICS", column("NAME"), column("COUNT"), schema="information_schema"
)
# What holds back InnoDB's purge: the oldest transaction open (its read view keeps the
# undo log of every later one), this read's own left out. One row even when none is open;
# InnoDB counts no transaction ages (a read-only transaction's id is made up).
_vacuum_holders = select(
    literal("transaction").label("kind"),
    func.coalesce(
        func.max(
            func.timestampdiff(
                literal_column("SECOND"), _innodb_transactions.c.trx_started, func.now()
            )
        ),
        0,
    ).label("seconds"),
    null().label("transactions"),
    null().label("horizon"),
).where(_innodb_transactions.c.trx_mysql_thread_id != func.connection_id())
# Purge's lag: committed transactions whose undo log is not yet purged, one per
# transaction that wrote however many rows (the history list), which grows while an old
# read view holds them.
_undo_history = select(_innodb_metrics.c.COUNT).where(
    _innodb_metrics.c.NAME == "trx_rseg_history_len"
)

STATEMENTS: Variants = {
    "groups": {
        # The keeper's row of a group, unless it exists (a no-op update: INSERT IGNORE
        # would hide any other error too).
        "group_enlist": insert(message_groups)
        .values(queue=bindparam("queue"), messageGroup=bindparam("group"))
        .on_duplicate_key_update(queue=message_groups.c.queue),
        # A group's waiting messages from the group index, named: given a priority, the
        # optimizer may walk the poll's index instead, every group's waiting messages of it.
        "group_waiting": build_waiting(f"FORCE INDEX ({GROUP_INDEX})"),
    },
    "messages": {
        # INSERT IGNORE, the warnings read after it (dialect.py's docstring).
        "offer_insert": insert(queue_table).prefix_with("IGNORE").returning(columns.pKey),
        # The payload's SHA-256 (hex), not the payload: a re-sent key costs 64 bytes of
        # answer, not up to the payload limit.
        "stored_offers": keys_in_queue(
            columns.pKey,
            func.sha2(columns.payload, 256).label("digest"),
            columns.scheduledAtInitially,
            columns.priority,
            columns.messageGroup,
            columns.expiresAt,
        ),
    },
    "leases": {
        # A poll reads the ten ranges of `priority IN (9, …, 0)` of the poll's index, in
        # its order (no sort), and stops at the LIMIT; named, since the optimizer may
        # otherwise read the queue through ("pKind", "scheduledAt", "id") and sort every
        # due row when the ranges look as large as the queue (as lists did: decision 13).
        "claim_candidates": leases.claim_candidates.with_hint(
            queue_table, f"FORCE INDEX ({POLL_INDEX})"
        ),
        # No partial index of leased messages (revision 0013): a claim in a queue with
        # `max_leased` reads the messages some lock holds, of every queue, through the
        # lock index, rather than every message of its queue not yet due through the
        # poll's (docs/decisions/0026-concurrency-and-rate-limits.md).
        "limits_leased": leases.limits_leased.with_hint(queue_table, f"FORCE INDEX ({LOCK_INDEX})"),
    },
    "cron": {
        # A cron entry's runs: one range of the unique ("pKey", "pKind") index (a LIKE alone
        # read the whole queue: an uninstall took 1.7-2.2 s beside 100,000 messages). Given
        # "pKind" as it is, the optimizer takes the list index ("pKind", "pKey") by "pKind"
        # alone (ref, not range: every key of the queue read), so the other columns it
        # compares are wrapped, which keeps their indexes out of the plan.
        "entry_runs": build_entry_runs(unindexed=func.concat),
    },
    "lists": {
        # Lists: cursors written out and indexes named (ListReads): on 1,000,000 messages
        # a page after a cursor in the middle read 500,000 rows, and a page of scheduled
        # messages read every ready one first (decision 13).
        "list_reads": ListReads(expanded=True, forced=True),
    },
    # InnoDB's purge: what holds it back, and how far behind it is.
    "table_health": {"vacuum_holders": _vacuum_holders, "undo_history": _undo_history},
}
