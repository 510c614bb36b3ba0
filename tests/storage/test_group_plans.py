"""The claim never reads a group's waiting messages, and the keeper reads only a group's
next ones (docs/decisions/0027-message-groups.md): the databases' plans, analysed, on a
queue of 200 groups of 100 due messages, each group's first in its front and the rest
waiting, the waiting ones due *before* every front one (so a claim that walked them
would meet them first). bench/groups.py measures the same on 1,000,000 in 10,000 groups.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest
from sqlalchemy import text

from app.storage.tables import GROUP_DUE_INDEX, GROUP_INDEX, POLL_INDEX
from tests.storage.test_poll_plans import (
    NOW,
    _analysed,
    _nodes,
    _parameters,
    not_read_and_thrown_away,
)
from tests.support.helpers import fill_queue

QUEUE = "orders"
GROUPS = 200
WAITING = 19_800  # 99 a group


@pytest.fixture
def grouped_queue(store, clean_database):
    url = clean_database.url
    fill_queue(url, QUEUE, WAITING, key_prefix="waiting-", due_at=NOW - 100_000)
    fill_queue(url, QUEUE, GROUPS, key_prefix="front-", due_at=NOW - 10_000)
    quote = "`" if store.dialect.name == "mariadb" else '"'
    group = (
        f"CONCAT('g', id % {GROUPS})"
        if store.dialect.name == "mariadb"
        else f"'g' || (id % {GROUPS})"
    )
    with store.engine.begin() as connection:
        connection.execute(
            text(
                f"UPDATE delayed_queue SET {quote}messageGroup{quote} = {group}, "
                f"priority = CASE WHEN {quote}pKey{quote} LIKE 'waiting-%' THEN -1 ELSE 0 END"
            )
        )
    with store.engine.connect() as connection:
        if store.dialect.name == "mariadb":
            connection.exec_driver_sql("ANALYZE TABLE delayed_queue").all()
        else:
            connection.exec_driver_sql("ANALYZE")
        connection.commit()
    return store


@pytest.mark.parametrize("limit", [1, 100])
def test_the_claim_reads_the_fronts_only(grouped_queue, limit):
    store = grouped_queue
    name = store.dialect.name
    if name == "postgresql":
        [(plans,)] = _analysed(
            store,
            "EXPLAIN (ANALYZE, FORMAT JSON)",
            store.dialect.statements.leases.claims[False, limit > 1],
            _parameters(limit),
        )
        plan = (json.loads(plans) if isinstance(plans, str) else plans)[0]["Plan"]
        # The candidates' scans (the UPDATE then finds each row by its primary key).
        scans = [
            node
            for node in _nodes(plan)
            if node["Node Type"] == "Index Scan" and node["Index Name"] != "delayed_queue_pkey"
        ]
        assert {scan["Index Name"] for scan in scans} == {POLL_INDEX}
        for scan in scans:
            assert not_read_and_thrown_away(scan)
        # Ten ranges (priorities 9 to 0), nine of them empty: the rows read per loop,
        # rounded, can only be the rows taken spread over the loops.
        [scan] = scans
        assert scan["Actual Rows"] * scan["Actual Loops"] <= limit
    elif name == "mariadb":
        [(analysed,)] = _analysed(
            store,
            "ANALYZE FORMAT=JSON",
            store.dialect.statements.leases.claim_candidates,
            _parameters(limit),
        )
        [table] = [step["table"] for step in json.loads(analysed)["query_block"]["nested_loop"]]
        assert (table["key"], table["access_type"]) == (POLL_INDEX, "range")
        assert table["r_rows"] == limit  # read: the rows taken, no waiting one
    else:
        rows = _analysed(
            store,
            "EXPLAIN QUERY PLAN",
            store.dialect.statements.leases.claim_candidates,
            _parameters(limit),
        )
        plan = "\n".join(str(row[-1]) for row in rows)
        assert f"SEARCH delayed_queue USING INDEX {POLL_INDEX}" in plan, plan
        assert "priority=?" in plan and "scheduledAt<?" in plan, plan
    taken = store.leases.poll(QUEUE, limit, str(uuid.uuid4()), NOW + 30_000, NOW)
    assert all(d.message.key.startswith("front-") for d in taken.deliveries)
    assert len(taken.deliveries) == limit


def test_the_keeper_reads_a_group_s_next_messages_only(grouped_queue):
    """Ten ranges of the group index, one per waiting priority, each stopped at the limit:
    of a group's 99 waiting messages, 2 read."""
    store = grouped_queue
    statement = store.dialect.statements.groups.group_waiting
    parameters = {"queue": QUEUE, "group": "g7", "limit": 2}
    name = store.dialect.name
    if name == "postgresql":
        [(plans,)] = _analysed(store, "EXPLAIN (ANALYZE, FORMAT JSON)", statement, parameters)
        plan = (json.loads(plans) if isinstance(plans, str) else plans)[0]["Plan"]
        scans = [node for node in _nodes(plan) if "Scan" in node["Node Type"]]
        assert {scan.get("Index Name") for scan in scans} == {GROUP_INDEX}
        assert sum(scan["Actual Rows"] * scan["Actual Loops"] for scan in scans) == 2
        # Many groups at once, one range of the due-order index per group (the front's
        # messages, at most the concurrency, passed over): of two groups, 4 read.
        [(plans,)] = _analysed(
            store,
            "EXPLAIN (ANALYZE, FORMAT JSON)",
            store.dialect.statements.groups.groups_waiting,
            {"queue": QUEUE, "groups": ["g7", "g8"], "limit": 2},
        )
        plan = (json.loads(plans) if isinstance(plans, str) else plans)[0]["Plan"]
        [scan] = [node for node in _nodes(plan) if node["Node Type"] == "Index Scan"]
        assert scan["Index Name"] == GROUP_DUE_INDEX
        assert scan["Actual Loops"] == 2  # one range per group
        assert scan.get("Rows Removed by Filter", 0) <= 2  # a front message per group, at most
        assert plan["Actual Rows"] == 4  # (a scan's rows per loop are rounded)
    elif name == "mariadb":
        [(analysed,)] = _analysed(store, "ANALYZE FORMAT=JSON", statement, parameters)
        tables = _mariadb_tables(json.loads(analysed))
        assert {table["key"] for table in tables} == {GROUP_INDEX}
        assert sum(table["r_rows"] for table in tables) == 2
        assert "filesort" not in analysed
    else:
        rows = _analysed(store, "EXPLAIN QUERY PLAN", statement, parameters)
        plan = "\n".join(str(row[-1]) for row in rows)
        assert plan.count(f"SEARCH delayed_queue USING INDEX {GROUP_INDEX}") == 10, plan
        assert "TEMP B-TREE" not in plan, plan


def _mariadb_tables(block: Any) -> list[dict]:
    """Every table access of a MariaDB JSON plan on delayed_queue."""
    found = []
    if isinstance(block, dict):
        if block.get("table_name") == "delayed_queue":
            found.append(block)
        for value in block.values():
            found += _mariadb_tables(value)
    elif isinstance(block, list):
        for value in block:
            found += _mariadb_tables(value)
    return found
