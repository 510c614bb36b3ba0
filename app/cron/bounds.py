"""How many runs a cron entry may keep in its queue, and which of its stored runs go: pure.

An entry installs its runs as ordinary messages a few at a time, ahead of when they
are due (the manager's passes, app/cron/service.py). What one entry may hold in its
queue at once, whatever state its runs are in (scheduled, due, leased), is bounded
by count and by payload bytes, and never below one run:

- MAX_RUNS_PER_ENTRY = 200: enough for the densest schedule, `every: 1`, to keep
  the 180 runs a pass must see ahead (SKEW_MARGIN_MS plus four passes of
  PASS_INTERVAL_MS, see app/cron/service.py), with a little room for runs waiting
  for a worker; a daily entry keeps 200 days of runs unpolled before it skips one.
- MAX_RUN_BYTES_PER_ENTRY = 4 MiB of payload: an entry whose payload is 128 KiB keeps
  at most 32 runs (before this bound, `every: 1` with such a payload stored ~1,060
  copies, 133 MiB).

Which stored runs go and which new ones come, within these bounds, is decided by
the storage's transaction that holds the entry's row (app/domain/cron.py:
kept_run_count, runs_to_install).
"""

from __future__ import annotations

MAX_RUNS_PER_ENTRY = 200
MAX_RUN_BYTES_PER_ENTRY = 4 * 1024 * 1024


def runs_allowed(payload_bytes: int) -> int:
    """How many runs an entry whose stored payload has `payload_bytes` may keep: at least one."""
    return max(1, min(MAX_RUNS_PER_ENTRY, MAX_RUN_BYTES_PER_ENTRY // max(payload_bytes, 1)))
