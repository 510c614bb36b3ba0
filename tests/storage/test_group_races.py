"""The keeper's pass against a change that commits between what it reads and what it
moves (docs/decisions/0027-message-groups.md): a message it planned to bring into its
group's front, moved meanwhile to another group, or a front message it planned to send
back, leased meanwhile. The pass must move neither, and no front may pass the group's
concurrency. On PostgreSQL and MariaDB; SQLite's writers take turns, so nothing commits
inside a pass there."""

from __future__ import annotations

import uuid

import pytest
from sqlalchemy import create_engine, select, update

from app.domain.messages import Offer, waiting_priority
from app.storage.groups import SqlGroups
from app.storage.tables import delayed_queue

NOW = 1_000_000


@pytest.fixture
def server_store(store):
    if store.dialect.name == "sqlite":
        pytest.skip("SQLite's writers take turns: no change commits inside a pass")
    return store


def _fronts(url: str) -> dict[str, list[str]]:
    engine = create_engine(url)
    try:
        with engine.connect() as connection:
            rows = connection.execute(
                select(delayed_queue.c.messageGroup, delayed_queue.c.pKey).where(
                    delayed_queue.c.priority >= 0
                )
            ).all()
    finally:
        engine.dispose()
    fronts: dict[str, list[str]] = {}
    for group, key in rows:
        fronts.setdefault(group, []).append(key)
    return fronts


def _meanwhile(monkeypatch, url: str, change) -> None:
    """Run `change(connection)` in a transaction of its own, committed, right after the
    keeper's pass has read the groups' waiting messages."""
    read = SqlGroups._waiting

    async def read_then_change(self, *args, **kwargs):
        found = await read(self, *args, **kwargs)
        engine = create_engine(url)
        try:
            with engine.begin() as connection:
                change(connection)
        finally:
            engine.dispose()
        monkeypatch.setattr(SqlGroups, "_waiting", read)  # once
        return found

    monkeypatch.setattr(SqlGroups, "_waiting", read_then_change)


def _offer(store, key: str, group: str, due: int) -> None:
    store.messages.offer("q", Offer(key=key, payload=b"1", scheduled_at=due, group=group), NOW)


def test_a_message_moved_to_another_group_meanwhile_is_not_brought_into_either(
    server_store, clean_database, monkeypatch
):
    store = server_store
    _offer(store, "f1", "g1", NOW - 10)
    _offer(store, "f2", "g2", NOW - 10)
    store.groups.settle("q", ["g1", "g2"], NOW)  # f1 and f2 in front
    _offer(store, "w", "g1", NOW - 20)  # earlier than f1: the pass would swap them
    key = delayed_queue.c.pKey == "w"

    def regroup(connection) -> None:  # as an update of "w" into g2 would
        connection.execute(update(delayed_queue).where(key).values(messageGroup="g2"))

    _meanwhile(monkeypatch, clean_database.url, regroup)
    store.groups.settle("q", ["g1"], NOW)
    fronts = _fronts(clean_database.url)
    assert fronts.get("g2") == ["f2"]  # not w: g2 holds one at most
    assert len(fronts.get("g1", [])) <= 1
    # The pass marked g1 again; the next puts the right message in each front.
    store.groups.settle("q", ["g1", "g2"], NOW)
    assert _fronts(clean_database.url) == {"g1": ["f1"], "g2": ["w"]}


def test_a_front_message_leased_meanwhile_is_not_sent_back_nor_doubled(
    server_store, clean_database, monkeypatch
):
    store = server_store
    _offer(store, "f", "g", NOW - 10)
    store.groups.settle("q", ["g"], NOW)
    _offer(store, "w", "g", NOW - 20)  # earlier: the pass plans f out, w in
    key = delayed_queue.c.pKey == "f"

    def lease(connection) -> None:  # as a poll that takes f would
        connection.execute(
            update(delayed_queue)
            .where(key)
            .values(lockUuid=str(uuid.uuid4()), scheduledAt=NOW + 60_000)
        )

    _meanwhile(monkeypatch, clean_database.url, lease)
    store.groups.settle("q", ["g"], NOW)
    assert _fronts(clean_database.url) == {"g": ["f"]}  # f leased, w still waiting
    engine = create_engine(clean_database.url)
    try:
        with engine.connect() as connection:
            stored = connection.execute(
                select(delayed_queue.c.priority).where(delayed_queue.c.pKey == "w")
            ).scalar()
    finally:
        engine.dispose()
    assert stored == waiting_priority(0)
