"""PostgreSQL's statements of the cron room: an entry's runs read from the partial index
of run keys in byte order (its variant in VARIANTS)."""

from __future__ import annotations

from app.storage.statements.common import columns
from app.storage.statements.cron import build_entry_runs
from app.storage.tables import cron_run_keys_index

VARIANTS = {
    # A cron entry's runs, from the partial index of run keys in byte order (revision
    # 0005): keys compared by its operator class's byte-wise operators (~<~, ~>~), and its
    # condition stated word for word, since the planner uses a partial index only for a
    # query that states its condition.
    "entry_runs": build_entry_runs(
        after=columns.pKey.op("~>~", is_comparison=True),
        before=columns.pKey.op("~<~", is_comparison=True),
        also=[cron_run_keys_index.dialect_options["postgresql"]["where"]],
    ),
}
