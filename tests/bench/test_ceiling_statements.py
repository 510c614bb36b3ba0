"""The raw-SQL ceiling (bench/hourglass.py) sends the very statements the service sends.

The ceiling is what a request's HTTP, JSON and Python around the statement cost
against; a ceiling running other SQL (the single-range poll from before priorities,
say) measures nothing. Here the service offers, offers a batch, polls one and many
and acknowledges (by itself, and on the next poll) on PostgreSQL, every statement it hands psycopg is recorded, and
each of the ceiling's must be among them, text for text.
"""

from __future__ import annotations

import psycopg
import pytest
from fastapi.testclient import TestClient

from app.config import Settings
from app.main import create_app
from bench import hourglass
from tests.conftest import FakeClock, truncate_all
from tests.support.helpers import poll, put

pytestmark = pytest.mark.postgresql_only


def _statements_sent(monkeypatch: pytest.MonkeyPatch) -> set[str]:
    sent: set[str] = set()
    execute = psycopg.AsyncCursor.execute

    async def recorded(self, query, params=None, **options):  # type: ignore[no-untyped-def]
        sent.add(query if isinstance(query, str) else str(query))
        return await execute(self, query, params, **options)

    monkeypatch.setattr(psycopg.AsyncCursor, "execute", recorded)
    return sent


@pytest.mark.parametrize("history", [True, False], ids=["history", "no history"])
def test_the_ceiling_sends_the_services_statements(postgresql_url, monkeypatch, history):
    truncate_all(postgresql_url)
    settings = Settings(database_url=postgresql_url, auto_migrate=False, history=history)
    sent = _statements_sent(monkeypatch)
    with TestClient(create_app(settings, clock=FakeClock())) as client:
        assert put(client, hourglass.QUEUE, "one", {"n": 1}).status_code == 201
        batch = {"messages": [{"key": f"b{i}", "payload": i} for i in range(3)]}
        assert client.post(f"/v1/queues/{hourglass.QUEUE}/batch", json=batch).status_code == 200
        for limit in (1, 100):
            polled = poll(client, hourglass.QUEUE, max=limit)
            assert polled["messages"]
            deleted = client.delete(f"/v1/queues/{hourglass.QUEUE}/locks/{polled['lock_id']}")
            assert deleted.status_code == 204
        # A lock acknowledged on the next poll (decision 21), as the drain of one does.
        assert put(client, hourglass.QUEUE, "two", {"n": 2}).status_code == 201
        lock_id = poll(client, hourglass.QUEUE)["lock_id"]
        assert poll(client, hourglass.QUEUE, ack={"lock_id": lock_id})["acknowledged"] == ["two"]

    acknowledge = hourglass.ACKNOWLEDGE_RECORDED if history else hourglass.ACKNOWLEDGE
    keys = hourglass.ACKNOWLEDGE_KEYS_RECORDED if history else hourglass.ACKNOWLEDGE_KEYS
    ceiling = {
        "offer": hourglass.OFFER,
        "batch offer": hourglass.OFFER_ROWS,
        "poll of one": hourglass.CLAIM_ONE,
        "poll of many": hourglass.CLAIM_MANY,
        "acknowledge": acknowledge,
        "acknowledge on a poll": keys,
    }
    assert {name for name, text in ceiling.items() if text not in sent} == set()
