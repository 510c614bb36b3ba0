"""Metrics across several processes (`hourglass serve --workers N`, N > 1): each writes its
counters, histograms and open connections to prometheus-client's files in one directory, and
a scrape adds them up; what is read at scrape time comes from the scraping process alone."""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterable

from prometheus_client import CollectorRegistry, Gauge, values
from prometheus_client.multiprocess import MultiProcessCollector
from prometheus_client.registry import Collector


def check_multiprocess() -> None:
    """Refuse to start unless prometheus-client writes its values to files; quiet its warning
    on every removal of a series."""
    if not getattr(values.ValueClass, "_multiprocess", False):
        # prometheus-client chooses where values go when it is first imported.
        raise RuntimeError(
            "multiprocess metrics need PROMETHEUS_MULTIPROC_DIR set before "
            "prometheus_client is imported"
        )
    # Removing a series forgets it in this process; its last values stay in the files
    # (docs/operations/scaling.md). prometheus-client warns of it each time.
    warnings.filterwarnings(
        "ignore", "(Removal|Clearing) of labels has not been implemented", UserWarning
    )


def exposed_registry(
    multiprocess_dir: str, build: Collector, read_at_scrape: Iterable[Collector]
) -> CollectorRegistry:
    """What a scrape shows: the release, every process's files, then what this process
    reads itself at scrape time (never counted N times)."""
    exposed = CollectorRegistry()
    exposed.register(build)
    MultiProcessCollector(exposed, multiprocess_dir)
    for collector in read_at_scrape:
        exposed.register(collector)
    return exposed


class OpenConnections:
    """hourglass_connections_open: the count of one process read at scrape time; with
    several, each writes its own count to the files on its server's tick, as a function's
    value is not written there (the dead processes' go: mark_process_dead)."""

    def __init__(self, gauge: Gauge, multiprocess: bool) -> None:
        self.gauge = gauge
        self.multiprocess = multiprocess
        self._count: Callable[[], int] | None = None

    def watch(self, count: Callable[[], int]) -> None:
        if not self.multiprocess:
            self.gauge.set_function(count)
        else:
            self._count = count

    def sample(self) -> None:
        """Write this process's count of open connections for the other processes' scrapes."""
        if self._count is not None:
            self.gauge.set(self._count())
