"""The delivery history: one row per message that leaves a queue, on every database."""

from __future__ import annotations

from fastapi.testclient import TestClient
from sqlalchemy import create_engine, insert

from app.main import create_app
from app.storage.tables import delivery_history
from tests.conftest import START_MS
from tests.support.helpers import history_rows, poll, put

DAY = 24 * 3600


def test_an_acknowledged_message_leaves_one_row_with_its_deliveries(client, clock, database):
    put(client, "q", "k", 1, delay=10)
    clock.advance(12)
    first = poll(client, "q", lease=30)
    clock.advance(1)
    assert client.post(f"/v1/queues/q/locks/{first['lock_id']}/release").status_code == 204
    clock.advance(2)
    second = poll(client, "q", lease=30)
    assert second["messages"][0]["deliveries"] == 2
    clock.advance(3)
    assert client.delete(f"/v1/queues/q/locks/{second['lock_id']}").status_code == 204
    assert history_rows(database.url) == [
        {
            "queue": "q",
            "key": "k",
            "scheduledAt": START_MS + 10_000,
            "createdAt": START_MS,
            "firstDeliveredAt": START_MS + 12_000,
            "lastDeliveredAt": START_MS + 15_000,
            "deliveries": 2,
            "outcome": "acknowledged",
            "finishedAt": START_MS + 18_000,
        }
    ]


def test_an_acknowledgement_records_every_message_of_its_lock_once(client, database):
    for index in range(5):
        put(client, "q", f"k{index}", index)
    polled = poll(client, "q", max=5)
    assert client.delete(f"/v1/queues/q/locks/{polled['lock_id']}").status_code == 204
    assert client.delete(f"/v1/queues/q/locks/{polled['lock_id']}").status_code == 404
    rows = history_rows(database.url)
    assert sorted(row["key"] for row in rows) == [f"k{index}" for index in range(5)]
    assert {row["outcome"] for row in rows} == {"acknowledged"}


def test_deleted_purged_and_withdrawn_messages_are_dropped(client, clock, database):
    put(client, "q", "deleted", 1)
    assert client.delete("/v1/queues/q/messages/deleted").status_code == 204
    put(client, "q", "purged-1", 1)
    put(client, "q", "purged-2", 1, delay=60)
    assert client.delete("/v1/queues/q?confirm=q").json() == {"deleted": 2}
    install = client.put("/v1/queues/q/cron/tick", json={"payload": 1, "every": 600})
    runs = len(install.json()["next_runs"])  # installed up to the lookahead, at least these
    assert client.delete("/v1/queues/q/cron/tick").status_code == 204
    rows = history_rows(database.url)
    assert rows[0]["key"] == "deleted"
    # One purge records its messages in the order its DELETE returned them: any order.
    assert sorted(row["key"] for row in rows[1:3]) == ["purged-1", "purged-2"]
    assert len(rows) - 3 >= min(runs, 3)
    assert all(row["key"].startswith("tick/") for row in rows[3:])
    assert {(row["outcome"], row["deliveries"], row["finishedAt"]) for row in rows} == {
        ("dropped", 0, START_MS)
    }
    assert rows[0]["firstDeliveredAt"] is None


def test_an_update_is_not_an_end(client, database):
    put(client, "q", "k", 1)
    put(client, "q", "k", 2)
    assert history_rows(database.url) == []


def test_recording_can_be_switched_off(clean_database, clock):
    database = clean_database
    with TestClient(create_app(database.settings(history=False), clock=clock)) as client:
        client.put("/v1/queues/q/settings", json={"max_deliveries": 1})
        for key in ("acked", "deleted", "dead"):
            put(client, "q", key, 1)
        polled = poll(client, "q", max=2)  # acked, deleted
        assert client.delete(f"/v1/queues/q/locks/{polled['lock_id']}").status_code == 204
        put(client, "q", "deleted", 1)
        assert client.delete("/v1/queues/q/messages/deleted").status_code == 204
        poll(client, "q", lease=1)
        clock.advance(1)
        assert poll(client, "q")["messages"] == []  # "dead" moves on
        assert client.get("/v1/queues/q.dead/messages/dead").status_code == 200
    assert history_rows(database.url) == []


def test_the_service_prunes_rows_older_than_the_retention(clean_database, clock):
    database = clean_database
    settings = database.settings(history_retention=7 * DAY)
    with TestClient(create_app(settings, clock=clock)) as client:
        put(client, "q", "old", 1)
        assert client.delete("/v1/queues/q/messages/old").status_code == 204
        clock.advance(7 * DAY - 1)
        put(client, "q", "new", 1)
        assert client.delete("/v1/queues/q/messages/new").status_code == 204
        pruner = client.app.state.history_pruner
        clock.advance(1)
        assert client.portal.call(pruner.run_pass) == 0  # "old" is 7 days old: kept that long
        clock.advance(0.001)
        assert client.portal.call(pruner.run_pass) == 1
        assert [row["key"] for row in history_rows(database.url)] == ["new"]
        assert pruner.failures == 0


def test_pruning_goes_in_batches_and_stops_at_the_cutoff(store, database):
    # A purge or a large acknowledgement finishes many rows in one millisecond:
    # 1,500 rows here, which a batch must still split.
    finished = [1_000] * 1_500 + [1_001 + index for index in range(1_000)]
    rows = [
        {
            "queue": "q",
            "key": f"k{index}",
            "scheduledAt": 0,
            "createdAt": 0,
            "deliveries": 1,
            "outcome": "acknowledged",
            "finishedAt": finished_at,
        }
        for index, finished_at in enumerate(finished)
    ]
    engine = create_engine(database.url)
    with engine.begin() as connection:
        connection.execute(insert(delivery_history), rows)
    engine.dispose()
    cutoff = 1_501  # rows 0-1,999 finished before it
    pruned = [store.history.prune(cutoff, 1_000) for _ in range(3)]
    assert pruned == [1_000, 1_000, 0]
    remaining = history_rows(database.url)
    assert len(remaining) == 500
    assert min(row["finishedAt"] for row in remaining) == cutoff
