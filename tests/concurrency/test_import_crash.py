"""kill -9 of `hourglass pipeline import` half-way, then the same command again: every
valid row is scheduled exactly once.

"Half-way" is made certain, not timed: the test holds an uncommitted row under the
input's greatest key, so the import's INSERT of that key's chunk waits on the
test's lock. Keys are sorted within each partition, so that chunk is the last of
its partition, and the chunks before it have been written. The import is killed
while it waits, and its waiting statement is cancelled with it.

The database is the run's, shared by every test of this process, so the test waits for
the import's own sessions (by their application_name) to end, not for the database to
have no other session: a server, a pool or an engine of another test may still be there."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.engine import Connection

from app.pipeline import IMPORT_APPLICATION_NAME
from tests.conftest import truncate_all
from tests.support.helpers import wait_until

pytestmark = pytest.mark.postgresql_only

ROWS = 20_000  # 20 batches of 1,000: the killed import has written some
STARTUP_TIMEOUT = 300
# The greatest key of the input: the last of its partition.
BLOCKING_KEY = max(f"user-{n}" for n in range(ROWS))


def _command(path: str, url: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "app",
        "pipeline",
        "import",
        path,
        "--queue",
        "bulk",
        "--database-url",
        url,
        "--master",
        "local[2]",
        # A transaction per 1,000 rows of a partition (the bulk path's default is 10,000,
        # more than a partition holds here), so the chunks before the held key's commit.
        "--batch-size",
        "1000",
    ]


# What a session is doing, as pg_stat_activity says, for the waits and their failures.
_SESSIONS = (
    "SELECT pid, application_name, state, wait_event_type, backend_start, query "
    "FROM pg_stat_activity WHERE datname = current_database() "
    "AND pid <> pg_backend_pid() AND backend_type = 'client backend'"
)


def _sessions(connection: Connection) -> list[dict]:
    """The other sessions of the database: the import's and any other test's."""
    return [dict(row) for row in connection.execute(text(_SESSIONS)).mappings()]


def _import_sessions(connection: Connection) -> list[dict]:
    """The sessions the import opened: its application_name says so."""
    return [
        session
        for session in _sessions(connection)
        if session["application_name"] == IMPORT_APPLICATION_NAME
    ]


def _waiting_on_a_lock(sessions: list[dict]) -> list[dict]:
    return [session for session in sessions if session["wait_event_type"] == "Lock"]


def _stored(url: str) -> tuple[int, int]:
    engine = create_engine(url)
    try:
        with engine.connect() as connection:
            return tuple(
                connection.execute(
                    text(
                        'SELECT count(*), count(DISTINCT "pKey") FROM delayed_queue '
                        "WHERE \"pKind\" = 'bulk'"
                    )
                ).one()
            )
    finally:
        engine.dispose()


def test_an_import_killed_half_way_and_run_again_schedules_each_row_once(
    postgresql_url, tmp_path, java
):
    truncate_all(postgresql_url)
    path = str(tmp_path / "bulk.parquet")
    pq.write_table(
        pa.table(
            {
                "key": [f"user-{n}" for n in range(ROWS)],
                "payload": [f'{{"n": {n}}}' for n in range(ROWS)],
                "scheduled_at": ["2026-12-01T09:00:00Z"] * ROWS,
            }
        ),
        path,
    )
    engine = create_engine(postgresql_url)

    def sessions() -> list[dict]:  # what a failed wait reports
        with engine.connect() as watcher:
            return _sessions(watcher)

    try:
        with engine.connect() as holder:
            holder.execute(
                text(
                    'INSERT INTO delayed_queue ("pKey", "pKind", payload, "scheduledAt", '
                    '"scheduledAtInitially", "createdAt") '
                    "VALUES (:key, 'bulk', '\\x31', 0, 0, 0)"
                ),
                {"key": BLOCKING_KEY},
            )  # not committed: the import's INSERT of this key waits on it

            first = subprocess.Popen(
                _command(path, postgresql_url),
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                start_new_session=True,  # the driver, its JVM and the Python workers: one group
            )
            try:

                def import_waits_on_the_lock() -> bool:
                    assert first.poll() is None, "the import ended while the key was held"
                    with engine.connect() as watcher:
                        return bool(_waiting_on_a_lock(_import_sessions(watcher)))

                wait_until(
                    import_waits_on_the_lock,
                    STARTUP_TIMEOUT,
                    "the import to reach the key",
                    details=sessions,
                )
                os.killpg(first.pid, signal.SIGKILL)
            finally:
                if first.poll() is None:
                    os.killpg(first.pid, signal.SIGKILL)
                first.wait(60)
            # The killed import's waiting INSERT must not commit once the key is free.
            with engine.connect() as watcher:
                for session in _waiting_on_a_lock(_import_sessions(watcher)):
                    watcher.execute(
                        text("SELECT pg_terminate_backend(:pid)"), {"pid": session["pid"]}
                    )
            holder.rollback()

            def the_import_is_disconnected() -> bool:
                with engine.connect() as watcher:
                    return not _import_sessions(watcher)

            # A killed client's idle session ends when the server reads the closed socket.
            wait_until(
                the_import_is_disconnected,
                60,
                "the import's connections to close",
                details=sessions,
            )
    finally:
        engine.dispose()
    written, _ = _stored(postgresql_url)
    assert 0 < written < ROWS  # killed half-way

    again = subprocess.run(
        _command(path, postgresql_url), capture_output=True, text=True, timeout=600, check=False
    )
    assert again.returncode == 0, again.stderr[-3000:]
    counts = dict(line.split(": ", 1) for line in again.stdout.splitlines() if ": " in line)
    created, ignored = int(counts["created"]), int(counts["ignored"])
    # What the killed run wrote is ignored now; the rest is created; nothing twice.
    assert (created, ignored) == (ROWS - written, written)
    assert _stored(postgresql_url) == (ROWS, ROWS)
