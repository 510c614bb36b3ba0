"""The report's sessions bound an idle transaction as the service's do, and not a statement
(app/pipeline/report.py's read_table says why), as the server's own session shows it: its
count's, and its JDBC reads' (each partition one transaction on PostgreSQL)."""

from __future__ import annotations

import pytest

from app.pipeline.report import jdbc_source, read_table
from app.storage.dialects import Bounds
from app.storage.tables import delivery_history
from tests.conftest import SERVERS
from tests.support.sessions import (
    BOUNDS_SQL,
    bounds_of,
    idle_bound_only,
    sessions_of_engines,
    within,
)

# Bounds other than the defaults, so that a session that shows them took the settings'.
BOUNDS = Bounds(lock_wait=2.0, statement=3.0)


@pytest.mark.parametrize("server", SERVERS)
def test_the_reports_count_bounds_an_idle_transaction(server, request, spark):
    url = request.getfixturevalue(f"{server}_url")
    with sessions_of_engines(server) as shown:
        read_table(spark, url, delivery_history, {"id": "long"}, BOUNDS)  # reads nothing yet
    bounds = idle_bound_only(server, statement=BOUNDS.statement)
    assert [within(each, bounds) for each in shown] == [bounds]


@pytest.mark.parametrize("server", SERVERS)
def test_the_reports_jdbc_reads_bound_an_idle_transaction(server, request, spark):
    url = request.getfixturevalue(f"{server}_url")
    jdbc_url, properties = jdbc_source(url, BOUNDS)
    read = spark.read.jdbc(jdbc_url, f"({BOUNDS_SQL[server]}) AS bounds", properties=properties)
    shown = bounds_of(tuple(row) for row in read.collect())
    bounds = idle_bound_only(server, statement=BOUNDS.statement)
    assert within(shown, bounds) == bounds
