"""The cap on queue labels: which queues and cron entry names have series of their own, and
the series made for each, so that forgetting one removes them.

Series labelled with a queue exist only for queues known to hold something: the
database shows them holding messages, settings or cron entries (read with the
queue gauges, at scrape time), or something was written to them here (an offer,
a delivery, an acknowledgement, a release, a dead letter, a cron run). An empty
poll of any other queue counts under `queue="_other"`, so polls of made-up names
leave nothing behind (measured before the cap: 40,000 of them added 12.5 MB to every
scrape, for good).

A known queue that holds nothing and has seen no event for IDLE_QUEUE_SECONDS
loses its series at the next scrape; so does a cron entry name (the `name` label of
hourglass_cron_runs_installed) that the database no longer stores, whichever
replica uninstalled the entry, once no runs were installed for it as long. Their
counters stood still that long, so every scraper has read their last values; if
the queue or the name is used again, its counters start again from 0, as after a
restart, which rate() and increase() read as a counter reset. The queues with series
that the last read of the database did not show holding anything are at most
MAX_QUEUES_NOT_HOLDING; past it, the events of further queues count under `_other` too,
so memory stays bounded even when nothing scrapes. Cron entry names with series that the
last read did not show stored are at most MAX_CRON_ENTRIES_NOT_STORED in all; past it,
the runs of further names count under `name="_other"` of their queue. (Before the first
scrape of a replica, every name counts as not stored.)
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from prometheus_client import Counter, Histogram

from app.clock import Clock

# The queue label of what no queue of its own counts: no queue can be named so
# (queue names begin with a letter or a digit).
OTHER_QUEUES = "_other"
# A queue that holds nothing keeps its series this long after its last event:
# Prometheus's staleness window, the longest scrape interval it works well with,
# so every scraper has read the last values before they go.
IDLE_QUEUE_SECONDS = 300.0
# Queues with series that the last read of the database did not show holding
# anything (written to since, or drained but still polled). A queue's series take
# ~0.7 KB when it is only offered to, ~7 KB when it is also polled and
# acknowledged (its lateness histogram, measured): 10,000 such queues cost at most
# ~70 MB, and only writes to that many queues that then hold nothing reach it.
MAX_QUEUES_NOT_HOLDING = 10_000
# Cron entry names with series that the last read of the database did not show
# stored (installed since, or uninstalled and not yet idle): one series each, so
# installing and uninstalling made-up names in one queue costs at most this many.
MAX_CRON_ENTRIES_NOT_STORED = 10_000
# The collectors with a queue label (the first of their labels).
LabelledByQueue = Counter | Histogram


class QueueLabels:
    """Which queues and cron entry names have series of their own, and when each last
    had an event.

    Events come from the event loop and, for cron runs on SQLite and MariaDB, from
    storage threads: one lock keeps the tables whole while a scrape walks them.
    """

    def __init__(
        self,
        clock: Clock,
        forget_queue: Callable[[str], object],
        forget_entry: Callable[[str, str], object],
    ) -> None:
        self.clock = clock
        self._forget_queue = forget_queue  # removes a queue's series
        self._forget_entry = forget_entry  # removes one entry name's series
        self._lock = threading.Lock()
        self._last_event: dict[str, int] = {}  # queue -> epoch ms
        # queue -> cron entry names with series -> epoch ms of their last runs installed;
        # every queue here is in _last_event.
        self._entries: dict[str, dict[str, int]] = {}
        # What the last read of the database showed holding something; every one of
        # them is in _last_event, so the others number len(_last_event) - len(_holding).
        self._holding: frozenset[str] = frozenset()
        # The (queue, name) of every cron entry the last read showed stored, and how
        # many names in _entries are not among them.
        self._stored_entries: frozenset[tuple[str, str]] = frozenset()
        self._entries_not_stored = 0

    def label_for_write(self, queue: str) -> str:
        """The label for an event that shows `queue` holds, or held, something."""
        with self._lock:
            return self._label_for_write(queue)

    def _label_for_write(self, queue: str) -> str:
        if (
            queue not in self._last_event
            and len(self._last_event) - len(self._holding) >= MAX_QUEUES_NOT_HOLDING
        ):
            return OTHER_QUEUES
        self._last_event[queue] = self.clock.now_ms()
        return queue

    def labels_for_cron_runs(self, queue: str, name: str) -> tuple[str, str]:
        """The queue and name labels for runs installed for the cron entry `name`."""
        with self._lock:
            queue_label = self._label_for_write(queue)
            if queue_label == OTHER_QUEUES:
                return OTHER_QUEUES, OTHER_QUEUES
            names = self._entries.setdefault(queue, {})
            if name not in names and (queue, name) not in self._stored_entries:
                if self._entries_not_stored >= MAX_CRON_ENTRIES_NOT_STORED:
                    # The queue's overflow name: one more at most, gone once idle as any.
                    name = OTHER_QUEUES
                if name not in names:
                    self._entries_not_stored += 1
            names[name] = self.clock.now_ms()
            return queue, name

    def label_for_empty_poll(self, queue: str) -> str:
        """The label for an empty poll: the queue's own only if it has series already."""
        with self._lock:
            if queue not in self._last_event:
                return OTHER_QUEUES
            self._last_event[queue] = self.clock.now_ms()
            return queue

    def refresh(self, holding: set[str], stored_entries: set[tuple[str, str]]) -> None:
        """Take the queues the database shows holding something and the (queue, name) of
        the cron entries it stores; forget the queues that hold nothing and the entry
        names no longer stored that had no event for IDLE_QUEUE_SECONDS (their series go)."""
        with self._lock:
            now = self.clock.now_ms()

            def idle(last_event: int) -> bool:
                return now - last_event >= IDLE_QUEUE_SECONDS * 1000

            for queue in holding:
                self._last_event.setdefault(queue, now)
            self._holding = frozenset(holding)
            self._stored_entries = frozenset(stored_entries)
            for queue in [
                queue
                for queue, last_event in self._last_event.items()
                if queue not in holding and idle(last_event)
            ]:
                del self._last_event[queue]
                # Within the lock: an event that labels the queue again comes after.
                self._entries.pop(queue, None)
                self._forget_queue(queue)
            not_stored = 0
            for queue, names in list(self._entries.items()):
                for name, last_event in list(names.items()):
                    if (queue, name) in stored_entries:
                        continue
                    if idle(last_event):
                        del names[name]
                        self._forget_entry(queue, name)
                    else:
                        not_stored += 1
                if not names:
                    del self._entries[queue]
            self._entries_not_stored = not_stored


class QueueSeries:
    """The series made for each queue label, by collector and the values of its other
    labels: what forgetting the queue removes, and only that (up to prometheus-client
    0.21.1, removing a label set never made raises KeyError)."""

    def __init__(self) -> None:
        self._made: dict[str, dict[tuple[LabelledByQueue, tuple[str, ...]], Any]] = {}

    def of(self, metric: LabelledByQueue, queue: str, *other_labels: str) -> Any:
        """The series of `metric` for `queue` and `other_labels`, made on first use.

        Called right after QueueLabels stamped the queue's event, so no scrape forgets
        the queue meanwhile (it would have to stand idle IDLE_QUEUE_SECONDS first).
        """
        made = self._made.get(queue)
        if made is None:
            made = self._made.setdefault(queue, {})
        child = made.get((metric, other_labels))
        if child is None:
            child = made[metric, other_labels] = metric.labels(queue, *other_labels)
        return child

    def forget_queue(self, queue: str) -> None:
        """Remove every series made for `queue`."""
        for metric, other_labels in self._made.pop(queue, {}):
            metric.remove(queue, *other_labels)

    def forget(self, metric: LabelledByQueue, queue: str, *other_labels: str) -> None:
        """Remove the series of `metric` for `queue` and `other_labels`, if it was made."""
        made = self._made.get(queue, {})
        if made.pop((metric, other_labels), None) is not None:
            metric.remove(queue, *other_labels)
