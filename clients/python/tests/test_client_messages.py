"""Messages through `Client` and `AsyncClient`: offers, updates, reads, deletes, lists, history."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest

from hourglass_client import Invalid, Message, NotFound, Offer, OfferResult, TooLarge

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
