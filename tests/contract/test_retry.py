"""A queue's `retry` setting (decision 14), on every database: a release without a delay makes
each message due after its own delay, growing with its deliveries, capped, spread by
jitter drawn from a random source the tests fix."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient

from app.domain.formats import parse_timestamp
from app.main import create_app
from tests.conftest import START_MS, FakeClock
from tests.support.helpers import at, keys_of, poll, put, settings_rows

LEASE = 30


class FixedRandom:
    """The service's random source, drawing `value` until a test changes it."""

    def __init__(self, value: float = 0.5) -> None:
        self.value = value

    def random(self) -> float:
        return self.value


@pytest.fixture
def chance() -> FixedRandom:
    return FixedRandom()


@pytest.fixture
def client(settings, clock, chance) -> Iterator[TestClient]:
    """The app with the fake clock and a fixed random source."""
    with TestClient(create_app(settings, clock=clock, random_source=chance)) as client:
        yield client


def configure(client, queue: str = "q", **fields) -> dict:
    response = client.put(f"/v1/queues/{queue}/settings", json=fields)
    assert response.status_code == 200, response.text
    return response.json()


def release(client, lock_id: str, queue: str = "q", **body):
    response = client.post(f"/v1/queues/{queue}/locks/{lock_id}/release", json=body)
    assert response.status_code in (200, 204), response.text
    return response


def due_at(client, key: str, queue: str = "q") -> int:
    """When the message is due, epoch ms, as the API shows it."""
    message = client.get(f"/v1/queues/{queue}/messages/{key}").json()
    assert message["state"] in ("scheduled", "ready"), message
    return parse_timestamp(message["scheduled_at"])


def deliver_and_release(client, clock: FakeClock, key: str = "k", **body) -> int:
    """Wait until `key` is due, poll it (it alone), release it after a second of work; how
    long after the release it is due again (ms)."""
    clock.now = max(clock.now, due_at(client, key))
    polled = poll(client, "q", lease=LEASE)
    assert keys_of(polled) == [key]
    clock.advance(1)
    released_at = clock.now
    release(client, polled["lock_id"], **body)
    return due_at(client, key) - released_at


def test_each_delivery_released_without_a_delay_waits_longer_up_to_the_cap(client, clock):
    configure(client, retry={"initial_delay": 2, "max_delay": 30, "multiplier": 3})
    put(client, "q", "k", 1)
    delays = []
    for delivery in range(1, 6):
        delays.append(deliver_and_release(client, clock))
        message = client.get("/v1/queues/q/messages/k").json()
        assert message["deliveries"] == delivery
        # Not a millisecond early.
        clock.now = due_at(client, "k") - 1
        assert poll(client, "q")["messages"] == []
    # min(30, 2 × 3^(n−1)) for n = 1..5
    assert delays == [2_000, 6_000, 18_000, 30_000, 30_000]
    clock.now = due_at(client, "k")
    (again,) = poll(client, "q")["messages"]
    assert (again["deliveries"], again["delivery"]) == (6, "redelivery")


def test_jitter_stays_within_its_bounds(client, clock, chance):
    configure(client, retry={"initial_delay": 10, "max_delay": 40, "multiplier": 2, "jitter": 0.5})
    put(client, "q", "k", 1)
    delays = []
    # Deliveries 1-4: base delays 10, 20, 40 and 40 s (capped before the jitter).
    for draw in (0.0, 1.0, 0.0, 1.0):
        chance.value = draw
        delays.append(deliver_and_release(client, clock))
    assert delays == [5_000, 30_000, 20_000, 60_000]


def test_a_middle_draw_is_the_delay_itself(client, clock, chance):
    configure(client, retry={"initial_delay": 10, "max_delay": 40, "jitter": 0.3})
    put(client, "q", "k", 1)
    chance.value = 0.5
    assert [deliver_and_release(client, clock) for _ in range(3)] == [10_000, 20_000, 40_000]


def test_a_cap_under_the_first_delay_caps_every_delay(client, clock):
    """`min(max_delay, …)` (decision 14) from the first delivery on: taken, not refused."""
    body = configure(client, retry={"initial_delay": 10, "max_delay": 5})
    assert body["retry"]["initial_delay"] == 10.0 and body["retry"]["max_delay"] == 5.0
    put(client, "q", "k", 1)
    assert [deliver_and_release(client, clock) for _ in range(3)] == [5_000] * 3


def test_an_explicit_delay_wins_and_so_does_zero(client, clock):
    configure(client, retry={"initial_delay": 60, "max_delay": 600})
    put(client, "q", "k", 1)
    assert deliver_and_release(client, clock, delay=5) == 5_000
    assert deliver_and_release(client, clock, delay=0) == 0
    assert deliver_and_release(client, clock) == 240_000  # the third delivery: 60 s × 2²


def test_without_a_retry_setting_a_release_is_due_at_once(client, clock):
    put(client, "q", "k", 1)
    assert deliver_and_release(client, clock) == 0
    configure(client, retry={"initial_delay": 10, "max_delay": 10})
    assert deliver_and_release(client, clock) == 10_000
    configure(client, retry=None)
    assert deliver_and_release(client, clock) == 0
    configure(client, max_deliveries=10)  # a PUT without `retry` removes it too
    assert deliver_and_release(client, clock) == 0


def test_a_whole_lock_release_gives_each_message_its_own_time(client, clock, chance):
    configure(client, retry={"initial_delay": 1, "max_delay": 100, "multiplier": 10})
    put(client, "q", "old", 1)
    for _ in range(2):  # "old" delivered twice, its leases run out
        poll(client, "q", lease=LEASE)
        clock.advance(LEASE)
    put(client, "q", "new", 2)
    put(client, "q", "newer", 3)
    polled = poll(client, "q", max=3, lease=LEASE)
    assert sorted((m["key"], m["deliveries"]) for m in polled["messages"]) == [
        ("new", 1),
        ("newer", 1),
        ("old", 3),
    ]
    clock.advance(1)
    response = release(client, polled["lock_id"])
    assert response.status_code == 204
    assert {key: due_at(client, key) - clock.now for key in ("old", "new", "newer")} == {
        "old": 100_000,  # 1 s × 10², capped at 100 s
        "new": 1_000,
        "newer": 1_000,
    }
    assert release(client, polled["lock_id"], keys=["old"]).json() == {
        "released": [],
        "missing": ["old"],
    }


def test_a_whole_lock_release_with_jitter_draws_for_each_message(client, clock, chance):
    configure(client, retry={"initial_delay": 10, "max_delay": 10, "jitter": 1})
    for key in ("a", "b", "c"):
        put(client, "q", key, 1)
    draws = iter([0.0, 0.25, 1.0])
    chance.random = lambda: next(draws)  # type: ignore[method-assign]
    lock = poll(client, "q", max=3, lease=LEASE)["lock_id"]
    clock.advance(1)
    release(client, lock)
    delays = sorted(due_at(client, key) - clock.now for key in ("a", "b", "c"))
    assert delays == [0, 5_000, 20_000]


def test_a_keyed_release_follows_the_retry_setting_too(client, clock):
    configure(client, retry={"initial_delay": 3, "max_delay": 100, "multiplier": 2})
    put(client, "q", "a", 1)
    put(client, "q", "b", 1)
    clock.advance(1)
    lock = poll(client, "q", max=2, lease=LEASE)["lock_id"]
    assert release(client, lock, keys=["a"]).json() == {"released": ["a"], "missing": []}
    assert due_at(client, "a") == clock.now + 3_000
    assert release(client, lock, keys=["b"], delay=0).json() == {"released": ["b"], "missing": []}
    assert due_at(client, "b") == clock.now
    assert keys_of(poll(client, "q")) == ["b"]


def test_a_release_in_the_millisecond_a_message_came_due_still_reads_as_a_redelivery(client, clock):
    configure(client, retry={"initial_delay": 5, "max_delay": 5})
    put(client, "q", "k", 1)
    lock = poll(client, "q", lease=LEASE)["lock_id"]
    release(client, lock, keys=["k"], delay=0)  # due when first asked for: moved 1 ms earlier
    assert due_at(client, "k") == START_MS - 1
    (again,) = poll(client, "q")["messages"]
    assert again["delivery"] == "redelivery"


def test_the_retry_setting_reads_back(client, clock):
    body = configure(client, retry={"initial_delay": 0.5, "max_delay": 3600, "multiplier": 1.5})
    assert body["retry"] == {
        "initial_delay": 0.5,
        "max_delay": 3600.0,
        "multiplier": 1.5,
        "jitter": 0.0,
    }
    assert client.get("/v1/queues/q/settings").json() == body
    assert body["updated_at"] == at(START_MS)
    exact = configure(client, retry={"initial_delay": 1.1, "max_delay": 1.1, "jitter": 0.1})
    assert exact["retry"] == {
        "initial_delay": 1.1,
        "max_delay": 1.1,
        "multiplier": 2.0,
        "jitter": 0.1,
    }
    assert client.get("/v1/queues/q/settings").json()["retry"] == exact["retry"]


def test_a_queue_without_settings_has_no_retry(client):
    assert client.get("/v1/queues/q/settings").json()["retry"] is None


@pytest.mark.parametrize(
    "retry",
    [
        {"initial_delay": 0, "max_delay": 1},
        {"initial_delay": -1, "max_delay": 1},
        {"initial_delay": 1, "max_delay": 1, "multiplier": 0.5},
        {"initial_delay": 1, "max_delay": 1, "multiplier": 101},
        {"initial_delay": 1, "max_delay": 1, "jitter": -0.1},
        {"initial_delay": 1, "max_delay": 1, "jitter": 1.5},
        {"initial_delay": 1, "max_delay": 4_000_000_000},
        {"initial_delay": "1", "max_delay": 2},
        {"max_delay": 2},
        {"initial_delay": 1},
        {"initial_delay": 1, "max_delay": 2, "factor": 2},
        [1, 2, 2, 0],
    ],
)
def test_bad_retry_settings_are_422_and_store_nothing(client, database, retry):
    response = client.put("/v1/queues/q/settings", json={"retry": retry})
    assert response.status_code == 422, response.text
    assert response.headers["content-type"] == "application/problem+json"
    assert settings_rows(database.url) == []


def test_a_bad_retry_setting_leaves_the_old_one(client, database):
    configure(client, retry={"initial_delay": 1, "max_delay": 2})
    before = settings_rows(database.url)
    response = client.put(
        "/v1/queues/q/settings", json={"retry": {"initial_delay": 3, "max_delay": 2, "jitter": 2}}
    )
    assert response.status_code == 422
    assert settings_rows(database.url) == before
