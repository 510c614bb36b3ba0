"""The source of the current time: one object, passed everywhere, replaced in tests."""

from __future__ import annotations

import time
from typing import Protocol


class Clock(Protocol):
    """Tells the current time as epoch milliseconds."""

    def now_ms(self) -> int: ...


class SystemClock:
    """The wall clock."""

    def now_ms(self) -> int:
        return time.time_ns() // 1_000_000
