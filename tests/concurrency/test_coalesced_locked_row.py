"""A call stuck on a row locked from outside holds back no other call of its queue for
longer than the callers' patience (app/storage/coalescing.py, decision 23): the calls of
one queue share statements, and one of them waiting out the lock bound must not make the
others of its queue wait it out too (decision 12: only the locked row's callers wait)."""

from __future__ import annotations

import uuid

import pytest
from sqlalchemy import create_engine, text

from app.config import Settings
from app.domain.messages import Offer
from app.storage.blocking import create_blocking_storage
from app.storage.coalescing import PATIENCE_SECONDS
from tests.conftest import START_MS, truncate_all
from tests.support.helpers import INNODB_VIEWS_EVERY_SECONDS, wait_until
from tests.support.locking import busy_sessions, database_name

pytestmark = pytest.mark.server_databases

QUEUE = "stuck"
# The lock bound the test's storage keeps to (HOURGLASS_LOCK_TIMEOUT); the unstuck call
# must be answered well within it.
LOCK_BOUND = 5.0


def test_an_acknowledgement_stuck_on_a_locked_row_holds_back_no_other_of_its_queue(server_url):
    truncate_all(server_url)
    store = create_blocking_storage(
        Settings(database_url=server_url, auto_migrate=False, lock_timeout=LOCK_BOUND)
    )
    storage = store.storage
    outside = create_engine(server_url, isolation_level="AUTOCOMMIT")
    try:
        store.messages.offer_many(
            QUEUE, [Offer("a", b"1", START_MS - 2), Offer("b", b"2", START_MS - 1)], START_MS
        )
        held_a, held_b = str(uuid.uuid4()), str(uuid.uuid4())
        lease_until = START_MS + 60_000
        assert len(store.leases.poll(QUEUE, 1, held_a, lease_until, START_MS).deliveries) == 1
        assert len(store.leases.poll(QUEUE, 1, held_b, lease_until, START_MS).deliveries) == 1
        with outside.connect() as connection:
            quote = '"' if database_name(server_url) == "postgresql" else "`"
            if database_name(server_url) == "mariadb":
                connection.exec_driver_sql("SET TRANSACTION ISOLATION LEVEL READ COMMITTED")
            connection.exec_driver_sql("BEGIN")
            connection.execute(
                text(
                    f"SELECT {quote}pKey{quote} FROM delayed_queue "
                    f"WHERE {quote}pKey{quote} = 'a' FOR UPDATE"
                )
            )
            session = connection.execute(
                text(
                    "SELECT pg_backend_pid()"
                    if database_name(server_url) == "postgresql"
                    else "SELECT CONNECTION_ID()"
                )
            ).scalar()
            stuck = store.start(storage.leases.acknowledge(QUEUE, held_a, START_MS))
            wait_until(
                lambda: any(
                    "Lock" in state or "LOCK WAIT" in state or "Waiting" in state
                    for state in busy_sessions(server_url, session)
                ),
                timeout=LOCK_BOUND,
                what="the acknowledgement of the locked row waits on its lock",
                details=lambda: (busy_sessions(server_url, session), stuck.done()),
                # InnoDB's views of its transactions stood still while asked every 10 ms
                # (tests/support/helpers.py): the wait was never seen, one run in five under load.
                every=INNODB_VIEWS_EVERY_SECONDS,
            )
            # Without the patience it would wait in line for the stuck call (the lock
            # bound), then share a statement with its retry: a bound at least.
            unstuck = store.start(storage.leases.acknowledge(QUEUE, held_b, START_MS))
            assert unstuck.result(timeout=LOCK_BOUND / 2 + PATIENCE_SECONDS) == 1
            assert not stuck.done()  # still waiting on its row: the other went by it
            connection.exec_driver_sql("ROLLBACK")
        assert stuck.result(timeout=LOCK_BOUND * 2) == 1  # its row free again: acknowledged
    finally:
        outside.dispose()
        store.close()
