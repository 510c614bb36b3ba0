"""What a process read from the database lately, kept for a while: a queue's settings, whether
it is paused. A change made through another replica applies here once the entry expires."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable, Iterator
from typing import Generic, TypeVar

from app.clock import Clock

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class Recent(Generic[K, V]):
    """Values read at most `seconds` ago by the clock, at most `size` of them.

    Entries stay in the order they were read (one read again moves to the end), so the
    expired ones are at the front, and so is the oldest when it is full: reads of ever new
    keys, one each, leave nothing behind once they stop."""

    def __init__(self, clock: Clock, seconds: float, size: int) -> None:
        self.clock = clock
        self.seconds = seconds
        self.size = size
        self._entries: OrderedDict[K, tuple[int, V]] = OrderedDict()

    def __iter__(self) -> Iterator[K]:
        return iter(self._entries)

    def fresh(self, key: K, seconds: float | None = None) -> tuple[V] | None:
        """`(value,)` while read within the last `seconds` (by default the cache's; not when
        the clock went back), else None."""
        entry = self._entries.get(key)
        if entry is None or not self._holds(self.clock.now_ms() - entry[0], seconds):
            return None
        return (entry[1],)

    def keep(self, key: K, value: V) -> None:
        """`value`, read now; every expired entry is forgotten."""
        now = self.clock.now_ms()
        self._entries.pop(key, None)
        while self._entries:
            read_at, _ = next(iter(self._entries.values()))
            if len(self._entries) < self.size and self._holds(now - read_at):
                break
            self._entries.popitem(last=False)
        self._entries[key] = (now, value)

    def _holds(self, age_ms: int, seconds: float | None = None) -> bool:
        return 0 <= age_ms < (self.seconds if seconds is None else seconds) * 1000
