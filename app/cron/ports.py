"""What the cron service needs from storage: its port, satisfied by app/storage
(`Storage.cron`) and checked by mypy where `create_app` wires it."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from app.domain.cron import CronEntry, CronInstall
from app.domain.messages import Offer


class CronEntries(Protocol):
    async def install(self, entry: CronEntry) -> CronInstall: ...

    async def uninstall(self, queue: str, name: str, now: int) -> int | None: ...

    async def pause(self, queue: str, name: str, now: int) -> CronEntry | None: ...

    async def resume(self, queue: str, name: str) -> CronEntry | None: ...

    async def install_runs(
        self, entry: CronEntry, runs: Sequence[Offer], now: int, *, limit: int, keep_until: int
    ) -> int | None: ...

    async def get(self, queue: str, name: str) -> CronEntry | None: ...

    async def entries(self, queue: str | None = None) -> list[CronEntry]: ...

    async def names(self) -> list[tuple[str, str]]: ...


class CronStorage(Protocol):
    """The rooms the cron service uses."""

    @property
    def cron(self) -> CronEntries: ...
