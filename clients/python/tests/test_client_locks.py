"""Polls and their locks through both clients: extend, acknowledge, release, whole or by key."""

from __future__ import annotations

import dataclasses
import time
from datetime import UTC, datetime, timedelta

import pytest

from hourglass_client import Ack, AckResult, DeliveredMessage, Lease, NotFound


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
