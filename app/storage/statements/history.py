"""The statements of the history's upkeep: pruning it in batches. (What a removal
records there is app/storage/statements/common.py's `Removal`.)

Built once as Core objects with bound parameters; a dialect's variant of one is in its
modules (app/storage/dialects/<db>) under the same name.
"""

from __future__ import annotations

from sqlalchemy import bindparam, delete, select

from app.storage.statements.common import history
from app.storage.tables import delivery_history

__all__ = ["history_batch_end", "history_prune_batch", "history_prune_rest"]

# Pruning the history in batches without a list of ids (PostgreSQL's direct path
# binds no expanding IN, and MariaDB has no LIMIT in an IN subquery): find the
# batch's last row by (finishedAt, id), then delete every expired row up to it.
history_batch_end = (
    select(history.finishedAt, history.id)
    .where(history.finishedAt < bindparam("before"))
    .order_by(history.finishedAt, history.id)
    .limit(1)
    .offset(bindparam("last"))
)
# The batch's end row finished before the cutoff, so its bound is the only one:
# SQLite then reads the index up to it, not up to the cutoff.
history_prune_batch = delete(delivery_history).where(
    history.finishedAt <= bindparam("upto_finished_at"),
    (history.finishedAt < bindparam("upto_finished_at")) | (history.id <= bindparam("upto_id")),
)
history_prune_rest = delete(delivery_history).where(history.finishedAt < bindparam("before"))
