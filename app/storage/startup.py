"""The database at start-up: reached (waited for, if asked), then migrated, its failures in
words an operator can act on: DatabaseUnreachable (nothing answered) or DatabaseRefused (the
database answered no). Nothing here starts anything that would need stopping."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from alembic.util.exc import CommandError
from sqlalchemy.engine import make_url
from sqlalchemy.exc import DBAPIError, NoSuchModuleError

from app.config import SettingError, masked_url
from app.storage.dialects import for_engine_url
from app.storage.dialects.base import first_line
from app.storage.engine import create_unpooled_engine
from app.storage.schema import upgrade_to_head

# While waiting for the database: the first retry after this long, doubling up to the
# most; a line is said at the first failure and then every SAY_EVERY_SECONDS.
FIRST_RETRY_SECONDS = 0.25
MOST_RETRY_SECONDS = 2.0
SAY_EVERY_SECONDS = 5.0
# The driver that each database's URL needs, and how to install it.
_DRIVER_EXTRAS = {"mariadb": "mariadb", "mysql": "mariadb"}


class DatabaseFailure(Exception):
    """The database at start-up; its text is for the operator, `reason` the driver's words."""

    def __init__(self, message: str, reason: str = "") -> None:
        super().__init__(message)
        self.reason = reason or message


class DatabaseUnreachable(DatabaseFailure):
    """Nothing answered at the database URL: not running (yet), no route, an unknown host."""


class DatabaseRefused(DatabaseFailure):
    """The database answered no: credentials, an unknown database, a file that cannot be
    opened, a schema this release cannot migrate."""


@dataclass(frozen=True)
class DatabaseUrl:
    """A database URL and the setting it came from, for messages."""

    url: str
    setting: str = "HOURGLASS_DATABASE_URL"

    @property
    def shown(self) -> str:
        return masked_url(self.url)


def check_database(database: DatabaseUrl) -> None:
    """Open one connection and run one statement; raise DatabaseUnreachable or
    DatabaseRefused (or SettingError when the URL's driver is not installed)."""
    try:
        engine = create_unpooled_engine(database.url)
    except (NoSuchModuleError, ImportError) as error:
        backend = make_url(database.url).get_backend_name()
        extra = _DRIVER_EXTRAS.get(backend)
        hint = f": pip install 'hourglass[{extra}]'" if extra else ""
        raise SettingError(
            f"{database.setting}={database.shown!r}: the driver for {backend} is not "
            f"installed ({first_line(error)}){hint}"
        ) from None
    try:
        with engine.connect() as connection:
            connection.exec_driver_sql("SELECT 1")
    except DBAPIError as error:
        raise _failure(database, error) from None
    finally:
        engine.dispose()


def wait_for_database(
    database: DatabaseUrl,
    seconds: float,
    *,
    say: Callable[[str], object],
    check: Callable[[DatabaseUrl], None] = check_database,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], object] = time.sleep,
) -> None:
    """Return once `check` passes; while nothing answers, try again for up to `seconds`
    (backing off, saying why every few seconds), then raise DatabaseUnreachable. A
    database that refuses is not waited for: DatabaseRefused at once."""
    started = clock()
    delay = FIRST_RETRY_SECONDS
    said_at: float | None = None
    while True:
        try:
            check(database)
        except DatabaseUnreachable as error:
            now = clock()
            waited = now - started
            if waited >= seconds:
                if seconds > 0:
                    raise DatabaseUnreachable(
                        f"{error} (waited {waited:.0f} s)", error.reason
                    ) from None
                raise
            if said_at is None or now - said_at >= SAY_EVERY_SECONDS:
                said_at = now
                say(
                    f"waiting for the database at {database.shown}: {error.reason} "
                    f"({waited:.0f} s of {seconds:g})"
                )
            sleep(min(delay, seconds - waited))
            delay = min(delay * 2, MOST_RETRY_SECONDS)
        else:
            if said_at is not None:
                say(f"the database at {database.shown} answers after {clock() - started:.0f} s")
            return


def migrate(database: DatabaseUrl) -> None:
    """Upgrade the schema to this release's head, or raise DatabaseUnreachable or
    DatabaseRefused saying why not (the database is checked first, so an unreachable
    one leaves nothing half-done)."""
    check_database(database)
    try:
        upgrade_to_head(database.url)
    except DBAPIError as error:
        raise _failure(database, error, doing="migrating the schema") from None
    except CommandError as error:
        raise DatabaseRefused(
            f"the schema of the database at {database.shown} cannot be migrated by this "
            f"release: {first_line(error)} (a newer release migrated it?)"
        ) from None


def _failure(database: DatabaseUrl, error: DBAPIError, doing: str = "") -> DatabaseFailure:
    """DatabaseUnreachable or DatabaseRefused for a driver's error."""
    unanswered, reason = for_engine_url(database.url).connect_failure(error)
    while_doing = f" while {doing}" if doing else ""
    if unanswered:
        return DatabaseUnreachable(
            f"the database at {database.shown} ({database.setting}) does not answer"
            f"{while_doing}: {reason}",
            reason,
        )
    return DatabaseRefused(
        f"the database at {database.shown} ({database.setting}) refused{while_doing}: {reason}",
        reason,
    )
