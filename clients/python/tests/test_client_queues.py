"""Queues through both clients: stats, purge, pause and resume, each of their settings."""

from __future__ import annotations

from datetime import timedelta

import pytest

from hourglass_client import (
    Invalid,
    NotFound,
    PushTarget,
    QueueSettings,
    QueueStats,
    Rate,
    RetryPolicy,
)


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
