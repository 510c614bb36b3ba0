"""Statements an idle service's /metrics sends to the database per refresh of its queue
gauges (at most one every QUEUE_GAUGES_SECONDS, however often Prometheus scrapes), read
from hourglass_database_statements_total (what the readiness gauge costs an idle service).

    python -m bench.metrics_statements [DATABASE_URL]   # default: a new SQLite file

The URL's database is migrated to head first: give it a scratch database.
"""

from __future__ import annotations

import sys
import tempfile

from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families

from app.config import Settings
from app.main import create_app
from app.metrics.gauges import QUEUE_GAUGES_SECONDS
from app.storage.schema import upgrade_to_head

REFRESHES = 5


class _Clock:
    """A clock that moves only when told, so each scrape refreshes exactly once."""

    def __init__(self) -> None:
        self.now = 1_795_683_600_000

    def now_ms(self) -> int:
        return self.now


def _statements(client: TestClient) -> float:
    for family in text_string_to_metric_families(client.get("/metrics").text):
        for sample in family.samples:
            if sample.name == "hourglass_database_statements_total":
                return sample.value
    raise LookupError("no hourglass_database_statements_total")


def main() -> None:
    url = sys.argv[1] if len(sys.argv) > 1 else f"sqlite:///{tempfile.mkdtemp()}/metrics.db"
    upgrade_to_head(url)
    clock = _Clock()
    app = create_app(Settings(database_url=url, auto_migrate=False), clock=clock)
    with TestClient(app) as client:
        _statements(client)
        counts = []
        for _ in range(REFRESHES):
            clock.now += round(QUEUE_GAUGES_SECONDS * 1000)
            before = _statements(client)  # this scrape refreshes; the next one does
            clock.now += round(QUEUE_GAUGES_SECONDS * 1000)
            counts.append(_statements(client) - before)
    print(f"{url.split(':')[0]}: statements per refresh {counts}")


if __name__ == "__main__":
    main()
