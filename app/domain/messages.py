"""Frozen domain objects that storage returns and the API renders. Times are epoch ms."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Protocol

from app.domain.formats import LATEST_MS
from app.domain.trace import Trace

# Which queues a request may use. The service asks it about the queues a request
# names (a redrive's `to`, a dead-letter queue); storage about those only the rows
# know, under the rows' locks (where each dead letter goes back to).
QueueFilter = Callable[[str], bool]


def every_queue(queue: str) -> bool:
    """The QueueFilter of a request limited to no queues."""
    return True


# A message's priority (docs/decisions/0017-priorities.md): among due messages a poll
# takes the highest first.
DEFAULT_PRIORITY = 0
MAX_PRIORITY = 9
# Every priority, highest first: the order in which a poll reads them.
PRIORITIES = tuple(range(MAX_PRIORITY, DEFAULT_PRIORITY - 1, -1))
# How many of one group a queue leases at once unless its settings say otherwise, and
# the most it may say (docs/guide/flow-control.md).
DEFAULT_GROUP_CONCURRENCY = 1
MAX_GROUP_CONCURRENCY = 1000
# The longest delay, ttl or retry delay (seconds): far enough for any reminder, near
# enough that every due time it gives from now prints as a date.
MAX_DELAY_SECONDS = 100 * 366 * 24 * 3600
# The shortest ttl (seconds): a millisecond, the finest time the service keeps.
MIN_TTL_SECONDS = 0.001


def waiting_priority(priority: int) -> int:
    """How a grouped message that waits behind its group's front stores `priority` (and
    back again): -1 - p, outside the poll's ranges (docs/decisions/0027-message-groups.md)."""
    return -1 - priority


def shown_priority(stored: int) -> int:
    """The priority a stored value stands for, waiting or not."""
    return stored if stored >= 0 else waiting_priority(stored)


class Outcome(StrEnum):
    """What an offer did."""

    CREATED = "created"
    UPDATED = "updated"
    IGNORED = "ignored"


class IfExists(StrEnum):
    """What an offer does when its key already exists."""

    UPDATE = "update"
    IGNORE = "ignore"


class State(StrEnum):
    """Where a message stands at a given instant."""

    SCHEDULED = "scheduled"
    READY = "ready"
    LEASED = "leased"


@dataclass(frozen=True, slots=True)
class Message:
    """A stored message. `scheduled_at` is when it is next due (lease end when leased)."""

    queue: str
    key: str
    payload: bytes
    scheduled_at: int
    scheduled_at_initially: int
    created_at: int
    locked: bool
    # How often it was handed to a worker in this queue (a poll that leases it counts).
    deliveries: int = 0
    # For a dead letter, the queue it was dead-lettered from.
    dead_lettered_from: str | None = None
    # 0-9: among due messages, a poll takes higher ones first.
    priority: int = DEFAULT_PRIORITY
    # Its group, if any: one group's messages go at most group_concurrency at once, in due order.
    group: str | None = None
    # When it expires (epoch ms): never delivered after it (None: never).
    expires_at: int | None = None
    # A dead letter moved here because it expired (docs/decisions/0028-expiry.md).
    expired: bool = False
    # The trace context it was offered with (docs/decisions/0029-trace-context.md).
    trace: Trace | None = None

    def state(self, now: int) -> State:
        """`ready` once due (an expired lease is pollable again), else `leased` or `scheduled`."""
        if self.scheduled_at <= now:
            return State.READY
        return State.LEASED if self.locked else State.SCHEDULED


@dataclass(frozen=True, slots=True)
class Delivery:
    """A message handed to a worker by a poll."""

    message: Message
    redelivery: bool


@dataclass(frozen=True, slots=True)
class Claimed:
    """A delivered row as it was before a poll claimed it: what undoing the claim puts back
    (its due time, its holder, its delivery counts)."""

    id: int
    scheduled_at: int
    lock_id: str | None
    deliveries: int
    first_delivered_at: int | None
    last_delivered_at: int | None


@dataclass(frozen=True, slots=True)
class Claim:
    """What one look of a poll did: messages delivered, and keys moved to the dead-letter queue."""

    deliveries: list[Delivery]
    # When their leases end (epoch ms): a claim that waited for its turn on a limited
    # queue leases from when it claimed, later than the poll asked.
    lease_until: int
    dead_lettered: int = 0
    # Rows past their delivery limit that this look found (moved, or held for later).
    exhausted: int = 0
    # The delivered rows as they were, to give them back when nobody receives them.
    before: tuple[Claimed, ...] = ()
    # A queue limit that cut this look short (docs/guide/flow-control.md), or None: it took all
    # the room the limit left, less than it asked for (possibly nothing).
    held_back_by: Limit | None = None
    # When that limit next has room by time alone (epoch ms: a lease running out, the rate's
    # window moving on), or None when only an acknowledgement or a release frees it.
    room_at: int | None = None


# What one message adds to a poll's answer besides its payload and trace context, at most:
# its other fields with the longest key and group (200 characters of 4 bytes each) and
# queue names come to ~2,200 bytes, and the answer's own fields (its lock id) fit in the
# rest. Its trace context adds at most trace.RENDERED_PER_STORED bytes per stored character.
POLL_MESSAGE_ENVELOPE_BYTES = 2304
# The longest a poll waits for a message (its `wait`): a message due later than this from
# now cannot end any wait early.
MAX_WAIT_SECONDS = 20


@dataclass(frozen=True, slots=True)
class Lease:
    """The result of a poll: one lock id held over every delivered message."""

    lock_id: str
    expires_at: int
    deliveries: tuple[Delivery, ...]


@dataclass(frozen=True, slots=True)
class Offer:
    """One message to schedule: the unit of single and batch offers."""

    key: str
    payload: bytes
    scheduled_at: int
    if_exists: IfExists = IfExists.UPDATE
    priority: int = DEFAULT_PRIORITY
    group: str | None = None
    # When it expires (epoch ms), or None: never.
    expires_at: int | None = None
    trace: Trace | None = None

    @property
    def stored_priority(self) -> int:
        """The priority as a new or updated row stores it: a grouped message waits until
        the groups' keeper brings it to its group's front."""
        return self.priority if self.group is None else waiting_priority(self.priority)


@dataclass(frozen=True, slots=True)
class OfferOutcome:
    """What an offer did, and when the message it leaves stored was asked for."""

    outcome: Outcome
    scheduled_at: int


@dataclass(frozen=True, slots=True)
class When:
    """When a message is due: at `scheduled_at`, after `delay` (ms), or now; and when it
    expires: at `expires_at`, `ttl` (ms) after it is due, or never."""

    scheduled_at: int | None = None
    delay: int | None = None
    expires_at: int | None = None
    ttl: int | None = None

    def resolve(self, now: int) -> int:
        if self.scheduled_at is not None:
            return self.scheduled_at
        return now + (self.delay or 0)

    def expiry(self, due: int) -> int | None:
        """When a message due at `due` expires (None: never)."""
        if self.expires_at is not None:
            return self.expires_at
        return None if self.ttl is None else expiry_after(due, self.ttl)


def expiry_after(due: int, ttl_ms: int) -> int:
    """When a message due at `due` with a time to live of `ttl_ms` expires: that long after
    it is due, or at the last instant a time prints as (9999-12-31T23:59:59.999Z) if that
    comes first (a message due late in 9999 may carry a ttl of up to MAX_DELAY_SECONDS)."""
    return min(due + ttl_ms, LATEST_MS)


@dataclass(frozen=True, slots=True)
class OfferRequest:
    """One message as a producer sends it: the payload is still a JSON value."""

    key: str
    payload: Any
    when: When = When()
    if_exists: IfExists = IfExists.UPDATE
    priority: int = DEFAULT_PRIORITY
    group: str | None = None
    trace: Trace | None = None


@dataclass(frozen=True, slots=True)
class OfferResult:
    """The answer to one offer."""

    queue: str
    key: str
    outcome: Outcome
    scheduled_at: int


@dataclass(frozen=True, slots=True)
class QueueStats:
    """Counts of a queue's messages by state at one instant, and since when it has been
    paused (None: it delivers)."""

    queue: str
    messages: int
    ready: int
    scheduled: int
    leased: int
    oldest_ready_at: int | None
    next_scheduled_at: int | None
    paused_at: int | None = None

    @property
    def paused(self) -> bool:
        return self.paused_at is not None


class Finish(StrEnum):
    """How a message left its queue, as the delivery history records it."""

    ACKNOWLEDGED = "acknowledged"
    DEAD_LETTERED = "dead_lettered"
    DROPPED = "dropped"  # deleted by key, purged, replaced, or a cron run withdrawn
    EXPIRED = "expired"  # its expiry passed: removed, or moved to the dead-letter queue


# The dead-letter queue of a queue that names none: `{queue}.dead`.
DEAD_LETTER_SUFFIX = ".dead"


class RandomSource(Protocol):
    """Where jitter comes from: `random.Random` in the service, a fixed value in tests."""

    def random(self) -> float:
        """A number in [0, 1]."""
        ...


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """A queue's delays for messages released without one (docs/guide/failures.md):
    released after its n-th delivery, a message is due again
    `min(max_delay, initial_delay × multiplier^(n−1))` from now, spread uniformly over
    ±`jitter` of that.

    The cap applies before the jitter, so a capped delay is spread like any other
    (up to `max_delay × (1 + jitter)`): capping after it would put every message
    whose spread went past the cap at exactly `max_delay`, together again.
    """

    initial_delay_ms: int
    max_delay_ms: int
    multiplier: float = 2.0
    jitter: float = 0.0

    def base_delay_ms(self, deliveries: int) -> float:
        """The delay after the `deliveries`-th delivery, capped, before any jitter."""
        steps = max(deliveries, 1) - 1  # a message leased before counts existed has 0
        try:
            grown = self.initial_delay_ms * float(self.multiplier) ** steps
        except OverflowError:  # 100.0 ** 200 and beyond: past any cap
            grown = math.inf
        return min(float(self.max_delay_ms), grown)

    def delay_ms(self, deliveries: int, random: RandomSource) -> int:
        """The delay of a message released after its `deliveries`-th delivery, jitter drawn
        from `random`: never negative."""
        base = self.base_delay_ms(deliveries)
        if not self.jitter:
            return round(base)
        spread = base * self.jitter
        return max(0, round(base - spread + 2 * spread * random.random()))


@dataclass(frozen=True, slots=True)
class PushTarget:
    """Where a push queue's messages go (docs/guide/push.md): each due message is POSTed to `url`,
    the whole request bounded by `timeout_ms`, at most `concurrency` at once per replica."""

    url: str
    timeout_ms: int = 10_000
    concurrency: int = 4


class Limit(StrEnum):
    """The queue limits that bound how much a queue delivers (docs/guide/flow-control.md)."""

    MAX_LEASED = "max_leased"
    RATE = "rate"


# A queue's `max_leased`: messages leased at once across every replica and process.
MAX_LEASED_LIMIT = 100_000


@dataclass(frozen=True, slots=True)
class Rate:
    """A queue's rate: in any window of `period_ms`, at most `limit` deliveries begin."""

    limit: int
    period_ms: int


@dataclass(frozen=True, slots=True)
class QueueSettings:
    """A queue's own settings; None means the default (service lease, no limit, `{queue}.dead`,
    released messages due at once, no push, no bound on leases at once or on the rate)."""

    queue: str
    default_lease_ms: int | None = None
    max_deliveries: int | None = None
    dead_letter_queue: str | None = None
    updated_at: int | None = None
    retry: RetryPolicy | None = None
    push: PushTarget | None = None
    group_concurrency: int | None = None
    max_leased: int | None = None
    rate: Rate | None = None

    @property
    def effective_group_concurrency(self) -> int:
        return self.group_concurrency or DEFAULT_GROUP_CONCURRENCY

    @property
    def limited(self) -> bool:
        """Whether a limit bounds the queue's deliveries (its claims then serialize)."""
        return self.max_leased is not None or self.rate is not None

    @property
    def effective_dead_letter_queue(self) -> str:
        return self.dead_letter_queue or self.queue + DEAD_LETTER_SUFFIX


@dataclass(frozen=True, slots=True)
class Swept:
    """What one expiry sweep did: messages it found expired (`found`), how many of them
    left each queue (one whose dead-letter queue's key a worker holds waits for a later
    sweep), and the dead-letter queues they went to."""

    found: int = 0
    expired: dict[str, int] = field(default_factory=dict)
    dead_letter_queues: frozenset[str] = frozenset()


@dataclass(frozen=True, slots=True)
class Settled:
    """What a pass of the groups' keeper did: groups passed over, messages brought into
    fronts and sent out of them, and groups it could not finish (a message it needed was
    held by another transaction): those it marked again, for a later pass."""

    groups: int = 0
    entered: int = 0
    left: int = 0
    unfinished: int = 0

    def __add__(self, other: Settled) -> Settled:
        return Settled(
            self.groups + other.groups,
            self.entered + other.entered,
            self.left + other.left,
            self.unfinished + other.unfinished,
        )


@dataclass(frozen=True, slots=True)
class Redrive:
    """What a redrive did: messages moved back; messages left because their key is taken in
    the target queue or they name no queue to go back to (skipped); messages left because
    the request may not use their target queue (forbidden)."""

    moved: int
    skipped: int
    forbidden: int


@dataclass(frozen=True, slots=True)
class KeyedOutcome:
    """What a per-key acknowledgement or release did: the keys it applied to (`done`) and
    those the lock did not hold (`missing`), each in the order asked, each key once."""

    done: tuple[str, ...]
    missing: tuple[str, ...]

    @classmethod
    def of(cls, asked: Sequence[str], done: Iterable[str]) -> KeyedOutcome:
        """`asked` (duplicates dropped, the first kept) split by whether `done` has each."""
        unique, found = dict.fromkeys(asked), set(done)
        return cls(
            tuple(key for key in unique if key in found),
            tuple(key for key in unique if key not in found),
        )
