"""/metrics after real traffic: the counters, the lateness histogram, the queue gauges, the routes,
and which queues have series of their own."""

from __future__ import annotations

from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families

from app.main import create_app
from app.metrics import labels as labels_module
from app.metrics.gauges import QUEUE_GAUGES_SECONDS
from app.metrics.labels import IDLE_QUEUE_SECONDS, OTHER_QUEUES
from tests.support.helpers import poll, put


def _samples(client) -> dict[tuple[str, frozenset], float]:
    text = client.get("/metrics").text
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def _value(samples, metric: str, /, **labels: str) -> float:
    return samples.get((metric, frozenset(labels.items())), 0.0)


def test_metrics_after_offers_polls_and_acknowledgements(client, clock):
    assert put(client, "q", "user/42/a", 1).status_code == 201
    assert put(client, "q", "user/42/b", 2, delay=60).status_code == 201
    assert put(client, "q", "user/42/a", 3).status_code == 200  # updated
    batch = {"messages": [{"key": "c", "payload": 4}, {"key": "c", "payload": 4}]}
    assert client.post("/v1/queues/q/batch", json=batch).status_code == 200  # created, ignored
    clock.advance(2.5)  # "a" and "c" are 2.5 s late when polled
    polled = poll(client, "q", max=10)
    assert len(polled["messages"]) == 2
    assert client.delete(f"/v1/queues/q/locks/{polled['lock_id']}").status_code == 204
    assert poll(client, "q")["messages"] == []  # "b" is not due yet

    samples = _samples(client)
    assert _value(samples, "hourglass_messages_offered_total", queue="q", outcome="created") == 3
    assert _value(samples, "hourglass_messages_offered_total", queue="q", outcome="updated") == 1
    assert _value(samples, "hourglass_messages_offered_total", queue="q", outcome="ignored") == 1
    assert _value(samples, "hourglass_messages_delivered_total", queue="q", delivery="first") == 2
    assert _value(samples, "hourglass_messages_acknowledged_total", queue="q") == 2
    assert _value(samples, "hourglass_polls_total", queue="q", result="messages") == 1
    assert _value(samples, "hourglass_polls_total", queue="q", result="empty") == 1
    assert _value(samples, "hourglass_delivery_lateness_seconds_count", queue="q") == 2
    assert _value(samples, "hourglass_delivery_lateness_seconds_sum", queue="q") == 5.0
    assert _value(samples, "hourglass_queue_messages", queue="q", state="scheduled") == 1
    assert _value(samples, "hourglass_queue_messages", queue="q", state="ready") == 0
    assert _value(samples, "hourglass_queue_oldest_ready_age_seconds", queue="q") == 0

    routes = {
        dict(labels).get("route") for (name, labels) in samples if name.startswith("hourglass_http")
    }
    assert "/v1/queues/{queue}/messages/{key:path}" in routes
    assert not any("user/42" in (route or "") for route in routes)  # keys never become labels


def test_acknowledgements_and_releases_by_key_count_like_whole_locks(client, clock):
    for key in ("a", "b", "c", "d", "e"):
        put(client, "q", key, 1)
    lock = poll(client, "q", max=5)["lock_id"]
    acknowledged = client.post(f"/v1/queues/q/locks/{lock}/ack", json={"keys": ["a", "b", "x"]})
    assert acknowledged.json() == {"acknowledged": ["a", "b"], "missing": ["x"]}
    released = client.post(f"/v1/queues/q/locks/{lock}/release", json={"keys": ["c", "a"]})
    assert released.json() == {"released": ["c"], "missing": ["a"]}
    assert client.post(f"/v1/queues/q/locks/{lock}/release").status_code == 204  # "d", "e"
    assert client.post(f"/v1/queues/q/locks/{lock}/ack", json={"keys": ["d"]}).status_code == 200
    again = poll(client, "q", max=5)["lock_id"]
    assert client.delete(f"/v1/queues/q/locks/{again}").status_code == 204  # "c", "d", "e"

    samples = _samples(client)
    assert _value(samples, "hourglass_messages_acknowledged_total", queue="q") == 5
    assert _value(samples, "hourglass_messages_released_total", queue="q") == 3


def test_the_oldest_ready_message_age(client, clock):
    put(client, "q", "k", 1)
    clock.advance(30)
    samples = _samples(client)
    assert _value(samples, "hourglass_queue_oldest_ready_age_seconds", queue="q") == 30
    assert _value(samples, "hourglass_queue_messages", queue="q", state="ready") == 1


def _queues_named(samples) -> set[str]:
    """Every queue label value in the samples."""
    return {dict(labels)["queue"] for (_, labels) in samples if "queue" in dict(labels)}


def _scrape_after(client, clock, seconds: float):
    """The samples of a scrape `seconds` later (at least QUEUE_GAUGES_SECONDS: the
    scrape reads the database again)."""
    clock.advance(max(seconds, QUEUE_GAUGES_SECONDS))
    return _samples(client)


def _install_cron(client, queue: str, name: str = "tick"):
    return client.put(f"/v1/queues/{queue}/cron/{name}", json={"payload": 1, "every": 3600})


def _cron_entries_named(samples, queue: str) -> set[str]:
    """The name labels of hourglass_cron_runs_installed_total in `queue`."""
    return {
        dict(labels)["name"]
        for (name, labels) in samples
        if name == "hourglass_cron_runs_installed_total" and dict(labels)["queue"] == queue
    }


def test_empty_polls_of_queues_that_hold_nothing_count_under_other(client):
    for index in range(3):
        assert poll(client, f"made-up-{index}")["messages"] == []
    assert poll(client, "made-up-3", wait=0.01)["messages"] == []  # a long poll, too

    samples = _samples(client)
    assert _value(samples, "hourglass_polls_total", queue=OTHER_QUEUES, result="empty") == 4
    assert _queues_named(samples) == {OTHER_QUEUES}


def test_queues_holding_messages_settings_or_cron_entries_have_their_own_series(
    client, clock, settings
):
    # Written through another replica: this one learns of them from the database.
    with TestClient(create_app(settings, clock=clock)) as replica:
        assert put(replica, "held", "k", 1, delay=3600).status_code == 201
        configured = replica.put("/v1/queues/configured/settings", json={"max_deliveries": 3})
        assert configured.status_code == 200, configured.text
        assert _install_cron(replica, "timed").status_code == 201
    for queue in ("held", "configured", "timed"):
        assert poll(client, queue)["messages"] == []  # before this replica has read them
    assert (
        _value(_samples(client), "hourglass_polls_total", queue=OTHER_QUEUES, result="empty") == 3
    )

    for queue in ("held", "configured", "timed"):
        assert poll(client, queue)["messages"] == []
    samples = _scrape_after(client, clock, QUEUE_GAUGES_SECONDS)
    for queue in ("held", "configured", "timed"):
        assert _value(samples, "hourglass_polls_total", queue=queue, result="empty") == 1, queue
    assert _value(samples, "hourglass_polls_total", queue=OTHER_QUEUES, result="empty") == 3


def test_a_queue_that_holds_nothing_loses_its_series_once_idle(client, clock):
    assert put(client, "drained", "k", 1).status_code == 201
    polled = poll(client, "drained")
    assert client.delete(f"/v1/queues/drained/locks/{polled['lock_id']}").status_code == 204
    assert put(client, "kept", "k", 1, delay=24 * 3600).status_code == 201
    assert _install_cron(client, "timed").status_code == 201
    assert client.delete("/v1/queues/timed/cron/tick").status_code == 204

    samples = _scrape_after(client, clock, 200)
    assert _value(samples, "hourglass_messages_acknowledged_total", queue="drained") == 1
    assert _value(samples, "hourglass_cron_runs_installed_total", queue="timed", name="tick") > 0
    assert poll(client, "drained")["messages"] == []  # an empty poll: still in use
    samples = _scrape_after(client, clock, IDLE_QUEUE_SECONDS - 201)
    assert _queues_named(samples) == {"drained", "kept", "timed"}
    assert _value(samples, "hourglass_polls_total", queue="drained", result="empty") == 1

    # Idle that long since its last event, a queue that holds nothing loses its series.
    samples = _scrape_after(client, clock, 1)
    assert _queues_named(samples) == {"drained", "kept"}
    samples = _scrape_after(client, clock, 200)
    assert _queues_named(samples) == {"kept"}  # it still holds its message
    assert _value(samples, "hourglass_messages_offered_total", queue="kept", outcome="created") == 1

    assert poll(client, "drained")["messages"] == []
    assert (
        _value(_samples(client), "hourglass_polls_total", queue=OTHER_QUEUES, result="empty") == 1
    )
    assert put(client, "drained", "k", 2).status_code == 201  # used again: counted from 0
    samples = _samples(client)
    assert (
        _value(samples, "hourglass_messages_offered_total", queue="drained", outcome="created") == 1
    )
    assert _value(samples, "hourglass_messages_acknowledged_total", queue="drained") == 0


def test_queues_written_to_but_not_yet_seen_holding_are_capped(client, clock, monkeypatch):
    monkeypatch.setattr(labels_module, "MAX_QUEUES_NOT_HOLDING", 2)
    for queue in ("a", "b", "c"):
        assert put(client, queue, "k", 1, delay=3600).status_code == 201
    samples = _samples(client)  # this scrape reads a, b and c holding messages
    assert _value(samples, "hourglass_messages_offered_total", queue="a", outcome="created") == 1
    assert _value(samples, "hourglass_messages_offered_total", queue="b", outcome="created") == 1
    other = _value(
        samples, "hourglass_messages_offered_total", queue=OTHER_QUEUES, outcome="created"
    )
    assert other == 1  # c's offer, before any read of the database
    assert (
        "hourglass_messages_offered_total",
        frozenset({("queue", "c"), ("outcome", "created")}),
    ) not in samples

    # Known to hold messages, a, b and c no longer count against the cap.
    for queue in ("c", "d", "e"):
        assert put(client, queue, "another", 1, delay=3600).status_code == 201
    samples = _samples(client)
    for queue in ("c", "d", "e"):
        assert (
            _value(samples, "hourglass_messages_offered_total", queue=queue, outcome="created") == 1
        )


def test_an_uninstalled_cron_entry_loses_its_series_once_idle_whichever_replica_uninstalled_it(
    client, clock, settings
):
    assert put(client, "timed", "k", 1, delay=24 * 3600).status_code == 201  # the queue holds
    for name in ("tick", "kept"):
        assert _install_cron(client, "timed", name).status_code == 201
    with TestClient(create_app(settings, clock=clock)) as replica:
        assert replica.delete("/v1/queues/timed/cron/tick").status_code == 204

    samples = _scrape_after(client, clock, IDLE_QUEUE_SECONDS - QUEUE_GAUGES_SECONDS)
    assert _cron_entries_named(samples, "timed") == {"tick", "kept"}  # not idle yet
    samples = _scrape_after(client, clock, QUEUE_GAUGES_SECONDS)
    assert _cron_entries_named(samples, "timed") == {"kept"}  # still stored: kept
    assert _value(samples, "hourglass_messages_offered_total", queue="timed", outcome="created")

    assert _install_cron(client, "timed", "tick").status_code == 201  # again: counted from 0
    samples = _samples(client)
    assert _cron_entries_named(samples, "timed") == {"tick", "kept"}


def test_cron_entry_names_not_yet_seen_stored_are_capped(client, clock, monkeypatch):
    monkeypatch.setattr(labels_module, "MAX_CRON_ENTRIES_NOT_STORED", 2)
    assert put(client, "timed", "k", 1, delay=24 * 3600).status_code == 201
    for name in ("a", "b", "c", "d"):
        assert _install_cron(client, "timed", name).status_code == 201
    samples = _samples(client)  # this scrape reads a, b, c and d stored
    assert _cron_entries_named(samples, "timed") == {"a", "b", OTHER_QUEUES}
    assert (
        _value(samples, "hourglass_cron_runs_installed_total", queue="timed", name=OTHER_QUEUES)
        == _value(samples, "hourglass_cron_runs_installed_total", queue="timed", name="a") * 2
    )

    # Known to be stored, a and b no longer count against the cap; the overflow does.
    for name in ("e", "f"):
        assert _install_cron(client, "timed", name).status_code == 201
    assert _cron_entries_named(_samples(client), "timed") == {"a", "b", "e", OTHER_QUEUES}

    # Uninstalled, every name goes once idle, the overflow's too; the queue keeps its own.
    for name in ("a", "b", "c", "d", "e", "f"):
        assert client.delete(f"/v1/queues/timed/cron/{name}").status_code == 204
    samples = _scrape_after(client, clock, IDLE_QUEUE_SECONDS)
    assert _cron_entries_named(samples, "timed") == set()
    assert _queues_named(samples) == {"timed"}
