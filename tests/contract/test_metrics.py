"""/metrics after real traffic: the counters, the lateness histogram, the queue gauges, the routes."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

from tests.helpers import poll, put


def _samples(client) -> dict[tuple[str, frozenset], float]:
    text = client.get("/metrics").text
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def _value(samples, name: str, **labels: str) -> float:
    return samples.get((name, frozenset(labels.items())), 0.0)


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


def test_the_oldest_ready_message_age(client, clock):
    put(client, "q", "k", 1)
    clock.advance(30)
    samples = _samples(client)
    assert _value(samples, "hourglass_queue_oldest_ready_age_seconds", queue="q") == 30
    assert _value(samples, "hourglass_queue_messages", queue="q", state="ready") == 1
