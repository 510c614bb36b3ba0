"""Cron entries as stored (frozen domain objects) and the keys of their runs. Times are
epoch ms."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum

from app.domain.formats import from_epoch_ms

# The escape character of run_key_pattern's LIKE patterns.
LIKE_ESCAPE = "\\"
# A configuration hash's length in a run key, and the length of its time.
HASH_LENGTH = 16
_TIME_LENGTH = len("YYYYMMDD-HHMMSS.mmm")
# How far ahead an entry's runs are installed unless it says: an hour; an entry may ask
# for up to a day, and less than five minutes is taken as five. Whatever the lookahead,
# at least the next run is installed, and never more runs than the entry may keep
# (app/cron/bounds.py).
DEFAULT_LOOKAHEAD_MS = 3_600_000
MIN_LOOKAHEAD_MS = 300_000
MAX_LOOKAHEAD_MS = 86_400_000
# How many next runs an entry is shown with unless a read asks for others, and the most
# one may ask for.
DEFAULT_RUNS_SHOWN = 5
MAX_RUNS_SHOWN = 100


@dataclass(frozen=True, slots=True)
class CronEntry:
    """One recurring schedule, named within its queue.

    `schedule` is the schedule's JSON (rule and time zone, see Schedule.as_json);
    `payload` the stored form of the payload every run carries.
    """

    queue: str
    name: str
    schedule: str
    payload: bytes
    config_hash: str
    lookahead_ms: int | None
    created_at: int
    updated_at: int
    # The priority of every run (app/domain/messages.py: PRIORITIES).
    priority: int = 0
    # Since when the entry has been paused (epoch ms; None: it runs).
    paused_at: int | None = None
    # The group of every run, if any (docs/guide/flow-control.md).
    group: str | None = None
    # Every run expires this long after it is due (ms; None: never), and never by one time
    # for all (docs/decisions/0028-expiry.md).
    ttl_ms: int | None = None


class InstallOutcome(StrEnum):
    CREATED = "created"
    CHANGED = "changed"
    UNCHANGED = "unchanged"


@dataclass(frozen=True, slots=True)
class CronInstall:
    """What installing an entry did; `removed_runs` counts old runs it deleted."""

    outcome: InstallOutcome
    entry: CronEntry
    removed_runs: int


def run_key(name: str, hash_: str, run: int) -> str:
    """The message key of one run: `{name}/{config_hash}/{UTC YYYYMMDD-HHMMSS.mmm}`."""
    moment = from_epoch_ms(run)
    return f"{name}/{hash_}/{moment:%Y%m%d-%H%M%S}.{moment.microsecond // 1000:03d}"


def run_key_pattern(name: str, hash_: str | None = None) -> str:
    """A LIKE pattern (escape `LIKE_ESCAPE`) for every run key of one entry, or of one
    configuration of it.

    A prefix alone would be wrong: the runs of `a/b` start with `a/` too. Every
    run key of entry `name` is `name`, a slash, 16 characters, a slash and 19
    characters, so the pattern fixes the length; an entry whose name starts with
    `name/` has longer keys. `%`, `_` and the escape character in the name are
    escaped, so `a_b` never matches `axb` and `100%` never matches `1000`.
    Compare case-sensitively (SQLite's LIKE is not, by default).
    """
    literal = "".join(LIKE_ESCAPE + char if char in "%_" + LIKE_ESCAPE else char for char in name)
    middle = hash_ if hash_ is not None else "_" * HASH_LENGTH
    return f"{literal}/{middle}/{'_' * _TIME_LENGTH}"


def run_key_range(name: str, hash_: str | None = None) -> tuple[str, str]:
    """Two keys between which (both excluded) every run key of one entry, or of one
    configuration of it, falls in code point order (the byte order of UTF-8).

    The first is the keys' common prefix, `name/` (or `name/hash/`); the second is that
    prefix with its final `/` turned into the next character, `0`. A key lies strictly
    between them exactly when it starts with the prefix and is longer, so a database
    reads the entry's runs as one range of its (`pKey`, `pKind`) index, whatever the
    queue holds besides. The range also holds the runs of entries named `name/…`:
    run_key_pattern tells those apart.
    """
    prefix = f"{name}/" if hash_ is None else f"{name}/{hash_}/"
    return prefix, prefix[:-1] + chr(ord("/") + 1)


# Which of an entry's runs stay and which come, within its bounds (app/cron/bounds.py).
# Keys of one configuration sort in time order (`…/YYYYMMDD-HHMMSS.mmm`), so "later"
# below is "greater key".


def kept_run_count(stored: Sequence[str], limit: int, due_until: str, keep_until: str) -> int:
    """How many of an entry's stored run keys (of one configuration, sorted) stay: a prefix.

    The runs after it go: those due after `keep_until` (installed further ahead than the
    entry's lookahead now allows), and the latest of those not yet due when more than
    `limit` are stored. A run due by `due_until` always stays: a worker may be about
    to take it, and deleting it would lose a run that happened; while `limit` of them
    wait, the entry installs nothing new.
    """
    kept = sum(1 for key in stored if key <= keep_until)
    due = sum(1 for key in stored if key <= due_until)
    return max(due, min(kept, limit))


def runs_to_install(stored: Sequence[str], candidates: Sequence[str], room: int) -> list[str]:
    """The first `room` of `candidates` (run keys, earliest first) not stored yet."""
    present = set(stored)
    return [key for key in candidates if key not in present][: max(room, 0)]
