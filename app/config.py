"""Settings: the only place that reads the environment."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

# Plain URLs users write, mapped to the SQLAlchemy driver we ship for them.
_DRIVER_SCHEMES = {
    "postgres": "postgresql+psycopg",
    "postgresql": "postgresql+psycopg",
    "mysql": "mysql+mysqldb",
    "mariadb": "mariadb+mysqldb",
}
# The bounds on waiting for the database (see Settings), which storage defaults to as well.
DEFAULT_LOCK_TIMEOUT = 5.0
DEFAULT_STATEMENT_TIMEOUT = 10.0


def normalize_database_url(url: str) -> str:
    """Map `postgresql://…`, `postgres://…`, `mysql://…` and `mariadb://…` to our drivers."""
    scheme, separator, rest = url.partition("://")
    if not separator:
        raise ValueError(f"not a database URL: {url!r}")
    return f"{_DRIVER_SCHEMES.get(scheme, scheme)}://{rest}"


class Settings(BaseSettings):
    """Service configuration, from `HOURGLASS_*` environment variables."""

    model_config = SettingsConfigDict(env_prefix="HOURGLASS_", extra="ignore", frozen=True)

    database_url: str = "sqlite:///./hourglass.db"
    default_lease: float = Field(300.0, ge=1, le=43200, description="seconds")
    max_payload_bytes: int = Field(262_144, ge=1)
    max_request_bytes: int = Field(16 * 1024 * 1024, ge=1)
    # A poll stops adding messages before its answer would pass this size; the first
    # due message goes out whatever its size. 64 of the largest payloads by default,
    # and 1000 messages of up to 14 KiB: only polls of large messages are cut, and a
    # few of them at once cost the server tens of MiB (each ~1.1x its answer).
    max_poll_bytes: int = Field(16 * 1024 * 1024, ge=1)
    api_tokens: str = ""
    # Bearer tokens for /metrics (comma-separated; several allow rotation); open when empty.
    metrics_tokens: str = ""
    auto_migrate: bool = True
    log_format: Literal["text", "json"] = "text"
    # At most this many storage calls run at once (on PostgreSQL on the event loop,
    # on SQLite one thread each); the rest wait for a turn, up to lock_timeout, then
    # 503. No queue takes the last fifth of them while it holds one already.
    pool_size: int = Field(10, ge=1, description="database connections; storage calls at once")
    # How long a request waits for a connection, and each statement for a row or
    # table lock another transaction holds, before answering 503.
    lock_timeout: float = Field(DEFAULT_LOCK_TIMEOUT, gt=0, le=3600, description="seconds")
    # How long one statement may run before the database cancels it (503); a
    # statement not answered 2 s after that is given up and its connection closed.
    statement_timeout: float = Field(
        DEFAULT_STATEMENT_TIMEOUT, gt=0, le=86400, description="seconds"
    )
    # Long polls wake at once on offers made through this process; this bounds how
    # late they notice messages offered through another replica.
    poll_recheck_seconds: float = Field(1.0, gt=0, le=20)
    # On PostgreSQL, replicas tell each other of offers by LISTEN/NOTIFY, so long polls
    # wake within milliseconds whichever replica took the offer (decision 18); off, they
    # neither tell nor listen, and notice others' offers at their re-checks.
    listen: bool = True
    # Every message that leaves a queue (acknowledged, dead-lettered, dropped) leaves
    # a row in delivery_history, kept this many seconds (7 days), then pruned.
    history: bool = True
    history_retention: float = Field(7 * 24 * 3600.0, ge=1, description="seconds")
    # Slow clients (README, "Slow clients and connection caps"). A request's head must
    # arrive within this many seconds of the connection's opening or of its previous
    # answer, else the connection is closed.
    request_head_timeout: float = Field(10.0, gt=0, description="seconds")
    # A request's body must arrive within this many seconds of its head: else 408 and
    # the connection is closed. 30 s lets the largest body (16 MiB) come at ~560 KB/s.
    request_body_timeout: float = Field(30.0, gt=0, description="seconds")
    # Open client connections, at most; lowered at start to fit the open-file limit.
    max_connections: int = Field(10_000, ge=1)
    # Open connections from one client address, at most (0: no cap, e.g. behind a proxy).
    max_connections_per_client: int = Field(256, ge=0)
    # Push delivery (SPEC §12). The URL prefixes push targets must match, comma-separated:
    # empty, no queue may push (the service sends requests to no address of a user's
    # choosing). The secrets that sign each push (comma-separated; several allow rotation).
    push_allowed: str = ""
    push_secrets: str = Field("", repr=False)

    @field_validator("database_url")
    @classmethod
    def _normalize_url(cls, value: str) -> str:
        return normalize_database_url(value)
