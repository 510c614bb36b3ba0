"""Single offers, acknowledgements and releases that arrive while one of their kind runs share
the next statement (app/storage/coalescing.py, decision 23), on every database: each caller
gets what it would have got going alone, in order of arrival, and the tables end as they would.

Each scenario runs twice on the same clean database: first every call at once, on one event
loop (`asyncio.gather` starts them in order: the first goes alone, the others arrive while it
runs and go together next), then, from the same start, one call after another. The answers
and the rows of both tables must be the same, and are checked against what they must be.
Each call passes its own `now`: a row's createdAt, and a history row's finishedAt, tell which
caller's statement wrote it, so a row given to the wrong caller of a shared statement shows.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from typing import Any

from app.domain.messages import IfExists, Offer, OfferOutcome, Outcome
from app.domain.trace import Trace
from app.storage.blocking import BlockingStorage
from app.storage.store import Storage
from tests.conftest import START_MS, Database, truncate_all
from tests.support.helpers import history_rows, stored_rows

QUEUE = "coalesced"
OTHER = "coalesced-other"
LEASE_MS = 60_000
# Lock ids as the service hands them out; the unknown one holds nothing anywhere.
LOCK_A = "00000000-0000-4000-8000-00000000000a"
LOCK_B = "00000000-0000-4000-8000-00000000000b"
LOCK_C = "00000000-0000-4000-8000-00000000000c"
LOCK_D = "00000000-0000-4000-8000-00000000000d"
LOCK_OTHER = "00000000-0000-4000-8000-0000000000ff"
# A lock of the other queue that no call asks for there: asked for in QUEUE, it must hold
# nothing (a statement that matched lock ids across queues would take its messages).
LOCK_ELSEWHERE = "00000000-0000-4000-8000-0000000000ee"
UNKNOWN_LOCK = "00000000-0000-4000-8000-000000000000"
POLLED_AT = START_MS + 1_000
# Each call's own time: after the poll, one millisecond apart.
CALLED_AT = START_MS + 2_000

Call = Callable[[Storage], Awaitable[Any]]


class Statements:
    """The statements the store sends while `recording()` is open."""

    def __init__(self, store: BlockingStorage) -> None:
        self.sent: list[str] | None = None
        store.listen_statements(self._heard)

    def _heard(self, statement: str) -> None:
        if self.sent is not None:
            self.sent.append(statement)

    @contextmanager
    def recording(self) -> Iterator[list[str]]:
        self.sent = []
        try:
            yield self.sent
        finally:
            self.sent = None


def count(statements: list[str], pattern: str) -> int:
    return sum(1 for statement in statements if re.search(pattern, statement, re.IGNORECASE))


def state(url: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The message and history tables, without ids, in an order of their own."""
    messages = [{k: v for k, v in row.items() if k != "id"} for row in stored_rows(url)]
    history = history_rows(url)
    return (
        sorted(messages, key=lambda row: (row["pKind"], row["pKey"])),
        sorted(history, key=lambda row: (row["queue"], row["key"], row["finishedAt"])),
    )


def both_ways(
    store: BlockingStorage,
    database: Database,
    prepare: Callable[[BlockingStorage], None],
    calls: list[Call],
    shared: Callable[[list[str]], int] | None = None,
) -> list[Any]:
    """Run `calls` at once, then one by one, each time on a clean database `prepare`d the
    same way; check that both give the same answers and tables, and that `shared` (what
    matters of the statements sent) counts fewer statements than callers at once. The
    answers."""
    statements = Statements(store)
    prepare(store)

    async def at_once() -> list[Any]:
        return await asyncio.gather(*(call(store.storage) for call in calls))

    with statements.recording() as sent:
        together = store.wait(at_once())
    if shared is not None:
        # Proof that they shared: one statement for each call would be len(calls).
        assert shared(sent) < len(calls), sent
    after_together = state(database.url)

    truncate_all(database.url)
    prepare(store)
    one_by_one = [store.wait(call(store.storage)) for call in calls]
    assert together == one_by_one
    after_one_by_one = state(database.url)
    assert after_together == after_one_by_one, differences(after_together, after_one_by_one)
    return together


def differences(together: tuple[list, list], one_by_one: tuple[list, list]) -> str:
    """The rows that differ, by table and key, as (at once, one by one) values: the tables'
    whole contents are too long to read in an assertion's message."""
    lines = []
    for name, shared, alone in zip(("messages", "history"), together, one_by_one, strict=True):
        by_key = [
            {(row.get("pKind") or row["queue"], row.get("pKey") or row["key"]): row for row in rows}
            for rows in (shared, alone)
        ]
        for key in sorted(by_key[0].keys() | by_key[1].keys()):
            row, other = by_key[0].get(key, {}), by_key[1].get(key, {})
            if row != other:
                changed = {
                    k: (row.get(k), other.get(k)) for k in row | other if row.get(k) != other.get(k)
                }
                lines.append(f"{name} {key}: {changed}")
    return "\n".join(lines)


def offer(
    queue: str,
    key: str,
    payload: str,
    index: int,
    *,
    if_exists: IfExists = IfExists.UPDATE,
    due: int = START_MS,
    priority: int = 0,
) -> Call:
    """The `index`-th caller's single offer (its `now`: CALLED_AT + index), with a trace
    context of its own."""
    message = Offer(key, f'"{payload}"'.encode(), due, if_exists, priority, trace=traced(index))

    async def call(storage: Storage) -> OfferOutcome | None:
        return await storage.messages.offer(queue, message, CALLED_AT + index)

    return call


def traced(index: int) -> Trace:
    """The `index`-th caller's trace context."""
    return Trace(f"00-{index + 1:032x}-{index + 1:016x}-01", f"caller={index}")


def leased(store: BlockingStorage, queue: str, lock_id: str, keys: list[str]) -> None:
    """Offer `keys` to `queue` and lease exactly them to `lock_id`."""
    offers = [Offer(key, b"1", START_MS + index) for index, key in enumerate(keys)]
    store.messages.offer_many(queue, offers, START_MS)
    claim = store.leases.poll(queue, len(keys), lock_id, POLLED_AT + LEASE_MS, POLLED_AT)
    assert sorted(delivery.message.key for delivery in claim.deliveries) == sorted(keys)


def test_concurrent_single_offers_answer_and_store_as_one_after_another(store, clean_database):
    """New keys, a key the lone first caller created, existing keys changed (updated) or
    not (ignored), a key offered twice and one thrice within the shared statement,
    if_exists=ignore, and one key name in two queues. Broken by a shared statement that
    lets a later caller's row in before an earlier one's (the stored payload and createdAt
    would be the later one's; its caller would answer `created`), that gives a row to the
    wrong caller, or that matches keys across queues."""

    def prepare(store: BlockingStorage) -> None:
        existing = [
            Offer("changed", b'"old"', START_MS),
            Offer("same", b'"same"', START_MS),
            Offer("kept", b'"kept"', START_MS),
        ]
        store.messages.offer_many(QUEUE, existing, START_MS)
        store.messages.offer_many(OTHER, [Offer("changed", b'"other-old"', START_MS)], START_MS)

    calls = [
        offer(QUEUE, "new-0", "a", 0),  # alone: nothing of its kind runs yet
        offer(QUEUE, "new-1", "b", 1),  # the rest arrive while it runs: one statement
        offer(QUEUE, "twice", "first", 2),
        offer(QUEUE, "changed", "new", 3),
        offer(QUEUE, "same", "same", 4),
        offer(QUEUE, "twice", "second", 5),
        offer(QUEUE, "thrice", "one", 6),
        offer(QUEUE, "thrice", "two", 7, if_exists=IfExists.IGNORE),
        offer(QUEUE, "thrice", "three", 8, if_exists=IfExists.IGNORE),
        offer(QUEUE, "kept", "not-kept", 9, if_exists=IfExists.IGNORE),
        offer(OTHER, "new-1", "b-other", 10),
        offer(OTHER, "changed", "other-new", 11),
        offer(QUEUE, "new-0", "a", 12),  # what the lone caller created: unchanged
        offer(QUEUE, "later", "c", 13, due=START_MS + 5_000, priority=5),
    ]
    outcomes = both_ways(
        store,
        clean_database,
        prepare,
        calls,
        shared=lambda sent: count(sent, r"^\s*INSERT (IGNORE )?INTO .?delayed_queue"),
    )
    assert [each.outcome for each in outcomes] == [
        Outcome.CREATED,
        Outcome.CREATED,
        Outcome.CREATED,
        Outcome.UPDATED,
        Outcome.IGNORED,
        Outcome.UPDATED,
        Outcome.CREATED,
        Outcome.IGNORED,
        Outcome.IGNORED,
        Outcome.IGNORED,
        Outcome.CREATED,
        Outcome.UPDATED,
        Outcome.IGNORED,
        Outcome.CREATED,
    ]
    assert outcomes[13].scheduled_at == START_MS + 5_000
    messages, _ = state(clean_database.url)
    stored = {(row["pKind"], row["pKey"]): row for row in messages}
    assert {
        name: (
            row["payload"],
            row["createdAt"] - CALLED_AT if row["createdAt"] >= CALLED_AT else None,
        )
        for name, row in stored.items()
    } == {
        (QUEUE, "changed"): (b'"new"', 3),
        (QUEUE, "same"): (b'"same"', None),
        (QUEUE, "kept"): (b'"kept"', None),
        (QUEUE, "new-0"): (b'"a"', 0),
        (QUEUE, "new-1"): (b'"b"', 1),
        (QUEUE, "twice"): (b'"second"', 5),  # created by the first, updated by the second
        (QUEUE, "thrice"): (b'"one"', 6),
        (QUEUE, "later"): (b'"c"', 13),
        (OTHER, "changed"): (b'"other-new"', 11),
        (OTHER, "new-1"): (b'"b-other"', 10),
    }
    assert stored[QUEUE, "later"]["priority"] == 5
    # Each row's trace context is its writer's: a shared statement gives none to another
    # caller, and an ignored offer (whose trace differs) leaves the stored one.
    for row in stored.values():
        writer = row["createdAt"] - CALLED_AT if row["createdAt"] >= CALLED_AT else None
        assert row["trace"] == (None if writer is None else traced(writer).stored())


def test_the_shared_offers_go_in_one_statement_per_queue(store, clean_database):
    """Calls go together per queue (a queue whose rows are locked holds back no other's):
    the first caller of each of the two queues goes alone, and the waiting callers of each
    queue share one INSERT (on PostgreSQL an INSERT … SELECT FROM unnest(…), elsewhere one
    multi-row INSERT in one transaction): four INSERTs for twelve callers on every
    database. Broken by a statement per caller, or by callers of two queues sharing one."""
    statements = Statements(store)
    calls = [offer(QUEUE if index % 2 else OTHER, f"k{index}", "x", index) for index in range(12)]

    async def at_once() -> list[Any]:
        return await asyncio.gather(*(call(store.storage) for call in calls))

    with statements.recording() as sent:
        outcomes = store.wait(at_once())
    assert [each.outcome for each in outcomes] == [Outcome.CREATED] * 12
    inserts = count(sent, r"^\s*INSERT (IGNORE )?INTO .?delayed_queue")
    assert inserts == 4, sent
    assert len(stored_rows(clean_database.url)) == 12


def acknowledge(queue: str, lock_id: str, index: int) -> Call:
    async def call(storage: Storage) -> int:
        return await storage.leases.acknowledge(queue, lock_id, CALLED_AT + index)

    return call


def acknowledge_keys_of_lock(queue: str, lock_id: str, index: int) -> Call:
    async def call(storage: Storage) -> list[str]:
        keys = await storage.leases.acknowledge_keys_of_lock(queue, lock_id, CALLED_AT + index)
        return sorted(keys)  # in no particular order, alone or shared

    return call


def acknowledge_keys(queue: str, lock_id: str, keys: list[str], index: int) -> Call:
    async def call(storage: Storage) -> list[str]:
        deleted = await storage.leases.acknowledge_keys(queue, lock_id, keys, CALLED_AT + index)
        return sorted(deleted)

    return call


def finished_by(url: str) -> dict[tuple[str, str], tuple[str, int]]:
    """Each history row's (queue, key): its outcome, and which caller (index) finished it."""
    finished: dict[tuple[str, str], tuple[str, int]] = {}
    for row in history_rows(url):
        assert (row["queue"], row["key"]) not in finished, f"recorded twice: {row}"
        finished[row["queue"], row["key"]] = (row["outcome"], row["finishedAt"] - CALLED_AT)
    return finished


def test_concurrent_whole_lock_acknowledgements_answer_and_record_as_one_after_another(
    store, clean_database
):
    """Counted (DELETE …/locks/{id}) and with their keys (a poll's `ack`), each kind sharing
    its own statement: two locks, a lock twice (once after the lone caller took it, once
    within the shared statement), a lock of another queue, an unknown lock. Broken by
    counting a row for both callers of one lock, by giving it to the later one (its
    history row's finishedAt would say so), or by matching a lock id in the wrong queue."""

    def prepare(store: BlockingStorage) -> None:
        leased(store, QUEUE, LOCK_A, ["a1", "a2", "a3"])
        leased(store, QUEUE, LOCK_B, ["b1", "b2", "b3"])
        leased(store, QUEUE, LOCK_C, ["c1", "c2", "c3", "c4"])
        leased(store, QUEUE, LOCK_D, ["d1", "d2"])
        leased(store, OTHER, LOCK_OTHER, ["o1", "o2"])
        leased(store, OTHER, LOCK_ELSEWHERE, ["e1"])

    calls = [
        acknowledge(QUEUE, LOCK_A, 0),  # alone
        acknowledge(QUEUE, LOCK_B, 1),  # the rest of its kind: one statement
        acknowledge(QUEUE, LOCK_A, 2),
        acknowledge(QUEUE, LOCK_B, 3),
        acknowledge(QUEUE, LOCK_ELSEWHERE, 4),
        acknowledge(QUEUE, UNKNOWN_LOCK, 5),
        acknowledge(OTHER, LOCK_OTHER, 6),
        acknowledge_keys_of_lock(QUEUE, LOCK_C, 7),  # alone, of its own kind
        acknowledge_keys_of_lock(QUEUE, LOCK_D, 8),
        acknowledge_keys_of_lock(QUEUE, LOCK_C, 9),
        acknowledge_keys_of_lock(QUEUE, LOCK_D, 10),
        acknowledge_keys_of_lock(QUEUE, LOCK_ELSEWHERE, 11),
        acknowledge_keys_of_lock(QUEUE, UNKNOWN_LOCK, 12),
    ]
    postgresql = clean_database.name == "postgresql"
    answers = both_ways(
        store,
        clean_database,
        prepare,
        calls,
        shared=(lambda sent: count(sent, r"DELETE FROM .?delayed_queue")) if postgresql else None,
    )
    assert answers[:7] == [3, 3, 0, 0, 0, 0, 2]
    assert answers[7:] == [["c1", "c2", "c3", "c4"], ["d1", "d2"], [], [], [], []]
    assert [(row["pKey"], row["lockUuid"]) for row in stored_rows(clean_database.url)] == [
        ("e1", LOCK_ELSEWHERE)
    ]
    by_caller = {"a": 0, "b": 1, "o": 6, "c": 7, "d": 8}
    assert finished_by(clean_database.url) == {
        (OTHER if key[0] == "o" else QUEUE, key): ("acknowledged", by_caller[key[0]])
        for key in ["a1", "a2", "a3", "b1", "b2", "b3", "c1", "c2", "c3", "c4", "d1", "d2"]
        + ["o1", "o2"]
    }


def test_concurrent_acknowledgements_by_key_answer_and_record_as_one_after_another(
    store, clean_database
):
    """Overlapping keys of one lock (with the lone first caller, and within the shared
    statement), keys the lock never held, a lock asked for in another queue, an unknown
    lock. Broken by a key acknowledged for two callers, given to the later one, or
    recorded twice."""

    def prepare(store: BlockingStorage) -> None:
        leased(store, QUEUE, LOCK_A, ["k1", "k2", "k3", "k4", "k5", "k6"])
        leased(store, QUEUE, LOCK_B, ["l1", "l2", "l3"])

    calls = [
        acknowledge_keys(QUEUE, LOCK_A, ["k1", "k2"], 0),  # alone
        acknowledge_keys(QUEUE, LOCK_A, ["k2", "k3", "k4"], 1),
        acknowledge_keys(QUEUE, LOCK_A, ["k4", "k5"], 2),
        acknowledge_keys(QUEUE, LOCK_A, ["k6", "k5"], 3),
        acknowledge_keys(QUEUE, LOCK_B, ["l1", "never"], 4),
        acknowledge_keys(OTHER, LOCK_B, ["l3"], 5),  # the lock is QUEUE's
        acknowledge_keys(QUEUE, UNKNOWN_LOCK, ["k6"], 6),
        acknowledge_keys(QUEUE, LOCK_A, ["l2"], 7),  # another lock's key
        acknowledge_keys(QUEUE, LOCK_B, ["l2"], 8),
    ]
    postgresql = clean_database.name == "postgresql"
    answers = both_ways(
        store,
        clean_database,
        prepare,
        calls,
        shared=(lambda sent: count(sent, r"DELETE FROM .?delayed_queue")) if postgresql else None,
    )
    assert answers == [
        ["k1", "k2"],
        ["k3", "k4"],
        ["k5"],
        ["k6"],
        ["l1"],
        [],
        [],
        [],
        ["l2"],
    ]
    assert [(row["pKey"], row["lockUuid"]) for row in stored_rows(clean_database.url)] == [
        ("l3", LOCK_B)
    ]
    assert finished_by(clean_database.url) == {
        (QUEUE, "k1"): ("acknowledged", 0),
        (QUEUE, "k2"): ("acknowledged", 0),
        (QUEUE, "k3"): ("acknowledged", 1),
        (QUEUE, "k4"): ("acknowledged", 1),
        (QUEUE, "k5"): ("acknowledged", 2),
        (QUEUE, "k6"): ("acknowledged", 3),
        (QUEUE, "l1"): ("acknowledged", 4),
        (QUEUE, "l2"): ("acknowledged", 8),
    }


def release(queue: str, lock_id: str, index: int) -> Call:
    """The `index`-th caller's release, due again at CALLED_AT + index * 10."""

    async def call(storage: Storage) -> int:
        return await storage.leases.release(queue, lock_id, CALLED_AT + index * 10)

    return call


def test_concurrent_releases_count_as_one_after_another_and_come_back_as_redeliveries(
    store, clean_database
):
    """Two locks, a lock twice (after the lone caller, and within the shared statement), an
    unknown lock, a lock asked for in another queue. Broken by counting a lock's messages
    for both its callers, by giving them the later caller's due time, or by leaving them
    anything but redeliveries on the next poll."""

    def prepare(store: BlockingStorage) -> None:
        leased(store, QUEUE, LOCK_A, ["a1", "a2", "a3"])
        leased(store, QUEUE, LOCK_B, ["b1", "b2"])
        leased(store, OTHER, LOCK_OTHER, ["o1"])
        leased(store, OTHER, LOCK_ELSEWHERE, ["e1"])

    calls = [
        release(QUEUE, LOCK_A, 0),  # alone
        release(QUEUE, LOCK_B, 1),
        release(QUEUE, LOCK_A, 2),
        release(QUEUE, LOCK_B, 3),
        release(QUEUE, UNKNOWN_LOCK, 4),
        release(QUEUE, LOCK_ELSEWHERE, 5),
        release(OTHER, LOCK_OTHER, 6),
    ]
    postgresql = clean_database.name == "postgresql"
    answers = both_ways(
        store,
        clean_database,
        prepare,
        calls,
        shared=(lambda sent: count(sent, r"^\s*UPDATE .?delayed_queue")) if postgresql else None,
    )
    assert answers == [3, 2, 0, 0, 0, 0, 1]
    due = {
        row["pKey"]: (row["lockUuid"], row["scheduledAt"])
        for row in stored_rows(clean_database.url)
    }
    assert due == {
        "a1": (None, CALLED_AT),
        "a2": (None, CALLED_AT),
        "a3": (None, CALLED_AT),
        "b1": (None, CALLED_AT + 10),
        "b2": (None, CALLED_AT + 10),
        "o1": (None, CALLED_AT + 60),
        "e1": (LOCK_ELSEWHERE, POLLED_AT + LEASE_MS),
    }
    polled_again = CALLED_AT + 1_000
    for queue, expected in ((QUEUE, ["a1", "a2", "a3", "b1", "b2"]), (OTHER, ["o1"])):
        claim = store.leases.poll(queue, 10, LOCK_C, polled_again + LEASE_MS, polled_again)
        assert sorted(each.message.key for each in claim.deliveries) == expected
        assert {(each.redelivery, each.message.deliveries) for each in claim.deliveries} == {
            (True, 2)
        }
