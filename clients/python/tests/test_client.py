"""Every /v1 operation through `Client` and `AsyncClient` against a real server: typed
results, aware times, errors as exceptions with the problem's fields."""

from __future__ import annotations

import dataclasses
import time
from datetime import UTC, datetime, timedelta, timezone

import pytest

from hourglass_client import (
    Ack,
    AckResult,
    CronEntry,
    DeliveredMessage,
    Invalid,
    Lease,
    Message,
    NotFound,
    Offer,
    OfferResult,
    PushTarget,
    QueueSettings,
    QueueStats,
    Rate,
    RetryPolicy,
    TooLarge,
)

FRIDAY = datetime(2031, 11, 28, 9, 0, tzinfo=timezone(timedelta(hours=2)))


def test_offer_update_ignore_get_and_delete(api, queue):
    created = api.offer(queue, "user-42/friday", {"text": "hi"}, scheduled_at=FRIDAY)
    assert created == OfferResult(queue, "user-42/friday", "created", FRIDAY.astimezone(UTC))
    assert created.scheduled_at.tzinfo is UTC

    again = api.offer(queue, "user-42/friday", {"text": "hi"}, scheduled_at=FRIDAY)
    assert again.outcome == "ignored"
    kept = api.offer(queue, "user-42/friday", {"text": "new"}, delay=60, if_exists="ignore")
    assert kept.outcome == "ignored" and kept.scheduled_at == FRIDAY  # the stored time
    updated = api.update(queue, "user-42/friday", {"text": "new"}, delay=timedelta(hours=1))
    assert updated.outcome == "updated"

    message = api.get(queue, "user-42/friday")
    assert isinstance(message, Message)
    assert (message.queue, message.key, message.payload) == (
        queue,
        "user-42/friday",
        {"text": "new"},
    )
    assert message.state == "scheduled" and message.deliveries == 0
    assert timedelta(minutes=59) < message.scheduled_at - datetime.now(UTC) <= timedelta(hours=1)
    assert message.scheduled_at == message.scheduled_at_initially

    api.delete(queue, "user-42/friday")
    with pytest.raises(NotFound) as missing:
        api.get(queue, "user-42/friday")
    assert missing.value.status == 404
    assert missing.value.type == "urn:hourglass:problem:message-not-found"
    assert missing.value.title == "Not Found" and missing.value.detail
    with pytest.raises(NotFound):
        api.delete(queue, "user-42/friday")
    with pytest.raises(NotFound):
        api.update(queue, "user-42/friday", 1)


def test_create_makes_up_a_key(api, queue):
    result = api.create(queue, [1, 2, 3])
    assert result.outcome == "created" and result.key
    assert api.get(queue, result.key).payload == [1, 2, 3]


@pytest.mark.parametrize(
    "key", ["a/b/c", "100%", "a?b#c", "with space", "..", ".", "ü/€", "%2F", "a//b"]
)
def test_keys_reach_the_service_as_they_are(hourglass, queue, key):
    hourglass.offer(queue, key, key)
    assert hourglass.get(queue, key).payload == key
    assert [message.key for message in hourglass.iter_messages(queue)] == [key]
    hourglass.delete(queue, key)


def test_rejections_raise_with_the_problem(api, queue):
    with pytest.raises(Invalid) as invalid:
        api.offer("not a queue!", "k", 1)
    assert invalid.value.status == 422 and invalid.value.problem["errors"]
    with pytest.raises(TooLarge) as too_large:
        api.offer(queue, "k", "x" * 300_000)
    assert too_large.value.status == 413
    assert api.stats(queue).messages == 0  # nothing written
    with pytest.raises(ValueError, match="time zone"):
        api.offer(queue, "k", 1, scheduled_at=datetime(2030, 1, 1))
    with pytest.raises(ValueError, match="not both"):
        api.offer(queue, "k", 1, scheduled_at=FRIDAY, delay=5)


def test_offer_many_sends_batches_of_a_thousand(api, queue):
    offers = [Offer(f"k{index:05}", index, scheduled_at=FRIDAY) for index in range(2500)]
    result = api.offer_many(queue, offers)
    assert (result.created, result.updated, result.ignored) == (2500, 0, 0)
    assert [outcome.key for outcome in result.results] == [offer.key for offer in offers]
    again = api.offer_many(queue, offers[:3] + [Offer("k00003", "changed", delay=60)])
    assert (again.created, again.updated, again.ignored) == (0, 1, 3)
    assert api.stats(queue).messages == 2500


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


def test_poll_extend_ack_and_release(api, queue):
    for key in "abc":
        api.offer(queue, key, key)
    lease = api.poll(queue, max=2, lease=30)
    assert isinstance(lease, Lease) and lease.lock_id and len(lease) == 2
    first = lease.messages[0]
    assert isinstance(first, DeliveredMessage)
    assert first.lock_id == lease.lock_id and first.delivery == "first" and not first.redelivery
    assert first.state == "leased" and first.deliveries == 1
    assert (
        timedelta(seconds=25) < first.lease_expires_at - datetime.now(UTC) <= timedelta(seconds=30)
    )
    # Built from the answer without its __init__ (models.py: _built), yet the same thing.
    assert dataclasses.replace(first) == first and hash(dataclasses.replace(first)) == hash(first)
    assert first.scheduled_at == first.lease_expires_at and first.created_at.tzinfo is UTC
    with pytest.raises(dataclasses.FrozenInstanceError):
        first.key = "other"  # type: ignore[misc]

    expires = api.extend(queue, lease.lock_id, timedelta(minutes=10))
    assert timedelta(minutes=9) < expires - datetime.now(UTC) <= timedelta(minutes=10)
    assert api.release(queue, lease.lock_id, delay=0) is True
    assert api.release(queue, lease.lock_id) is False  # holds nothing any more
    with pytest.raises(NotFound):
        api.extend(queue, lease.lock_id, 30)

    again = api.poll(queue, max=10)
    assert sorted(again.keys) == ["a", "b", "c"]
    assert {m.key: m.delivery for m in again.messages} == {
        "a": "redelivery",
        "b": "redelivery",
        "c": "first",
    }
    assert api.ack(queue, again.lock_id) is True
    assert api.ack(queue, again.lock_id) is False  # acknowledged already: no error
    assert api.stats(queue).messages == 0


def test_a_long_poll_waits_past_the_clients_timeout(service, queue):
    from hourglass_client import Client

    with Client(service.url, timeout=0.5) as client:
        began = time.monotonic()
        lease = client.poll(queue, wait=1.5)
        assert lease == Lease(None, []) and time.monotonic() - began >= 1.4


def test_queues_stats_and_purge(api, queue):
    api.offer(queue, "now", 1)
    api.offer(queue, "later", 2, delay=3600)
    stats = api.stats(queue)
    assert isinstance(stats, QueueStats)
    assert (stats.messages, stats.ready, stats.scheduled, stats.leased) == (2, 1, 1, 0)
    assert stats.oldest_ready_at is not None and stats.next_scheduled_at is not None
    assert queue in {entry.queue for entry in api.queues()}
    assert api.purge(queue) == 2
    assert api.stats(queue) == QueueStats(queue, 0, 0, 0, 0, None, None)


def test_pause_and_resume_a_queue_and_a_cron_entry(api, queue):
    api.offer(queue, "k", 1)
    paused = api.pause(queue)
    assert paused.paused and paused.paused_at is not None and paused.ready == 1
    assert api.pause(queue).paused_at == paused.paused_at  # again: no error
    assert api.poll(queue).lock_id is None  # a paused queue delivers nothing
    assert api.stats(queue).paused
    assert not api.resume(queue).paused
    assert [message.key for message in api.poll(queue).messages] == ["k"]

    api.install_cron(queue, "tick", 1, every=timedelta(minutes=10))
    entry = api.pause_cron(queue, "tick")
    assert entry.paused and entry.next_runs == []
    resumed = api.resume_cron(queue, "tick")
    assert not resumed.paused and resumed.next_runs
    with pytest.raises(NotFound):
        api.pause_cron(queue, "nothing")


def test_settings_dead_letters_and_redrive(api, queue):
    settings = api.put_settings(queue, max_deliveries=1, default_lease=timedelta(minutes=2))
    assert isinstance(settings, QueueSettings)
    assert (settings.default_lease, settings.max_deliveries) == (120, 1)
    assert settings.dead_letter_queue == f"{queue}.dead" and settings.updated_at is not None
    assert api.get_settings(queue) == settings

    api.offer(queue, "poison", {"bad": True})
    first = api.poll(queue)
    assert api.release(queue, first.lock_id, delay=0)
    assert api.poll(queue).lock_id is None  # its second delivery would pass the limit
    dead = api.get(f"{queue}.dead", "poison")
    assert dead.dead_lettered_from == queue

    moved = api.redrive(f"{queue}.dead")
    assert (moved.moved, moved.skipped, moved.forbidden) == (1, 0, 0)
    assert api.get(queue, "poison").deliveries == 0
    reset = api.put_settings(queue)
    assert reset.max_deliveries is None and reset.default_lease != 120


def test_cron_install_list_get_and_uninstall(api, queue):
    installed = api.install_cron(
        queue, "nightly/sales", {"report": "sales"}, daily=["02:00"], timezone="Europe/Bucharest"
    )
    assert installed.outcome == "created" and len(installed.next_runs) == 5
    assert all(run.tzinfo is UTC and run.hour in (0, 23) for run in installed.next_runs)
    assert (
        api.install_cron(
            queue,
            "nightly/sales",
            {"report": "sales"},
            daily=["02:00"],
            timezone="Europe/Bucharest",
        ).outcome
        == "unchanged"
    )
    api.install_cron(queue, "every-minute", None, every=timedelta(minutes=1))

    entries = api.cron_entries(queue)
    assert sorted(entry.name for entry in entries) == ["every-minute", "nightly/sales"]
    assert all(isinstance(entry, CronEntry) for entry in entries)
    after = datetime(2027, 3, 26, 12, tzinfo=UTC)
    entry = api.get_cron(queue, "nightly/sales", after=after, count=3)
    assert entry.daily == ["02:00"] and entry.config_hash == installed.config_hash
    assert [run.isoformat() for run in entry.next_runs] == [
        "2027-03-27T00:00:00+00:00",
        "2027-03-28T00:00:00+00:00",
        "2027-03-28T23:00:00+00:00",  # summer time (UTC+3) from 28 March, 04:00
    ]

    api.uninstall_cron(queue, "nightly/sales")
    with pytest.raises(NotFound):
        api.get_cron(queue, "nightly/sales")
    with pytest.raises(NotFound):
        api.uninstall_cron(queue, "nightly/sales")


def test_lists_and_history_page_by_page(api, queue):
    api.offer_many(queue, [Offer(f"m{index:03}", index) for index in range(120)])
    page = api.list_messages(queue, limit=50)
    assert len(page.items) == 50 and page.next is not None
    walked = [message.key for message in api.iter_messages(queue, page_size=50)]
    assert sorted(walked) == [f"m{index:03}" for index in range(120)]
    assert len(set(walked)) == 120
    by_prefix = api.list_messages(queue, prefix="m11", state="ready")
    assert [message.key for message in by_prefix.items] == [f"m11{d}" for d in range(10)]

    lease = api.poll(queue, max=120)
    assert api.ack(queue, lease.lock_id)
    history = list(api.iter_history(queue, page_size=40))
    assert sorted(entry.key for entry in history) == sorted(walked)
    assert {(entry.outcome, entry.deliveries) for entry in history} == {("acknowledged", 1)}
    one = api.history(queue, key="m007", outcome="acknowledged")
    assert [entry.key for entry in one.items] == ["m007"] and one.next is None
    assert one.items[0].finished_at >= one.items[0].first_delivered_at


def test_acknowledge_and_release_some_keys_of_a_lock(api, queue):
    for key in "abc":
        api.offer(queue, key, key)
    lease = api.poll(queue, max=3)
    acknowledged = api.ack_keys(queue, lease.lock_id, ["a", "never"])
    assert (acknowledged.acknowledged, acknowledged.missing) == (["a"], ["never"])
    released = api.release_keys(queue, lease.lock_id, ["b", "a"], delay=timedelta(hours=1))
    assert (released.released, released.missing) == (["b"], ["a"])
    assert api.get(queue, "b").state == "scheduled"
    assert api.get(queue, "c").state == "leased"  # the others stay leased
    assert api.ack(queue, lease.lock_id) is True
    assert api.stats(queue).messages == 1


def test_a_poll_acknowledges_an_earlier_lock_on_its_way(api, queue):
    for key in "abc":
        api.offer(queue, key, key)
    first = api.poll(queue, max=2)
    assert first.acknowledgement is None  # it carried no ack
    by_key = api.poll(queue, ack=Ack(first.lock_id, keys=["a", "x"]))
    assert by_key.acknowledgement == AckResult(["a"], ["x"])
    assert by_key.keys == ["c"]
    whole = api.poll(queue, ack=first.lock_id)  # a lock id: all it still holds
    assert whole.acknowledgement == AckResult(["b"], [])
    assert whole.lock_id is None and whole.messages == []
    # Nothing held any more: nothing acknowledged, and no error.
    assert api.poll(queue, ack=Ack(first.lock_id)).acknowledgement == AckResult([], [])
    assert api.stats(queue).messages == 1  # "c", leased
    assert [entry.key for entry in api.history(queue).items] == ["b", "a"]


def test_a_queues_retry_setting(api, queue):
    policy = RetryPolicy(initial_delay=10, max_delay=3600, multiplier=3, jitter=0.25)
    assert api.put_settings(queue, retry=policy).retry == policy
    assert api.get_settings(queue).retry == policy
    assert api.put_settings(queue).retry is None


def test_a_queues_limits(api, queue):
    settings = api.put_settings(queue, max_leased=5, rate=Rate(limit=20, period=1.5))
    assert (settings.max_leased, settings.rate) == (5, Rate(20, 1.5))
    assert api.get_settings(queue).rate == Rate(20, 1.5)
    with pytest.raises(Invalid):
        api.put_settings(queue, max_leased=0)
    cleared = api.put_settings(queue)
    assert (cleared.max_leased, cleared.rate) == (None, None)


def test_a_queues_push_target(api, queue):
    target = PushTarget("http://127.0.0.1:9/hooks/reminders", timeout=5, concurrency=2)
    assert api.put_settings(queue, push=target).push == target
    assert api.get_settings(queue).push == target
    assert api.put_settings(queue, push=PushTarget("http://127.0.0.1:9/hooks/x")).push == (
        PushTarget("http://127.0.0.1:9/hooks/x", timeout=10.0, concurrency=4)
    )
    with pytest.raises(Invalid) as refused:
        api.put_settings(queue, push=PushTarget("http://127.0.0.1:9/elsewhere"))
    assert "HOURGLASS_PUSH_ALLOWED" in str(refused.value)
    assert api.put_settings(queue).push is None
