"""One push queue's HTTP requests: each message's POST built and signed, sent with the queue's
own httpx client within its time, and how it ended."""

from __future__ import annotations

import asyncio
import logging
from urllib.parse import quote

import httpx

from app import __version__
from app.clock import Clock
from app.domain.messages import Delivery, Lease, PushTarget
from app.domain.rendering import delivered_message
from app.push.ports import PushResult
from app.push.signing import signature_header

log = logging.getLogger(__name__)

# The endpoint's answer is read up to this many bytes; then the connection is closed.
RESPONSE_BODY_LIMIT = 64 * 1024
USER_AGENT = f"hourglass/{__version__}"


class PushSender:
    """Sends one queue's messages to its target: a connection pool of `concurrency`
    connections, redirects never followed, no proxies from the environment."""

    def __init__(
        self, queue: str, target: PushTarget, *, secrets: tuple[str, ...], clock: Clock
    ) -> None:
        self.queue = queue
        self.target = target
        self.secrets = secrets
        self.clock = clock
        self.timeout_seconds = target.timeout_ms / 1000
        self.client = httpx.AsyncClient(
            limits=httpx.Limits(
                max_connections=target.concurrency, max_keepalive_connections=target.concurrency
            ),
            # The whole request is bounded by asyncio.timeout; this only backs it up.
            timeout=httpx.Timeout(self.timeout_seconds + 1),
            follow_redirects=False,
            trust_env=False,
        )

    async def push(
        self, lease: Lease, delivery: Delivery, budget: float
    ) -> tuple[PushResult, float]:
        """POST `delivery` of `lease` within `budget` seconds: how it ended, and how long
        the request took (s)."""
        body = delivered_message(delivery, lease.expires_at)
        headers = self._headers(lease.lock_id, delivery, body)
        loop = asyncio.get_running_loop()
        started = loop.time()
        result = await self._send(body, headers, budget)
        return result, loop.time() - started

    def _headers(self, lock_id: str, delivery: Delivery, body: bytes) -> dict[str, str]:
        message = delivery.message
        headers = {
            "content-type": "application/json",
            "user-agent": USER_AGENT,
            "hourglass-queue": self.queue,
            # Header values are ASCII: the key percent-encoded as UTF-8, as in a URL's path.
            "hourglass-key": quote(message.key, safe=""),
            "hourglass-delivery": str(message.deliveries),
            "hourglass-lock": lock_id,
        }
        if (trace := message.trace) is not None:
            # The producer's trace context, for the endpoint's span; outside the signature,
            # which covers the body (where the message's `trace` is too).
            headers["traceparent"] = trace.traceparent
            if trace.tracestate is not None:
                headers["tracestate"] = trace.tracestate
        timestamp = self.clock.now_ms() // 1000
        if (signed := signature_header(self.secrets, timestamp, body)) is not None:
            headers["hourglass-signature"] = signed
        return headers

    async def _send(self, body: bytes, headers: dict[str, str], budget: float) -> PushResult:
        """POST `body`; how it ended. The whole request (connecting, sending, the answer's
        head and up to RESPONSE_BODY_LIMIT of its body) is bounded by `budget` seconds."""
        try:
            async with asyncio.timeout(budget):
                async with self.client.stream(
                    "POST", self.target.url, content=body, headers=headers
                ) as response:
                    read = 0
                    # Raw: nothing decompressed, so the limit bounds what is received.
                    async for chunk in response.aiter_raw():
                        read += len(chunk)
                        if read >= RESPONSE_BODY_LIMIT:
                            break  # leaving unread closes the connection
                    return PushResult.of_status(response.status_code)
        except (TimeoutError, httpx.TimeoutException):
            return PushResult.TIMEOUT
        except (httpx.HTTPError, OSError):
            return PushResult.ERROR
        except Exception:  # whatever failed, the message goes back with its retry delay
            log.exception("push to %r: the request failed", self.queue)
            return PushResult.ERROR

    async def close(self) -> None:
        await self.client.aclose()
