"""The `Hourglass-Signature` header of a push: `t=<unix seconds>,v1=<hex HMAC-SHA256>`, the
HMAC of `"<t>.<raw body>"` under each secret in turn (several allow rotation)."""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Sequence


def signature(secret: str, timestamp: int, body: bytes) -> str:
    """The hex HMAC-SHA256 of `"<timestamp>.<body>"` under `secret` (its UTF-8 bytes)."""
    signed = str(timestamp).encode() + b"." + body
    return hmac.new(secret.encode(), signed, hashlib.sha256).hexdigest()


def signature_header(secrets: Sequence[str], timestamp: int, body: bytes) -> str | None:
    """The header's value for `body` sent at `timestamp` (unix seconds): one `v1=` per
    secret, in their order; None without secrets (the request goes unsigned)."""
    if not secrets:
        return None
    return ",".join(
        [f"t={timestamp}", *(f"v1={signature(secret, timestamp, body)}" for secret in secrets)]
    )
