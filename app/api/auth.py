"""Bearer tokens for `/v1` (`HOURGLASS_API_TOKENS`) and for `/metrics` (`HOURGLASS_METRICS_TOKENS`).

`HOURGLASS_API_TOKENS` is `token` or `token=queue-glob`, comma-separated. Without
a valid token a `/v1` request is `401`; a token limited to a glob gets `403` for
any queue outside it, and the queue list shows only its queues. The queue in the
path is checked here; the queues a request reaches beyond it (a dead-letter
queue, a redrive's targets, a dead letter's origin) are checked where they are
known, through the request's queue filter (app/api/deps.py: `allowed_queues`).
`HOURGLASS_METRICS_TOKENS` (comma-separated; several allow rotation) guards
`/metrics` alone, which names every queue and cron entry: its tokens open
nothing else, and no `/v1` token opens it. `/healthz`, `/readyz` and the docs
stay open. Tokens are compared in constant time and never logged. With no
tokens configured nothing is installed.
"""

from __future__ import annotations

import hmac
from dataclasses import dataclass
from fnmatch import fnmatchcase
from urllib.parse import unquote

from starlette.types import ASGIApp, Receive, Scope, Send

from app.api.errors import ProblemResponse, domain_problem, problem
from app.domain.errors import QueueForbidden

_PREFIX = "/v1/"
# Where in a request's state the queues its token may use are left, as a QueueFilter.
QUEUE_FILTER = "queue_filter"
_QUEUES = "/v1/queues/"
METRICS_PATH = "/metrics"


@dataclass(frozen=True, slots=True)
class TokenRule:
    token: bytes
    queues: str | None  # a glob (fnmatch, case-sensitive); None: every queue

    def allows(self, queue: str) -> bool:
        return self.queues is None or fnmatchcase(queue, self.queues)


def parse_tokens(text: str) -> list[TokenRule]:
    """`a,b=reports-*` → two rules; blanks ignored. ValueError for an empty token."""
    rules = []
    for item in text.split(","):
        if not item.strip():
            continue
        token, separator, glob = item.strip().partition("=")
        if not token:
            raise ValueError("HOURGLASS_API_TOKENS has an empty token")
        rules.append(
            TokenRule(token.encode(), glob.strip() if separator and glob.strip() else None)
        )
    return rules


def parse_metrics_tokens(text: str) -> list[bytes]:
    """`a, b` → two tokens; blanks ignored. ValueError when the text has nothing else."""
    tokens = [item.strip().encode() for item in text.split(",") if item.strip()]
    if text.strip() and not tokens:
        raise ValueError("HOURGLASS_METRICS_TOKENS has no token")
    return tokens


class BearerTokens:
    """ASGI middleware enforcing the rules on every `/v1` request."""

    def __init__(self, app: ASGIApp, rules: list[TokenRule]) -> None:
        self.app = app
        self.rules = rules
        self.tokens = [rule.token for rule in rules]

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not scope["path"].startswith(_PREFIX):
            await self.app(scope, receive, send)
            return
        found = _matching(_offered_token(scope), self.tokens)
        if found is None:
            await _unauthorized()(scope, receive, send)
            return
        rule = self.rules[found]
        queue = _queue_of(scope["path"])
        if queue is not None and not rule.allows(queue):
            await domain_problem(QueueForbidden(queue))(scope, receive, send)
            return
        scope.setdefault("state", {})[QUEUE_FILTER] = rule.allows
        await self.app(scope, receive, send)


class MetricsTokens:
    """ASGI middleware: `/metrics` only with one of `tokens` as the bearer token."""

    def __init__(self, app: ASGIApp, tokens: list[bytes]) -> None:
        self.app = app
        self.tokens = tokens

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if (
            scope["type"] == "http"
            and scope["path"] == METRICS_PATH
            and _matching(_offered_token(scope), self.tokens) is None
        ):
            await _unauthorized()(scope, receive, send)
            return
        await self.app(scope, receive, send)


def _offered_token(scope: Scope) -> bytes:
    """The request's bearer token; empty without one."""
    offered = b""
    for name, value in scope["headers"]:
        if name == b"authorization":
            scheme, _, credentials = value.partition(b" ")
            if scheme.lower() == b"bearer":
                offered = credentials.strip()
    return offered


def _matching(offered: bytes, tokens: list[bytes]) -> int | None:
    """The index of the token `offered` equals, in constant time; None for none."""
    found = None
    for index, token in enumerate(tokens):  # every token, whether or not an earlier one matched
        if hmac.compare_digest(token, offered) and offered:
            found = index
    return found


def _unauthorized() -> ProblemResponse:
    return problem(
        401,
        "a valid `Authorization: Bearer <token>` header is required",
        slug="unauthorized",
        headers={"WWW-Authenticate": 'Bearer realm="hourglass"'},
    )


def _queue_of(path: str) -> str | None:
    if not path.startswith(_QUEUES):
        return None
    return unquote(path[len(_QUEUES) :].split("/", 1)[0]) or None
