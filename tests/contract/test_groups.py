"""Message groups (docs/guide/flow-control.md), on every database: at most `group_concurrency` of
one group leased at once, in due order within a group, priority only across groups, a
group never holding back another group or the ungrouped messages. Many workers on two
replicas: tests/concurrency/test_group_replicas.py."""

from __future__ import annotations

import pytest

from tests.conftest import START_MS
from tests.support.helpers import at, keys_of, poll, put, stored_rows

pytestmark = pytest.mark.usefixtures("clock")


def settle(client) -> None:
    """One pass of the groups' keeper (it also runs by itself, every 0.1 s)."""
    client.portal.call(client.app.state.service.keeper.run_pass)


def configure(client, queue: str = "q", **settings) -> dict:
    response = client.put(f"/v1/queues/{queue}/settings", json=settings)
    assert response.status_code == 200, response.text
    return response.json()


def offer(client, key: str, group: str | None, at_ms: int, **fields) -> None:
    response = put(client, "q", key, key, group=group, scheduled_at=at(at_ms), **fields)
    assert response.status_code in (200, 201), response.text


def ack(client, polled: dict) -> None:
    assert client.delete(f"/v1/queues/q/locks/{polled['lock_id']}").status_code == 204
    settle(client)


def test_one_of_a_group_at_a_time_and_no_group_holds_back_another(client):
    offer(client, "a1", "a", START_MS)
    offer(client, "a2", "a", START_MS)
    offer(client, "b1", "b", START_MS)
    offer(client, "plain", None, START_MS)
    first = poll(client, "q", max=10)
    assert sorted(keys_of(first)) == ["a1", "b1", "plain"]
    assert poll(client, "q", max=10)["messages"] == []  # a2 waits for a1
    ack(client, first)
    assert keys_of(poll(client, "q", max=10)) == ["a2"]


def test_within_a_group_due_order_and_priority_only_across_groups(client):
    offer(client, "late-urgent", "a", START_MS, priority=9)
    offer(client, "early", "a", START_MS - 1000)
    offer(client, "other", "b", START_MS, priority=5)
    polled = poll(client, "q", max=10)
    # Group a's next is its earliest due, whatever the priorities; across groups, priority.
    assert keys_of(polled) == ["other", "early"]
    ack(client, polled)
    assert keys_of(poll(client, "q", max=10)) == ["late-urgent"]


def test_group_concurrency_bounds_each_group(client):
    configure(client, group_concurrency=2)
    for index in range(5):
        offer(client, f"a{index}", "a", START_MS - 10 + index)
    polled = poll(client, "q", max=10)
    assert keys_of(polled) == ["a0", "a1"]
    ack(client, polled)
    assert keys_of(poll(client, "q", max=10)) == ["a2", "a3"]


def test_a_lapsed_message_keeps_its_place(client, clock):
    offer(client, "a1", "a", START_MS - 2)
    offer(client, "a2", "a", START_MS - 1)
    assert keys_of(poll(client, "q", lease=10)) == ["a1"]
    clock.advance(11)  # its lease ran out: it is the group's earliest due still
    settle(client)
    again = poll(client, "q", max=10)
    assert keys_of(again) == ["a1"]
    assert again["messages"][0]["delivery"] == "redelivery"


def test_a_released_message_keeps_its_place_only_while_it_is_the_earliest_due(client):
    offer(client, "a1", "a", START_MS - 2)
    offer(client, "a2", "a", START_MS - 1)
    polled = poll(client, "q")
    lock = polled["lock_id"]
    assert client.post(f"/v1/queues/q/locks/{lock}/release").status_code == 204
    settle(client)
    polled = poll(client, "q", max=10)
    assert keys_of(polled) == ["a1"]  # due now, before a2
    lock = polled["lock_id"]
    released = client.post(f"/v1/queues/q/locks/{lock}/release", json={"delay": 60})
    assert released.status_code == 204
    settle(client)
    assert keys_of(poll(client, "q", max=10)) == ["a2"]  # a1 is now due after it


@pytest.mark.parametrize("how", ["delete", "dead-letter"])
def test_a_message_that_leaves_frees_its_place(client, clock, how):
    offer(client, "a1", "a", START_MS - 2)
    offer(client, "a2", "a", START_MS - 1)
    delivered = []
    if how == "delete":
        assert client.delete("/v1/queues/q/messages/a1").status_code == 204
    else:
        configure(client, max_deliveries=1)
        assert keys_of(poll(client, "q", lease=1)) == ["a1"]
        clock.advance(2)
        # a1 goes to q.dead; its place is free at once, so the same poll may already
        # take a2 (when the groups' keeper has moved it up in between) or not.
        delivered = keys_of(poll(client, "q"))
        assert delivered in ([], ["a2"])
        dead = client.get("/v1/queues/q.dead/messages/a1").json()
        assert dead["group"] == "a"
    settle(client)
    assert delivered + keys_of(poll(client, "q", max=10)) == ["a2"]


def test_an_earlier_message_offered_later_goes_first(client):
    offer(client, "a2", "a", START_MS)
    offer(client, "a1", "a", START_MS - 1000)
    assert keys_of(poll(client, "q", max=10)) == ["a1"]


def test_the_group_is_part_of_the_message(client):
    created = put(client, "q", "k", 1, group="g")
    assert created.status_code == 201
    message = client.get("/v1/queues/q/messages/k").json()
    assert (message["group"], message["priority"]) == ("g", 0)
    assert put(client, "q", "k", 1, group="g").json()["outcome"] == "ignored"
    assert put(client, "q", "k", 1, group="h").json()["outcome"] == "updated"
    assert put(client, "q", "k", 1, group=None).json()["outcome"] == "updated"
    assert client.get("/v1/queues/q/messages/k").json()["group"] is None
    assert put(client, "q", "k", 1).json()["outcome"] == "ignored"  # none is null
    assert put(client, "q", "k", 1, group="g", priority=7).status_code == 200
    polled = poll(client, "q")["messages"][0]
    assert (polled["group"], polled["priority"]) == ("g", 7)


def test_every_way_in_takes_a_group(client):
    generated = client.post("/v1/queues/q/messages", json={"payload": 1, "group": "a"})
    assert generated.status_code == 201
    batch = client.post(
        "/v1/queues/q/batch",
        json={"messages": [{"key": f"b{i}", "payload": i, "group": "a"} for i in range(3)]},
    )
    assert batch.status_code == 200, batch.text
    update = client.post("/v1/queues/q/messages/b2", json={"payload": 2, "group": "c"})
    assert update.json()["outcome"] == "updated"
    polled = poll(client, "q", max=10)
    assert sorted(keys_of(polled)) == sorted([generated.json()["key"], "b2"])


def test_waiting_messages_are_stored_outside_the_polls_ranges(client, settings):
    offer(client, "a1", "a", START_MS, priority=3)
    offer(client, "a2", "a", START_MS + 1, priority=3)
    stored = {row["pKey"]: row["priority"] for row in stored_rows(settings.database_url)}
    assert stored == {"a1": 3, "a2": -4}


def test_lowering_the_concurrency_revokes_no_lease(client):
    configure(client, group_concurrency=3)
    for index in range(4):
        offer(client, f"a{index}", "a", START_MS - 10 + index)
    held = poll(client, "q", max=2)
    assert keys_of(held) == ["a0", "a1"]
    configure(client, group_concurrency=1)
    settle(client)
    assert poll(client, "q", max=10)["messages"] == []  # two leased already
    ack(client, held)
    assert keys_of(poll(client, "q", max=10)) == ["a2"]


@pytest.mark.parametrize("group", ["", "x" * 201, "a\nb"])
def test_a_group_has_a_keys_rules(client, group):
    response = put(client, "q", "k", 1, group=group)
    assert response.status_code == 422
    assert client.get("/v1/queues/q/messages/k").status_code == 404


@pytest.mark.parametrize("concurrency", [0, 1001, 1.5, "2", True])
def test_group_concurrency_is_1_to_1000(client, concurrency):
    response = client.put("/v1/queues/q/settings", json={"group_concurrency": concurrency})
    assert response.status_code == 422
    assert client.get("/v1/queues/q/settings").json()["group_concurrency"] == 1


def test_lists_filter_by_group(client, clock):
    for index in range(3):
        offer(client, f"a{index}", "a", START_MS - 10 + index)
        offer(client, f"b{index}", "b", START_MS - 10 + index)
    offer(client, "plain", None, START_MS)
    clock.advance(1)  # a walk lists what was there when it began
    page = client.get("/v1/queues/q/messages", params={"group": "a", "limit": 2}).json()
    assert [message["key"] for message in page["messages"]] == ["a0", "a1"]
    rest = client.get(
        "/v1/queues/q/messages", params={"group": "a", "limit": 2, "cursor": page["next"]}
    ).json()
    assert [message["key"] for message in rest["messages"]] == ["a2"]
    by_key = client.get("/v1/queues/q/messages", params={"group": "b", "prefix": "b"}).json()
    assert [message["key"] for message in by_key["messages"]] == ["b0", "b1", "b2"]
    assert {m["group"] for m in by_key["messages"]} == {"b"}


def test_a_cron_entry_s_runs_carry_its_group(client):
    entry = {"every": 60, "payload": {"report": 1}, "group": "reports"}
    installed = client.put("/v1/queues/q/cron/nightly", json=entry)
    assert installed.status_code == 201, installed.text
    assert installed.json()["group"] == "reports"
    runs = client.get("/v1/queues/q/messages").json()["messages"]
    assert runs and {run["group"] for run in runs} == {"reports"}
    # A changed group is a changed configuration: its runs are installed again.
    changed = client.put("/v1/queues/q/cron/nightly", json={**entry, "group": "other"})
    assert changed.json()["outcome"] == "changed"
    assert changed.json()["config_hash"] != installed.json()["config_hash"]
    runs = client.get("/v1/queues/q/messages").json()["messages"]
    assert {run["group"] for run in runs} == {"other"}


def test_a_poll_waiting_behind_a_group_does_not_look_again_and_again(client):
    offer(client, "a1", "a", START_MS - 2)
    offer(client, "a2", "a", START_MS - 1)  # due, but waits behind a1
    assert keys_of(poll(client, "q")) == ["a1"]
    sent: list[str] = []
    client.app.state.service.storage.listen_statements(sent.append)
    assert poll(client, "q", wait=0.5)["messages"] == []
    # Looking every 10 ms, as for due messages other polls hold, would be ~50 looks (a
    # claim and a read of the next due time each). The keeper's idle looks at its marks
    # (every 0.1 s) are not the poll's.
    looks = [sql for sql in sent if "delayed_queue" in sql and "group_marks" not in sql]
    assert len(looks) < 10, sent


def test_groups_and_a_queue_limit_hold_together(client):
    configure(client, group_concurrency=1, max_leased=2)
    for group in ("a", "b", "c"):
        offer(client, f"{group}1", group, START_MS - 2)
        offer(client, f"{group}2", group, START_MS - 1)
    first = poll(client, "q", max=10)
    assert sorted(keys_of(first)) == ["a1", "b1"]  # two at once in all, one per group
    assert {message["group"] for message in first["messages"]} == {"a", "b"}
    ack(client, first)
    # The earliest due of the fronts (a2, b2, c1), two again.
    assert keys_of(poll(client, "q", max=10)) == ["c1", "a2"]
