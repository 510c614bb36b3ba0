"""A small real HTTP endpoint for push tests: a threaded server on 127.0.0.1 that records
every request and answers as the test says (a status, a large body, or held until the
test lets it go), counting requests in flight."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


@dataclass(frozen=True)
class Received:
    """One request as it arrived."""

    path: str
    headers: dict[str, str]  # names lower-cased
    body: bytes
    arrived: float  # time.monotonic()


@dataclass
class Answer:
    status: int = 200
    body: bytes = b""
    headers: dict[str, str] = field(default_factory=dict)
    # Held until the endpoint's `release` is set (at most `hold_seconds`).
    hold: bool = False
    hold_seconds: float = 30.0
    # Instead of `body`: this many bytes, written in 64 KiB pieces until the peer is gone.
    large_body: int = 0


class Endpoint:
    """Records requests; `answer(received)` decides each answer (200 by default)."""

    def __init__(self) -> None:
        self.answer: Callable[[Received], Answer] = lambda received: Answer()
        self.requests: list[Received] = []
        self.changed = threading.Condition()
        self.in_flight = 0
        self.most_in_flight = 0
        self.finished = 0  # requests answered (or whose peer went away)
        self.release = threading.Event()
        self.large_body_written: list[tuple[int, bool]] = []  # (bytes written, peer gone)
        endpoint = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: object) -> None:
                pass

            def do_POST(self) -> None:
                length = int(self.headers.get("content-length", "0"))
                received = Received(
                    self.path,
                    {name.lower(): value for name, value in self.headers.items()},
                    self.rfile.read(length),
                    time.monotonic(),
                )
                with endpoint.changed:
                    endpoint.requests.append(received)
                    endpoint.in_flight += 1
                    endpoint.most_in_flight = max(endpoint.most_in_flight, endpoint.in_flight)
                    endpoint.changed.notify_all()
                try:
                    self._answer(endpoint.answer(received))
                except OSError:
                    pass  # the sender gave up (its timeout) and closed the connection
                finally:
                    with endpoint.changed:
                        endpoint.in_flight -= 1
                        endpoint.finished += 1
                        endpoint.changed.notify_all()

            def _answer(self, answer: Answer) -> None:
                if answer.hold:
                    endpoint.release.wait(answer.hold_seconds)
                self.send_response(answer.status)
                for name, value in answer.headers.items():
                    self.send_header(name, value)
                length = answer.large_body or len(answer.body)
                self.send_header("Content-Length", str(length))
                self.end_headers()
                if not answer.large_body:
                    self.wfile.write(answer.body)
                    return
                written, gone = 0, False
                piece = b"x" * 65536
                try:
                    while written < answer.large_body:
                        self.wfile.write(piece)
                        written += len(piece)
                except OSError:
                    gone = True
                endpoint.large_body_written.append((written, gone))
                self.close_connection = True

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.port = self._server.server_address[1]
        self.prefix = f"http://127.0.0.1:{self.port}"

    def url(self, path: str = "/hook") -> str:
        return self.prefix + path

    def wait_for_requests(self, count: int, timeout: float = 10.0) -> list[Received]:
        """The first `count` requests, once they have arrived (fails after `timeout`)."""
        with self.changed:
            arrived = self.changed.wait_for(lambda: len(self.requests) >= count, timeout)
            assert arrived, f"{len(self.requests)} requests arrived, expected {count}"
            return list(self.requests[:count])

    def wait_until(self, condition: Callable[[Endpoint], bool], timeout: float = 10.0) -> None:
        with self.changed:
            assert self.changed.wait_for(lambda: condition(self), timeout), "timed out"

    def serve(self) -> None:
        self._server.serve_forever(poll_interval=0.05)

    def close(self) -> None:
        self.release.set()
        self._server.shutdown()
        self._server.server_close()


@contextmanager
def running_endpoint() -> Iterator[Endpoint]:
    endpoint = Endpoint()
    thread = threading.Thread(target=endpoint.serve, daemon=True)
    thread.start()
    try:
        yield endpoint
    finally:
        endpoint.close()
        thread.join(5)


def refused_url() -> str:
    """A URL on 127.0.0.1 where nothing listens (a port just freed)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    return f"http://127.0.0.1:{port}/hook"
