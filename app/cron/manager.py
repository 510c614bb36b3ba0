"""The cron manager: CronService's installation pass, run at start and periodically."""

from __future__ import annotations

from app.cron.service import PASS_INTERVAL_MS, CronService
from app.periodic import Periodic

# How often each replica installs upcoming runs (well inside the lookahead).
PASS_INTERVAL_SECONDS = PASS_INTERVAL_MS / 1000


def cron_manager(cron: CronService, interval: float = PASS_INTERVAL_SECONDS) -> Periodic:
    """Installs every entry's upcoming runs now and every `interval` seconds; a failed pass
    is logged and counted as `cron_pass`, and the next one tries again."""
    return Periodic(
        "cron_pass",
        lambda stopping: cron.install_upcoming_runs(stopping=stopping),
        interval,
        failed=cron.failed,
    )
