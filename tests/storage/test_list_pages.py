"""Walking a list page by page gives every row once, in the list's order, on every
database: each dialect writes a page after a cursor its own way (its `list_reads`,
app/storage/statements/lists.py: a row comparison, written out, or split at the
cursor's millisecond), and many
messages share a due time (an import at 09:00) or a history row's finishing time."""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import insert, select, update

from app.domain.messages import Finish, IfExists, Offer
from app.domain.pages import ListState
from app.storage.tables import delayed_queue, delivery_history
from tests.conftest import START_MS

QUEUE = "walk"
NOW = START_MS
PAGE = 7


@pytest.fixture
def filled(store):
    """80 messages: 30 ready (ten due in one millisecond), 40 scheduled (25 in one
    millisecond), 10 leased (their lease ends in that millisecond too); keys of
    three prefixes, `%` and `_` among them; another queue's messages and history
    beside them; 60 history rows, 20 finished in one millisecond."""
    offers = []
    for n in range(80):
        if n < 30:
            due = NOW - 1000 if n < 10 else NOW - 1000 + n
        else:
            due = NOW + 60_000 if n % 3 else NOW + 120_000 + n
        prefix = ("a%_", "a", "b")[n % 3]
        offers.append(Offer(f"{prefix}{n:03d}", b"{}", due, IfExists.UPDATE))
    store.messages.offer_many(QUEUE, offers, NOW - 10_000)
    store.messages.offer_many(
        "beside", [Offer(f"a{n:03d}", b"{}", NOW, IfExists.UPDATE) for n in range(20)], NOW
    )
    history = [
        {
            "queue": QUEUE if n % 4 else "beside",
            "key": f"k{n % 5}",
            "scheduledAt": NOW,
            "createdAt": NOW,
            "firstDeliveredAt": None,
            "lastDeliveredAt": None,
            "deliveries": 1,
            "outcome": ("acknowledged", "dead_lettered", "dropped")[n % 3],
            "finishedAt": NOW if n < 27 else NOW + n,
        }
        for n in range(80)
    ]
    with store.engine.begin() as connection:
        leased = [f"{('a%_', 'a', 'b')[n % 3]}{n:03d}" for n in range(30, 80, 5)]
        connection.execute(
            update(delayed_queue)
            .where(delayed_queue.c.pKind == QUEUE, delayed_queue.c.pKey.in_(leased))
            .values(lockUuid="lock", scheduledAt=NOW + 60_000, lastDeliveredAt=NOW - 10_000)
        )
        connection.execute(insert(delivery_history), history)
    return store


def _rows(store, table: Any, *where: Any) -> list[Any]:
    with store.engine.connect() as connection:
        return list(connection.execute(select(table).where(*where)))


def _walk(read: Any) -> list[str]:
    """Every key the pages give, in order, following the cursors to the end."""
    keys: list[str] = []
    after = None
    while True:
        page = read(after)
        entries = page.messages if hasattr(page, "messages") else page.entries
        keys += [entry.key for entry in entries]
        if page.after is None:
            return keys
        after = page.after


@pytest.mark.parametrize("state", list(ListState))
def test_a_walk_by_due_time_gives_each_message_once_in_order(filled, state):
    rows = _rows(filled, delayed_queue, delayed_queue.c.pKind == QUEUE)
    if state is ListState.READY:
        rows = [row for row in rows if row.scheduledAt <= NOW]
    elif state is ListState.SCHEDULED:
        rows = [row for row in rows if row.scheduledAt > NOW and row.lockUuid is None]
    elif state is ListState.LEASED:
        rows = [row for row in rows if row.scheduledAt > NOW and row.lockUuid is not None]
    expected = [row.pKey for row in sorted(rows, key=lambda row: (row.scheduledAt, row.id))]
    assert len(expected) >= 2 * PAGE or state is ListState.LEASED
    walked = _walk(
        lambda after: filled.lists.messages(QUEUE, state=state, after=after, limit=PAGE, now=NOW)
    )
    assert walked == expected


@pytest.mark.parametrize("prefix", ["a", "a%_", "a%", "b0", "c"])
def test_a_walk_by_prefix_gives_each_key_with_it_once_in_byte_order(filled, prefix):
    rows = _rows(filled, delayed_queue, delayed_queue.c.pKind == QUEUE)
    expected = sorted(row.pKey for row in rows if row.pKey.startswith(prefix))
    walked = _walk(
        lambda after: filled.lists.messages(QUEUE, prefix=prefix, after=after, limit=PAGE, now=NOW)
    )
    assert walked == expected


@pytest.mark.parametrize(
    "key, outcome",
    [(None, None), ("k1", None), (None, Finish.DEAD_LETTERED), ("k2", Finish.DROPPED)],
)
def test_a_walk_of_the_history_gives_each_row_once_newest_first(filled, key, outcome):
    rows = _rows(filled, delivery_history, delivery_history.c.queue == QUEUE)
    rows = [
        row
        for row in rows
        if (key is None or row.key == key) and (outcome is None or row.outcome == outcome.value)
    ]
    newest_first = sorted(rows, key=lambda row: (row.finishedAt, row.id), reverse=True)
    walked = _walk(
        lambda before: filled.lists.history(QUEUE, key=key, outcome=outcome, before=before, limit=3)
    )
    assert walked == [row.key for row in newest_first]
    assert len(walked) > 3  # more than one page
