"""Priorities, groups and expiry through both clients: on every offer, message and cron entry."""

from __future__ import annotations

import dataclasses
import time
from datetime import UTC, datetime, timedelta, timezone

import pytest

from hourglass_client import Invalid, NotFound, Offer

FRIDAY = datetime(2031, 11, 28, 9, 0, tzinfo=timezone(timedelta(hours=2)))


def test_priorities_on_every_offer_and_every_message(api, queue):
    assert api.offer(queue, "low", 1).outcome == "created"
    assert api.offer(queue, "high", 2, priority=9).outcome == "created"
    generated = api.create(queue, 3, priority=5).key
    api.offer_many(queue, [Offer("batched", 4, priority=7), Offer("plain", 5)])
    assert api.update(queue, "plain", 5, priority=6).outcome == "updated"
    assert api.get(queue, "high").priority == 9 and api.get(queue, "low").priority == 0
    listed = {message.key: message.priority for message in api.iter_messages(queue)}
    assert listed == {"low": 0, "high": 9, generated: 5, "batched": 7, "plain": 6}
    lease = api.poll(queue, max=10)
    assert [(message.key, message.priority) for message in lease.messages] == [
        ("high", 9),
        ("batched", 7),
        ("plain", 6),
        (generated, 5),
        ("low", 0),
    ]
    assert dataclasses.replace(lease.messages[0]) == lease.messages[0]
    assert api.offer(queue, "later", 1, scheduled_at=FRIDAY, priority=3).outcome == "created"
    assert api.offer(queue, "later", 1, scheduled_at=FRIDAY, priority=3).outcome == "ignored"
    assert api.offer(queue, "later", 1, scheduled_at=FRIDAY, priority=2).outcome == "updated"
    entry = api.install_cron(queue, "tick", 1, every=600, priority=4)
    assert entry.priority == 4 and api.get_cron(queue, "tick").priority == 4
    with pytest.raises(Invalid):
        api.offer(queue, "k", 1, priority=10)


def test_groups_on_every_offer_every_message_and_the_settings(api, queue):
    assert api.get_settings(queue).group_concurrency == 1
    due = datetime.now(UTC) - timedelta(minutes=10)
    api.offer(queue, "ann-1", 1, scheduled_at=due, group="ann")
    api.offer(queue, "ann-2", 2, scheduled_at=due + timedelta(minutes=1), group="ann")
    bob = api.create(queue, 3, scheduled_at=due, group="bob").key
    api.offer_many(queue, [Offer("bob-2", 4, delay=0, group="bob"), Offer("solo", 5)])
    assert api.update(queue, "solo", 5, scheduled_at=due, group="cy").outcome == "updated"
    assert api.get(queue, "ann-1").group == "ann" and api.get(queue, bob).group == "bob"
    assert [message.key for message in api.iter_messages(queue, group="ann")] == [
        "ann-1",
        "ann-2",
    ]
    page = api.list_messages(queue, group="bob", limit=1)
    assert [message.key for message in page.items] == [bob] and page.next is not None
    assert [message.key for message in api.iter_messages(queue, group="nobody")] == []

    # One of each group at once, the earliest due first.
    lease = api.poll(queue, max=10)
    assert sorted((message.group, message.key) for message in lease.messages) == [
        ("ann", "ann-1"),
        ("bob", bob),
        ("cy", "solo"),
    ]
    assert api.poll(queue, max=10).lock_id is None
    assert api.ack(queue, lease.lock_id)
    following: list[str] = []
    deadline = time.monotonic() + 10
    while len(following) < 2 and time.monotonic() < deadline:
        following += api.poll(queue, max=10, wait=2).keys
    assert sorted(following) == ["ann-2", "bob-2"]

    assert api.offer(queue, "later", 1, scheduled_at=FRIDAY, group="g").outcome == "created"
    assert api.offer(queue, "later", 1, scheduled_at=FRIDAY, group="g").outcome == "ignored"
    assert api.offer(queue, "later", 1, scheduled_at=FRIDAY, group="h").outcome == "updated"
    assert api.get(queue, "later").group == "h"
    entry = api.install_cron(queue, "tick", 1, every=600, group="g")
    assert entry.group == "g" and api.get_cron(queue, "tick").group == "g"
    assert api.install_cron(queue, "tick", 1, every=600, group="g").outcome == "unchanged"
    assert len(list(api.iter_messages(queue, group="g"))) >= 1  # its runs, in its group
    assert api.install_cron(queue, "tick", 1, every=600).outcome == "changed"
    assert api.get_cron(queue, "tick").group is None
    assert list(api.iter_messages(queue, group="g")) == []
    assert api.put_settings(queue, group_concurrency=5).group_concurrency == 5
    assert api.get_settings(queue).group_concurrency == 5
    assert api.put_settings(queue).group_concurrency == 1
    for refused in ({"group": ""}, {"group": "x" * 201}):
        with pytest.raises(Invalid):
            api.offer(queue, "k", 1, **refused)
    with pytest.raises(Invalid):
        api.put_settings(queue, group_concurrency=1001)


def test_expiry_on_every_offer_and_every_message(api, queue):
    friday_noon = FRIDAY + timedelta(hours=3)
    api.offer(queue, "absolute", 1, scheduled_at=FRIDAY, expires_at=friday_noon)
    api.offer(queue, "relative", 2, scheduled_at=FRIDAY, ttl=timedelta(minutes=30))
    made = api.create(queue, 3, scheduled_at=FRIDAY, ttl=90).key
    api.offer_many(
        queue,
        [
            Offer("batch-ttl", 4, scheduled_at=FRIDAY, ttl=1.5),
            Offer("batch-at", 5, scheduled_at=FRIDAY, expires_at=friday_noon),
            Offer("batch-none", 6, scheduled_at=FRIDAY),
        ],
    )
    expiries = {message.key: message.expires_at for message in api.iter_messages(queue)}
    assert expiries == {
        "absolute": friday_noon,
        "relative": FRIDAY + timedelta(minutes=30),  # after it is due
        made: FRIDAY + timedelta(seconds=90),
        "batch-ttl": FRIDAY + timedelta(seconds=1.5),
        "batch-at": friday_noon,
        "batch-none": None,
    }
    assert api.get(queue, "absolute").expires_at.tzinfo is UTC
    assert not any(message.expired for message in api.iter_messages(queue))

    # The same expiry again is ignored; a changed one, or none, is an update.
    again = api.offer(queue, "absolute", 1, scheduled_at=FRIDAY, expires_at=friday_noon)
    assert again.outcome == "ignored"
    assert api.update(queue, "absolute", 1, scheduled_at=FRIDAY, ttl=60).outcome == "updated"
    assert api.get(queue, "absolute").expires_at == FRIDAY + timedelta(minutes=1)
    assert api.update(queue, "absolute", 1, scheduled_at=FRIDAY).outcome == "updated"
    assert api.get(queue, "absolute").expires_at is None

    # Both ways at once, or a time without a zone: refused before anything is sent.
    for refused in (
        {"expires_at": friday_noon, "ttl": 60},
        {"expires_at": datetime(2031, 11, 28, 12, 0)},
    ):
        with pytest.raises(ValueError):
            api.offer(queue, "refused", 1, **refused)
        with pytest.raises(ValueError):
            api.offer_many(queue, [Offer("refused", 1, **refused)])
    with pytest.raises(NotFound):
        api.get(queue, "refused")
    with pytest.raises(Invalid):
        api.offer(queue, "k", 1, ttl=0)

    # A cron entry's ttl: each run expires that long after it is due.
    entry = api.install_cron(queue, "tick", 1, every=600, ttl=timedelta(minutes=5))
    assert entry.ttl == 300 and api.get_cron(queue, "tick").ttl == 300
    runs = [message for message in api.iter_messages(queue) if message.key.startswith("tick/")]
    assert runs and all(
        run.expires_at == run.scheduled_at_initially + timedelta(minutes=5) for run in runs
    )
    assert api.install_cron(queue, "tick", 1, every=600, ttl=300).outcome == "unchanged"


def test_an_expired_message_leaves_its_queue_for_the_dead_letters_or_for_good(api, queue):
    dead_letters = api.put_settings(queue, max_deliveries=5).dead_letter_queue
    api.offer(queue, "held", {"n": 1}, ttl=0.5)
    api.offer(queue, "waiting", {"n": 2}, ttl=0.5)
    api.offer(queue, "lasting", {"n": 3}, ttl=3600)
    lease = api.poll(queue, max=1, lease=60)
    (held,) = lease.messages
    assert held.key == "held" and held.expires_at is not None and held.expired is False
    assert held.expires_at - held.scheduled_at_initially == timedelta(seconds=0.5)

    # Within about a second of its expiry, leased or not, whether or not anyone polls: a
    # poll waiting on the dead-letter queue wakes as they arrive.
    arrived: list[str] = []
    deadline = time.monotonic() + 10
    while len(arrived) < 2 and time.monotonic() < deadline:
        arrived += api.poll(dead_letters, max=10, wait=5, lease=1).keys
    assert sorted(arrived) == ["held", "waiting"]
    dead = {message.key: message for message in api.iter_messages(dead_letters)}
    assert sorted(dead) == ["held", "waiting"]
    assert dead["held"].expired and dead["held"].expires_at is None
    assert dead["held"].dead_lettered_from == queue and dead["held"].payload == {"n": 1}
    assert [message.key for message in api.iter_messages(queue)] == ["lasting"]
    assert api.ack_keys(queue, lease.lock_id, ["held"]).missing == ["held"]
    expired = api.history(queue, outcome="expired").items
    assert sorted(entry.key for entry in expired) == ["held", "waiting"]
    assert {entry.outcome for entry in expired} == {"expired"}

    # Without a dead-letter queue (a queue with no settings): removed. Due a second ago and
    # expired since: a poll waiting on its queue sweeps it, then finds nothing.
    alone = f"{queue}-alone"
    api.offer(alone, "gone", 1, scheduled_at=datetime.now(UTC) - timedelta(seconds=1), ttl=0.5)
    assert api.poll(alone, wait=1).keys == []
    assert [entry.outcome for entry in api.history(alone, key="gone").items] == ["expired"]
    with pytest.raises(NotFound):
        api.get(alone, "gone")
