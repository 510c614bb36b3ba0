"""Coalesced and lone callers racing on the same keys and locks, on a real server process
over real HTTP, on PostgreSQL and MariaDB (app/storage/coalescing.py, decision 23).

Requests that arrive while one of their kind runs share the next statement (PostgreSQL) or
transaction (MariaDB); one that finds nothing running goes alone. Whichever way each went,
a key is created once, a message is acknowledged by exactly one answer, a lock is released
by exactly one, and the database, read directly, agrees with the answers.
"""

from __future__ import annotations

import json
import threading
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest

from tests.support.helpers import history_rows, stored_rows

pytestmark = pytest.mark.server_databases

TIMEOUT = 60
# Longer than any test: a message is never redelivered because its lease ran out.
LONG_LEASE = 600


def _client(base_url: str) -> httpx.Client:
    return httpx.Client(base_url=base_url, timeout=TIMEOUT)


def _at_once(workers: int, work: Callable[[int, threading.Barrier], Any]) -> list[Any]:
    """`work(worker, barrier)` on `workers` threads at once; their results, by worker."""
    barrier = threading.Barrier(workers)
    with ThreadPoolExecutor(workers) as pool:
        futures = [pool.submit(work, worker, barrier) for worker in range(workers)]
        return [future.result(timeout=10 * TIMEOUT) for future in futures]


KEYS = [f"key-{index:02d}" for index in range(20)]
OFFERERS = 16
UPDATERS = 4
# Offerers go in groups of four: in each round every group offers its own key, so four
# callers offer one key at once, beside three other keys (new in some rounds, taken in
# the others); over the rounds every offerer offers every key once.
GROUP = 4


def _offered_key(worker: int, round_: int) -> str:
    return KEYS[(round_ + worker // GROUP) % len(KEYS)]


def _updated_key(worker: int, round_: int) -> str:
    # The first updater updates the key the last group offers for the first time this
    # round (a race with its creation); the others, keys no group has offered yet (404)
    # or, wrapping around, keys long there (updated).
    return KEYS[(round_ + GROUP - 1 + worker) % len(KEYS)]


def test_many_clients_offering_and_updating_the_same_keys_create_each_once(base_url, server_url):
    """16 clients offer (PUT) the same 20 keys, four at a time on one key, while 4 others
    update them (POST, which never creates): every key is created by exactly one answer,
    in the first round that offered it; an update answers 404 only while its key cannot
    exist yet; nothing answers 5xx; one row per key, holding a payload some request sent.
    Broken by a shared INSERT that answers `created` to two callers of one key (or to none),
    that lets an update through to a key not yet created, or that writes a row twice."""
    queue = "offer-races"

    def work(worker: int, barrier: threading.Barrier) -> list[dict[str, Any]]:
        answers = []
        offering = worker < OFFERERS
        with _client(base_url) as client:
            for round_ in range(len(KEYS)):
                if offering:
                    key = _offered_key(worker, round_)
                else:
                    key = _updated_key(worker - OFFERERS, round_)
                payload = {"worker": worker, "round": round_}
                barrier.wait(TIMEOUT)  # every client fires at once
                send = client.put if offering else client.post
                response = send(f"/v1/queues/{queue}/messages/{key}", json={"payload": payload})
                answers.append(
                    {
                        "method": "PUT" if offering else "POST",
                        "key": key,
                        "round": round_,
                        "payload": payload,
                        "status": response.status_code,
                        "outcome": response.json().get("outcome"),
                        # What a 5xx said (a deadlock retried to the end, a lock wait).
                        "problem": response.json() if response.status_code >= 500 else None,
                    }
                )
        return answers

    answers = [answer for worker in _at_once(OFFERERS + UPDATERS, work) for answer in worker]
    failed = [answer for answer in answers if answer["status"] >= 500]
    assert not failed, f"{len(failed)} answers 5xx: {failed}"
    puts = [answer for answer in answers if answer["method"] == "PUT"]
    posts = [answer for answer in answers if answer["method"] == "POST"]
    assert len(puts) == OFFERERS * len(KEYS)
    assert all(
        answer["status"] == (201 if answer["outcome"] == "created" else 200) for answer in puts
    ), puts
    created = Counter(answer["key"] for answer in puts if answer["outcome"] == "created")
    assert created == dict.fromkeys(KEYS, 1)
    first_offered = {
        key: min(answer["round"] for answer in puts if answer["key"] == key) for key in KEYS
    }
    for answer in puts:
        if answer["outcome"] == "created":
            assert answer["round"] == first_offered[answer["key"]], answer
    for answer in posts:
        assert answer["outcome"] != "created", answer
        if answer["round"] < first_offered[answer["key"]]:
            assert answer["status"] == 404, answer  # nobody had offered it yet
        elif answer["round"] > first_offered[answer["key"]]:
            assert (answer["status"], answer["outcome"]) == (200, "updated"), answer
        else:  # raced with its creation: either way
            assert answer["status"] in (200, 404), answer
    assert {answer["status"] for answer in posts} == {200, 404}, "no race ever went both ways"

    rows = stored_rows(server_url)
    assert sorted(row["pKey"] for row in rows) == KEYS  # one row per key
    sent = {(answer["key"], json.dumps(answer["payload"], sort_keys=True)) for answer in answers}
    for row in rows:
        assert row["pKind"] == queue
        stored = json.dumps(json.loads(bytes(row["payload"])), sort_keys=True)
        assert (row["pKey"], stored) in sent, row


MESSAGES = 100
ROUNDS = 3
# Whole-lock acknowledgements: DELETE …/locks/{id} (204 or 404, counted), and a poll's
# `ack` of the whole lock (answering the keys it deleted), two clients each.
DELETE_CLIENTS = 2
POLL_ACK_CLIENTS = 2
WHOLE_LOCK_CLIENTS = DELETE_CLIENTS + POLL_ACK_CLIENTS
BY_KEY_CLIENTS = 8
# Only the whole-lock acknowledgements name the last messages: one of them always finds
# some left, so exactly one answers 204.
NAMED_BY_KEY = 80


def _key_sets(keys: list[str], worker: int) -> list[list[str]]:
    """Two overlapping windows of the first NAMED_BY_KEY keys for a by-key client: each
    key is named by two to four requests of different clients."""
    named = keys[:NAMED_BY_KEY]
    start = worker * 10
    return [named[start : start + 20], (named + named)[start + 35 : start + 55]]


def _filled_and_polled(client: httpx.Client, queue: str) -> tuple[str, list[str]]:
    """MESSAGES messages offered to `queue`, then leased by one poll: its lock, its keys."""
    keys = [f"m{index:03d}" for index in range(MESSAGES)]
    response = client.post(
        f"/v1/queues/{queue}/batch",
        json={"messages": [{"key": key, "payload": {"key": key}} for key in keys]},
    )
    assert response.status_code == 200, response.text
    polled = client.post(f"/v1/queues/{queue}/poll", json={"max": MESSAGES, "lease": LONG_LEASE})
    assert polled.status_code == 200, polled.text
    body = polled.json()
    assert sorted(message["key"] for message in body["messages"]) == keys
    return body["lock_id"], keys


def _acknowledged_at_once(
    base_url: str, queue: str, lock_id: str, keys: list[str]
) -> list[tuple[str, list[str] | None, int, Any]]:
    """WHOLE_LOCK_CLIENTS clients acknowledge the whole lock (by DELETE, or with a poll's
    `ack`) and BY_KEY_CLIENTS clients two windows of its keys each, all at once: (what,
    keys named, status, body) each."""

    def work(worker: int, barrier: threading.Barrier) -> list[tuple[str, Any, int, Any]]:
        with _client(base_url) as client:
            barrier.wait(TIMEOUT)
            if worker < DELETE_CLIENTS:
                response = client.delete(f"/v1/queues/{queue}/locks/{lock_id}")
                return [("DELETE", None, response.status_code, response.text)]
            if worker < WHOLE_LOCK_CLIENTS:
                response = client.post(
                    f"/v1/queues/{queue}/poll", json={"ack": {"lock_id": lock_id}}
                )
                return [("poll", None, response.status_code, response.json())]
            answers = []
            for named in _key_sets(keys, worker - WHOLE_LOCK_CLIENTS):
                response = client.post(
                    f"/v1/queues/{queue}/locks/{lock_id}/ack", json={"keys": named}
                )
                answers.append(("ack", named, response.status_code, response.json()))
            return answers

    clients = WHOLE_LOCK_CLIENTS + BY_KEY_CLIENTS
    return [answer for worker in _at_once(clients, work) for answer in worker]


def test_whole_lock_and_by_key_acknowledgements_of_one_lock_acknowledge_each_message_once(
    base_url, server_url
):
    """A poll leases 100 messages; 4 clients acknowledge the whole lock (2 by DELETE, 2 with
    a poll's `ack`, which answers the keys) while 8 acknowledge overlapping sets of its keys
    (two requests each), all at once; three rounds. Every message is acknowledged by
    exactly one answer: exactly one whole-lock acknowledgement finds messages left (the
    last 20 are named by no by-key request), so one DELETE answers 204 and the others 404,
    or one poll lists keys; no key is in two answers; the by-key answers and the winning
    poll's (when a poll won) add up to the 100 messages. One history row each,
    `acknowledged`; nothing left. Broken by a shared statement that answers one deleted
    row to two callers, or none; by a count that tells a caller it deleted what another
    did (two winners, or none); by a row deleted and not recorded, or recorded twice."""
    for round_ in range(ROUNDS):
        queue = f"ack-races-{round_}"
        with _client(base_url) as client:
            lock_id, keys = _filled_and_polled(client, queue)
        answers = _acknowledged_at_once(base_url, queue, lock_id, keys)
        assert [status for _, _, status, _ in answers if status >= 500] == []
        acknowledged: Counter[str] = Counter()
        for kind, named, status, body in answers:
            if kind == "ack":
                assert status == 200, body
                done, missing = set(body["acknowledged"]), set(body["missing"])
                assert not done & missing
                assert body["acknowledged"] == [key for key in named if key in done]
                assert body["missing"] == [key for key in named if key in missing]
                assert done | missing == set(named)
                acknowledged.update(body["acknowledged"])
            elif kind == "poll":
                assert status == 200, body
                assert (body["messages"], body["missing"]) == ([], [])
                acknowledged.update(body["acknowledged"])
        assert max(acknowledged.values(), default=1) == 1, "a key acknowledged by two answers"
        deletes = Counter(status for kind, _, status, _ in answers if kind == "DELETE")
        polls_that_took = [
            body for kind, _, _, body in answers if kind == "poll" and body["acknowledged"]
        ]
        if deletes[204]:
            # The DELETE took what was left: all but what the answers list.
            assert (deletes, polls_that_took) == ({204: 1, 404: DELETE_CLIENTS - 1}, []), answers
            assert set(keys) - set(acknowledged) >= set(keys[NAMED_BY_KEY:])
        else:
            assert (deletes, len(polls_that_took)) == ({404: DELETE_CLIENTS}, 1), answers
            assert sorted(acknowledged) == keys  # every message in exactly one answer

        history = [row for row in history_rows(server_url) if row["queue"] == queue]
        assert sorted(row["key"] for row in history) == keys  # once each
        assert {row["outcome"] for row in history} == {"acknowledged"}
        assert [row for row in stored_rows(server_url) if row["pKind"] == queue] == []


RELEASED_LOCKS = 5
PER_LOCK = 20
RELEASERS_PER_LOCK = 4


def test_many_clients_releasing_the_same_locks_release_each_once_at_its_winners_delay(
    base_url, server_url
):
    """Five polls lease 20 messages each; 20 clients release those five locks at once, four
    per lock, each client with its own delay (100 s apart). The first to arrive goes alone
    and the others share statements, where one lock is named by several callers: per lock
    exactly one answers 204, the others 404, and each lock's messages are due again at its
    204's delay, not another's; none is due now. Broken by a shared statement that applies
    a later caller's delay while the answer credits the first (as the PostgreSQL statement
    once did: a lock's rows were due at one of its 404s' delays), or that counts a lock's
    messages for two callers, or for none."""
    queue = "release-races"
    with _client(base_url) as client:
        keys = [f"m{index:03d}" for index in range(RELEASED_LOCKS * PER_LOCK)]
        response = client.post(
            f"/v1/queues/{queue}/batch",
            json={"messages": [{"key": key, "payload": {"key": key}} for key in keys]},
        )
        assert response.status_code == 200, response.text
        held = {}
        for _ in range(RELEASED_LOCKS):
            polled = client.post(
                f"/v1/queues/{queue}/poll", json={"max": PER_LOCK, "lease": LONG_LEASE}
            ).json()
            held[polled["lock_id"]] = sorted(message["key"] for message in polled["messages"])
    locks = list(held)

    def work(worker: int, barrier: threading.Barrier) -> tuple[str, int, int]:
        lock_id, delay = locks[worker % RELEASED_LOCKS], 100 * (worker + 1)
        with _client(base_url) as client:
            barrier.wait(TIMEOUT)
            response = client.post(
                f"/v1/queues/{queue}/locks/{lock_id}/release", json={"delay": delay}
            )
            return lock_id, delay, response.status_code

    before = time.time_ns() // 1_000_000
    answers = _at_once(RELEASED_LOCKS * RELEASERS_PER_LOCK, work)
    after = time.time_ns() // 1_000_000
    assert Counter((lock_id, status) for lock_id, _, status in answers) == {
        **{(lock_id, 204): 1 for lock_id in locks},
        **{(lock_id, 404): RELEASERS_PER_LOCK - 1 for lock_id in locks},
    }, answers
    winners = {lock_id: delay for lock_id, delay, status in answers if status == 204}

    rows = {row["pKey"]: row for row in stored_rows(server_url)}
    assert sorted(rows) == keys
    for lock_id, its_keys in held.items():
        released = [rows[key] for key in its_keys]
        assert {row["lockUuid"] for row in released} == {None}
        assert {row["deliveries"] for row in released} == {1}  # delivered once, released
        [due] = {row["scheduledAt"] for row in released}  # one statement's time for all
        delay = winners[lock_id] * 1000
        assert before + delay <= due <= after + delay, (winners[lock_id], due - before)
    with _client(base_url) as client:
        # Due only after the winners' delays: nothing to poll now.
        polled = client.post(f"/v1/queues/{queue}/poll", json={"max": MESSAGES})
        assert polled.status_code == 200, polled.text
        assert polled.json()["messages"] == []
