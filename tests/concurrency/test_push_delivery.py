"""Push delivery end to end (decision 16): real `hourglass serve` processes on
PostgreSQL pushing to the tests' receiver (tests/support/push_receiver.py) through 500s and
timeouts, a kill -9 and two replicas: every message acknowledged once, none lost, a key
sent again only after its earlier attempt failed or its sender died, never in flight twice.
"""

from __future__ import annotations

import os
import re
import signal
import statistics
import time
from bisect import bisect_right
from collections import Counter, defaultdict
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from itertools import pairwise

import httpx
import pytest
from sqlalchemy import Engine, create_engine, func, select

from app.domain.formats import parse_timestamp
from app.domain.messages import RetryPolicy
from app.storage.tables import delayed_queue, delivery_history
from tests.conftest import truncate_all
from tests.support.helpers import at, wait_until
from tests.support.push_receiver import (
    Fault,
    Outcome,
    Plan,
    PushReceiver,
    Receipt,
    always_ok,
    faults,
    header_key,
    push_receiver,
)
from tests.support.server import Server, running_server

pytestmark = pytest.mark.postgresql_only

QUEUE = "pushed"
SECRETS = ("new-secret", "old-secret")  # two, as during a rotation: both must sign
# Small delays, so retries come back within the test; no jitter, so each is exact.
RETRY = {"initial_delay": 0.1, "max_delay": 0.8, "multiplier": 2, "jitter": 0}
POLICY = RetryPolicy(initial_delay_ms=100, max_delay_ms=800, multiplier=2)
# A failed attempt's end and the next attempt's arrival are read on two clocks of this
# machine, a little after and a little before the server's own reading.
CLOCK_TOLERANCE = 0.05
# A retry's due time is read here from the receiver's clock as its failure ended (a little
# before the server's release): a message due this much after it may still go first.
DUE_SLACK = 1.0
# Requests claimed together reach the receiver in any order, within this much.
ARRIVAL_SLACK = 0.5
BATCH = 1000


# -- helpers -------------------------------------------------------------------------------


def _environment(receiver: PushReceiver) -> dict[str, str]:
    return {
        "HOURGLASS_PUSH_ALLOWED": receiver.url + "/",
        "HOURGLASS_PUSH_SECRETS": ",".join(SECRETS),
    }


def _configure(server: Server, receiver: PushReceiver, *, timeout: float, concurrency: int) -> None:
    push = {"url": f"{receiver.url}/hook", "timeout": timeout, "concurrency": concurrency}
    answer = httpx.put(
        f"{server.url}/v1/queues/{QUEUE}/settings",
        json={"retry": RETRY, "push": push},
        timeout=30,
    )
    assert answer.status_code == 200, answer.text
    assert answer.json()["push"] == push, answer.text


def _offer(url: str, keys: Sequence[str], first_due_ms: int, spread_ms: int) -> None:
    """Offer `keys` in batches, due one after another from `first_due_ms` over `spread_ms`."""
    step = spread_ms / len(keys)
    with httpx.Client(base_url=url, timeout=60) as client:
        for start in range(0, len(keys), BATCH):
            items = [
                {
                    "key": key,
                    "payload": {"n": start + n},
                    "scheduled_at": at(first_due_ms + round((start + n) * step)),
                }
                for n, key in enumerate(keys[start : start + BATCH])
            ]
            answer = client.post(f"/v1/queues/{QUEUE}/batch", json={"messages": items})
            assert answer.status_code == 200, answer.text
            assert answer.json()["created"] == len(items), answer.text


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


@dataclass(frozen=True)
class Settled:
    """The queue's end state in the database."""

    acknowledged: dict[str, tuple[int, int]]  # key -> (deliveries, finishedAt), one row each
    repeated: list[str]  # keys with more than one `acknowledged` row
    other_outcomes: Counter[str]
    left: int  # messages still in the queue


def _settled(engine: Engine) -> Settled:
    with engine.connect() as connection:
        rows = connection.execute(
            select(
                delivery_history.c.key,
                delivery_history.c.outcome,
                delivery_history.c.deliveries,
                delivery_history.c.finishedAt,
            ).where(delivery_history.c.queue == QUEUE)
        ).all()
        left = connection.execute(
            select(func.count()).select_from(delayed_queue).where(delayed_queue.c.pKind == QUEUE)
        ).scalar_one()
    acknowledged: dict[str, tuple[int, int]] = {}
    repeated: list[str] = []
    other: Counter[str] = Counter()
    for key, outcome, deliveries, finished_at in rows:
        if outcome != "acknowledged":
            other[outcome] += 1
        elif key in acknowledged:
            repeated.append(key)
        else:
            acknowledged[key] = (deliveries, finished_at)
    return Settled(acknowledged, repeated, other, left)


@contextmanager
def _database(url: str) -> Iterator[Engine]:
    truncate_all(url)
    engine = create_engine(url)
    try:
        yield engine
    finally:
        engine.dispose()


def _wait_settled(engine: Engine, count: int, timeout: float) -> Settled:
    """Once the receiver has answered every key 2xx, the last acknowledgements may still
    be on their way to the database (another process: no event to wait on)."""
    wait_until(
        lambda: (state := _settled(engine)).left == 0 and len(state.acknowledged) >= count,
        timeout,
        "the queue to be empty and every message acknowledged",
    )
    return _settled(engine)


_SAMPLE = re.compile(r"^hourglass_push_requests_total\{(?P<labels>[^}]*)\} (?P<value>\S+)$")


def _push_requests(url: str) -> Counter[str]:
    """The server's `hourglass_push_requests_total` of the queue, by result."""
    text = httpx.get(f"{url}/metrics", timeout=30).text
    counts: Counter[str] = Counter()
    for line in text.splitlines():
        if match := _SAMPLE.match(line):
            labels = dict(re.findall(r'(\w+)="([^"]*)"', match["labels"]))
            if labels.get("queue") == QUEUE:
                counts[labels["result"]] += int(float(match["value"]))
    return counts


def _by_key(receipts: Sequence[Receipt]) -> dict[str, list[Receipt]]:
    attempts: dict[str, list[Receipt]] = defaultdict(list)
    for receipt in sorted(receipts, key=lambda r: r.arrived):
        attempts[receipt.key].append(receipt)
    return attempts


def _failed(receipt: Receipt) -> bool:
    """An attempt the receiver made fail: a 500 answered, or held until the sender gave up."""
    return (receipt.status == 500) or (
        receipt.fault is Fault.HOLD and receipt.outcome is Outcome.SENDER_LEFT
    )


def _check_requests(receipts: Sequence[Receipt]) -> None:
    """Every request as push delivery promises (docs/guide/push.md): a POST to the target,
    signed with both secrets, its headers naming its message; and never two of one key in
    flight at once."""
    wrong = [
        receipt
        for receipt in receipts
        if receipt.request != "POST /hook"
        or receipt.signature_valid is not True
        or header_key(receipt) != receipt.key
        or receipt.headers.get("hourglass-queue") != QUEUE
        or not receipt.lock
        or receipt.headers.get("content-type") != "application/json"
    ]
    assert not wrong, f"{len(wrong)} requests not as push delivery promises, e.g. {wrong[0]}"
    overlapped = [receipt for receipt in receipts if receipt.overlapped]
    assert not overlapped, (
        f"{len(overlapped)} requests arrived while another of their key was in flight, "
        f"e.g. {[(r.key, r.delivery, r.lock) for r in overlapped[:5]]}"
    )


@dataclass(frozen=True)
class Accounting:
    """Where every delivery of every key went (a delivery is one claim: one request)."""

    keys: int
    deliveries: int  # counted by the database: the history's `deliveries`, summed
    requests: int  # received by the receiver
    failed: int  # received and made to fail by the receiver (500, or held)
    late: int  # answered 2xx, yet sent again: the sender's timeout ran out first
    unseen: int  # deliveries the receiver never got (the sender gave up before they came)

    def __str__(self) -> str:
        return (
            f"{self.keys} keys, {self.deliveries} deliveries: {self.requests} requests "
            f"received = {self.keys} acknowledged + {self.failed} made to fail + {self.late} "
            f"answered 2xx after the sender's timeout; {self.unseen} never received"
        )


def _check_once_each(
    attempts: dict[str, list[Receipt]], settled: Settled, keys: Sequence[str]
) -> Accounting:
    """Each key acknowledged once, and received again only after an attempt that failed
    (a 500, a hold) or timed out at the sender; its deliveries counted up; nothing left."""
    assert set(attempts) == set(keys), (
        f"{len(set(keys) - set(attempts))} keys never received, "
        f"{len(set(attempts) - set(keys))} received that were not offered"
    )
    problems = []
    for key, tries in attempts.items():
        *earlier, last = tries
        numbers = [attempt.delivery for attempt in tries]
        if numbers != sorted(set(numbers)) or numbers[0] < 1:
            problems.append(f"{key}: deliveries {numbers}")
        elif not last.succeeded or not all(_failed(a) or a.succeeded for a in earlier):
            problems.append(f"{key}: {[(a.fault.name, a.outcome.value, a.status) for a in tries]}")
        elif settled.acknowledged.get(key, (None,))[0] != last.delivery:
            problems.append(f"{key}: deliveries {numbers}, history {settled.acknowledged.get(key)}")
    accounting = Accounting(
        keys=len(keys),
        deliveries=sum(deliveries for deliveries, _ in settled.acknowledged.values()),
        requests=sum(len(tries) for tries in attempts.values()),
        failed=sum(_failed(attempt) for tries in attempts.values() for attempt in tries),
        late=sum(attempt.succeeded for tries in attempts.values() for attempt in tries[:-1]),
        unseen=sum(tries[-1].delivery - len(tries) for tries in attempts.values()),
    )
    totals = (
        f"{accounting}; {len(settled.acknowledged)} acknowledged, {len(settled.repeated)} "
        f"twice, other outcomes {dict(settled.other_outcomes)}, {settled.left} left"
    )
    assert not problems, f"{len(problems)} keys went wrong ({totals}), e.g. {problems[:5]}"
    assert set(settled.acknowledged) == set(keys) and not settled.repeated, totals
    assert not settled.other_outcomes and settled.left == 0, totals
    assert accounting.requests == accounting.keys + accounting.failed + accounting.late, totals
    return accounting


def _check_metrics(metrics: Counter[str], accounting: Accounting, receipts: Sequence[Receipt]):
    """The senders' counts agree with the receiver's: each 2xx it saw acknowledged a key,
    each other delivery failed; timeouts cover the holds and the late answers."""
    holds = sum(receipt.fault is Fault.HOLD for receipt in receipts)
    answered_500 = sum(receipt.status == 500 for receipt in receipts)
    seen = f"{accounting}; {holds} held, {answered_500} answered 500; metrics {dict(metrics)}"
    assert metrics["2xx"] == accounting.keys, seen
    assert sum(metrics.values()) == accounting.deliveries, seen
    assert metrics["timeout"] >= holds + accounting.late, seen
    assert metrics["5xx"] <= answered_500, seen
    assert metrics["timeout"] + metrics["5xx"] + metrics["error"] == (
        accounting.deliveries - accounting.keys
    ), seen
    assert set(metrics) <= {"2xx", "5xx", "timeout", "error"}, seen


# -- 10,000 messages through 500s and timeouts ---------------------------------------------

MESSAGES = 10_000
# Due over 10 s: faster than one replica pushes on two shared cores (110–300 a second
# measured), so a backlog builds and retries wait their turn behind it.
SPREAD_MS = 10_000
TIMEOUT = 1.0
CONCURRENCY = 25
FAIL, HOLD = 0.20, 0.05
CLEAN_FROM = 6  # from the 6th delivery on, every answer is 200 (0.25^5: ~10 keys get there)


def test_ten_thousand_messages_through_500s_and_timeouts_are_each_acknowledged_once(
    postgresql_url,
):
    keys = [f"m{n:05d}" for n in range(MESSAGES)]
    rule = faults(fail=FAIL, hold=HOLD, clean_from=CLEAN_FROM, seed="ten-thousand")
    with (
        _database(postgresql_url) as engine,
        push_receiver(rule, secrets=SECRETS, hold_limit=TIMEOUT + 10) as receiver,
        running_server(postgresql_url, **_environment(receiver)) as server,
    ):
        _configure(server, receiver, timeout=TIMEOUT, concurrency=CONCURRENCY)
        started = time.monotonic()
        _offer(server.url, keys, _now_ms() + 1000, SPREAD_MS)
        assert receiver.wait_until(lambda r: r.succeeded() == MESSAGES, timeout=240), (
            f"{receiver.succeeded()} of {MESSAGES} answered 2xx after 240 s"
        )
        elapsed = time.monotonic() - started
        settled = _wait_settled(engine, MESSAGES, timeout=30)
        metrics = _push_requests(server.url)
        most_in_flight = receiver.most_in_flight
    receipts = receiver.receipts
    attempts = _by_key(receipts)

    _check_requests(receipts)
    accounting = _check_once_each(attempts, settled, keys)
    _check_metrics(metrics, accounting, receipts)
    assert most_in_flight <= CONCURRENCY

    by_fault = Counter(receipt.fault for receipt in receipts)
    summary = (
        f"{accounting}; in {elapsed:.1f} s; the rule said {by_fault[Fault.OK]} 200, "
        f"{by_fault[Fault.FAIL]} 500, {by_fault[Fault.HOLD]} hold; metrics {dict(metrics)}"
    )
    print(summary)
    # The faults happened as often as asked (the rule is a hash, the same every run).
    assert by_fault[Fault.FAIL] > 0.15 * len(receipts), summary
    assert by_fault[Fault.HOLD] > 0.03 * len(receipts), summary
    # Timeouts the receiver did not cause (a sender too busy to send or read in time) are
    # allowed, as any timeout, but must stay rare on localhost with a 1 s timeout.
    assert accounting.late + accounting.unseen <= 0.05 * accounting.requests, summary

    # A held request ends when its sender's timeout bounds the whole request.
    held = [
        receipt.ended - receipt.arrived
        for receipt in receipts
        if receipt.fault is Fault.HOLD and receipt.outcome is Outcome.SENDER_LEFT
    ]
    # From its arrival, so less than the timeout by however long the request took to
    # arrive after the sender's clock started (connecting, its event loop's other work).
    held_for = (
        f"{len(held)} requests held, each until the sender gave up: after "
        f"{min(held):.2f} s at least, {statistics.median(held):.2f} s median, "
        f"{max(held):.2f} s at most"
    )
    print(held_for)
    # (A loaded sender's timer fires late: 1.38 s seen at a load average of 7 on 2 cores.)
    assert max(held) <= TIMEOUT + 1.0, f"a timeout of {TIMEOUT} s: {held_for}"

    # A failed attempt comes back after the queue's retry delay for its delivery count,
    # not sooner; and not later than its turn: due times are served in order, so no
    # message first due after the retry may have been sent well before it. (When the
    # dispatcher is behind, a retry waits behind what was due before it, as they all do.)
    by_due = sorted(
        (parse_timestamp(receipt.message["scheduled_at_initially"]) / 1000, receipt.arrived)
        for receipt in receipts
        if receipt.delivery == 1
    )
    dues = [due for due, _ in by_due]
    # first_arrival_after[i]: the earliest arrival of a first delivery due at dues[i] or later.
    first_arrival_after = [arrived for _, arrived in by_due]
    for index in range(len(first_arrival_after) - 2, -1, -1):
        first_arrival_after[index] = min(first_arrival_after[index], first_arrival_after[index + 1])

    early, overtaken, excess = [], [], []
    for tries in attempts.values():
        for failed, after in pairwise(tries):
            if not _failed(failed) or after.delivery != failed.delivery + 1:
                continue  # the sender's own timeout: when it gave up is not seen here
            gap = after.arrived - failed.ended
            delay = POLICY.base_delay_ms(failed.delivery) / 1000
            excess.append(gap - delay)
            if gap < delay - CLOCK_TOLERANCE:
                early.append((failed.key, failed.delivery, round(gap, 3), delay))
            later = bisect_right(dues, failed.ended + delay + DUE_SLACK)
            if later < len(dues) and first_arrival_after[later] < after.arrived - ARRIVAL_SLACK:
                overtaken.append((failed.key, failed.delivery, round(gap, 3), delay))
    lateness = [arrived - due for due, arrived in by_due]
    gaps = (
        f"{len(excess)} retries, late beyond their delay by median "
        f"{statistics.median(excess) * 1000:.0f} ms, at most {max(excess) * 1000:.0f} ms; "
        f"first deliveries late by median {statistics.median(lateness) * 1000:.0f} ms, "
        f"at most {max(lateness) * 1000:.0f} ms"
    )
    print(gaps)
    assert not early, f"{len(early)} retries came back before their delay ({gaps}): {early[:5]}"
    assert not overtaken, (
        f"{len(overtaken)} retries were overtaken by messages due after them ({gaps}): "
        f"{overtaken[:5]}"
    )


# -- kill -9 mid-push ----------------------------------------------------------------------

KILL_MESSAGES = 2_000
# The killed server's leases run out 15 s (timeout + 5) after its claims. Long enough that
# no held request times out (and is released, then counted as in flight at the kill) while
# the test waits for every slot to hold one: under a loaded CI run at 3 s, 14 did.
KILL_TIMEOUT = 10.0
# How long the test waits for every slot to hold a request: well within KILL_TIMEOUT.
KILL_FILL_SECONDS = KILL_TIMEOUT / 2
# Under 8: a pusher claims once a quarter of its slots is free (app/push/dispatcher.py:
# CLAIM_BATCH_DIVISOR), at least one. With 8 it claims two at a time, so when every
# request is held and the slots came free one by one, the last one stays empty (7 of 8,
# in two CI runs); with 7 each slot is claimed for as it comes free, and all fill.
KILL_CONCURRENCY = 7


def test_a_push_killed_mid_request_loses_nothing_and_repeats_only_what_was_in_flight(
    postgresql_url,
):
    keys = [f"k{n:05d}" for n in range(KILL_MESSAGES)]

    def hold_everything(key: str, delivery: int) -> Plan:
        return Plan(Fault.HOLD)

    with (
        _database(postgresql_url) as engine,
        push_receiver(always_ok, secrets=SECRETS, hold_limit=60) as receiver,
    ):
        environment = _environment(receiver)
        with running_server(postgresql_url, **environment) as first:
            _offer(first.url, keys, _now_ms(), 0)
            _configure(first, receiver, timeout=KILL_TIMEOUT, concurrency=KILL_CONCURRENCY)
            assert receiver.wait_until(lambda r: r.arrived() >= KILL_MESSAGES // 3, timeout=60)
            # From now on nothing is answered: the dispatcher's every slot fills with a
            # request in flight, and then it is killed.
            receiver.rule = hold_everything
            filled = receiver.wait_until(
                lambda r: r.in_flight == KILL_CONCURRENCY, timeout=KILL_FILL_SECONDS
            )
            assert filled, (
                f"{receiver.in_flight} requests in flight, not {KILL_CONCURRENCY}, after "
                f"{receiver.arrived()} arrived; the server's last lines:\n"
                + "".join(first.output[-30:])
            )
            held_at_kill = receiver.keys_in_flight
            killed_at = time.time()
            os.kill(first.pid, signal.SIGKILL)
            # The kernel closes the dead process's connections: the receiver sees them go.
            assert receiver.wait_until(lambda r: r.in_flight == 0, timeout=10)
        before_restart = receiver.receipts
        receiver.rule = always_ok
        with running_server(postgresql_url, **environment):
            assert receiver.wait_until(lambda r: r.succeeded() == KILL_MESSAGES, timeout=60), (
                f"{receiver.succeeded()} of {KILL_MESSAGES} answered 2xx after the restart"
            )
            settled = _wait_settled(engine, KILL_MESSAGES, timeout=30)
    receipts = receiver.receipts
    attempts = _by_key(receipts)
    _check_requests(receipts)

    received_before = {receipt.key for receipt in before_restart}
    acknowledged_before = {
        key
        for key, (_, finished_at) in settled.acknowledged.items()
        if finished_at <= killed_at * 1000
    }
    # Sent by the killed server and not acknowledged by it: in flight when it died.
    in_flight_at_kill = received_before - acknowledged_before
    received_twice = {key for key, tries in attempts.items() if len(tries) > 1}
    counts = (
        f"{len(received_before)} keys received before the kill, {len(acknowledged_before)} "
        f"acknowledged by the killed server, {len(in_flight_at_kill)} in flight at the kill "
        f"({len(held_at_kill)} held unanswered, {len(in_flight_at_kill - held_at_kill)} "
        f"answered but not yet acknowledged), {len(received_twice)} received twice, "
        f"{len(settled.acknowledged)} acknowledged in all"
    )
    print(counts)
    assert held_at_kill <= in_flight_at_kill, counts
    assert received_twice == in_flight_at_kill, counts
    assert all(len(tries) <= 2 for tries in attempts.values()), counts
    assert set(attempts) == set(keys), counts
    assert set(settled.acknowledged) == set(keys) and not settled.repeated, counts
    assert not settled.other_outcomes and settled.left == 0, counts
    assert len(in_flight_at_kill) <= 2 * KILL_CONCURRENCY, counts


# -- two replicas --------------------------------------------------------------------------

REPLICA_MESSAGES = 2_000
REPLICA_CONCURRENCY = 8


def test_two_replicas_pushing_one_queue_never_send_a_message_at_once(postgresql_url):
    keys = [f"r{n:05d}" for n in range(REPLICA_MESSAGES)]
    # Answers take a few milliseconds, so a message sent by both would overlap at the receiver.
    rule = faults(fail=0.2, clean_from=4, latency=0.003, seed="replicas")
    with (
        _database(postgresql_url) as engine,
        push_receiver(rule, secrets=SECRETS) as receiver,
    ):
        environment = _environment(receiver)
        with running_server(postgresql_url, **environment) as first:
            _configure(first, receiver, timeout=5, concurrency=REPLICA_CONCURRENCY)
            # The second replica reads the settings as it starts.
            with running_server(postgresql_url, **environment) as second:
                # Offered through both, due over 2 s, so both dispatchers wake for them.
                first_due = _now_ms() + 500
                half = REPLICA_MESSAGES // 2
                _offer(first.url, keys[:half], first_due, 2000)
                _offer(second.url, keys[half:], first_due, 2000)
                assert receiver.wait_until(
                    lambda r: r.succeeded() == REPLICA_MESSAGES, timeout=60
                ), f"{receiver.succeeded()} of {REPLICA_MESSAGES} answered 2xx"
                settled = _wait_settled(engine, REPLICA_MESSAGES, timeout=30)
                by_replica = [_push_requests(replica.url) for replica in (first, second)]
    receipts = receiver.receipts
    _check_requests(receipts)
    accounting = _check_once_each(_by_key(receipts), settled, keys)
    _check_metrics(by_replica[0] + by_replica[1], accounting, receipts)
    sent = [sum(metrics.values()) for metrics in by_replica]
    print(f"{accounting}; sent by each replica: {sent}")
    assert all(sent), f"one replica sent nothing: {sent} ({accounting})"
