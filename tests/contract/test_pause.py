"""Pausing and resuming a queue or a cron entry (docs/guide/flow-control.md), on every database: a paused
queue delivers nothing and takes everything else; a paused cron entry installs nothing.
Two replicas and push: tests/concurrency/test_pause_replicas.py."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

from fastapi.testclient import TestClient

from app.main import create_app
from app.queue import polling as polling_module
from app.queue import settings as settings_module
from app.queue.settings import PAUSE_CACHE_SECONDS
from tests.conftest import START_MS
from tests.contract.test_long_poll import RETURNED_EARLY, WAIT, WaitingPolls
from tests.support.helpers import at, history_rows, keys_of, poll, put

EMPTY_POLL = {"lock_id": None, "messages": []}


def pause(client, queue: str = "q") -> dict:
    response = client.post(f"/v1/queues/{queue}/pause")
    assert response.status_code == 200, response.text
    return response.json()


def resume(client, queue: str = "q") -> dict:
    response = client.post(f"/v1/queues/{queue}/resume")
    assert response.status_code == 200, response.text
    return response.json()


def test_pause_and_resume_answer_the_stats_and_twice_is_no_error(client, clock):
    put(client, "q", "k", 1)
    paused = pause(client)
    assert (paused["paused"], paused["paused_at"]) == (True, at(START_MS))
    assert (paused["messages"], paused["ready"]) == (1, 1)
    clock.advance(10)
    assert pause(client)["paused_at"] == at(START_MS)  # since the first pause
    assert client.get("/v1/queues/q").json()["paused"] is True
    resumed = resume(client)
    assert (resumed["paused"], resumed["paused_at"]) == (False, None)
    assert resume(client)["paused"] is False


def test_a_paused_queue_delivers_nothing_and_takes_everything_else(client, clock):
    put(client, "q", "held", 1)
    held = poll(client, "q", lease=60)
    for key in ("a", "b", "c", "gone"):
        put(client, "q", key, key)
    pause(client)
    assert poll(client, "q", max=10) == EMPTY_POLL
    assert poll(client, "q", wait=0.2) == EMPTY_POLL  # after its wait
    # Offers, updates, deletes, acknowledgements, extends, releases and lists go on.
    assert put(client, "q", "d", "d").status_code == 201
    assert client.post("/v1/queues/q/messages/a", json={"payload": "a2"}).status_code == 200
    assert client.delete("/v1/queues/q/messages/gone").status_code == 204
    lock = held["lock_id"]
    assert client.patch(f"/v1/queues/q/locks/{lock}", json={"lease": 90}).status_code == 200
    assert client.post(f"/v1/queues/q/locks/{lock}/release").status_code == 204
    assert poll(client, "q") == EMPTY_POLL  # released: due again, still not delivered
    listed = client.get("/v1/queues/q/messages").json()
    assert sorted(message["key"] for message in listed["messages"]) == ["a", "b", "c", "d", "held"]
    resume(client)
    assert sorted(keys_of(poll(client, "q", max=10))) == ["a", "b", "c", "d", "held"]


def test_an_acknowledgement_of_a_paused_queue_goes_through(client):
    put(client, "q", "k", 1)
    lock = poll(client, "q")["lock_id"]
    pause(client)
    assert client.delete(f"/v1/queues/q/locks/{lock}").status_code == 204
    history = client.get("/v1/queues/q/history").json()["entries"]
    assert [entry["outcome"] for entry in history] == ["acknowledged"]


def test_a_pause_holds_back_only_its_own_queue(client):
    put(client, "q", "k", 1)
    put(client, "other", "k", 1)
    pause(client)
    assert poll(client, "q") == EMPTY_POLL
    assert keys_of(poll(client, "other")) == ["k"]


def test_any_queue_name_may_be_paused_and_is_listed_while_paused(client):
    assert pause(client, "nothing-yet")["messages"] == 0
    listed = {queue["queue"]: queue for queue in client.get("/v1/queues").json()["queues"]}
    assert listed["nothing-yet"]["paused"] is True
    resume(client, "nothing-yet")
    assert "nothing-yet" not in {q["queue"] for q in client.get("/v1/queues").json()["queues"]}


def test_a_pause_is_stored_a_restart_keeps_it(client, clock, settings):
    put(client, "q", "k", 1)
    pause(client)
    with TestClient(create_app(settings, clock=clock)) as restarted:
        assert restarted.get("/v1/queues/q").json()["paused"] is True
        assert poll(restarted, "q") == EMPTY_POLL
        resume(restarted)
    clock.advance(PAUSE_CACHE_SECONDS)  # the first one's read of the pause expires
    assert keys_of(poll(client, "q")) == ["k"]


def test_a_pause_through_another_replica_applies_within_the_pause_cache_time(
    client, clock, settings
):
    for key in ("a", "b"):
        put(client, "q", key, 1)
    assert keys_of(poll(client, "q")) == ["a"]  # this replica has read that it delivers
    with TestClient(create_app(settings, clock=clock)) as replica:
        pause(replica)
    clock.advance(PAUSE_CACHE_SECONDS)
    assert poll(client, "q") == EMPTY_POLL


def test_a_waiting_poll_of_a_paused_queue_wakes_when_it_resumes(clean_database, clock, monkeypatch):
    # The pause read again only after the poll's whole wait: only the resume's wake-up
    # can end it early.
    for module in (settings_module, polling_module):  # the cache's, and the waiting poll's
        monkeypatch.setattr(module, "PAUSE_CACHE_SECONDS", WAIT * 2)
    settings = clean_database.settings(poll_recheck_seconds=WAIT)
    with TestClient(create_app(settings, clock=clock)) as client:
        waiting = WaitingPolls(client.app.state.service)
        put(client, "q", "k", 1)
        pause(client)
        with ThreadPoolExecutor(1) as pool:
            result = pool.submit(poll, client, "q", wait=WAIT)
            waiting.wait_for(1)
            resume(client)
            assert keys_of(result.result(timeout=RETURNED_EARLY)) == ["k"]


def test_a_token_outside_the_queue_may_neither_pause_nor_resume_it(clean_database, clock):
    settings = clean_database.settings(api_tokens="admin,team=team-*")
    with TestClient(create_app(settings, clock=clock)) as client:
        team = {"Authorization": "Bearer team"}
        for path in ("/v1/queues/orders/pause", "/v1/queues/orders/cron/tick/pause"):
            assert client.post(path, headers=team).status_code == 403
        admin = {"Authorization": "Bearer admin"}
        assert client.get("/v1/queues/orders", headers=admin).json()["paused"] is False
        assert client.post("/v1/queues/team-a/pause", headers=team).json()["paused"] is True


def test_the_paused_gauge_says_which_queues_are_paused(client):
    put(client, "q", "k", 1)
    put(client, "other", "k", 1)
    pause(client)
    metrics = client.get("/metrics").text
    assert 'hourglass_queue_paused{queue="q"} 1.0' in metrics
    assert 'hourglass_queue_paused{queue="other"} 0.0' in metrics


# -- cron entries ---------------------------------------------------------------------

EVERY = 600  # a run every 10 minutes


def install(client, name: str = "tick", **fields):
    body = {"payload": 1, "every": EVERY, **fields}
    response = client.put(f"/v1/queues/q/cron/{name}", json=body)
    assert response.status_code in (200, 201), response.text
    return response.json()


def run_times(client) -> list[str]:
    listed = client.get("/v1/queues/q/messages").json()["messages"]
    return sorted(message["scheduled_at"] for message in listed)


def test_a_paused_entry_installs_nothing_and_its_pending_runs_go(client, clock, database):
    assert install(client)["paused"] is False
    assert run_times(client)  # an hour of runs installed
    paused = client.post("/v1/queues/q/cron/tick/pause").json()
    assert (paused["paused"], paused["paused_at"], paused["next_runs"]) == (
        True,
        at(START_MS),
        [],
    )
    assert run_times(client) == []
    assert {row["outcome"] for row in history_rows(database.url)} == {"dropped"}
    clock.advance(10)
    assert client.post("/v1/queues/q/cron/tick/pause").json()["paused_at"] == at(START_MS)
    # The manager's pass installs nothing of it.
    assert client.portal.call(client.app.state.cron_manager.run_pass) == 0
    assert run_times(client) == []


def test_a_pause_keeps_a_run_a_worker_holds_and_one_released_to_retry(client, clock):
    install(client)
    first, second = run_times(client)[:2]
    clock.advance(EVERY)  # the first run is due
    held = poll(client, "q", lease=60)
    assert [message["scheduled_at_initially"] for message in held["messages"]] == [first]
    released = client.post(f"/v1/queues/q/locks/{held['lock_id']}/release", json={"delay": 3600})
    assert released.status_code == 204
    clock.advance(EVERY)  # the second run is due
    holding = poll(client, "q", lease=60)
    assert [message["scheduled_at_initially"] for message in holding["messages"]] == [second]
    client.post("/v1/queues/q/cron/tick/pause")
    listed = client.get("/v1/queues/q/messages").json()["messages"]
    assert sorted(message["scheduled_at_initially"] for message in listed) == [first, second]
    assert client.delete(f"/v1/queues/q/locks/{holding['lock_id']}").status_code == 204


def test_installing_a_paused_entry_again_keeps_it_paused(client):
    install(client)
    client.post("/v1/queues/q/cron/tick/pause")
    unchanged = install(client)
    assert (unchanged["outcome"], unchanged["paused"]) == ("unchanged", True)
    changed = install(client, payload=2)
    assert (changed["outcome"], changed["paused"]) == ("changed", True)
    assert run_times(client) == []


def test_a_resumed_entry_installs_from_now_with_no_burst_of_missed_runs(client, clock):
    install(client)
    client.post("/v1/queues/q/cron/tick/pause")
    clock.advance(3 * 3600)  # three hours of runs missed
    resumed = client.post("/v1/queues/q/cron/tick/resume").json()
    assert resumed["paused"] is False
    times = run_times(client)
    assert times and min(times) > at(START_MS + 3 * 3600 * 1000)
    assert times[0] == resumed["next_runs"][0]
    assert client.post("/v1/queues/q/cron/tick/resume").status_code == 200  # twice: no error


def test_pausing_or_resuming_an_unknown_entry_is_404(client):
    for action in ("pause", "resume"):
        response = client.post(f"/v1/queues/q/cron/nothing/{action}")
        assert response.status_code == 404
        assert response.headers["content-type"] == "application/problem+json"


def test_an_entry_whose_name_ends_in_pause_is_still_an_entry(client):
    install(client, name="daily/pause")
    assert client.get("/v1/queues/q/cron/daily/pause").json()["name"] == "daily/pause"
    assert client.post("/v1/queues/q/cron/daily/pause/pause").json()["paused"] is True
