"""Races at the storage level, many threads against one database."""

from __future__ import annotations

import threading
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

import pytest

from app.domain.messages import IfExists, Offer, Outcome

# Every test here runs through both ways a batch offer inserts (tests/conftest.py).
pytestmark = pytest.mark.usefixtures("batch_insert_path")

NOW = 1_000_000


def test_many_threads_updating_one_key_each_win_once(store):
    threads, rounds = 8, 25
    barrier = threading.Barrier(threads)

    def update(worker: int) -> list[Outcome]:
        outcomes = []
        for round_ in range(rounds):
            barrier.wait(30)
            offer = Offer(key="hot", payload=f'"{worker}-{round_}"'.encode(), scheduled_at=NOW)
            outcomes.append(store.messages.offer("q", offer, NOW).outcome)
        return outcomes

    with ThreadPoolExecutor(threads) as pool:
        outcomes = Counter(
            o for f in [pool.submit(update, w) for w in range(threads)] for o in f.result()
        )
    assert outcomes[Outcome.CREATED] == 1
    assert outcomes[Outcome.UPDATED] == threads * rounds - 1
    assert store.messages.stats("q", NOW).messages == 1


def test_concurrent_polls_never_share_a_message(store):
    messages, threads = 600, 8
    offers = [Offer(key=f"k{index}", payload=b"1", scheduled_at=NOW) for index in range(messages)]
    assert store.messages.offer_many("q", offers, NOW).count(Outcome.CREATED) == messages
    barrier = threading.Barrier(threads)

    def drain(worker: int) -> list[str]:
        taken = []
        barrier.wait(30)
        while deliveries := store.leases.poll(
            "q", 1 + worker % 3 * 5, f"lock-{worker}", NOW + 60_000, NOW
        ).deliveries:
            taken.extend(delivery.message.key for delivery in deliveries)
        return taken

    with ThreadPoolExecutor(threads) as pool:
        taken = [key for f in [pool.submit(drain, w) for w in range(threads)] for key in f.result()]
    assert len(taken) == messages
    assert sorted(set(taken)) == sorted(offer.key for offer in offers)


def test_concurrent_batches_with_overlapping_keys(store):
    threads = 6
    keys = [f"k{index}" for index in range(300)]
    barrier = threading.Barrier(threads)

    def batch(worker: int) -> list[Outcome]:
        barrier.wait(30)
        offers = [
            Offer(key=key, payload=b"1", scheduled_at=NOW, if_exists=IfExists.IGNORE)
            for key in keys
        ]
        return store.messages.offer_many("q", offers, NOW)

    with ThreadPoolExecutor(threads) as pool:
        results = [f.result() for f in [pool.submit(batch, w) for w in range(threads)]]
    for index in range(len(keys)):
        assert sorted(result[index] for result in results) == [Outcome.CREATED] + [
            Outcome.IGNORED
        ] * (threads - 1)
    assert store.messages.stats("q", NOW).messages == len(keys)
