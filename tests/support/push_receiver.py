"""A push receiver for tests and benchmarks: an HTTP server on a free port that answers each
push as a deterministic rule says (2xx, 500, or holding it past the sender's timeout) and
records every request it got, what it answered, and which keys it had in flight at once.

It runs an asyncio server on an event loop of its own thread and speaks just enough
HTTP/1.1 for the dispatcher's requests (Content-Length bodies, keep-alive). Tests wait on
it with `wait_until`, which wakes on every change, never by sleeping.
"""

from __future__ import annotations

import asyncio
import enum
import hashlib
import hmac
import json
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote

_HEAD_LIMIT = 64 * 1024


class Fault(enum.Enum):
    """What the receiver does with one request."""

    OK = "200"  # answer 200 at once (after the rule's delay)
    FAIL = "500"  # answer 500
    HOLD = "hold"  # answer nothing until the sender gives up, then close


@dataclass(frozen=True)
class Plan:
    """One request's fate: the fault, and how long to wait before answering (OK, FAIL)."""

    fault: Fault
    delay: float = 0.0


# Decides a request's fate from its key and its Hourglass-Delivery.
Rule = Callable[[str, int], Plan]


def always_ok(_key: str, _delivery: int) -> Plan:
    return Plan(Fault.OK)


def faults(
    *,
    fail: float = 0.0,
    hold: float = 0.0,
    clean_from: int | None = None,
    latency: float = 0.0,
    seed: str = "",
) -> Rule:
    """A rule that answers `fail` of the requests 500 and holds `hold` of them, chosen by a
    hash of key and delivery (the same in every run); from delivery `clean_from` on, 200.
    Answers take `latency` seconds."""

    def rule(key: str, delivery: int) -> Plan:
        if clean_from is not None and delivery >= clean_from:
            return Plan(Fault.OK, latency)
        draw = _uniform(f"{seed}:{key}:{delivery}")
        if draw < hold:
            return Plan(Fault.HOLD)
        if draw < hold + fail:
            return Plan(Fault.FAIL, latency)
        return Plan(Fault.OK, latency)

    return rule


def _uniform(text: str) -> float:
    """A number in [0, 1) that depends only on `text`."""
    digest = hashlib.sha256(text.encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64


class Outcome(enum.Enum):
    """How a request ended, as the receiver saw it."""

    ANSWERED = "answered"  # the receiver wrote its answer
    SENDER_LEFT = "sender left"  # the sender closed the connection before any answer
    DROPPED = "dropped"  # the receiver closed it unanswered (a hold that outlived its limit)


@dataclass(frozen=True)
class Receipt:
    """One request the receiver got."""

    request: str  # its request line without the version, "POST /path?query"
    key: str  # from the body ("" when the body was not a message)
    delivery: int  # Hourglass-Delivery (0 when missing)
    lock: str  # Hourglass-Lock
    headers: dict[str, str]  # lower-cased names
    body: bytes
    arrived: float  # time.time() when its body had arrived
    ended: float  # time.time() as the answer was written, or when the connection closed
    fault: Fault
    outcome: Outcome
    status: int | None  # what was answered; None when nothing was
    signature_valid: bool | None  # None: the receiver was given no secrets
    overlapped: bool  # another request of the same key was in flight at the receiver
    connection: int  # the receiver's number for the TCP connection it came on

    @property
    def succeeded(self) -> bool:
        """Answered 2xx: the sender acknowledges the message."""
        return self.outcome is Outcome.ANSWERED and self.status is not None and self.status < 300

    @property
    def message(self) -> dict[str, Any]:
        return json.loads(self.body)


def signature_matches(header: str, body: bytes, secrets: Sequence[str]) -> bool:
    """`Hourglass-Signature: t=<s>,v1=<hex>,…` holds one v1 per secret, in order, each
    HMAC-SHA256(secret, "<t>.<body>")."""
    parts = [part.partition("=") for part in header.split(",")]
    stamps = [value for name, _, value in parts if name == "t"]
    signatures = [value for name, _, value in parts if name == "v1"]
    if len(stamps) != 1 or len(signatures) != len(secrets):
        return False
    signed = stamps[0].encode() + b"." + body
    return all(
        hmac.compare_digest(hmac.new(secret.encode(), signed, hashlib.sha256).hexdigest(), given)
        for secret, given in zip(secrets, signatures, strict=True)
    )


@dataclass
class _State:
    """What the receiver keeps; changed on its loop, read under `condition` elsewhere."""

    receipts: list[Receipt] = field(default_factory=list)
    in_flight: Counter[str] = field(default_factory=Counter)  # requests per key
    in_flight_total: int = 0
    most_in_flight: int = 0
    connections: int = 0
    succeeded: set[str] = field(default_factory=set)  # keys answered 2xx


class PushReceiver:
    """Runs on an event loop of its own thread; `url` once started."""

    def __init__(
        self,
        rule: Rule = always_ok,
        *,
        secrets: Sequence[str] = (),
        hold_limit: float = 30.0,
        keep_bodies: bool = True,
    ) -> None:
        self.rule = rule  # may be replaced while running: requests after read the new one
        self.secrets = tuple(secrets)
        self.hold_limit = hold_limit  # a HOLD closes unanswered after this many seconds
        self.keep_bodies = keep_bodies
        self.port = 0
        self.condition = threading.Condition()
        self._state = _State()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._server: asyncio.Server | None = None
        self._open: set[asyncio.StreamWriter] = set()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    # -- what tests read ---------------------------------------------------------------

    @property
    def receipts(self) -> list[Receipt]:
        """Every request so far (a copy), in the order they ended."""
        with self.condition:
            return list(self._state.receipts)

    @property
    def in_flight(self) -> int:
        """Requests received and not yet answered or closed."""
        with self.condition:
            return self._state.in_flight_total

    @property
    def keys_in_flight(self) -> set[str]:
        with self.condition:
            return {key for key, count in self._state.in_flight.items() if count}

    @property
    def most_in_flight(self) -> int:
        """The most requests the receiver had in flight at once."""
        with self.condition:
            return self._state.most_in_flight

    def wait_until(self, condition: Callable[[PushReceiver], bool], timeout: float) -> bool:
        """Wait until `condition(self)` holds, waking on each request's arrival and end;
        whether it held within `timeout` seconds."""
        deadline = time.monotonic() + timeout
        with self.condition:
            while not condition(self):
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self.condition.wait(left)
            return True

    def succeeded(self) -> int:
        """Keys answered 2xx so far."""
        with self.condition:
            return len(self._state.succeeded)

    def ended(self) -> int:
        """Requests ended so far."""
        with self.condition:
            return len(self._state.receipts)

    def arrived(self) -> int:
        """Requests whose body has arrived so far (ended or in flight)."""
        with self.condition:
            return len(self._state.receipts) + self._state.in_flight_total

    def clear(self) -> None:
        """Forget what was received (between rounds of a benchmark)."""
        with self.condition:
            self._state.receipts.clear()
            self._state.succeeded.clear()
            self._state.most_in_flight = self._state.in_flight_total

    # -- running -----------------------------------------------------------------------

    def start(self) -> None:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._listen(), self._loop).result(10)

    def close(self) -> None:
        asyncio.run_coroutine_threadsafe(self._stop(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop.close()

    async def _listen(self) -> None:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0, backlog=1024)
        self.port = self._server.sockets[0].getsockname()[1]

    async def _stop(self) -> None:
        if self._server is not None:
            self._server.close()
        for writer in list(self._open):
            writer.transport.abort()
        handlers = [task for task in asyncio.all_tasks() if task is not asyncio.current_task()]
        for task in handlers:
            task.cancel()
        await asyncio.gather(*handlers, return_exceptions=True)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with self.condition:
            self._state.connections += 1
            connection = self._state.connections
        self._open.add(writer)
        try:
            while await self._one_request(reader, writer, connection):
                pass
        except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, ValueError):
            pass  # the sender went away mid-request, or sent what this receiver cannot read
        finally:
            self._open.discard(writer)
            writer.transport.abort()

    async def _one_request(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, connection: int
    ) -> bool:
        """Read one request and answer it as the rule says; whether the connection goes on."""
        try:
            head = await reader.readuntil(b"\r\n\r\n")
        except asyncio.IncompleteReadError:
            return False  # closed between requests
        if len(head) > _HEAD_LIMIT:
            return False
        request_line, *lines = head.decode("latin-1").split("\r\n")
        headers: dict[str, str] = {}
        for line in lines:
            name, found, value = line.partition(":")
            if found:
                headers[name.strip().lower()] = value.strip()
        body = await reader.readexactly(int(headers.get("content-length", "0")))
        arrived = time.time()
        key = _key_of(body)
        delivery = int(headers.get("hourglass-delivery", "0") or 0)
        plan = self.rule(key, delivery)
        with self.condition:
            overlapped = self._state.in_flight[key] > 0
            self._state.in_flight[key] += 1
            self._state.in_flight_total += 1
            self._state.most_in_flight = max(
                self._state.most_in_flight, self._state.in_flight_total
            )
            self.condition.notify_all()
        status: int | None = None
        if plan.fault is Fault.HOLD:
            outcome = await self._hold(reader)
        else:
            if plan.delay:
                await asyncio.sleep(plan.delay)  # the receiver's own latency, by the rule
            if reader.at_eof():
                outcome = Outcome.SENDER_LEFT  # the sender gave up while it waited
            else:
                outcome, status = Outcome.ANSWERED, (200 if plan.fault is Fault.OK else 500)
        # Recorded (and out of flight) before the answer is written: the sender may act on
        # it at once, and a request of the key it sends next must not look overlapping.
        self._record(
            Receipt(
                request=request_line.rpartition(" ")[0],
                key=key,
                delivery=delivery,
                lock=headers.get("hourglass-lock", ""),
                headers=headers,
                body=body if self.keep_bodies else b"",
                arrived=arrived,
                ended=time.time(),
                fault=plan.fault,
                outcome=outcome,
                status=status,
                signature_valid=(
                    signature_matches(headers.get("hourglass-signature", ""), body, self.secrets)
                    if self.secrets
                    else None
                ),
                overlapped=overlapped,
                connection=connection,
            )
        )
        if status is None:
            return False
        writer.write(_answer(status, headers))
        await writer.drain()
        return "close" not in headers.get("connection", "")

    def _record(self, receipt: Receipt) -> None:
        with self.condition:
            self._state.in_flight[receipt.key] -= 1
            if not self._state.in_flight[receipt.key]:
                del self._state.in_flight[receipt.key]
            self._state.in_flight_total -= 1
            self._state.receipts.append(receipt)
            if receipt.succeeded:
                self._state.succeeded.add(receipt.key)
            self.condition.notify_all()

    async def _hold(self, reader: asyncio.StreamReader) -> Outcome:
        """Answer nothing until the sender closes the connection (or the hold's limit)."""
        try:
            async with asyncio.timeout(self.hold_limit):
                while await reader.read(64 * 1024):
                    pass  # a sender that pipelines behind a hold: ignore what it sends
        except TimeoutError:
            return Outcome.DROPPED
        except OSError:
            pass  # reset rather than closed: left all the same
        return Outcome.SENDER_LEFT


def _key_of(body: bytes) -> str:
    try:
        message = json.loads(body)
    except ValueError:
        return ""
    key = message.get("key") if isinstance(message, dict) else None
    return key if isinstance(key, str) else ""


def _answer(status: int, headers: dict[str, str]) -> bytes:
    reason = {200: "OK", 500: "Internal Server Error"}[status]
    body = b'{"ok":true}' if status == 200 else b'{"ok":false}'
    keep = "close" if "close" in headers.get("connection", "") else "keep-alive"
    return (
        f"HTTP/1.1 {status} {reason}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\nConnection: {keep}\r\n\r\n"
    ).encode() + body


def header_key(receipt: Receipt) -> str:
    """The Hourglass-Key header, decoded (it is percent-encoded UTF-8)."""
    return unquote(receipt.headers.get("hourglass-key", ""), encoding="utf-8", errors="strict")


@contextmanager
def push_receiver(rule: Rule = always_ok, **options: Any) -> Iterator[PushReceiver]:
    """A started receiver, closed on the way out."""
    receiver = PushReceiver(rule, **options)
    receiver.start()
    try:
        yield receiver
    finally:
        receiver.close()
