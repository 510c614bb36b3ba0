"""Push delivery's rules (docs/guide/push.md, docs/decisions/0016-push-delivery.md): which
target URLs a queue may push to, its requests' bounds, and the retry delays of pushes that
failed in a queue with no `retry` setting of its own."""

from __future__ import annotations

import re
from urllib.parse import urlsplit

from app.domain.messages import RetryPolicy

# A failed push of a queue without a `retry` setting: 1 s after the first delivery,
# doubling, at most 1 h, no jitter.
PUSH_DEFAULT_RETRY = RetryPolicy(initial_delay_ms=1_000, max_delay_ms=3_600_000, multiplier=2.0)
# Longer URLs are refused (the column's size).
PUSH_URL_MAX = 2048
# A push request's bound in seconds (connecting, sending, the answer), and the requests a
# queue has in flight at once on each replica: each a default and the most it may say.
DEFAULT_PUSH_TIMEOUT_SECONDS = 10.0
MAX_PUSH_TIMEOUT_SECONDS = 300
DEFAULT_PUSH_CONCURRENCY = 4
MAX_PUSH_CONCURRENCY = 100
# What the API's schema says of a push url (the rest is url_problem's and the prefixes').
PUSH_URL_PATTERN = r"^[Hh][Tt][Tt][Pp][Ss]?://[!-\[\]-~]+$"
# Printable ASCII without space and backslash: what a URL is written with here. A
# backslash is a slash to some parsers and not to others, so a prefix could admit a
# URL that one of them reads as another host.
_URL_CHARACTERS = re.compile(r"[!-\[\]-~]+")
# A path segment "." or ".." (percent-encoded or not): httpx removes them before it
# sends (`/api/../admin` goes to `/admin`), which would step out of a prefix's path.
_DOT_SEGMENT = re.compile(r"(?:^|/)(?:\.|%2e){1,2}(?:/|$)", re.IGNORECASE)


def parse_prefixes(text: str) -> tuple[str, ...]:
    """HOURGLASS_PUSH_ALLOWED's prefixes: comma-separated, blanks dropped."""
    return tuple(prefix for part in text.split(",") if (prefix := part.strip()))


def prefix_problem(prefix: str) -> str | None:
    """Why `prefix` can admit no push url (no http:// or https:// at its start, say), or None."""
    if not _URL_CHARACTERS.fullmatch(prefix):
        return "a prefix is printable ASCII, without spaces or backslashes"
    if not prefix.lower().startswith(("http://", "https://")):
        return "a prefix starts with http:// or https://"
    return None


def parse_secrets(text: str) -> tuple[str, ...]:
    """HOURGLASS_PUSH_SECRETS: comma-separated, in order, blanks dropped."""
    return tuple(secret for part in text.split(",") if (secret := part.strip()))


def url_problem(url: str) -> str | None:
    """Why `url` cannot be a push target whatever the allowed prefixes, or None."""
    if len(url) > PUSH_URL_MAX:
        return f"a push url has at most {PUSH_URL_MAX} characters"
    if not _URL_CHARACTERS.fullmatch(url):
        return "a push url is printable ASCII, without spaces or backslashes"
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises ValueError for a port out of range
    except ValueError as error:
        return f"not a URL: {error}"
    if parts.scheme.lower() not in ("http", "https"):
        return "a push url is http:// or https://"
    if "@" in parts.netloc:
        return "a push url carries no user or password"
    if not parts.hostname:
        return "a push url names a host"
    if _DOT_SEGMENT.search(parts.path):
        return "a push url has no '.' or '..' path segments"
    return None


def prefix_admits(prefix: str, url: str) -> bool:
    """Whether `prefix` admits `url`: the URL starts with it, and the prefix ends with "/" or
    the URL goes on with "/", "?" or ends there (`http://a.example` does not admit
    `http://a.example.evil.com`, nor `http://a.example:8080`)."""
    if not url.startswith(prefix):
        return False
    return prefix.endswith("/") or url[len(prefix) : len(prefix) + 1] in ("", "/", "?")


def url_allowed(url: str, prefixes: tuple[str, ...]) -> bool:
    """Whether the service may send requests to `url` (a valid URL some prefix admits)."""
    return url_problem(url) is None and any(prefix_admits(prefix, url) for prefix in prefixes)


def target_problem(url: str, prefixes: tuple[str, ...]) -> str | None:
    """Why a queue may not push to `url` under `prefixes` (HOURGLASS_PUSH_ALLOWED), or None."""
    if not prefixes:
        return "push needs HOURGLASS_PUSH_ALLOWED: the service sends requests only to its prefixes"
    if problem := url_problem(url):
        return problem
    if not any(prefix_admits(prefix, url) for prefix in prefixes):
        return f"push url {url!r} matches no prefix of HOURGLASS_PUSH_ALLOWED"
    return None
