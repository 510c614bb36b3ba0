"""Cron entries in storage: install, change, uninstall, and deletes that touch only their entry."""

from __future__ import annotations

import dataclasses
import json
import uuid

import pytest

from app.cron.models import CronEntry, InstallOutcome
from app.cron.schedule import Schedule, config_hash, run_key
from app.queue.models import IfExists, Offer
from tests.conftest import START_MS

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
    store.messages_offer_many(entry.queue, offers, START_MS)
    return keys


def test_installing_an_entry_creates_it_and_reinstalling_changes_nothing(store):
    entry = _entry("nightly")
    assert store.cron_install(entry).outcome is InstallOutcome.CREATED
    later = dataclasses.replace(entry, updated_at=START_MS + 1)
    again = store.cron_install(later)
    assert again.outcome is InstallOutcome.UNCHANGED
    assert again.entry.updated_at == START_MS  # nothing was written
    assert store.cron_get(QUEUE, "nightly") == entry
    assert store.cron_list(QUEUE) == [entry]
    assert store.cron_list() == [entry]
    assert store.cron_get(QUEUE, "other") is None


def test_a_changed_entry_replaces_its_pending_runs_and_keeps_the_leased_one(store):
    old = _entry("nightly")
    store.cron_install(old)
    old_keys = _install_runs(store, old)
    # The first run is in flight: a worker holds it.
    leased = store.messages_poll(
        QUEUE, 1, str(uuid.uuid4()), START_MS + 10 * HOUR, START_MS + HOUR
    ).deliveries
    assert [d.message.key for d in leased] == old_keys[:1]

    new = _entry("nightly", payload=b'{"r":2}')
    result = store.cron_install(new)
    assert result.outcome is InstallOutcome.CHANGED
    assert result.removed_runs == 2
    assert result.entry.created_at == START_MS
    assert store.cron_get(QUEUE, "nightly").config_hash == new.config_hash
    assert store.messages_get(QUEUE, old_keys[0]) is not None  # in flight: untouched
    assert all(store.messages_get(QUEUE, key) is None for key in old_keys[1:])


@pytest.mark.parametrize(
    ("entry", "other"),
    [("a", "a/b"), ("a/b", "a"), ("a_b", "axb"), ("100%", "1000"), ("A", "a"), ("x\\y", "x\\\\y")],
)
def test_uninstall_deletes_only_its_own_runs(store, entry, other):
    mine, theirs = _entry(entry), _entry(other)
    store.cron_install(mine)
    store.cron_install(theirs)
    my_keys = _install_runs(store, mine)
    their_keys = _install_runs(store, theirs)

    assert store.cron_uninstall(QUEUE, entry, START_MS) == len(my_keys)
    assert store.cron_get(QUEUE, entry) is None
    assert store.cron_get(QUEUE, other) is not None
    assert all(store.messages_get(QUEUE, key) is None for key in my_keys)
    assert all(store.messages_get(QUEUE, key) is not None for key in their_keys)


@pytest.mark.parametrize(("entry", "other"), [("a", "a/b"), ("a_b", "axb"), ("100%", "1000")])
def test_a_change_deletes_only_its_own_old_runs(store, entry, other):
    mine, theirs = _entry(entry), _entry(other)
    store.cron_install(mine)
    store.cron_install(theirs)
    _install_runs(store, mine)
    their_keys = _install_runs(store, theirs)
    assert store.cron_install(_entry(entry, every=60)).removed_runs == 3
    assert all(store.messages_get(QUEUE, key) is not None for key in their_keys)


def test_uninstalling_an_unknown_entry_says_so(store):
    assert store.cron_uninstall(QUEUE, "nothing", START_MS) is None


def test_runs_of_a_configuration_that_is_gone_are_not_installed(store):
    old = _entry("nightly")
    store.cron_install(old)
    store.cron_install(_entry("nightly", payload=b'{"r":2}'))  # another replica changed it
    run = Offer(
        key=run_key(old.name, old.config_hash, START_MS + HOUR),
        payload=old.payload,
        scheduled_at=START_MS + HOUR,
        if_exists=IfExists.IGNORE,
    )
    assert store.cron_install_runs(old, [run], START_MS) is None
    assert store.messages_get(QUEUE, run.key) is None
    store.cron_uninstall(QUEUE, "nightly", START_MS)
    assert store.cron_install_runs(old, [run], START_MS) is None


def test_installing_runs_twice_creates_each_once(store):
    entry = _entry("nightly")
    store.cron_install(entry)
    runs = [
        Offer(
            key=run_key(entry.name, entry.config_hash, START_MS + n * HOUR),
            payload=entry.payload,
            scheduled_at=START_MS + n * HOUR,
            if_exists=IfExists.IGNORE,
        )
        for n in range(1, 4)
    ]
    assert store.cron_install_runs(entry, runs, START_MS) == 3
    assert store.cron_install_runs(entry, runs, START_MS) == 0
