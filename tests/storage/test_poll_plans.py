"""A poll reads only due rows, whatever the future messages of higher priorities
(decision 17): the database's plan of the claim, and what it read, on a queue of
20,000 future messages spread over all ten priorities, with due ones of priority 0 and
3 among them, analysed. bench/priorities.py measures the same on 1,000,000.

The claim's rows come in the poll's order (priority, due time, id) from one range of
the poll's index per priority: "due" is a prefix of each priority's range, so a plan
that walks the index in (priority DESC, scheduledAt) order and filters on the due
time would read every future message of priorities 9 to 4 before the first due one
of priority 3.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest
from sqlalchemy import text

from app.config import Settings
from app.storage.blocking import create_blocking_storage
from app.storage.tables import POLL_INDEX
from tests.conftest import START_MS, truncate_all
from tests.support.helpers import fill_queue

QUEUE = "orders"
FUTURE = 20_000
DUE_LOW, DUE_MIDDLE = 300, 30  # due messages of priority 0, and of priority 3
NOW = START_MS


@pytest.fixture
def queue_with_a_future(store, clean_database):
    """FUTURE messages due from an hour ahead, priorities 0-9 in turn; DUE_LOW due ones of
    priority 0 and DUE_MIDDLE of priority 3, due before NOW; as many of another queue."""
    url = clean_database.url
    fill_queue(url, QUEUE, FUTURE, key_prefix="future-", due_at=NOW + 3_600_000)
    fill_queue(url, "other", FUTURE, key_prefix="future-", due_at=NOW - FUTURE - 1)
    fill_queue(url, QUEUE, DUE_LOW, key_prefix="low-", due_at=NOW - 10_000)
    fill_queue(url, QUEUE, DUE_MIDDLE, key_prefix="middle-", due_at=NOW - 10_000)
    with store.engine.begin() as connection:
        connection.execute(
            text("UPDATE delayed_queue SET priority = id % 10 WHERE \"pKey\" LIKE 'future-%'")
            if store.dialect.name != "mariadb"
            else text("UPDATE delayed_queue SET priority = id % 10 WHERE `pKey` LIKE 'future-%'")
        )
        connection.execute(
            text("UPDATE delayed_queue SET priority = 3 WHERE " + _key_like(store, "middle-%"))
        )
    with store.engine.connect() as connection:
        if store.dialect.name == "mariadb":
            connection.exec_driver_sql("ANALYZE TABLE delayed_queue").all()
        else:
            connection.exec_driver_sql("ANALYZE")
        connection.commit()
    return store


def _key_like(store, pattern: str) -> str:
    quote = "`" if store.dialect.name == "mariadb" else '"'
    return f"{quote}pKey{quote} LIKE '{pattern}'"


def _parameters(limit: int) -> dict[str, Any]:
    return {
        "queue": QUEUE,
        "now": NOW,
        "limit": limit,
        "lock_id": str(uuid.uuid4()),
        "lease_until": NOW + 30_000,
        "max_bytes": 2**62,
        "inline_payload_bytes": 1024,
    }


def _analysed(store, explain: str, statement: Any, parameters: dict[str, Any]) -> list[Any]:
    """Rows of `explain` (EXPLAIN ANALYZE …, run) of `statement`, in a transaction rolled
    back: a claim analysed leases nothing."""
    dialect = store.engine.dialect
    compiled = statement.compile(dialect=dialect)
    values = {**compiled.params, **parameters}
    if compiled.positiontup is not None:
        values = tuple(values[name] for name in compiled.positiontup)
    with store.engine.connect() as connection:
        transaction = connection.begin()
        try:
            return connection.exec_driver_sql(f"{explain} {compiled.string}", values).all()
        finally:
            transaction.rollback()


def _nodes(plan: dict) -> list[dict]:
    """Every node of a PostgreSQL JSON plan, depth first."""
    found = [plan]
    for child in plan.get("Plans", []):
        found += _nodes(child)
    return found


@pytest.mark.parametrize("limit", [1, 100])
def test_a_poll_reads_one_range_per_priority_and_only_the_rows_it_takes(queue_with_a_future, limit):
    check = {"postgresql": _postgresql, "mariadb": _mariadb, "sqlite": _sqlite}
    check[queue_with_a_future.dialect.name](queue_with_a_future, limit)


def not_read_and_thrown_away(scan: dict) -> bool:
    """Whether a PostgreSQL index scan node read no row it then dropped: no filter but the
    expiry's (every row a claim reads it locks anyway), and that one removed nothing."""
    condition = scan.get("Filter", '"expiresAt"')
    return (
        '"expiresAt"' in condition
        and "scheduledAt" not in condition
        and (scan.get("Rows Removed by Filter", 0) == 0)
    )


def _postgresql(store, limit: int) -> None:
    """One range per priority through LATERAL; rows locked: the rows taken."""
    [(plans,)] = _analysed(
        store,
        "EXPLAIN (ANALYZE, FORMAT JSON)",
        store.dialect.statements.leases.claims[False, limit > 1],
        _parameters(limit),
    )
    plan = (json.loads(plans) if isinstance(plans, str) else plans)[0]["Plan"]
    nodes = _nodes(plan)
    kinds = [node["Node Type"] for node in nodes]
    # The priorities, highest first, each the outer row of a nested loop over a LATERAL
    # range: nothing sorts the candidates before the limit takes them.
    [loop] = [
        node
        for node in nodes
        if node["Node Type"] == "Nested Loop"
        and "Values Scan" in [child["Node Type"] for child in node["Plans"]]
    ]
    outer, inner = loop["Plans"]
    assert outer["Node Type"] == "Values Scan", kinds
    inner_kinds = [node["Node Type"] for node in _nodes(inner)]
    assert "Sort" not in inner_kinds and "LockRows" in inner_kinds, inner_kinds
    [scan] = [node for node in _nodes(inner) if node["Node Type"] == "Index Scan"]
    assert scan["Index Name"] == POLL_INDEX
    # The due time bounds the range: no future row is read. The only filter is the expiry's
    # (docs/decisions/0028-expiry.md), on the rows the claim reads to lock anyway.
    assert not_read_and_thrown_away(scan)
    assert "Seq Scan" not in kinds
    # Priorities 9 to 4 hold only future messages: one probe each. Priority 3 holds
    # DUE_MIDDLE due ones, then 0 after 2 empty ones. Rows read: the rows taken.
    expected = list(range(9, -1, -1)) if limit > DUE_MIDDLE else list(range(9, 2, -1))
    assert scan["Actual Loops"] == len(expected)
    assert loop["Actual Rows"] == limit  # (a node's rows per loop are rounded: not the scan's)


def _mariadb(store, limit: int) -> None:
    """The ten ranges of `priority IN (…)`, in the index's order: no sort."""
    [(analysed,)] = _analysed(
        store,
        "ANALYZE FORMAT=JSON",
        store.dialect.statements.leases.claim_candidates,
        _parameters(limit),
    )
    block = json.loads(analysed)["query_block"]
    assert "filesort" not in json.dumps(block)  # the index gives the order
    [table] = [step["table"] for step in block["nested_loop"]]
    assert (table["key"], table["access_type"]) == (POLL_INDEX, "range")
    assert table["r_rows"] == limit  # read: the rows taken, none past them


def _sqlite(store, limit: int) -> None:
    """The poll's index searched by priority and due time, in its order: no sort."""
    rows = _analysed(
        store,
        "EXPLAIN QUERY PLAN",
        store.dialect.statements.leases.claim_candidates,
        _parameters(limit),
    )
    plan = "\n".join(str(row[-1]) for row in rows)
    assert f"SEARCH delayed_queue USING INDEX {POLL_INDEX}" in plan, plan
    assert "priority=?" in plan and "scheduledAt<?" in plan, plan
    assert "TEMP B-TREE" not in plan, plan


def test_the_claim_takes_the_due_rows_in_the_poll_s_order(queue_with_a_future):
    """What the plans above read is the right thing: every due message, highest priority
    first, and no future one."""
    store = queue_with_a_future
    taken = store.leases.poll(QUEUE, 1000, str(uuid.uuid4()), NOW + 30_000, NOW)
    keys = [delivery.message.key for delivery in taken.deliveries]
    assert keys == [f"middle-{n:07d}" for n in range(1, DUE_MIDDLE + 1)] + [
        f"low-{n:07d}" for n in range(1, DUE_LOW + 1)
    ]
    assert {delivery.message.priority for delivery in taken.deliveries} == {3, 0}


ONE_PRIORITY = 20_000  # due messages, all of priority 0, as most queues hold


@pytest.mark.postgresql_only
@pytest.mark.parametrize("limit", [1, 100])
def test_on_a_queue_of_one_priority_the_poll_s_index_wins_by_a_margin(postgresql_url, limit):
    """With every message of one priority, the statistics hold one distinct value, and a
    priority compared with the list's (an unknown value to the planner) matched every row:
    the lists' index ("pKind", "scheduledAt", id), the priority a filter, cost exactly
    what the poll's index did, and an analyze could tip the claim onto it, to walk every
    due row for each empty priority (~1 s a poll at 300,000). Revision 0010 declares ten
    distinct priorities: the lists' index must cost clearly more."""
    truncate_all(postgresql_url)
    fill_queue(postgresql_url, QUEUE, ONE_PRIORITY, due_at=NOW - ONE_PRIORITY - 1)
    store = create_blocking_storage(Settings(database_url=postgresql_url, auto_migrate=False))
    try:
        with store.engine.connect() as connection:
            connection.exec_driver_sql("ANALYZE delayed_queue")
            connection.commit()
        statement = store.dialect.statements.leases.claims[False, limit > 1]
        chosen = _claim_scan(store, statement, limit)
        assert chosen["Index Name"] == POLL_INDEX
        other = _claim_scan(store, statement, limit, without=POLL_INDEX)
    finally:
        store.close()
    assert other["Index Name"] == "delayed_queue__kind_scheduled_at_id_idx"
    assert other["Total Cost"] >= 1.5 * chosen["Total Cost"], (other, chosen)


def _claim_scan(store, statement: Any, limit: int, without: str | None = None) -> dict:
    """The claim's scan of the queue's rows in the planner's estimate (EXPLAIN, not run),
    `without` an index (dropped in the transaction the EXPLAIN runs in, rolled back)."""
    compiled = statement.compile(dialect=store.engine.dialect)
    values = {**compiled.params, **_parameters(limit)}
    with store.engine.connect() as connection:
        transaction = connection.begin()
        try:
            if without is not None:
                connection.exec_driver_sql(f'DROP INDEX "{without}"')
            [(plans,)] = connection.exec_driver_sql(
                f"EXPLAIN (FORMAT JSON) {compiled.string}", values
            ).all()
        finally:
            transaction.rollback()
    plan = (json.loads(plans) if isinstance(plans, str) else plans)[0]["Plan"]
    [scan] = [
        node
        for node in _nodes(plan)
        if node["Node Type"] == "Index Scan" and node["Index Name"] != "delayed_queue_pkey"
    ]
    return scan
