"""Queue-scoped tokens and the queues a request reaches beyond its path, on every database:
a dead-letter queue, a redrive's targets, a dead letter's way back."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from functools import partial
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import create_engine, exc, select

from app.domain.messages import Offer, QueueSettings
from app.main import create_app
from app.storage.tables import delayed_queue
from tests.conftest import START_MS
from tests.support.helpers import poll, put, settings_rows, stored_rows

ADMIN, TEAM, ORDERS = "admin-token", "team-token", "orders-token"
LEASE = 30


@dataclass
class Caller:
    """The app's client, every request carrying one token (so tests/helpers take it too)."""

    client: TestClient
    token: str

    def __getattr__(self, method: str) -> Any:  # get, put, post, delete
        send = getattr(self.client, method)
        return partial(send, headers={"Authorization": f"Bearer {self.token}"})


@pytest.fixture
def app_client(clean_database, clock) -> Iterator[TestClient]:
    settings = clean_database.settings(api_tokens=f"{ADMIN},{TEAM}=team-*,{ORDERS}=orders")
    with TestClient(create_app(settings, clock=clock)) as client:
        yield client


@pytest.fixture
def admin(app_client) -> Caller:
    return Caller(app_client, ADMIN)


@pytest.fixture
def team(app_client) -> Caller:
    """Limited to `team-*`."""
    return Caller(app_client, TEAM)


def configure(caller: Caller, queue: str, **fields: Any) -> None:
    response = caller.put(f"/v1/queues/{queue}/settings", json=fields)
    assert response.status_code == 200, response.text


def dead_letter(caller: Caller, clock, queue: str, key: str, payload: Any) -> None:
    """Offer a message to `queue` (limited to one delivery) and let it die there."""
    assert put(caller, queue, key, payload).status_code == 201
    poll(caller, queue, lease=LEASE)
    clock.advance(LEASE)
    assert poll(caller, queue)["messages"] == []  # its delivery is spent: moved


def message(caller: Caller, queue: str, key: str) -> dict:
    response = caller.get(f"/v1/queues/{queue}/messages/{key}")
    assert response.status_code == 200, response.text
    return response.json()


def count(caller: Caller, queue: str) -> int:
    return caller.get(f"/v1/queues/{queue}").json()["messages"]


@pytest.fixture
def triage(admin, team, clock) -> None:
    """Decision 10's setting: `billing`'s dead letters routed to `team-triage`, where the
    `team-*` token can read and write them, and a team queue's there too."""
    configure(admin, "billing", max_deliveries=1, dead_letter_queue="team-triage")
    configure(team, "team-a", max_deliveries=1, dead_letter_queue="team-triage")
    dead_letter(admin, clock, "billing", "invoice-7", {"amount": 100})
    dead_letter(team, clock, "team-a", "job-1", "retry me")
    assert message(team, "team-triage", "invoice-7")["dead_lettered_from"] == "billing"
    assert message(team, "team-triage", "job-1")["dead_lettered_from"] == "team-a"


# -- redrive ---------------------------------------------------------------------------


def test_a_redrive_leaves_the_dead_letters_whose_queue_the_token_may_not_use(admin, team, triage):
    response = team.post("/v1/queues/team-triage/redrive", json={})
    assert response.status_code == 200, response.text
    assert response.json() == {"moved": 1, "skipped": 0, "forbidden": 1}
    assert count(admin, "billing") == 0
    assert message(team, "team-a", "job-1")["payload"] == "retry me"
    assert message(team, "team-triage", "invoice-7")["dead_lettered_from"] == "billing"
    # A token that may use billing moves it back.
    response = admin.post("/v1/queues/team-triage/redrive", json={})
    assert response.json() == {"moved": 1, "skipped": 0, "forbidden": 0}
    assert message(admin, "billing", "invoice-7")["payload"] == {"amount": 100}


def test_a_redrive_to_a_queue_outside_the_token_is_403_and_moves_nothing(
    team, triage, clean_database
):
    before = stored_rows(clean_database.url)
    response = team.post("/v1/queues/team-triage/redrive", json={"to": "billing"})
    assert response.status_code == 403
    assert response.headers["content-type"] == "application/problem+json"
    assert "billing" in response.json()["detail"]
    assert stored_rows(clean_database.url) == before
    # Within its queues, every dead letter goes where the token says, billing's too.
    response = team.post("/v1/queues/team-triage/redrive", json={"to": "team-b"})
    assert response.json() == {"moved": 2, "skipped": 0, "forbidden": 0}


# -- a dead letter corrected in place ----------------------------------------------------


def _put(caller: Caller, queue: str, key: str, payload: Any):
    return caller.put(f"/v1/queues/{queue}/messages/{key}", json={"payload": payload})


def _post(caller: Caller, queue: str, key: str, payload: Any):
    return caller.post(f"/v1/queues/{queue}/messages/{key}", json={"payload": payload})


def _batch(caller: Caller, queue: str, key: str, payload: Any):
    body = {"messages": [{"key": key, "payload": payload}]}
    return caller.post(f"/v1/queues/{queue}/batch", json=body)


UPDATES = [_put, _post, _batch]


@pytest.mark.parametrize("update", UPDATES)
def test_an_update_by_a_token_that_may_not_use_a_dead_letters_origin_drops_the_origin(
    admin, team, triage, update
):
    response = update(team, "team-triage", "invoice-7", {"amount": -1_000_000})
    assert response.status_code == 200, response.text
    forged = message(team, "team-triage", "invoice-7")
    assert (forged["payload"], forged["dead_lettered_from"]) == ({"amount": -1_000_000}, None)
    # No redrive, however broad its token, now takes it to billing.
    response = admin.post("/v1/queues/team-triage/redrive", json={})
    assert response.json()["skipped"] == 1  # invoice-7: it came from no queue now
    assert count(admin, "billing") == 0


@pytest.mark.parametrize("update", UPDATES)
def test_an_update_by_a_token_that_may_use_the_origin_keeps_it(admin, team, triage, update):
    assert update(admin, "team-triage", "invoice-7", {"amount": 90}).status_code == 200
    assert update(team, "team-triage", "job-1", "fixed").status_code == 200
    assert message(admin, "team-triage", "invoice-7")["dead_lettered_from"] == "billing"
    assert message(team, "team-triage", "job-1")["dead_lettered_from"] == "team-a"
    response = admin.post("/v1/queues/team-triage/redrive", json={})
    assert response.json()["moved"] == 2
    assert message(admin, "billing", "invoice-7")["payload"] == {"amount": 90}
    assert message(team, "team-a", "job-1")["payload"] == "fixed"


# -- settings ---------------------------------------------------------------------------


def test_a_token_cannot_send_its_dead_letters_outside_its_queues(team, clean_database):
    settings = "/v1/queues/team-a/settings"
    outside = team.put(settings, json={"dead_letter_queue": "billing"})
    assert outside.status_code == 403
    assert outside.headers["content-type"] == "application/problem+json"
    assert settings_rows(clean_database.url) == []
    assert team.get(settings).json()["dead_letter_queue"] == "team-a.dead"
    inside = team.put(settings, json={"max_deliveries": 1, "dead_letter_queue": "team-triage"})
    assert inside.status_code == 200


def test_a_queue_outside_the_token_is_one_problem_in_the_path_and_beyond_it(team):
    in_path = team.put("/v1/queues/billing/messages/k", json={"payload": 1})
    beyond = team.put("/v1/queues/team-a/settings", json={"dead_letter_queue": "billing"})
    forbidden = {
        "type": "urn:hourglass:problem:forbidden",
        "title": "Forbidden",
        "status": 403,
        "detail": "this token may not use queue 'billing'",
    }
    assert in_path.json() == beyond.json() == forbidden


def test_a_token_cannot_set_a_limit_whose_default_dead_letter_queue_it_may_not_use(
    app_client, clean_database
):
    orders = Caller(app_client, ORDERS)  # limited to exactly "orders"
    limit = orders.put("/v1/queues/orders/settings", json={"max_deliveries": 1})
    assert limit.status_code == 403
    assert "orders.dead" in limit.json()["detail"]
    assert settings_rows(clean_database.url) == []
    lease = orders.put("/v1/queues/orders/settings", json={"default_lease": 60})
    assert lease.status_code == 200


# -- where the store judges a redrive's targets ---------------------------------------------


def _locked_elsewhere(url: str, queue: str, key: str) -> bool:
    """Whether another transaction holds the row (PostgreSQL, MariaDB) or the database's
    write lock (SQLite, which has no row locks), asked without waiting."""
    engine = create_engine(url, connect_args={"timeout": 0} if url.startswith("sqlite") else {})
    try:
        with engine.connect() as connection:
            if url.startswith("sqlite"):
                connection.exec_driver_sql("BEGIN IMMEDIATE")
            else:
                row = delayed_queue.c
                connection.execute(
                    select(row.id)
                    .where(row.pKind == queue, row.pKey == key)
                    .with_for_update(nowait=True)
                )
            connection.rollback()
        return False
    except exc.DBAPIError:
        return True
    finally:
        engine.dispose()


def _dead_letter_in_store(store) -> int:
    """billing's "invoice-7", dead-lettered into team-triage; the time it was moved."""
    billing = QueueSettings("billing", max_deliveries=1, dead_letter_queue="team-triage")
    store.messages.offer("billing", Offer("invoice-7", b"1", START_MS), START_MS)
    for now in (START_MS, START_MS + LEASE * 1000):  # a delivery, then the move
        store.leases.poll("billing", 1, str(uuid.uuid4()), now + LEASE * 1000, now, billing)
    assert store.messages.get("team-triage", "invoice-7").dead_lettered_from == "billing"
    return now


def _asking_while_locked(url: str, asked: list):
    """A filter allowing `team-*` that notes, for each queue asked about, whether the
    dead letter was locked at that moment."""

    def may_use(queue: str) -> bool:
        asked.append((queue, _locked_elsewhere(url, "team-triage", "invoice-7")))
        return queue.startswith("team-")

    return may_use


def test_a_redrive_judges_each_target_while_the_dead_letters_are_locked(store, clean_database):
    """No check-then-act: the filter is asked inside the transaction that moves the rows, so
    no dead letter can arrive or change its way back between the check and the move."""
    now = _dead_letter_in_store(store)
    asked = []
    may_use = _asking_while_locked(clean_database.url, asked)
    redrive = store.leases.redrive("team-triage", None, 10, now, may_use)
    assert (redrive.moved, redrive.skipped, redrive.forbidden) == (0, 0, 1)
    assert asked == [("billing", True)]
    assert _locked_elsewhere(clean_database.url, "team-triage", "invoice-7") is False


def test_an_update_judges_a_dead_letters_origin_while_it_is_locked(store, clean_database):
    now = _dead_letter_in_store(store)
    asked = []
    may_use = _asking_while_locked(clean_database.url, asked)
    forged = Offer("invoice-7", b"2", now)
    assert store.messages.offer("team-triage", forged, now, may_use=may_use).outcome == "updated"
    assert asked == [("billing", True)]
    assert store.messages.get("team-triage", "invoice-7").dead_lettered_from is None
