"""The paging promise of lists (decision 13) under real concurrency, on every database:
a walk through a queue by due time while other threads poll and offer lists no message
twice, and skips none that stayed in place."""

from __future__ import annotations

import itertools
import random
import threading
import uuid
from collections.abc import Callable

from app.domain.messages import Offer
from app.domain.pages import DuePosition
from tests.conftest import START_MS
from tests.support.helpers import stored_rows

QUEUE = "q"
PAGE = 25


class Ticks:
    """A clock for several threads: every reading is later than the one before, so the
    walk's start is before every move the workers make after it."""

    def __init__(self, start: int) -> None:
        self._counter = itertools.count(start)
        self._lock = threading.Lock()

    def now(self) -> int:
        with self._lock:
            return next(self._counter)


def _places(url: str) -> dict[str, tuple]:
    """Each message of the queue by key: what fixes its place in due order, and more."""
    return {
        row["pKey"]: (row["id"], row["scheduledAt"], row["lockUuid"], row["createdAt"])
        for row in stored_rows(url)
        if row["pKind"] == QUEUE
    }


def _worker(work: Callable[[], object], stop: threading.Event, done: threading.Semaphore) -> None:
    while not stop.is_set():
        work()
        done.release()


def test_a_walk_by_due_time_lists_no_message_twice_and_skips_none_in_place(store, clean_database):
    ticks = Ticks(START_MS)
    # Due messages, three to a millisecond (as an import makes), and later ones.
    offers = [Offer(f"due-{n:04}", b"1", START_MS - 1000 + n // 3) for n in range(450)]
    offers += [Offer(f"later-{n:04}", b"2", START_MS + 10_000_000 + n) for n in range(150)]
    store.messages.offer_many(QUEUE, offers, ticks.now())
    before = _places(clean_database.url)

    first = store.lists.messages(QUEUE, limit=PAGE, now=ticks.now())
    listed = [message.key for message in first.messages]
    after = first.after
    assert isinstance(after, DuePosition)

    stop = threading.Event()
    done = threading.Semaphore(0)
    randomness = random.Random(7)

    def poll() -> None:
        now = ticks.now()
        # Takes the oldest due messages, listed already: their leases move them last.
        store.leases.poll(QUEUE, 3, str(uuid.uuid4()), now + 100_000_000, now)

    def offer() -> None:
        now = ticks.now()
        key = f"due-{randomness.randrange(450):04}"
        moved_to = START_MS + randomness.randrange(-2000, 20_000_000)
        store.messages.offer(QUEUE, Offer(key, b'"moved"', moved_to), now)
        store.messages.offer(QUEUE, Offer(f"new-{uuid.uuid4()}", b"3", moved_to), now)

    workers = [
        threading.Thread(target=_worker, args=(work, stop, done), daemon=True)
        for work in (poll, poll, offer)
    ]
    for worker in workers:
        worker.start()
    try:
        while after is not None:
            for _ in range(3):  # the workers move something between any two pages
                assert done.acquire(timeout=30), "the workers made no progress"
            page = store.lists.messages(QUEUE, after=after, limit=PAGE, now=ticks.now())
            listed += [message.key for message in page.messages]
            assert page.after is None or isinstance(page.after, DuePosition)
            after = page.after
    finally:
        stop.set()
        for worker in workers:
            worker.join(timeout=30)
    end = _places(clean_database.url)

    assert len(listed) == len(set(listed)), "a message was listed twice in one walk"
    in_place = {key for key, place in before.items() if end.get(key) == place}
    moved = set(before) - in_place
    assert len(moved) > 50, "the workers moved too little for the walk to prove anything"
    assert not in_place - set(listed), "messages that stayed in place were skipped"
    # Some moved messages were listed before they moved: without the walk's rule they
    # would have come again, later in due order.
    assert moved & set(listed[:PAGE])
