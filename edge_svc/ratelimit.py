"""Per client address and per account request limits, kept in Redis so that
every edge replica counts the same (one Lua script per check, sent in the
shared pipelines of a :class:`~boxoffice.redis.ScriptBatcher`)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from boxoffice import deadline
from boxoffice.clock import Clock
from boxoffice.errors import BoxofficeError
from boxoffice.redis import Script, ScriptBatcher, event_key, load_script
from edge_svc.errors import too_many


@dataclass(frozen=True, slots=True)
class Limit:
    """``rate_per_second`` sustained, ``burst`` at once."""

    rate_per_second: float
    burst: int

    @property
    def interval_ms(self) -> int:
        return max(1, round(1000 / self.rate_per_second))


class RateLimiter(Protocol):
    async def check(self, scope: str, subject: str, limit: Limit) -> None:
        """Nothing when allowed; RESOURCE_EXHAUSTED TOO_MANY_REQUESTS otherwise."""


class RedisRateLimiter:
    """GCRA limits in Redis; a limit Redis cannot answer within
    ``timeout_seconds`` lets the request in (the services behind keep their
    own limits), and counts it."""

    def __init__(
        self,
        batcher: ScriptBatcher,
        clock: Clock,
        *,
        timeout_seconds: float = 0.25,
        on_unavailable: Callable[[], None] | None = None,
    ) -> None:
        self._batcher = batcher
        self._clock = clock
        self._timeout_seconds = timeout_seconds
        self._script: Script = load_script("edge_svc", "rate")
        self._on_unavailable = on_unavailable

    async def check(self, scope: str, subject: str, limit: Limit) -> None:
        key = f"edge:rate:{scope}:{{{subject}}}"
        try:
            with deadline.scope(self._timeout_seconds):
                allowed, retry_ms = await self._batcher.call(
                    self._script, [key], [int(self._clock.now() * 1000), limit.interval_ms, limit.burst]
                )
        except BoxofficeError:
            if self._on_unavailable is not None:
                self._on_unavailable()
            return
        if not int(allowed):
            raise too_many(scope, int(retry_ms) / 1000)


class RefusalCounter(Protocol):
    async def count(self, event_id: int, reason: str) -> None:
        """Count one join of the event refused at the door for ``reason``."""


class RedisRefusals:
    """The event's refusal counters in Redis (``{ev:<id>}:refused``, the
    hash the queue's join script counts its own refusals in). A count that
    Redis cannot take is dropped: the refusal stands without it."""

    def __init__(self, batcher: ScriptBatcher) -> None:
        self._batcher = batcher
        self._script: Script = load_script("edge_svc", "refused")

    async def count(self, event_id: int, reason: str) -> None:
        try:
            with deadline.scope(0.25):
                await self._batcher.call(self._script, [event_key(event_id, "refused")], [reason])
        except BoxofficeError:
            return
