"""A minimal HTTP/1.1 keep-alive client on asyncio streams, for load generation.

httpx costs ~0.75 ms of client CPU per request here, which on two shared cores
slows the server it measures; this client costs a small fraction of that. It
speaks just enough HTTP for Hourglass's answers (Content-Length bodies).
"""

from __future__ import annotations

import asyncio
import json
from typing import Any


class HttpError(Exception):
    """A response with a status the caller did not expect."""


class Connection:
    """One keep-alive connection; one request at a time."""

    def __init__(self, host: str, port: int) -> None:
        self.host = host
        self.port = port
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._host_header = f"Host: {host}:{port}\r\n".encode()

    async def request(
        self,
        method: str,
        path: str,
        body: bytes | None = None,
        timeout: float = 60.0,
        headers: bytes = b"",
    ) -> tuple[int, bytes]:
        """Send one request (with `headers`, each line ending in CRLF); its status and body."""
        if self._writer is None:
            self._reader, self._writer = await asyncio.open_connection(self.host, self.port)
        assert self._reader is not None
        head = f"{method} {path} HTTP/1.1\r\n".encode() + self._host_header + headers
        if body is not None:
            head += b"Content-Type: application/json\r\nContent-Length: %d\r\n" % len(body)
        self._writer.write(head + b"\r\n" + (body or b""))
        return await asyncio.wait_for(self._response(), timeout)

    async def json(
        self,
        method: str,
        path: str,
        body: Any = None,
        expect: tuple[int, ...] = (200,),
        headers: bytes = b"",
    ) -> Any:
        """Send `body` as JSON (bytes are sent as they are); the decoded answer."""
        raw = body if isinstance(body, bytes) or body is None else json.dumps(body).encode()
        status, answer = await self.request(method, path, raw, headers=headers)
        if status not in expect:
            raise HttpError(f"{method} {path}: {status} {answer[:300]!r}")
        return json.loads(answer) if answer else None

    async def _response(self) -> tuple[int, bytes]:
        assert self._reader is not None
        head = await self._reader.readuntil(b"\r\n\r\n")
        status_line, _, headers = head.partition(b"\r\n")
        status = int(status_line.split(b" ", 2)[1])
        length = 0
        for line in headers.split(b"\r\n"):
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                length = int(value)
        body = await self._reader.readexactly(length) if length else b""
        return status, body

    async def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
            try:
                await self._writer.wait_closed()
            except ConnectionError:
                pass
            self._writer = None


def event_loop_factory():
    """uvloop when installed (uvicorn[standard] brings it): less client CPU per request."""
    try:
        import uvloop
    except ImportError:
        return None
    return uvloop.new_event_loop
