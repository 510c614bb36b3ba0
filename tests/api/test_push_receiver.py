"""The tests' push receiver (tests/support/push_receiver.py) does what the push proofs rely on:
faults chosen the same way every run, holds that end when the sender gives up, signatures
checked, and two requests of one key in flight at once noticed."""

from __future__ import annotations

import hashlib
import hmac
import json
import threading
import time

import httpx
import pytest

from tests.support.push_receiver import (
    Fault,
    Outcome,
    Plan,
    faults,
    header_key,
    push_receiver,
    signature_matches,
)


def _push(url: str, key: str, delivery: int = 1, **headers: str) -> httpx.Response:
    body = json.dumps({"queue": "q", "key": key, "payload": None}).encode()
    return httpx.post(
        url,
        content=body,
        headers={"Hourglass-Delivery": str(delivery), "Hourglass-Key": key, **headers},
        timeout=5,
    )


def test_a_fault_rule_gives_each_key_and_delivery_the_same_fate_every_time():
    rule = faults(fail=0.2, hold=0.05, clean_from=4, seed="s")
    fates = [rule(f"k{n}", delivery) for n in range(20_000) for delivery in (1, 2)]
    assert fates == [rule(f"k{n}", delivery) for n in range(20_000) for delivery in (1, 2)]
    counts = {fault: sum(plan.fault is fault for plan in fates) for fault in Fault}
    assert 0.18 < counts[Fault.FAIL] / len(fates) < 0.22, counts
    assert 0.04 < counts[Fault.HOLD] / len(fates) < 0.06, counts
    assert {rule(f"k{n}", 4).fault for n in range(1000)} == {Fault.OK}


def test_it_answers_as_the_rule_says_and_records_each_request():
    def rule(key: str, delivery: int) -> Plan:
        return Plan(Fault.FAIL if key == "bad" else Fault.OK)

    with push_receiver(rule) as receiver:
        assert _push(receiver.url, "good", 3, **{"Hourglass-Lock": "L"}).status_code == 200
        assert _push(receiver.url, "bad").status_code == 500
        assert receiver.wait_until(lambda r: r.ended() == 2, timeout=5)
        good, bad = sorted(receiver.receipts, key=lambda receipt: receipt.key, reverse=True)
    assert (good.key, good.delivery, good.lock, good.status) == ("good", 3, "L", 200)
    assert good.succeeded and not bad.succeeded and bad.status == 500
    assert good.arrived <= good.ended and header_key(good) == "good"
    assert good.message["queue"] == "q" and good.request == "POST /"


def test_a_held_request_ends_when_its_sender_gives_up():
    with push_receiver(lambda key, delivery: Plan(Fault.HOLD), hold_limit=10) as receiver:
        started = time.monotonic()
        with pytest.raises(httpx.TimeoutException):
            httpx.post(receiver.url, content=b'{"key":"k"}', timeout=0.3)
        assert receiver.wait_until(lambda r: r.ended() == 1, timeout=5)
        (held,) = receiver.receipts
    assert held.outcome is Outcome.SENDER_LEFT and held.status is None
    assert held.ended - held.arrived < time.monotonic() - started


def test_a_hold_past_its_limit_is_dropped():
    with push_receiver(lambda key, delivery: Plan(Fault.HOLD), hold_limit=0.2) as receiver:
        with pytest.raises(httpx.RemoteProtocolError):
            httpx.post(receiver.url, content=b'{"key":"k"}', timeout=5)
        assert receiver.wait_until(lambda r: r.ended() == 1, timeout=5)
    assert receiver.receipts[0].outcome is Outcome.DROPPED


def test_two_requests_of_one_key_in_flight_at_once_are_noticed():
    def rule(key: str, delivery: int) -> Plan:
        return Plan(Fault.OK, delay=0.5 if delivery == 1 else 0.0)

    with push_receiver(rule) as receiver:
        first = threading.Thread(target=_push, args=(receiver.url, "k", 1))
        first.start()
        assert receiver.wait_until(lambda r: r.keys_in_flight == {"k"}, timeout=5)
        _push(receiver.url, "k", 2)
        _push(receiver.url, "other", 2)
        first.join(5)
        assert receiver.wait_until(lambda r: r.ended() == 3, timeout=5)
        overlapped = {(r.key, r.delivery) for r in receiver.receipts if r.overlapped}
        assert receiver.most_in_flight == 2
    assert overlapped == {("k", 2)}


def test_signatures_are_checked_with_each_secret_in_order():
    body = b'{"key":"k"}'
    stamp = str(int(time.time()))

    def sign(secret: str) -> str:
        return hmac.new(secret.encode(), f"{stamp}.".encode() + body, hashlib.sha256).hexdigest()

    header = f"t={stamp},v1={sign('new')},v1={sign('old')}"
    assert signature_matches(header, body, ["new", "old"])
    assert not signature_matches(header, body, ["old", "new"])
    assert not signature_matches(header, body, ["new"])
    assert not signature_matches(header, body + b" ", ["new", "old"])
    with push_receiver(secrets=["new", "old"]) as receiver:
        httpx.post(receiver.url, content=body, headers={"Hourglass-Signature": header})
        httpx.post(receiver.url, content=body, headers={"Hourglass-Signature": f"t={stamp}"})
        assert receiver.wait_until(lambda r: r.ended() == 2, timeout=5)
        assert [r.signature_valid for r in receiver.receipts] == [True, False]
