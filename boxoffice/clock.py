"""Time as a dependency, so tests can move it."""

from __future__ import annotations

import time
from typing import Protocol


class Clock(Protocol):
    def now(self) -> float:
        """Wall-clock seconds since the epoch."""


class SystemClock:
    def now(self) -> float:
        return time.time()


_: Clock = SystemClock()
