"""The queue service's ports: what it needs from storage, satisfied by app/storage
(`Storage` and its rooms), and what it reports as it works (`QueueEvents`, which
the app's metrics implement); mypy checks both where `create_app` wires them."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol

from app.domain.messages import (
    Claim,
    Claimed,
    Finish,
    Lease,
    Limit,
    Message,
    Offer,
    OfferOutcome,
    Outcome,
    QueueFilter,
    QueueSettings,
    QueueStats,
    Redrive,
    Settled,
    Swept,
    every_queue,
)
from app.domain.pages import (
    DuePosition,
    HistoryPage,
    HistoryPosition,
    KeyPosition,
    ListState,
    MessagePage,
)
from app.domain.table_health import TableHealth


class Messages(Protocol):
    async def offer(
        self,
        queue: str,
        offer: Offer,
        now: int,
        *,
        can_create: bool = True,
        may_use: QueueFilter = every_queue,
    ) -> OfferOutcome | None: ...

    async def offer_many(
        self, queue: str, offers: Sequence[Offer], now: int, may_use: QueueFilter = every_queue
    ) -> list[Outcome]: ...

    async def get(self, queue: str, key: str) -> Message | None: ...

    async def delete(self, queue: str, key: str, now: int) -> bool: ...

    async def next_due(self, queue: str) -> int | None: ...

    async def stats(self, queue: str, now: int) -> QueueStats: ...

    async def all_stats(self, now: int) -> list[QueueStats]: ...

    async def purge(self, queue: str, now: int) -> int: ...


class Leases(Protocol):
    async def poll(
        self,
        queue: str,
        limit: int,
        lock_id: str,
        lease_until: int,
        now: int,
        settings: QueueSettings | None = None,
        *,
        max_bytes: int | None = None,
        clock: Callable[[], int] | None = None,
    ) -> Claim: ...

    async def redrive(
        self, queue: str, to: str | None, limit: int, now: int, may_use: QueueFilter = every_queue
    ) -> Redrive: ...

    async def acknowledge(self, queue: str, lock_id: str, now: int) -> int: ...

    async def acknowledge_keys_of_lock(self, queue: str, lock_id: str, now: int) -> list[str]: ...

    async def acknowledge_keys(
        self, queue: str, lock_id: str, keys: Sequence[str], now: int
    ) -> list[str]: ...

    async def extend(self, queue: str, lock_id: str, until: int) -> int: ...

    async def extend_within_limits(
        self, queue: str, lock_id: str, lease_ms: int, clock: Callable[[], int]
    ) -> tuple[int | None, int]: ...

    async def give_back(self, queue: str, lock_id: str, claimed: Sequence[Claimed]) -> int: ...

    async def release(self, queue: str, lock_id: str, at: int) -> int: ...

    async def release_each(
        self,
        queue: str,
        lock_id: str,
        due: Callable[[int], int],
        keys: Sequence[str] | None = None,
    ) -> list[str]: ...


class Settings(Protocol):
    async def get(self, queue: str) -> QueueSettings | None: ...

    async def put(self, settings: QueueSettings) -> QueueSettings: ...

    async def queues(self) -> list[str]: ...

    async def pushing(self) -> list[QueueSettings]: ...

    async def pause(self, queue: str, now: int) -> int: ...

    async def resume(self, queue: str) -> bool: ...

    async def paused_at(self, queue: str) -> int | None: ...


class Groups(Protocol):
    async def marked(self, limit: int) -> dict[str, list[str]]: ...

    async def settle(self, queue: str, groups: Sequence[str], now: int) -> Settled: ...


class History(Protocol):
    async def prune(self, before: int, batch: int) -> int: ...


class Expiry(Protocol):
    async def expire(self, now: int, limit: int) -> Swept: ...


class TableHealthReads(Protocol):
    async def read(self) -> TableHealth: ...


class Lists(Protocol):
    async def messages(
        self,
        queue: str,
        *,
        state: ListState = ListState.ALL,
        prefix: str | None = None,
        group: str | None = None,
        after: DuePosition | KeyPosition | None = None,
        limit: int,
        now: int,
        max_bytes: int | None = None,
    ) -> MessagePage: ...

    async def history(
        self,
        queue: str,
        *,
        key: str | None = None,
        outcome: Finish | None = None,
        before: HistoryPosition | None = None,
        limit: int,
    ) -> HistoryPage: ...


class ListStorage(Protocol):
    """The room the queue's lists use."""

    @property
    def lists(self) -> Lists: ...


class QueueStorage(Protocol):
    """The rooms the queue service uses."""

    @property
    def messages(self) -> Messages: ...

    @property
    def leases(self) -> Leases: ...

    @property
    def settings(self) -> Settings: ...

    @property
    def groups(self) -> Groups: ...

    @property
    def history(self) -> History: ...

    @property
    def expiry(self) -> Expiry: ...

    @property
    def table_health(self) -> TableHealthReads: ...

    async def schema_revision(self) -> str | None: ...


class Peers(Protocol):
    """The other processes serving the same database, told after a commit that a queue may
    have a message due soon (on PostgreSQL by NOTIFY, app/storage/dialects/postgresql/peers.py;
    on other databases there are none, and their long polls rely on re-checks)."""

    def tell(self, queue: str | None) -> None:
        """`queue` (None: every queue) may have something due; returns at once."""
        ...


class QueueEvents(Protocol):
    """What the service reports as it works (the app's metrics listen)."""

    def offered(self, queue: str, outcomes: Sequence[Outcome]) -> None: ...

    def polled(self, queue: str, lease: Lease | None, now: int) -> None: ...

    def acknowledged(self, queue: str, count: int) -> None: ...

    def released(self, queue: str, count: int) -> None: ...

    def dead_lettered(self, queue: str, count: int) -> None: ...

    def expired(self, queue: str, count: int) -> None: ...

    def held_back(self, queue: str, limit: Limit) -> None: ...


class Unobserved:
    """Events nobody listens to."""

    def offered(self, queue: str, outcomes: Sequence[Outcome]) -> None:
        pass

    def polled(self, queue: str, lease: Lease | None, now: int) -> None:
        pass

    def acknowledged(self, queue: str, count: int) -> None:
        pass

    def released(self, queue: str, count: int) -> None:
        pass

    def dead_lettered(self, queue: str, count: int) -> None:
        pass

    def expired(self, queue: str, count: int) -> None:
        pass

    def held_back(self, queue: str, limit: Limit) -> None:
        pass
