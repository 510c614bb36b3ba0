"""Push delivery's pure parts: which URLs a prefix admits, the signature header, the result
of a status, and the request body (the poll's rendering of one message, byte for byte)."""

from __future__ import annotations

import hashlib
import hmac

import pytest

from app.api.rendering import poll_response
from app.domain.messages import Delivery, Lease, Message
from app.domain.push import (
    PUSH_DEFAULT_RETRY,
    parse_prefixes,
    prefix_admits,
    target_problem,
    url_allowed,
    url_problem,
)
from app.domain.rendering import delivered_message
from app.push.ports import PushResult
from app.push.signing import signature_header


@pytest.mark.parametrize(
    ("prefix", "url", "admitted"),
    [
        ("http://a.example", "http://a.example", True),
        ("http://a.example", "http://a.example/", True),
        ("http://a.example", "http://a.example/hook", True),
        ("http://a.example", "http://a.example?x=1", True),
        ("http://a.example", "http://a.example.evil.com", False),
        ("http://a.example", "http://a.example.evil.com/", False),
        ("http://a.example", "http://a.examplex/", False),
        ("http://a.example", "http://a.example:8080/", False),
        ("http://a.example", "http://a.example#x", False),
        ("http://a.example/", "http://a.example/anything", True),
        ("http://a.example/hooks", "http://a.example/hooks/q", True),
        ("http://a.example/hooks", "http://a.example/hooksevil", False),
        ("http://a.example/hooks/", "http://a.example/hooksevil", False),
        ("http://a.example/hooks/", "http://a.example/hooks/", True),
        ("https://a.example", "http://a.example/", False),
    ],
)
def test_a_prefix_admits_a_url_only_at_a_boundary(prefix, url, admitted):
    assert prefix_admits(prefix, url) is admitted


@pytest.mark.parametrize(
    "url",
    [
        "ftp://a.example/",
        "file:///etc/passwd",
        "gopher://a.example/",
        "http://user@a.example/",
        "http://user:secret@a.example/",
        "http://a.example\\@b.example/",
        "http://a.example/ x",
        "http://a.example/\u00e9",
        "http://a.example/\n",
        "http:///path",
        "http://a.example:70000/",
        "http://a.example/hooks/../admin",
        "http://a.example/hooks/./x",
        "http://a.example/hooks/%2e%2E/admin",
        "http://a.example/..",
        "http://[::1/",
        "http://a.example/" + "x" * 2048,
    ],
)
def test_urls_no_prefix_can_admit(url):
    assert url_problem(url) is not None
    assert not url_allowed(url, ("http://", "https://", "ftp://", "file://", "gopher://"))


@pytest.mark.parametrize(
    "url",
    [
        "http://a.example",
        "https://a.example:8443/hooks/q?token=a%2Fb",
        "http://127.0.0.1:8080/hook",
        "http://[::1]:8080/hook",
        "http://a.example/a..b/.c/d.",
    ],
)
def test_well_formed_urls_pass(url):
    assert url_problem(url) is None


def test_no_prefixes_admit_nothing_and_say_why():
    assert parse_prefixes("") == parse_prefixes(" , ,") == ()
    assert parse_prefixes(" http://a.example/ ,https://b.example") == (
        "http://a.example/",
        "https://b.example",
    )
    problem = target_problem("http://a.example/", ())
    assert problem is not None and "HOURGLASS_PUSH_ALLOWED" in problem
    assert target_problem("http://a.example/x", ("http://a.example",)) is None


def test_the_signature_header_has_one_v1_per_secret_in_order():
    body = '{"key":"k","payload":"é"}'.encode()
    header = signature_header(("one", "two"), 1_795_683_600, body)
    expected = [
        hmac.new(secret, b"1795683600." + body, hashlib.sha256).hexdigest()
        for secret in (b"one", b"two")
    ]
    assert header == f"t=1795683600,v1={expected[0]},v1={expected[1]}"
    assert signature_header((), 1, body) is None


@pytest.mark.parametrize(
    ("status", "result"),
    [
        (200, PushResult.SUCCESS),
        (204, PushResult.SUCCESS),
        (299, PushResult.SUCCESS),
        (301, PushResult.REDIRECT),
        (304, PushResult.REDIRECT),
        (400, PushResult.CLIENT_ERROR),
        (429, PushResult.CLIENT_ERROR),
        (500, PushResult.SERVER_ERROR),
        (599, PushResult.SERVER_ERROR),
        (100, PushResult.ERROR),
        (600, PushResult.ERROR),
    ],
)
def test_a_status_gives_its_class(status, result):
    assert PushResult.of_status(status) is result


def test_the_default_retry_doubles_from_one_second_to_an_hour_without_jitter():
    delays = [PUSH_DEFAULT_RETRY.delay_ms(n, random=None) for n in (1, 2, 3, 12, 13, 500)]  # type: ignore[arg-type]
    assert delays == [1_000, 2_000, 4_000, 2_048_000, 3_600_000, 3_600_000]


@pytest.mark.parametrize("redelivery", [False, True])
def test_the_body_is_the_polls_rendering_of_the_message_byte_for_byte(redelivery):
    message = Message(
        queue="q",
        key='k/"1" é',
        payload='{"a":[1,2.5,null],"b":"\\u2028ü"}'.encode(),
        scheduled_at=1_795_683_615_000,
        scheduled_at_initially=1_795_683_600_000,
        created_at=1_795_683_500_123,
        locked=True,
        deliveries=3,
        dead_lettered_from="origin",
    )
    delivery = Delivery(message, redelivery)
    lease = Lease("0f8fad5b-d9cb-469f-a165-70867728950e", 1_795_683_615_000, (delivery,))
    body = delivered_message(delivery, lease.expires_at)
    answer = poll_response(lease).body
    assert answer == b'{"lock_id":"' + lease.lock_id.encode() + b'","messages":[' + body + b"]}"
