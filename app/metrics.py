"""Prometheus collectors on an injectable registry."""

from __future__ import annotations

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Info, generate_latest

from app import __version__
from app.storage.store import Store


class Metrics:
    """The service's collectors. One instance per app, so tests get fresh counters."""

    content_type = CONTENT_TYPE_LATEST

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        Info("hourglass_build", "The running release", registry=self.registry).info(
            {"version": __version__}
        )
        self.database_statements = Counter(
            "hourglass_database_statements",
            "Statements sent to the database (what an idle service costs the database, too)",
            registry=self.registry,
        )

        self.cron_runs_installed = Counter(
            "hourglass_cron_runs_installed",
            "Cron runs installed as messages (each run once, whichever replica installs it)",
            ["queue", "name"],
            registry=self.registry,
        )
        self.errors = Counter(
            "hourglass_errors",
            "Failures the service recovered from by itself, by kind",
            ["kind"],
            registry=self.registry,
        )

    def cron_runs_installed_by(self, queue: str, name: str, count: int) -> None:
        self.cron_runs_installed.labels(queue=queue, name=name).inc(count)

    def error(self, kind: str) -> None:
        self.errors.labels(kind=kind).inc()

    def count_statements(self, store: Store) -> None:
        """Count every statement `store` sends."""
        store.listen_statements(self.database_statements.inc)

    def exposition(self) -> bytes:
        """Every collector's samples in the Prometheus text format."""
        return generate_latest(self.registry)
