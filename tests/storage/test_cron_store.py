"""Cron entries in storage: install, change, uninstall, and deletes that touch only their entry."""

from __future__ import annotations

import dataclasses
import json
import uuid

import pytest
from sqlalchemy import select, text

from app.config import Settings
from app.domain.cron import CronEntry, InstallOutcome, run_key
from app.domain.messages import IfExists, Offer
from app.domain.schedule import Schedule, config_hash
from app.storage.blocking import create_blocking_storage
from app.storage.cron_entries import _runs_of
from app.storage.schema import upgrade_to_head
from app.storage.tables import delayed_queue
from tests.conftest import START_MS, scratch_database
from tests.support.helpers import fill_queue, history_rows, plan_of

QUEUE = "reports"
HOUR = 3_600_000


def _entry(
    name: str, payload: bytes = b'{"r":1}', every: float = 3600, lookahead: int | None = None
):
    schedule = Schedule(every=every)
    return CronEntry(
        queue=QUEUE,
        name=name,
        schedule=json.dumps(schedule.as_json()),
        payload=payload,
        config_hash=config_hash(schedule, payload),
        lookahead_ms=lookahead,
        created_at=START_MS,
        updated_at=START_MS,
    )


def _install_runs(store, entry: CronEntry, count: int = 3) -> list[str]:
    """Offer `count` runs of `entry` the way the manager does; their keys."""
    keys = [run_key(entry.name, entry.config_hash, START_MS + (n + 1) * HOUR) for n in range(count)]
    offers = [
        Offer(
            key=key,
            payload=entry.payload,
            scheduled_at=START_MS + (n + 1) * HOUR,
            if_exists=IfExists.IGNORE,
        )
        for n, key in enumerate(keys)
    ]
    store.messages.offer_many(entry.queue, offers, START_MS)
    return keys


def _runs(entry: CronEntry, times: list[int]) -> list[Offer]:
    return [
        Offer(
            key=run_key(entry.name, entry.config_hash, time),
            payload=entry.payload,
            scheduled_at=time,
            if_exists=IfExists.IGNORE,
        )
        for time in times
    ]


def _install(store, entry: CronEntry, runs: list[Offer], limit: int = 200, keep_until=None):
    """cron_install_runs at START_MS, keeping runs up to a day ahead unless told."""
    keep_until = START_MS + 24 * HOUR if keep_until is None else keep_until
    return store.cron.install_runs(entry, runs, START_MS, limit=limit, keep_until=keep_until)


def _stored_keys(store) -> list[str]:
    """Every key in the message table, sorted."""
    with store.engine.connect() as connection:
        return sorted(connection.execute(select(delayed_queue.c.pKey)).scalars())


def test_installing_an_entry_creates_it_and_reinstalling_changes_nothing(store):
    entry = _entry("nightly")
    assert store.cron.install(entry).outcome is InstallOutcome.CREATED
    later = dataclasses.replace(entry, updated_at=START_MS + 1)
    again = store.cron.install(later)
    assert again.outcome is InstallOutcome.UNCHANGED
    assert again.entry.updated_at == START_MS  # nothing was written
    assert store.cron.get(QUEUE, "nightly") == entry
    assert store.cron.entries(QUEUE) == [entry]
    assert store.cron.entries() == [entry]
    assert store.cron.get(QUEUE, "other") is None


def test_a_changed_entry_replaces_its_pending_runs_and_keeps_the_leased_one(store):
    old = _entry("nightly")
    store.cron.install(old)
    old_keys = _install_runs(store, old)
    # The first run is in flight: a worker holds it.
    leased = store.leases.poll(
        QUEUE, 1, str(uuid.uuid4()), START_MS + 10 * HOUR, START_MS + HOUR
    ).deliveries
    assert [d.message.key for d in leased] == old_keys[:1]

    new = _entry("nightly", payload=b'{"r":2}')
    result = store.cron.install(new)
    assert result.outcome is InstallOutcome.CHANGED
    assert result.removed_runs == 2
    assert result.entry.created_at == START_MS
    assert store.cron.get(QUEUE, "nightly").config_hash == new.config_hash
    assert store.messages.get(QUEUE, old_keys[0]) is not None  # in flight: untouched
    assert all(store.messages.get(QUEUE, key) is None for key in old_keys[1:])


@pytest.mark.parametrize(
    ("entry", "other"),
    [("a", "a/b"), ("a/b", "a"), ("a_b", "axb"), ("100%", "1000"), ("A", "a"), ("x\\y", "x\\\\y")],
)
def test_uninstall_deletes_only_its_own_runs(store, entry, other):
    mine, theirs = _entry(entry), _entry(other)
    store.cron.install(mine)
    store.cron.install(theirs)
    my_keys = _install_runs(store, mine)
    their_keys = _install_runs(store, theirs)

    assert store.cron.uninstall(QUEUE, entry, START_MS) == len(my_keys)
    assert store.cron.get(QUEUE, entry) is None
    assert store.cron.get(QUEUE, other) is not None
    assert all(store.messages.get(QUEUE, key) is None for key in my_keys)
    assert all(store.messages.get(QUEUE, key) is not None for key in their_keys)


@pytest.mark.parametrize(("entry", "other"), [("a", "a/b"), ("a_b", "axb"), ("100%", "1000")])
def test_a_change_deletes_only_its_own_old_runs(store, entry, other):
    mine, theirs = _entry(entry), _entry(other)
    store.cron.install(mine)
    store.cron.install(theirs)
    _install_runs(store, mine)
    their_keys = _install_runs(store, theirs)
    assert store.cron.install(_entry(entry, every=60)).removed_runs == 3
    assert all(store.messages.get(QUEUE, key) is not None for key in their_keys)


def test_uninstalling_an_unknown_entry_says_so(store):
    assert store.cron.uninstall(QUEUE, "nothing", START_MS) is None


def test_runs_of_a_configuration_that_is_gone_are_not_installed(store):
    old = _entry("nightly")
    store.cron.install(old)
    store.cron.install(_entry("nightly", payload=b'{"r":2}'))  # another replica changed it
    run = Offer(
        key=run_key(old.name, old.config_hash, START_MS + HOUR),
        payload=old.payload,
        scheduled_at=START_MS + HOUR,
        if_exists=IfExists.IGNORE,
    )
    assert _install(store, old, [run]) is None
    assert store.messages.get(QUEUE, run.key) is None
    store.cron.uninstall(QUEUE, "nightly", START_MS)
    assert _install(store, old, [run]) is None


def test_installing_runs_twice_creates_each_once(store):
    entry = _entry("nightly")
    store.cron.install(entry)
    runs = [
        Offer(
            key=run_key(entry.name, entry.config_hash, START_MS + n * HOUR),
            payload=entry.payload,
            scheduled_at=START_MS + n * HOUR,
            if_exists=IfExists.IGNORE,
        )
        for n in range(1, 4)
    ]
    assert _install(store, entry, runs) == 3
    assert _install(store, entry, runs) == 0


# -- bounds (decision 6) -------------------------------------------------------------

MINUTE = 60_000


def _take_and_acknowledge(store, now: int) -> str:
    lock = str(uuid.uuid4())
    [delivery] = store.leases.poll(QUEUE, 1, lock, now + HOUR, now).deliveries
    assert store.leases.acknowledge(QUEUE, lock, now) == 1
    return delivery.message.key


def test_runs_go_in_up_to_the_limit_and_one_more_for_each_one_delivered(store):
    entry = _entry("tick", every=60)
    store.cron.install(entry)
    runs = _runs(entry, [START_MS + n * MINUTE for n in range(1, 11)])
    assert _install(store, entry, runs, limit=4) == 4
    assert _stored_keys(store) == [run.key for run in runs[:4]]
    assert _install(store, entry, runs, limit=4) == 0  # full
    assert _take_and_acknowledge(store, START_MS + MINUTE) == runs[0].key
    assert _install(store, entry, runs[1:], limit=4) == 1  # a later pass's runs
    assert _stored_keys(store) == [run.key for run in runs[1:5]]


def test_runs_past_the_limit_or_the_lookahead_go_but_never_one_that_is_due(store, database):
    entry = _entry("tick", every=60)
    store.cron.install(entry)
    # Runs stored before the bounds: two due (a worker holds the older), thirty ahead.
    times = [START_MS - 2 * MINUTE, START_MS - MINUTE] + [
        START_MS + n * MINUTE for n in range(1, 31)
    ]
    stored = _runs(entry, times)
    store.messages.offer_many(QUEUE, stored, START_MS - HOUR)
    store.leases.poll(QUEUE, 1, str(uuid.uuid4()), START_MS + HOUR, START_MS)
    other = _entry("tick/other", every=60)  # its keys share the prefix `tick/`
    store.cron.install(other)
    their_keys = [run.key for run in _runs(other, times)]
    store.messages.offer_many(QUEUE, _runs(other, times), START_MS - HOUR)

    assert _install(store, entry, [], limit=5) == 0
    # The two due ones stay, with the earliest runs ahead up to the limit.
    assert _stored_keys(store) == sorted([run.key for run in stored[:5]] + their_keys)
    # A shorter lookahead: the runs after it go too, not the due ones.
    assert _install(store, entry, [], limit=5, keep_until=START_MS + MINUTE) == 0
    assert _stored_keys(store) == sorted([run.key for run in stored[:3]] + their_keys)
    dropped = [row for row in history_rows(database.url) if row["outcome"] == "dropped"]
    assert sorted(row["key"] for row in dropped) == sorted(run.key for run in stored[3:])


def test_while_the_limit_of_runs_wait_for_workers_none_is_added(store):
    entry = _entry("tick", every=60)
    store.cron.install(entry)
    waiting = _runs(entry, [START_MS - n * MINUTE for n in range(6, 0, -1)])
    store.messages.offer_many(QUEUE, waiting, START_MS - HOUR)
    ahead = _runs(entry, [START_MS + n * MINUTE for n in range(1, 4)])
    assert _install(store, entry, ahead, limit=5) == 0
    assert _stored_keys(store) == sorted(run.key for run in waiting)


def test_an_uninstall_larger_than_one_delete_removes_its_runs_and_nothing_else(
    store, clean_database
):
    mine, below, beside = _entry("a"), _entry("a/b"), _entry("a0")
    for entry in (mine, below, beside):
        store.cron.install(entry)
    # 2,500 runs: MariaDB removes them in pages of 1,000. Keys after the range's start
    # (`a/b/…`) and right after its end (`a0/…`) stay.
    for entry, count in ((mine, 2_500), (below, 1_500), (beside, 1_500)):
        fill_queue(
            clean_database.url,
            QUEUE,
            count,
            key_prefix=f"{entry.name}/{entry.config_hash}/20261126-",
            key_suffix="000",
            due_at=START_MS + HOUR,
        )
    assert store.cron.uninstall(QUEUE, "a", START_MS) == 2_500
    keys = _stored_keys(store)
    assert len(keys) == 3_000
    assert not [key for key in keys if key.startswith(f"a/{mine.config_hash}/")]


def test_an_entrys_runs_are_one_index_range_however_full_the_queue_is(store, clean_database):
    """The plan of the statements that read and delete an entry's runs, on a queue of
    20,000 other messages, never analysed: an index range, not the queue."""
    entry = _entry("tick")
    fill_queue(clean_database.url, QUEUE, 20_000, due_at=START_MS)
    fill_queue(
        clean_database.url,
        QUEUE,
        50,
        key_prefix=f"tick/{entry.config_hash}/20261126-",
        key_suffix="000",
        due_at=START_MS,
    )
    runs = store.dialect.statements.cron.entry_runs
    parameters = _runs_of(QUEUE, "tick")
    for statement in (runs.keys, runs.delete_pending.delete):
        plan = plan_of(store, statement, parameters)
        if store.dialect.name == "postgresql":
            assert "delayed_queue__cron_run_keys_idx" in plan, plan
        elif store.dialect.name == "mariadb":
            assert "| range | " in plan and "| delayed_queue__key_kind_uq |" in plan, plan
        else:
            assert "INDEX delayed_queue__key_kind_uq (pKey>? AND pKey<?)" in plan, plan


@pytest.mark.postgresql_only
def test_runs_are_found_by_bytes_on_a_database_whose_collation_is_linguistic():
    """On a database whose default collation ignores punctuation at first (as glibc's
    en_US.UTF-8 does), `a`'s run keys sort after "a0": a range under that collation
    would miss every one of them. The index and the statements compare bytes."""
    icu = "TEMPLATE template0 LOCALE_PROVIDER icu ICU_LOCALE 'en-US-u-ka-shifted' LOCALE 'C.UTF-8'"
    with scratch_database("postgresql", "collation", icu) as url:
        upgrade_to_head(url)
        store = create_blocking_storage(Settings(database_url=url, auto_migrate=False))
        try:
            with store.engine.connect() as connection:
                run_key_of_a = "'a/0123456789abcdef/20261127-000000.000'"
                assert connection.execute(text(f"SELECT {run_key_of_a} < 'a0'")).scalar() is False
            entries = [_entry(name) for name in ("a", "a/b", "a-b", "A", "a0")]
            for entry in entries:
                store.cron.install(entry)
                _install_runs(store, entry)
            assert _install(store, entries[0], [], limit=2) == 0  # drops its latest run
            assert store.cron.uninstall(QUEUE, "a", START_MS) == 2
            keys = _stored_keys(store)
            assert len(keys) == 12
            assert not [key for key in keys if key.startswith(f"a/{entries[0].config_hash}/")]
        finally:
            store.close()
