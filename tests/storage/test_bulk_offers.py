"""offer_bulk (the import's way in) against offer_many: the same outcomes and the same rows."""

from __future__ import annotations

import random

import pytest

from app.domain.messages import IfExists, Offer
from app.domain.trace import Trace
from app.storage import offers as offers_module
from app.storage.store import Storage
from tests.conftest import START_MS
from tests.support.helpers import stored_rows

# Stored values to compare; the id and the queue differ by construction.
_COMPARED = (
    "pKey",
    "payload",
    "scheduledAt",
    "scheduledAtInitially",
    "createdAt",
    "priority",
    "trace",
)
# Trace contexts some offers carry (the import's carry none; the storage takes any).
_TRACES = (None, Trace("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "a=1"))


def _offers(rng: random.Random, count: int) -> list[Offer]:
    """Offers over few keys, so that keys repeat within a batch and across batches,
    with payloads, times and priorities that often equal those stored already."""
    return [
        Offer(
            key=f"k{rng.randrange(40)}",
            payload=b'{"v":%d}' % rng.randrange(3),
            scheduled_at=START_MS + rng.randrange(2) * 1000,
            if_exists=rng.choice((IfExists.UPDATE, IfExists.IGNORE)),
            priority=rng.randrange(2),
            trace=rng.choice(_TRACES),
        )
        for _ in range(count)
    ]


def _by_queue(url: str) -> dict[str, list[tuple]]:
    rows: dict[str, list[tuple]] = {}
    for row in stored_rows(url):  # by id: the order rows went in
        rows.setdefault(row["pKind"], []).append(tuple(row[name] for name in _COMPARED))
    return rows


@pytest.mark.parametrize("seed", range(6))
def test_bulk_offers_match_batch_offers_outcome_for_outcome_and_row_for_row(
    store: Storage, clean_database, monkeypatch, seed
):
    if store.dialect.bulk_rows is None:
        pytest.skip(f"{clean_database.name} has no bulk path: offer_bulk is offer_many there")
    # Several bulk transactions per call.
    monkeypatch.setattr(store.dialect, "bulk_rows", 7)
    rng = random.Random(seed)
    for step in range(4):
        offers = _offers(rng, rng.randrange(1, 60))
        now = START_MS + step
        assert store.messages.offer_bulk("bulk", offers, now) == store.messages.offer_many(
            "many", offers, now
        )
    rows = _by_queue(clean_database.url)
    assert rows["bulk"] == rows["many"]


def test_bulk_rows_go_in_in_input_order(store: Storage, clean_database, monkeypatch):
    """Ids follow the input, as in the chunked path: the poll's last tie-break."""
    if store.dialect.bulk_rows is None:
        pytest.skip(f"{clean_database.name} has no bulk path: offer_bulk is offer_many there")
    monkeypatch.setattr(store.dialect, "bulk_rows", 500)
    keys = [f"k{index}" for index in random.Random(1).sample(range(100_000), 1200)]
    store.messages.offer_bulk("q", [Offer(key, b"1", START_MS) for key in keys], START_MS)
    assert [row["pKey"] for row in stored_rows(clean_database.url)] == keys


def test_a_bulk_transaction_carries_at_most_bulk_bytes(store: Storage, clean_database, monkeypatch):
    """Large payloads cut the bulk path's transactions by bytes as well as by rows, with the
    same outcomes and rows as offer_many."""
    if store.dialect.bulk_rows is None:
        pytest.skip(f"{clean_database.name} has no bulk path: offer_bulk is offer_many there")
    monkeypatch.setattr(offers_module, "BULK_BYTES", 3 * (2 * 1000 + 1024))  # three such rows
    pieces: list[int] = []
    insert_bulk = store.dialect.insert_bulk

    async def counted(connection, queue, offers, now):
        pieces.append(len(offers))
        return await insert_bulk(connection, queue, offers, now)

    monkeypatch.setattr(store.dialect, "insert_bulk", counted)
    offers = [
        Offer(key=f"k{n}", payload=b'"%s"' % (b"x" * 998), scheduled_at=START_MS, priority=0)
        for n in range(10)
    ]
    assert store.messages.offer_bulk("bulk", offers, START_MS) == store.messages.offer_many(
        "many", offers, START_MS
    )
    assert pieces == [3, 3, 3, 1]
    rows = _by_queue(clean_database.url)
    assert rows["bulk"] == rows["many"]
