"""The count a claim in a queue with `max_leased` makes reads leases only, never the queue's
messages waiting to be due (docs/decisions/0026-concurrency-and-rate-limits.md): the
database's plan of it, analysed, on a queue of 20,000 messages due later and 10 leased,
beside another queue with 2,000 leased. PostgreSQL and SQLite read the partial index of
leased messages (the queue's own; PostgreSQL may take the lock index, whose costs it
estimates close); MariaDB, which has no partial indexes, its lock index (every queue's
leases)."""

from __future__ import annotations

import uuid

from app.domain.messages import QueueSettings
from app.storage.tables import LEASED_INDEX, LOCK_INDEX
from tests.conftest import START_MS
from tests.support.helpers import fill_queue, plan_of

QUEUE = "limited"


def test_the_count_of_live_leases_reads_leases_only(store, clean_database):
    url = clean_database.url
    fill_queue(url, QUEUE, 20_000, key_prefix="later-", due_at=START_MS + 3_600_000)
    fill_queue(url, QUEUE, 10, key_prefix="now-", due_at=START_MS - 10)
    fill_queue(url, "other", 2_000, key_prefix="now-", due_at=START_MS - 10_000)
    for _ in range(2):
        store.leases.poll("other", 1000, str(uuid.uuid4()), START_MS + 60_000, START_MS)
    settings = store.settings.put(QueueSettings(QUEUE, updated_at=START_MS, max_leased=100))
    claim = store.leases.poll(QUEUE, 10, str(uuid.uuid4()), START_MS + 60_000, START_MS, settings)
    assert len(claim.deliveries) == 10
    mariadb = store.dialect.name == "mariadb"
    with store.engine.connect() as connection:
        analysed = connection.exec_driver_sql(
            "ANALYZE TABLE delayed_queue" if mariadb else "ANALYZE"
        )
        if mariadb:
            analysed.all()  # its answer (a table of results) read before the commit
        connection.commit()
    statement = store.dialect.statements.leases.limits_leased
    plan = plan_of(store, statement, {"queue": QUEUE, "now": START_MS})
    if mariadb:
        assert LOCK_INDEX in plan, plan
    else:
        # The partial index of leases, or (the costs are close: 2,010 leases in all, and
        # the estimate puts most in this queue) the lock index: leases either way.
        assert LEASED_INDEX in plan or LOCK_INDEX in plan, plan
    assert "Seq Scan" not in plan, plan
