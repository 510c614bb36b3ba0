"""Each page of a list is read from the index that leads to it, whatever the queue's size
(decision 13): the database's plan of every list statement, on a queue of
20,000 messages and as many history rows, analysed (as PostgreSQL's autovacuum
does after 2% of a queue table changed: revision 0002). bench/lists.py measures
the same pages on 1,000,000 rows."""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import insert

from app.domain.messages import Finish
from app.domain.pages import DuePosition, HistoryPosition, KeyPosition, ListState
from app.storage.tables import delivery_history
from tests.conftest import START_MS
from tests.support.helpers import fill_queue, plan_of

QUEUE = "orders"
ROWS = 20_000
HISTORY_ROWS = 50_000
PAGE = 50

DUE = "delayed_queue__kind_scheduled_at_id_idx"
KEYS = "delayed_queue__kind_key_idx"
HISTORY = "delivery_history__queue_finished_at_id_idx"
HISTORY_KEY = "delivery_history__queue_key_finished_at_id_idx"
HISTORY_OUTCOME = "delivery_history__queue_outcome_finished_at_id_idx"


@pytest.fixture
def full_store(store, clean_database):
    """A queue of ROWS messages (keys `filler-NNNNNNN`, due a millisecond apart), as many
    of another queue, and a tenth of HISTORY_ROWS history rows (50 a key, one in 50
    dead-lettered; the other queues' rows between them, ten finishing in each
    millisecond); analysed."""
    fill_queue(clean_database.url, QUEUE, ROWS, due_at=START_MS)
    fill_queue(clean_database.url, "other", ROWS, due_at=START_MS)
    rows = [
        {
            "queue": QUEUE if n % 10 == 0 else "other",
            "key": f"filler-{n % 1000:07d}",
            "scheduledAt": START_MS,
            "createdAt": START_MS,
            "firstDeliveredAt": None,
            "lastDeliveredAt": None,
            "deliveries": 1,
            "outcome": "dead_lettered" if n % 500 == 0 else "acknowledged",
            "finishedAt": START_MS + n // 10,
        }
        for n in range(HISTORY_ROWS)
    ]
    with store.engine.begin() as connection:
        connection.execute(insert(delivery_history), rows)
    with store.engine.connect() as connection:
        if store.dialect.name == "mariadb":
            connection.exec_driver_sql("ANALYZE TABLE delayed_queue, delivery_history").all()
        else:
            connection.exec_driver_sql("ANALYZE")
        connection.commit()
    return store


def _pages(store) -> list[tuple[str, str, tuple[Any, dict[str, Any]]]]:
    """(what, the index that leads to it, the page's statement and parameters). Pages
    named `… after` or by state start inside their queue's range of the index."""
    lists, now = store.lists, START_MS + ROWS // 2
    middle = DuePosition(START_MS + ROWS // 2, ROWS // 2, now)
    key = KeyPosition(f"filler-{ROWS // 2:07d}")
    finished = HistoryPosition(START_MS + HISTORY_ROWS // 20, HISTORY_ROWS // 2)
    return [
        ("due, first page", DUE, lists.messages_query(QUEUE, limit=PAGE, now=now)),
        ("due, after", DUE, lists.messages_query(QUEUE, after=middle, limit=PAGE, now=now)),
        (
            "ready",
            DUE,
            lists.messages_query(QUEUE, state=ListState.READY, limit=PAGE, now=now),
        ),
        (
            "scheduled",
            DUE,
            lists.messages_query(QUEUE, state=ListState.SCHEDULED, limit=PAGE, now=now),
        ),
        (
            "scheduled, after",
            DUE,
            lists.messages_query(
                QUEUE, state=ListState.SCHEDULED, after=middle, limit=PAGE, now=now
            ),
        ),
        ("prefix", KEYS, lists.messages_query(QUEUE, prefix="filler-", limit=PAGE, now=now)),
        (
            "prefix, after",
            KEYS,
            lists.messages_query(QUEUE, prefix="filler-", after=key, limit=PAGE, now=now),
        ),
        ("history", HISTORY, lists.history_query(QUEUE, limit=PAGE)),
        ("history, after", HISTORY, lists.history_query(QUEUE, before=finished, limit=PAGE)),
        (
            "history of a key",
            HISTORY_KEY,
            lists.history_query(QUEUE, key="filler-0000010", limit=PAGE),
        ),
        (
            "history of an outcome",
            HISTORY_OUTCOME,
            lists.history_query(QUEUE, outcome=Finish.DEAD_LETTERED, limit=PAGE),
        ),
        (
            "history of an outcome, after",
            HISTORY_OUTCOME,
            lists.history_query(QUEUE, outcome=Finish.DEAD_LETTERED, before=finished, limit=PAGE),
        ),
    ]


def _seeks_into_the_queue(name: str, plan: str) -> bool:
    """Whether the plan reads a range of the index that starts after the queue's first
    entries, not every entry of the queue up to the page (MariaDB's ref on "pKind")."""
    if name == "mariadb":
        return "| range |" in plan
    # PostgreSQL's Index Cond, SQLite's SEARCH: the queue's equality and a bound more.
    marker = "Index Cond" if name == "postgresql" else "SEARCH"
    return any(marker in line and " AND " in line for line in plan.splitlines())


# A page after a cursor seeks the cursor's (time, id), not its millisecond only: many
# messages may be due in one (an import at 09:00), many rows finish in one (a purge).
_SEEKS_THE_ID = {
    ("postgresql", "due"): 'ROW("scheduledAt", id) >',
    ("sqlite", "due"): "scheduledAt=? AND id>?",
    ("postgresql", "history"): 'ROW("finishedAt", id) <',
    ("sqlite", "history"): "finishedAt=? AND id<?",
}


def test_every_page_reads_the_index_that_leads_to_it(full_store):
    name = full_store.dialect.name
    for what, index, (query, parameters) in _pages(full_store):
        plan = plan_of(full_store, query, parameters)
        assert index in plan, (what, plan)
        if what.endswith("after") or what in ("ready", "scheduled"):
            assert _seeks_into_the_queue(name, plan), (what, plan)
        order = "history" if what.startswith("history") else "due"
        if what.endswith("after") and (name, order) in _SEEKS_THE_ID and "prefix" not in what:
            assert _SEEKS_THE_ID[name, order] in plan, (what, plan)
