"""Uninstalling a cron entry beside a full queue: does it cost what its own runs cost?

    python -m bench.cron_uninstall            # PostgreSQL and MariaDB, 15 rounds, ~2 minutes
    python -m bench.cron_uninstall --quick    # 1 round beside 10,000 messages: does it run?

On a fresh database per server, an entry with 1,000 runs (stored straight into
its queue, as the manager did before runs were bounded) is uninstalled through
the store (`Storage.cron_uninstall`: the entry's row, its runs, their history
rows, one transaction), its queue first holding nothing else, then 1,000,000
other messages, then 1,000,000 runs of another entry (keys of a run's shape,
so on PostgreSQL they are in the partial index of run keys too). Each queue is
loaded with one INSERT … SELECT on the server (tests/support/helpers.py: fill_queue),
then vacuumed, analysed and written out. Each queue has its own database, and the
rounds go through the three in turn (so a busy moment of the machine slows all
three), each installing an entry and its runs anew; a first round warms up.
The figure is the median of the rounds, and the ratio is each full queue's
median over the empty queue's.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
import uuid

from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

from app.config import Settings, normalize_database_url
from app.domain.cron import CronEntry
from app.domain.schedule import Schedule, config_hash
from app.storage.blocking import create_blocking_storage
from app.storage.schema import upgrade_to_head
from tests.support.helpers import fill_queue

QUEUE = "reports"
NOW_MS = 1_795_683_600_000  # 2026-11-26T09:00:00Z
RUNS = 1_000
SERVERS = {
    "postgresql": "postgresql://root@127.0.0.1:5432/hourglass_bench_cron",
    "mariadb": "mariadb://root@127.0.0.1:3306/hourglass_bench_cron",
}


def _entry(name: str) -> CronEntry:
    schedule = Schedule(every=1)
    return CronEntry(
        queue=QUEUE,
        name=name,
        schedule=json.dumps(schedule.as_json(), sort_keys=True),
        payload=b"{}",
        config_hash=config_hash(schedule, b"{}"),
        lookahead_ms=None,
        created_at=NOW_MS,
        updated_at=NOW_MS,
    )


def _fill_runs(url: str, entry: CronEntry, count: int) -> None:
    """`count` keys of `entry`'s run shape, `{name}/{hash}/20261126-{n:07d}000`."""
    fill_queue(
        url,
        QUEUE,
        count,
        key_prefix=f"{entry.name}/{entry.config_hash}/20261126-",
        key_suffix="000",
        due_at=NOW_MS + 3_600_000,
    )


def _fresh(url: str, *, create: bool = True) -> None:
    """Drop the database `url` names, and create it anew unless told not to."""
    target = make_url(url)
    backend = target.get_backend_name()
    admin = create_engine(
        target.set(database="postgres" if backend == "postgresql" else "mysql"),
        isolation_level="AUTOCOMMIT",
    )
    quoted = admin.dialect.identifier_preparer.quote_identifier(target.database)
    force = " WITH (FORCE)" if backend == "postgresql" else ""
    try:
        with admin.connect() as connection:
            connection.execute(text(f"DROP DATABASE IF EXISTS {quoted}{force}"))
            if create:
                connection.execute(text(f"CREATE DATABASE {quoted}"))
    finally:
        admin.dispose()


def _settle(url: str) -> None:
    """Vacuum and analyse the queue table (autovacuum is off on the benchmark machine),
    and write its loaded pages out, so that flushing them does not run during the rounds."""
    engine = create_engine(url, isolation_level="AUTOCOMMIT")
    try:
        with engine.connect() as connection:
            if engine.dialect.name == "postgresql":
                connection.execute(text("VACUUM ANALYZE delayed_queue"))
                connection.execute(text("CHECKPOINT"))
            else:
                connection.execute(text("ANALYZE TABLE delayed_queue"))
                connection.execute(text("FLUSH TABLES delayed_queue FOR EXPORT"))
                connection.execute(text("UNLOCK TABLES"))
    finally:
        engine.dispose()


def _uninstall_time(store, url: str) -> float:
    """Seconds to uninstall an entry with RUNS runs, installed just before."""
    entry = _entry(f"tick-{uuid.uuid4().hex[:8]}")
    store.cron.install(entry)
    _fill_runs(url, entry, RUNS)
    started = time.perf_counter()
    removed = store.cron.uninstall(QUEUE, entry.name, NOW_MS)
    elapsed = time.perf_counter() - started
    assert removed == RUNS, removed
    return elapsed


def measure(url: str, others: int, rounds: int) -> dict[str, list[float]]:
    """Uninstall times beside an empty queue, `others` messages, and `others` runs of
    another entry: one database each, loaded first, then measured in turn, round by
    round (a first round warms up, not counted)."""
    queues = {
        "empty queue": lambda url: None,
        f"{others:,} other messages": lambda url: fill_queue(url, QUEUE, others),
        f"{others:,} runs of another entry": lambda url: _fill_runs(url, _entry("other"), others),
    }
    base = make_url(url)
    urls = {
        label: base.set(database=f"{base.database}_{number}").render_as_string(hide_password=False)
        for number, label in enumerate(queues)
    }
    for label, fill in queues.items():
        _fresh(urls[label])
        upgrade_to_head(urls[label])
        fill(urls[label])
        _settle(urls[label])
    stores = {
        label: create_blocking_storage(Settings(database_url=queue_url, auto_migrate=False))
        for label, queue_url in urls.items()
    }
    try:
        figures: dict[str, list[float]] = {label: [] for label in queues}
        for _ in range(rounds + 1):
            for label, store in stores.items():
                figures[label].append(_uninstall_time(store, urls[label]))
        return {label: times[1:] for label, times in figures.items()}
    finally:
        for store in stores.values():
            store.close()
        for queue_url in urls.values():
            _fresh(queue_url, create=False)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--messages", type=int, default=1_000_000)
    parser.add_argument("--servers", default=",".join(SERVERS))
    for server, url in SERVERS.items():
        parser.add_argument(
            f"--{server}-url",
            default=url,
            help="its database's name is the prefix of the three the benchmark makes and drops",
        )
    parser.add_argument("--quick", action="store_true", help="1 round beside 10,000 messages")
    args = parser.parse_args(argv)
    if args.quick:
        args.rounds, args.messages = 1, 10_000
    print(f"| database | queue besides the entry's {RUNS:,} runs | median | ratio | rounds (ms) |")
    print("|---|---|---|---|---|")
    for server in args.servers.split(","):
        url = normalize_database_url(getattr(args, f"{server}_url"))
        figures = measure(url, args.messages, args.rounds)
        empty = statistics.median(figures["empty queue"])
        for label, times in figures.items():
            median = statistics.median(times)
            rounds = " / ".join(f"{seconds * 1000:.1f}" for seconds in times)
            print(
                f"| {server} | {label} | {median * 1000:.1f} ms | {median / empty:.2f} | {rounds} |",
                flush=True,
            )


if __name__ == "__main__":
    main()
