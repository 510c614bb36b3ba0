"""A poll's answer is bounded in bytes (HOURGLASS_MAX_POLL_BYTES), on every database.

A poll takes due messages oldest first while their payloads, with
POLL_MESSAGE_ENVELOPE_BYTES each and their trace contexts by their stored length, fit
in the bound; the first always, whatever its size. What it leaves is not touched: not
leased, not counted as delivered, due when it was, and delivered (as a first delivery)
by the next poll.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient

from app.domain.errors import StorageUnavailable
from app.domain.messages import POLL_MESSAGE_ENVELOPE_BYTES, Offer, QueueSettings
from app.main import create_app
from app.storage import claims
from app.storage.runner import Runner
from tests.conftest import START_MS
from tests.support.helpers import keys_of, poll, put, stored_rows

# Payloads of 30,002 bytes encoded ("x" * 30,000 as a JSON string): four fill the
# bound exactly, and an answer of four is streamed (past 64 KiB).
TEXT = "x" * 30_000
COUNTED = len(TEXT) + 2 + POLL_MESSAGE_ENVELOPE_BYTES
MAX_POLL_BYTES = 4 * COUNTED


@pytest.fixture
def bounded(clean_database, clock) -> Iterator[TestClient]:
    settings = clean_database.settings(max_poll_bytes=MAX_POLL_BYTES)
    with TestClient(create_app(settings, clock=clock)) as client:
        yield client


def _rows_by_key(url: str) -> dict[str, dict]:
    return {row["pKey"]: row for row in stored_rows(url)}


def test_a_poll_stops_adding_messages_before_its_answer_passes_the_bound(
    bounded, clean_database, clock
):
    keys = [f"k{index}" for index in range(10)]
    for index, key in enumerate(keys):
        put(bounded, "q", key, TEXT, delay=index)  # due one second apart, in key order
    clock.advance(60)
    before = _rows_by_key(clean_database.url)

    response = bounded.post("/v1/queues/q/poll", json={"max": 1000, "lease": 30})
    assert response.status_code == 200
    assert len(response.content) <= MAX_POLL_BYTES
    first = response.json()
    assert keys_of(first) == keys[:4]
    assert [message["payload"] for message in first["messages"]] == [TEXT] * 4

    after = _rows_by_key(clean_database.url)
    for key in keys[:4]:
        assert after[key]["lockUuid"] == first["lock_id"]
        assert after[key]["deliveries"] == 1
    for key in keys[4:]:  # left alone: not leased, not counted, due when it was
        assert after[key] == before[key]
    assert bounded.get("/v1/queues/q").json()["leased"] == 4

    second = poll(bounded, "q", max=1000)
    assert keys_of(second) == keys[4:8]
    assert {message["delivery"] for message in second["messages"]} == {"first"}
    assert {message["deliveries"] for message in second["messages"]} == {1}
    assert keys_of(poll(bounded, "q", max=1000)) == keys[8:]
    assert poll(bounded, "q", max=1000)["messages"] == []


def test_a_message_larger_than_the_bound_is_delivered_alone(bounded, clock):
    put(bounded, "q", "small-1", "a", delay=1)
    put(bounded, "q", "small-2", "b", delay=2)
    put(bounded, "q", "large", "x" * MAX_POLL_BYTES, delay=3)
    put(bounded, "q", "small-3", "c", delay=4)
    clock.advance(60)

    assert keys_of(poll(bounded, "q", max=1000)) == ["small-1", "small-2"]
    response = bounded.post("/v1/queues/q/poll", json={"max": 1000})
    assert response.status_code == 200
    assert len(response.content) > MAX_POLL_BYTES
    (large,) = response.json()["messages"]
    assert (large["key"], large["payload"]) == ("large", "x" * MAX_POLL_BYTES)
    assert keys_of(poll(bounded, "q", max=1000)) == ["small-3"]


def test_max_still_bounds_a_poll_within_the_bytes(bounded, clock):
    for index in range(3):
        put(bounded, "q", f"k{index}", index, delay=index)
    clock.advance(60)
    assert keys_of(poll(bounded, "q", max=2)) == ["k0", "k1"]
    assert keys_of(poll(bounded, "q", max=2)) == ["k2"]


# A trace context with a tracestate that JSON escapes in part, as stored (app/domain/trace.py).
TRACE = {
    "traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
    "tracestate": 'k=say "hi" \\o/',
}
STORED_TRACE = TRACE["traceparent"] + "\n" + TRACE["tracestate"]


@pytest.mark.parametrize(("slack", "taken"), [(0, 4), (-1, 3)])
def test_a_traced_message_counts_its_trace_context_by_its_stored_length(
    clean_database, clock, slack, taken
):
    # Four traced messages of TEXT fill the bound exactly, each counted with its trace
    # context (claims.message_bytes); a byte less and the fourth waits for the next poll.
    counted = claims.message_bytes(len(TEXT) + 2, STORED_TRACE)
    assert counted > COUNTED
    settings = clean_database.settings(max_poll_bytes=4 * counted + slack)
    with TestClient(create_app(settings, clock=clock)) as client:
        for index in range(5):
            offered = client.put(
                f"/v1/queues/q/messages/k{index}",
                json={"payload": TEXT, "delay": index},
                headers=TRACE,
            )
            assert offered.status_code == 201, offered.text
        clock.advance(60)
        response = client.post("/v1/queues/q/poll", json={"max": 1000})
        assert response.status_code == 200
        assert len(response.content) <= 4 * counted + slack
        polled = response.json()
        assert keys_of(polled) == [f"k{index}" for index in range(taken)]
        assert {message["trace"]["tracestate"] for message in polled["messages"]} == {
            TRACE["tracestate"]
        }
        assert keys_of(poll(client, "q", max=1000)) == [f"k{index}" for index in range(taken, 5)]


def test_a_message_to_dead_letter_takes_no_room_in_the_answer(store):
    # "spent" has had its one delivery and goes to the dead-letter queue; it comes
    # first and is large, yet the poll still delivers "next" in the same look.
    limited = QueueSettings("q", max_deliveries=1)
    payload = b'"' + b"x" * 10_000 + b'"'
    store.messages.offer_many(
        "q", [Offer("spent", payload, START_MS), Offer("next", payload, START_MS + 1_500)], START_MS
    )

    def poll_store(now: int):
        return store.leases.poll(
            "q", 10, str(uuid.uuid4()), now + 1_000, now, limited, max_bytes=15_000
        )

    assert [d.message.key for d in poll_store(START_MS).deliveries] == ["spent"]
    claim = poll_store(START_MS + 2_000)  # "spent" (due again at +1 s) before "next"
    assert [d.message.key for d in claim.deliveries] == ["next"]
    assert claim.dead_lettered == 1
    assert store.messages.get("q.dead", "spent") is not None


def _statements_of_a_poll(store, queue: str, limit: int) -> tuple[int, list[bytes]]:
    statements = []
    store.listen_statements(lambda _statement: statements.append(1))
    claim = store.leases.poll(
        queue, limit, str(uuid.uuid4()), START_MS + 1_000, START_MS, max_bytes=16 * 2**20
    )
    return len(statements), [delivery.message.payload for delivery in claim.deliveries]


def test_polls_of_small_messages_read_their_payloads_in_the_claim(store):
    # One statement on PostgreSQL, a select and an update elsewhere (where an empty
    # poll makes the select only), however many messages: payloads are read after
    # the claim only when they are large.
    empty, _ = _statements_of_a_poll(store, "empty", 1000)
    claim = empty + (0 if store.dialect.claims_in_one_statement else 1)
    small = [Offer(f"k{index:04d}", b'{"i":%d}' % index, START_MS) for index in range(1000)]
    largest = Offer("largest", b'"%s"' % (b"x" * 262_142), START_MS)  # the default limit
    store.messages.offer_many("small", small, START_MS)
    store.messages.offer_many("largest", [largest], START_MS)
    for queue, limit, offers in (("small", 1000, small), ("largest", 1, [largest])):
        statements, payloads = _statements_of_a_poll(store, queue, limit)
        assert statements == claim, queue
        assert payloads == [offer.payload for offer in offers]

    large = [Offer(f"k{index}", b'"%s"' % (b"%d" % index * 50_000), START_MS) for index in range(8)]
    store.messages.offer_many("large", large, START_MS)
    statements, payloads = _statements_of_a_poll(store, "large", 8)
    assert statements > claim  # read after the claim, a few at a time
    assert payloads == [offer.payload for offer in large]


def test_a_message_updated_before_its_payload_is_read_is_left_out(store, monkeypatch):
    # Payloads larger than one read are read after the claim commits: a message its
    # producer updated in between is no longer the lock's, and the poll leaves it out.
    large = b'"%s"' % (b"x" * 300_000)
    store.messages.offer_many(
        "q", [Offer("a", large, START_MS - 2), Offer("b", large, START_MS - 1)], START_MS
    )
    read_payloads = claims.read_payloads

    async def updated_first(*arguments):
        await store.storage.messages.offer("q", Offer("a", b'"new"', START_MS - 2), START_MS)
        return await read_payloads(*arguments)

    monkeypatch.setattr(claims, "read_payloads", updated_first)
    claim = store.leases.poll("q", 10, str(uuid.uuid4()), START_MS + 1_000, START_MS)
    monkeypatch.undo()
    assert [delivery.message.key for delivery in claim.deliveries] == ["b"]
    assert [delivery.message.payload for delivery in claim.deliveries] == [large]
    (again,) = store.leases.poll("q", 10, str(uuid.uuid4()), START_MS + 1_000, START_MS).deliveries
    assert (again.message.key, again.message.payload, again.redelivery) == ("a", b'"new"', False)


async def _database_gone(*arguments):
    raise StorageUnavailable("the database is unavailable; retry shortly")


def test_a_poll_whose_payload_read_fails_gives_back_what_it_took(
    client, clean_database, clock, monkeypatch
):
    # A message may be delivered twice: one the failed poll counted would then be
    # dead-lettered by the next poll instead of delivered.
    limited = client.put("/v1/queues/q/settings", json={"max_deliveries": 2})
    assert limited.status_code == 200, limited.text
    put(client, "q", "again", "a", delay=0)
    assert keys_of(poll(client, "q", lease=1)) == ["again"]  # delivered once, lease lost
    large = "x" * 200_000  # two are more than one read: read after the claim on every database
    put(client, "q", "small", "s", delay=1)
    put(client, "q", "large-1", large, delay=2)
    put(client, "q", "large-2", large, delay=3)
    clock.advance(10)
    before = _rows_by_key(clean_database.url)

    monkeypatch.setattr(claims, "read_payloads", _database_gone)
    response = client.post("/v1/queues/q/poll", json={"max": 10})
    assert response.status_code == 503, response.text
    assert "retry-after" in response.headers
    assert _rows_by_key(clean_database.url) == before  # due, held, counted as before
    monkeypatch.undo()

    polled = poll(client, "q", max=10)
    assert [
        (message["key"], message["delivery"], message["deliveries"])
        for message in polled["messages"]
    ] == [
        ("again", "redelivery", 2),
        ("small", "first", 1),
        ("large-1", "first", 1),
        ("large-2", "first", 1),
    ]
    assert client.get("/v1/queues/q.dead").json()["messages"] == 0


def test_a_poll_that_can_neither_read_nor_give_back_answers_503(client, clock, monkeypatch):
    # The window decision 3 leaves: the rows stay leased under a lock nobody knows
    # until the lease ends, then come back as redeliveries.
    large = "x" * 200_000
    for key in ("large-1", "large-2"):
        put(client, "q", key, large)
    monkeypatch.setattr(claims, "read_payloads", _database_gone)
    transaction = Runner.transaction

    async def giving_back_fails(runner, work):
        if work.__name__ == "give_back":
            raise StorageUnavailable("the database is unavailable; retry shortly")
        return await transaction(runner, work)

    monkeypatch.setattr(Runner, "transaction", giving_back_fails)
    response = client.post("/v1/queues/q/poll", json={"max": 10, "lease": 30})
    assert response.status_code == 503, response.text
    assert "retry-after" in response.headers
    monkeypatch.undo()

    assert poll(client, "q", max=10)["messages"] == []  # leased
    clock.advance(30)
    polled = poll(client, "q", max=10)
    assert [(message["key"], message["delivery"]) for message in polled["messages"]] == [
        ("large-1", "redelivery"),
        ("large-2", "redelivery"),
    ]
