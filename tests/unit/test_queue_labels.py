"""QueueLabels, the table of queues with series of their own, under events from other threads."""

from __future__ import annotations

import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from app.metrics.labels import IDLE_QUEUE_SECONDS, QueueLabels
from tests.conftest import FakeClock

# Cron runs the reporting thread reports while scrapes go on: ~0.3 s of it.
REPORTS = 100_000


@contextmanager
def _switching_threads_often() -> Iterator[None]:
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        yield
    finally:
        sys.setswitchinterval(interval)


def test_scrapes_and_cron_runs_reported_from_storage_threads_keep_the_tables_whole():
    clock = FakeClock()
    forgotten: list[str] = []
    labels = QueueLabels(clock, forget_queue=forgotten.append, forget_entry=lambda *_: None)
    reported = 0
    reporting = threading.Event()

    def cron_runs() -> None:  # as the cron service reports them on SQLite: from a thread
        nonlocal reported
        for index in range(REPORTS):
            labels.labels_for_cron_runs(f"queue-{index}", f"entry-{index}")
            reported = index + 1
            if index == 1000:
                reporting.set()
        reporting.set()

    reporter = threading.Thread(target=cron_runs)
    with _switching_threads_often():
        reporter.start()
        try:
            assert reporting.wait(10)
            scrapes = 0
            while reported < REPORTS:
                scrapes += 1
                if scrapes % 10 == 0:  # in between, the tables grow
                    clock.advance(IDLE_QUEUE_SECONDS)
                labels.refresh(set(), set())  # walks the tables the reporter writes to
        finally:
            reporter.join()
    assert forgotten
    assert all(queue.startswith("queue-") for queue in forgotten)
