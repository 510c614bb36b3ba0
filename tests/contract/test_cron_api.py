"""Cron over HTTP: install, change, preview, uninstall, bad input, and runs that are ordinary messages."""

from __future__ import annotations

import json
from datetime import datetime, timedelta

import pytest
from fastapi.testclient import TestClient

from app.cron.bounds import MAX_RUN_BYTES_PER_ENTRY, MAX_RUNS_PER_ENTRY, runs_allowed
from app.domain.cron import CronEntry, run_key
from app.domain.errors import StorageUnavailable
from app.domain.formats import parse_timestamp
from app.domain.messages import MAX_DELAY_SECONDS, IfExists, Offer
from app.domain.schedule import LATEST_RUN_MS, Schedule, config_hash
from app.main import create_app
from tests.support.helpers import at, cron_rows, history_rows, keys_of, poll, stored_rows

DAILY = {"payload": {"report": "sales"}, "daily": ["02:00"], "timezone": "Europe/Bucharest"}


def install(client, name: str = "nightly/sales", queue: str = "reports", **body):
    return client.put(f"/v1/queues/{queue}/cron/{name}", json=body or DAILY)


def test_installing_a_daily_schedule_installs_its_next_runs(client, database):
    response = install(client)
    assert response.status_code == 201, response.text
    body = response.json()
    assert body["outcome"] == "created"
    assert body["daily"] == ["02:00"] and body["timezone"] == "Europe/Bucharest"
    # 2026-11-26 09:00Z is 11:00 in Bucharest: the next 02:00 local is 00:00Z tomorrow.
    assert body["next_runs"][:2] == ["2026-11-27T00:00:00.000Z", "2026-11-28T00:00:00.000Z"]
    keys = sorted(row["pKey"] for row in stored_rows(database.url))
    # The next run, even though the hour of lookahead holds none.
    assert keys == [f"nightly/sales/{body['config_hash']}/20261127-000000.000"]


def test_reinstalling_the_same_entry_changes_nothing(client, database):
    first = install(client).json()
    rows = stored_rows(database.url)
    again = install(client)
    assert again.status_code == 200
    assert again.json()["outcome"] == "unchanged"
    assert again.json()["config_hash"] == first["config_hash"]
    assert stored_rows(database.url) == rows


def test_a_changed_entry_replaces_its_runs_but_not_the_one_in_flight(client, clock, database):
    first = install(client, **{**DAILY, "daily": ["02:00"]}).json()
    assert first["next_runs"][0] == "2026-11-27T00:00:00.000Z"
    clock.advance(15 * 3600)  # from 2026-11-26 09:00Z: the first run is due
    polled = poll(client, "reports", lease=600)
    assert keys_of(polled)[0].startswith(f"nightly/sales/{first['config_hash']}/")
    changed = install(client, **{**DAILY, "daily": ["03:00"]})
    assert changed.status_code == 200 and changed.json()["outcome"] == "changed"
    new_hash = changed.json()["config_hash"]
    keys = [row["pKey"] for row in stored_rows(database.url)]
    old = [key for key in keys if f"/{first['config_hash']}/" in key]
    assert old == keys_of(polled)  # only the run in flight is left of the old configuration
    assert any(f"/{new_hash}/" in key for key in keys)
    assert client.delete(f"/v1/queues/reports/locks/{polled['lock_id']}").status_code == 204


def test_preview_shows_runs_from_any_instant_across_a_dst_change(client):
    install(client, **{**DAILY, "daily": ["03:30"]})
    response = client.get(
        "/v1/queues/reports/cron/nightly/sales",
        params={"after": "2026-03-28T12:00:00Z", "count": 2},
    )
    assert response.status_code == 200, response.text
    # Bucharest skips 03:00-04:00 on 2026-03-29: that run is at 04:00 local (01:00Z).
    assert response.json()["next_runs"] == ["2026-03-29T01:00:00.000Z", "2026-03-30T00:30:00.000Z"]


def test_list_get_and_uninstall(client, database):
    install(client, "a")
    install(client, "a/b")
    assert [e["name"] for e in client.get("/v1/queues/reports/cron").json()["entries"]] == [
        "a",
        "a/b",
    ]
    assert client.get("/v1/queues/reports/cron/a").json()["name"] == "a"
    assert client.delete("/v1/queues/reports/cron/a").status_code == 204
    assert client.get("/v1/queues/reports/cron/a").status_code == 404
    assert client.delete("/v1/queues/reports/cron/a").status_code == 404
    keys = [row["pKey"] for row in stored_rows(database.url)]
    assert keys and all(key.startswith("a/b/") for key in keys)


@pytest.mark.parametrize(
    "body",
    [
        {"payload": 1, "cron": "61 * * * *"},
        {"payload": 1, "cron": "0 2 * * *", "timezone": "Mars/Olympus_Mons"},
        {"payload": 1, "cron": "0 2 * * *", "every": 60},
        {"payload": 1},
        {"payload": 1, "every": 0},
        {"payload": 1, "every": -1},
        {"payload": 1, "daily": ["25:00"]},
        {"payload": 1, "daily": []},
        {"payload": 1, "every": "60"},
        {"payload": 1, "every": 0.5},
        {"payload": 1, "every": 1e300},
        {"payload": 1, "cron": "0 0 * * * *"},
        {"payload": 1, "cron": "0 2 * * *", "timezone": "localtime"},
        {"payload": 1, "every": 60, "lookahed": 10},
    ],
)
def test_bad_entries_are_422_and_store_nothing(client, database, body):
    response = install(client, **body)
    assert response.status_code == 422, response.text
    assert response.headers["content-type"].startswith("application/problem+json")
    assert client.get("/v1/queues/reports/cron").json() == {"entries": []}
    assert stored_rows(database.url) == []


def test_the_manager_keeps_runs_installed_as_time_passes(client, clock):
    install(client, "tick", payload={"n": 1}, every=600)  # every 10 minutes
    manager = client.app.state.cron_manager
    delivered = []
    for _ in range(3):
        clock.advance(3600)
        client.portal.call(manager.run_pass)  # the pass the manager runs every 30 s
        polled = poll(client, "reports", max=100)
        delivered += keys_of(polled)
        client.delete(f"/v1/queues/reports/locks/{polled['lock_id']}")
    assert len(delivered) == len(set(delivered))
    assert len(delivered) >= 18  # six runs an hour, three hours
    assert manager.failures == 0


def test_a_queue_with_only_cron_entries_is_listed(client):
    install(client, "x", queue="only-cron", payload=1, every=86_400 * 7)
    client.delete("/v1/queues/only-cron?confirm=only-cron")  # its runs go; the entry stays
    names = [queue["queue"] for queue in client.get("/v1/queues").json()["queues"]]
    assert "only-cron" in names


def test_runs_keep_coming_after_a_restart(settings, clock):
    with TestClient(create_app(settings, clock=clock)) as first:
        assert install(first, "tick", payload=1, every=600).status_code == 201
    clock.advance(5 * 3600)  # the service was down for five hours
    with TestClient(create_app(settings, clock=clock)) as second:
        # Runs installed before the stop are due now; the new manager adds the next ones.
        overdue = poll(second, "reports", max=100)
        assert len(keys_of(overdue)) == 6
        assert second.delete(f"/v1/queues/reports/locks/{overdue['lock_id']}").status_code == 204
        second.portal.call(second.app.state.cron_manager.run_pass)
        clock.advance(3600)
        assert len(keys_of(poll(second, "reports", max=100))) == 6


def test_the_manager_counts_a_failed_pass_and_goes_on(client, clock, monkeypatch):
    install(client, "tick", payload=1, every=600)
    manager = client.app.state.cron_manager
    cron = client.app.state.cron
    original = cron.install_upcoming_runs

    async def database_down() -> int:
        raise StorageUnavailable("the database is unavailable; retry shortly")

    monkeypatch.setattr(cron, "install_upcoming_runs", database_down)
    assert client.portal.call(manager.run_pass) == 0
    assert manager.failures == 1
    assert 'hourglass_errors_total{kind="cron_pass"} 1.0' in client.get("/metrics").text
    monkeypatch.setattr(cron, "install_upcoming_runs", original)
    clock.advance(3600)
    assert client.portal.call(manager.run_pass) == 6
    # 6 at install, 6 now: counted per entry.
    metrics = client.get("/metrics").text
    assert 'hourglass_cron_runs_installed_total{name="tick",queue="reports"} 12.0' in metrics


def test_uninstall_leaves_the_run_in_flight_with_its_worker(client, clock, database):
    install(client, "tick", payload=1, every=600)
    clock.advance(600)
    polled = poll(client, "reports")
    assert len(keys_of(polled)) == 1
    assert client.delete("/v1/queues/reports/cron/tick").status_code == 204
    assert [row["pKey"] for row in stored_rows(database.url)] == keys_of(polled)
    assert client.delete(f"/v1/queues/reports/locks/{polled['lock_id']}").status_code == 204
    client.portal.call(client.app.state.cron_manager.run_pass)  # nothing comes back
    assert stored_rows(database.url) == []


@pytest.mark.parametrize(
    "after", ["0000-12-31T00:00:00Z", "0001-01-01T00:00:00+01:00", "2026-02-30T00:00:00Z"]
)
def test_a_preview_from_an_impossible_instant_is_422(client, after):
    install(client)
    response = client.get("/v1/queues/reports/cron/nightly/sales", params={"after": after})
    assert response.status_code == 422, response.text


@pytest.mark.parametrize("after", ["0001-01-01T00:00:00Z", "0001-01-01T00:00:00-01:00"])
def test_a_preview_from_the_first_days_of_year_1_starts_on_the_third(client, after):
    # openapi.yaml allows any instant of years 0001-9999: each has its runs.
    install(client)
    response = client.get(
        "/v1/queues/reports/cron/nightly/sales", params={"after": after, "count": 2}
    )
    assert response.status_code == 200, response.text
    assert [run[:10] for run in response.json()["next_runs"]] == ["0001-01-03", "0001-01-04"]


@pytest.mark.parametrize("number", ["Infinity", "-Infinity", "NaN"])
def test_numbers_json_does_not_have_are_422(client, database, number):
    response = client.put(
        "/v1/queues/reports/cron/x",
        content=f'{{"payload": 1, "every": {number}}}',
        headers={"Content-Type": "application/json"},
    )
    assert response.status_code == 422, response.text
    assert stored_rows(database.url) == []


# -- previews near the end of time (decision 6) ----------------------------------------


def test_a_preview_near_year_9999_shows_the_runs_left(client):
    install(client, "new-year", payload=1, cron="0 0 1 1 *")
    response = client.get(
        "/v1/queues/reports/cron/new-year", params={"after": "9996-03-01T00:00:00Z", "count": 5}
    )
    assert response.status_code == 200, response.text
    assert response.json()["next_runs"] == [
        "9997-01-01T00:00:00.000Z",
        "9998-01-01T00:00:00.000Z",
        "9999-01-01T00:00:00.000Z",
    ]


@pytest.mark.parametrize(
    "schedule",
    [
        {"cron": "0 0 29 2 *", "timezone": "America/New_York"},
        {"cron": "30 2 * * *", "timezone": "Europe/Bucharest"},
        {"cron": "*/7 * * * *", "timezone": "Pacific/Kiritimati"},
        {"every": 1},
        {"every": 100 * 366 * 24 * 3600},
        {"daily": ["00:00", "23:59"], "timezone": "Etc/GMT+12"},
        {"daily": ["02:30"], "timezone": "Australia/Lord_Howe"},
    ],
)
def test_a_preview_from_any_instant_the_api_takes_is_200(client, schedule):
    install(client, "e", payload=1, **schedule)
    for after in (
        "9998-12-31T23:59:59.999Z",
        "9999-12-29T10:00:00Z",
        "9999-12-30T00:00:00Z",
        "9999-12-31T12:00:00+12:00",
        "9999-12-31T23:59:59.999Z",
    ):
        response = client.get("/v1/queues/reports/cron/e", params={"after": after, "count": 100})
        assert response.status_code == 200, (after, response.text)
        runs = [parse_timestamp(run) for run in response.json()["next_runs"]]
        assert runs == sorted(set(runs))
        assert all(parse_timestamp(after) < run <= LATEST_RUN_MS for run in runs)


# -- what an entry stores (decision 6) ----------------------------------------------


def _payload_of(size: int) -> str:
    """A JSON string whose stored form is `size` bytes."""
    return "x" * (size - 2)


def _stored_runs(database) -> tuple[int, int]:
    """How many messages the table holds, and their payload bytes."""
    rows = stored_rows(database.url)
    return len(rows), sum(len(row["payload"]) for row in rows)


def test_an_entry_that_cannot_keep_its_runs_within_its_bound_is_422(client, database):
    response = install(client, "big", payload=_payload_of(128 * 1024), every=1)
    assert response.status_code == 422, response.text
    problem = response.json()
    assert problem["type"] == "urn:hourglass:problem:cron-entry-too-large"
    assert "at most 23301 bytes" in problem["detail"]
    assert client.get("/v1/queues/reports/cron").json() == {"entries": []}
    assert stored_rows(database.url) == []
    # Every 10 s, 180 s hold 18 runs: 233,016 bytes fit, a byte more does not.
    assert install(client, "big", payload=_payload_of(233_017), every=10).status_code == 422
    assert install(client, "big", payload=_payload_of(233_016), every=10).status_code == 201


def test_a_dense_entry_keeps_few_runs_and_none_goes_missing(client, clock, database):
    assert install(client, "tick", payload=_payload_of(20_000), every=1).status_code == 201
    manager = client.app.state.cron_manager
    delivered: list[str] = []
    for _ in range(12):  # six minutes of passes 30 s apart, a worker between them
        clock.advance(30)
        client.portal.call(manager.run_pass)
        count, payload_bytes = _stored_runs(database)
        assert count <= MAX_RUNS_PER_ENTRY and payload_bytes <= MAX_RUN_BYTES_PER_ENTRY
        polled = poll(client, "reports", max=1000)
        delivered += keys_of(polled)
        assert client.delete(f"/v1/queues/reports/locks/{polled['lock_id']}").status_code == 204
    # Every second of the six minutes, each once.
    seconds = sorted(datetime.strptime(key[-19:-4], "%Y%m%d-%H%M%S") for key in delivered)
    assert len(delivered) == len(set(delivered)) == 360
    assert seconds == [seconds[0] + timedelta(seconds=n) for n in range(360)]
    assert manager.failures == 0


def test_runs_nobody_takes_stop_at_the_bound(client, clock, database):
    assert install(client, "tick", payload=_payload_of(20_000), every=1).status_code == 201
    manager = client.app.state.cron_manager
    for _ in range(20):  # ten minutes of passes, no worker
        clock.advance(30)
        client.portal.call(manager.run_pass)
    count, payload_bytes = _stored_runs(database)
    assert count == runs_allowed(20_000) == MAX_RUNS_PER_ENTRY  # 4 MiB would hold 209
    assert payload_bytes <= MAX_RUN_BYTES_PER_ENTRY


def test_an_entry_stored_before_the_bounds_is_brought_under_them(client, clock, database, store):
    # `every: 1` with a 128 KiB payload, and the runs the manager kept before
    # (40 here, ~1,060 then): the store takes it, as the old service did.
    payload = json.dumps(_payload_of(128 * 1024)).encode()
    schedule = Schedule(every=1)
    entry = CronEntry(
        queue="reports",
        name="big",
        schedule=json.dumps(schedule.as_json(), sort_keys=True),
        payload=payload,
        config_hash=config_hash(schedule, payload),
        lookahead_ms=None,
        created_at=clock.now,
        updated_at=clock.now,
    )
    store.cron.install(entry)
    runs = [clock.now + n * 1000 for n in range(1, 41)]
    store.messages.offer_many(
        "reports",
        [
            Offer(run_key("big", entry.config_hash, run), payload, run, IfExists.IGNORE)
            for run in runs
        ],
        clock.now,
    )
    manager = client.app.state.cron_manager
    for _ in range(4):
        client.portal.call(manager.run_pass)
        count, payload_bytes = _stored_runs(database)
        assert count == 32 and payload_bytes == 32 * len(payload) <= 4 * 1024 * 1024
        clock.advance(30)


def test_a_lookahead_longer_than_a_day_is_422(client, database):
    assert install(client, "x", payload=1, every=60, lookahead=86_401).status_code == 422
    assert stored_rows(database.url) == []
    assert install(client, "x", payload=1, every=60, lookahead=86_400).status_code == 201


def test_an_entry_s_priority_is_every_run_s_and_a_change_of_it_replaces_its_runs(
    client, clock, database
):
    every = {"payload": 1, "every": 600}
    created = install(client, "tick", "q", **every, priority=6).json()
    assert created["priority"] == 6
    plain = config_hash(Schedule(every=600.0), b"1")
    assert created["config_hash"] == config_hash(Schedule(every=600.0), b"1", 6) != plain
    rows = stored_rows(database.url)
    assert rows and {row["priority"] for row in rows} == {6}
    assert all(f"/{created['config_hash']}/" in row["pKey"] for row in rows)
    assert client.get("/v1/queues/q/cron/tick").json()["priority"] == 6

    changed = install(client, "tick", "q", **every)  # priority left out: 0
    assert (changed.status_code, changed.json()["outcome"]) == (200, "changed")
    assert changed.json()["config_hash"] == plain
    rows = stored_rows(database.url)
    assert rows and {row["priority"] for row in rows} == {0}
    assert all(f"/{plain}/" in row["pKey"] for row in rows)
    assert install(client, "tick", "q", **every).json()["outcome"] == "unchanged"


@pytest.mark.parametrize("priority", [-1, 10, "1", 0.5])
def test_an_entry_s_priority_outside_0_to_9_is_422(client, database, priority):
    body = {"payload": 1, "every": 600, "priority": priority}
    assert install(client, "tick", "q", **body).status_code == 422
    assert stored_rows(database.url) == []


def test_an_entry_s_ttl_is_every_run_s_expiry_and_a_change_of_it_replaces_its_runs(
    client, database
):
    every = {"payload": 1, "every": 600}
    created = install(client, "tick", "q", **every, ttl=90).json()
    assert created["ttl"] == 90
    plain = config_hash(Schedule(every=600.0), b"1")
    expiring = config_hash(Schedule(every=600.0), b"1", ttl_ms=90_000)
    assert created["config_hash"] == expiring != plain
    assert [row["ttlMs"] for row in cron_rows(database.url)] == [90_000]
    rows = stored_rows(database.url)
    assert rows and all(row["expiresAt"] == row["scheduledAt"] + 90_000 for row in rows)
    assert all(f"/{expiring}/" in row["pKey"] for row in rows)
    shown = client.get("/v1/queues/q/cron/tick").json()
    assert shown["ttl"] == 90
    run = client.get(f"/v1/queues/q/messages/{rows[0]['pKey']}").json()
    assert run["expires_at"] == at(rows[0]["scheduledAt"] + 90_000)
    assert install(client, "tick", "q", **every, ttl=90.0).json()["outcome"] == "unchanged"

    changed = install(client, "tick", "q", **every, ttl=1.5)
    assert (changed.status_code, changed.json()["outcome"], changed.json()["ttl"]) == (
        200,
        "changed",
        1.5,
    )
    assert changed.json()["config_hash"] not in (expiring, plain)
    rows = stored_rows(database.url)
    assert rows and all(row["expiresAt"] == row["scheduledAt"] + 1_500 for row in rows)

    dropped = install(client, "tick", "q", **every)  # ttl left out: runs do not expire
    assert (dropped.json()["outcome"], dropped.json()["ttl"]) == ("changed", None)
    assert dropped.json()["config_hash"] == plain
    assert [row["ttlMs"] for row in cron_rows(database.url)] == [None]
    rows = stored_rows(database.url)
    assert rows and {row["expiresAt"] for row in rows} == {None}
    assert all(f"/{plain}/" in row["pKey"] for row in rows)


@pytest.mark.parametrize("ttl", [0, 0.0009, -1, "60", True, MAX_DELAY_SECONDS + 1, [60]])
def test_an_entry_s_ttl_the_api_refuses_on_a_message_is_422(client, database, ttl):
    response = install(client, "tick", "q", payload=1, every=600, ttl=ttl)
    assert response.status_code == 422, response.text
    assert response.headers["content-type"].startswith("application/problem+json")
    assert cron_rows(database.url) == [] and stored_rows(database.url) == []


@pytest.mark.parametrize(
    "expiry",
    [
        {"expires_at": "2026-11-27T00:00:00Z"},
        {"expires_at": None},
        {"expires_at": "2026-11-27T00:00:00Z", "ttl": 60},
    ],
)
def test_an_entry_takes_ttl_only_and_an_expires_at_is_422_saying_so(client, database, expiry):
    response = install(client, "tick", "q", payload=1, every=600, **expiry)
    assert response.status_code == 422, response.text
    assert response.headers["content-type"].startswith("application/problem+json")
    problem = response.json()
    assert [error["loc"] for error in problem["errors"]] == [["body", "expires_at"]]
    assert "takes no expires_at: give ttl" in problem["detail"]
    assert cron_rows(database.url) == [] and stored_rows(database.url) == []


def test_a_run_past_its_ttl_is_never_delivered_and_the_sweep_takes_it(client, clock, database):
    client.portal.call(client.app.state.expiry_sweeper.stop)  # only the sweeps below run
    entry = install(client, "tick", "q", payload=1, every=600, ttl=30).json()
    first, second = (parse_timestamp(run) for run in entry["next_runs"][:2])
    clock.advance((first + 30_000 - clock.now_ms()) / 1000)  # the first run's expiry
    assert poll(client, "q", max=10)["messages"] == []
    assert client.portal.call(client.app.state.service.upkeep.expire, 500) == 1
    assert [(row["key"], row["outcome"]) for row in history_rows(database.url)] == [
        (run_key("tick", entry["config_hash"], first), "expired")
    ]
    # The next run is due in its turn, and delivered before its own expiry.
    clock.advance((second - clock.now_ms()) / 1000)
    assert keys_of(poll(client, "q", max=10)) == [run_key("tick", entry["config_hash"], second)]
    # The runs the manager installs later, from the stored entry, expire as these did.
    installed = max(row["scheduledAt"] for row in stored_rows(database.url))
    clock.advance(7200)
    client.portal.call(client.app.state.cron_manager.run_pass)
    rows = stored_rows(database.url)
    assert max(row["scheduledAt"] for row in rows) > installed
    assert all(row["expiresAt"] == row["scheduledAtInitially"] + 30_000 for row in rows)
