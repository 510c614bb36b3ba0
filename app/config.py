"""Settings: the only place that reads the environment."""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import Field, ValidationError, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError

from app.domain.push import parse_prefixes, prefix_problem

# Plain URLs users write, mapped to the SQLAlchemy driver we ship for them.
_DRIVER_SCHEMES = {
    "postgres": "postgresql+psycopg",
    "postgresql": "postgresql+psycopg",
    "mysql": "mysql+mysqldb",
    "mariadb": "mariadb+mysqldb",
}
# The schemes a database URL may have: the plain ones above, and the drivers we ship.
_SHIPPED_SCHEMES = {
    *_DRIVER_SCHEMES,
    *_DRIVER_SCHEMES.values(),
    "sqlite",
    "sqlite+pysqlite",
}
ACCEPTED_DATABASE_URLS = (
    "postgresql://user:password@host:5432/db, mariadb://user:password@host:3306/db "
    "(or mysql://), sqlite:///path/to/file.db"
)
# `scheme://user:password@`: the password, up to the first "@" (as SQLAlchemy reads it).
_URL_PASSWORD = re.compile(r"^([\w+.-]+://[^:/@]*:)[^@]*@")
# `?password=…` in a URL's query.
_QUERY_PASSWORD = re.compile(r"([?&]password=)[^&]*", re.IGNORECASE)
# Settings whose values are never shown whole in a message.
_SECRET_LISTS = ("api_tokens", "metrics_tokens", "push_secrets")
# The bounds on waiting for the database (see Settings), which storage defaults to as well.
DEFAULT_LOCK_TIMEOUT = 5.0
DEFAULT_STATEMENT_TIMEOUT = 10.0


class SettingError(ValueError):
    """A setting (HOURGLASS_* or a command-line option) whose value is not accepted; its text
    names the setting, the value (secrets masked) and what is accepted."""


def masked_url(url: str) -> str:
    """`url` with its password, if any, shown as `***`."""
    return _QUERY_PASSWORD.sub(r"\1***", _URL_PASSWORD.sub(r"\1***@", url))


def normalize_database_url(url: str) -> str:
    """Map `postgresql://…`, `postgres://…`, `mysql://…` and `mariadb://…` to our drivers.

    ValueError, saying what is accepted, for anything but a URL of a database we ship a
    driver for (SQLAlchemy would fail later with a traceback).
    """
    scheme, separator, rest = url.partition("://")
    if not separator:
        raise ValueError(f"not a database URL; accepted: {ACCEPTED_DATABASE_URLS}")
    if scheme.lower() not in _SHIPPED_SCHEMES:
        raise ValueError(f"unsupported database {scheme!r}; accepted: {ACCEPTED_DATABASE_URLS}")
    normalized = f"{_DRIVER_SCHEMES.get(scheme.lower(), scheme.lower())}://{rest}"
    try:
        port = make_url(normalized).port
    except (ArgumentError, ValueError):
        raise ValueError(
            f"not a database URL (its port is not a number); accepted: {ACCEPTED_DATABASE_URLS}"
        ) from None
    if port is not None and not 0 < port < 65536:
        raise ValueError(f"port {port} is out of range (1 to 65535)")
    return normalized


def database_url_setting(name: str, url: str) -> str:
    """`url` normalized (see normalize_database_url), or SettingError naming `name`."""
    try:
        return normalize_database_url(url)
    except ValueError as error:
        raise SettingError(f"{name}={masked_url(url)!r}: {error}") from None


class Settings(BaseSettings):
    """Service configuration, from `HOURGLASS_*` environment variables."""

    model_config = SettingsConfigDict(env_prefix="HOURGLASS_", extra="ignore", frozen=True)

    database_url: str = "sqlite:///./hourglass.db"
    default_lease: float = Field(300.0, ge=1, le=43200, description="seconds")
    max_payload_bytes: int = Field(262_144, ge=1)
    max_request_bytes: int = Field(16 * 1024 * 1024, ge=1)
    # A poll stops adding messages before its answer would pass this size; the first
    # due message goes out whatever its size. 64 of the largest payloads by default,
    # and 1000 untraced messages of up to 14 KiB: only polls of large messages are cut, and a
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
    # wake within milliseconds whichever replica took the offer (decision 19); off, they
    # neither tell nor listen, and notice others' offers at their re-checks.
    listen: bool = True
    # Every message that leaves a queue (acknowledged, dead-lettered, dropped) leaves
    # a row in delivery_history, kept this many seconds (7 days), then pruned.
    history: bool = True
    history_retention: float = Field(7 * 24 * 3600.0, ge=1, description="seconds")
    # Slow clients (docs/operations/scaling.md). A request's head must arrive within this
    # many seconds of the connection's opening or of its previous answer, else the
    # connection is closed.
    request_head_timeout: float = Field(10.0, gt=0, description="seconds")
    # A request's body must arrive within this many seconds of its head: else 408 and
    # the connection is closed. 30 s lets the largest body (16 MiB) come at ~560 KB/s.
    request_body_timeout: float = Field(30.0, gt=0, description="seconds")
    # Open client connections, at most; lowered at start to fit the open-file limit.
    max_connections: int = Field(10_000, ge=1)
    # Open connections from one client address, at most (0: no cap, e.g. behind a proxy).
    max_connections_per_client: int = Field(256, ge=0)
    # Push delivery (docs/guide/push.md). The URL prefixes push targets must match,
    # comma-separated: empty, no queue may push (the service sends requests to no address
    # of a user's choosing). The secrets that sign each push (comma-separated; several
    # allow rotation).
    push_allowed: str = ""
    push_secrets: str = Field("", repr=False)
    # `serve` and `migrate`: how long to wait for a database that does not answer yet
    # (a container starting beside it), retrying with backoff; 0: not at all.
    wait_for_database: float = Field(0.0, ge=0, le=86400, description="seconds")

    @field_validator("database_url")
    @classmethod
    def _normalize_url(cls, value: str) -> str:
        return normalize_database_url(value)

    @field_validator("api_tokens")
    @classmethod
    def _check_api_tokens(cls, value: str) -> str:
        # app/api/auth.py's parse_tokens reads them; its grammar, checked before anything starts.
        for item in value.split(","):
            token, _, _glob = item.strip().partition("=")
            if item.strip() and not token.strip():
                raise ValueError(
                    "a token is empty; accepted: comma-separated `token` or `token=queue-glob`"
                )
        return value

    @field_validator("metrics_tokens", "push_secrets")
    @classmethod
    def _check_not_only_commas(cls, value: str) -> str:
        if value.strip() and not value.replace(",", "").strip():
            raise ValueError("no value between the commas; accepted: comma-separated values")
        return value

    @field_validator("push_allowed")
    @classmethod
    def _check_prefixes(cls, value: str) -> str:
        for prefix in parse_prefixes(value):
            if problem := prefix_problem(prefix):
                raise ValueError(
                    f"prefix {prefix!r}: {problem}; "
                    "accepted: comma-separated URL prefixes, e.g. https://hooks.example.com/"
                )
        return value


def load_settings(**overrides: Any) -> Settings:
    """Settings from the environment (and `overrides`), or SettingError with one line per
    setting that is not accepted."""
    try:
        return Settings(**overrides)
    except ValidationError as error:
        raise SettingError(
            "\n".join(_problem_line(problem) for problem in error.errors())
        ) from None


def _problem_line(problem: Any) -> str:
    """One line of a setting that is not accepted: its variable, its value, what is accepted."""
    name = str(problem["loc"][0]) if problem["loc"] else "?"
    value = problem.get("input")
    shown = _masked_value(name, value) if isinstance(value, str) else repr(value)
    if problem["type"] == "value_error":
        reason = str(problem["ctx"]["error"])
    else:
        reason = f"accepted: {_accepted(name)}"
    return f"HOURGLASS_{name.upper()}={shown}: {reason}"


def _masked_value(name: str, value: str) -> str:
    if name == "database_url":
        return repr(masked_url(value))
    if name in _SECRET_LISTS:
        # Each token or secret as ***, what follows `=` (a queue glob) as it is.
        items = [item.partition("=") for item in value.split(",")]
        return repr(
            ",".join(("***" if token.strip() else token) + sep + rest for token, sep, rest in items)
        )
    return repr(value)


def _accepted(name: str) -> str:
    """What a setting accepts, from its declaration (type, bounds, unit)."""
    field = Settings.model_fields[name]
    annotation: Any = field.annotation
    if annotation is bool:
        return "true or false (or 1/0, yes/no, on/off)"
    if getattr(annotation, "__origin__", None) is Literal:
        return "one of " + ", ".join(str(choice) for choice in annotation.__args__)
    kind = {int: "a whole number", float: "a number"}.get(annotation, "text")
    if field.description == "seconds":
        kind += " of seconds"
    bounds = []
    for constraint in field.metadata:
        for attribute, words in (
            ("ge", "at least"),
            ("gt", "more than"),
            ("le", "at most"),
            ("lt", "less than"),
        ):
            if (bound := getattr(constraint, attribute, None)) is not None:
                bounds.append(f"{words} {bound:g}")
    return ", ".join([kind, *bounds])
