"""How many Server-Sent Event streams one address and one account hold
open, across every edge process: each stream takes a slot of each (a lease
in Redis, renewed while it lasts, let go when it ends; a process that dies
loses its slots when their leases end). A stream beyond either limit is
refused with RESOURCE_EXHAUSTED (``TOO_MANY_REQUESTS``, scope
``stream-ip`` or ``stream-account``).

A count kept in each process would let N processes hold N times the limit
(a load balancer spreads one address's streams over all of them), hence
Redis. A slot Redis cannot answer for within the limiter's timeout is let
through, as the rate limits are (the stream is a fan's, and the services
behind have their own limits); it is counted in
``boxoffice_edge_rate_limit_unavailable``.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from boxoffice import deadline
from boxoffice.clock import Clock
from boxoffice.errors import BoxofficeError
from boxoffice.redis import Script, ScriptBatcher, load_script
from edge_svc.errors import too_many

# The retry a refused stream is told (a slot frees when another stream ends).
_RETRY_SECONDS = 10.0


@dataclass(frozen=True, slots=True)
class StreamLimits:
    per_address: int
    per_account: int


class Lease(Protocol):
    async def renew(self) -> None:
        """Keeps the stream's slots (when a third of the lease has passed)."""

    def release(self) -> None:
        """Lets go of the stream's slots (at once, in a task of its own: a
        stream ends by cancellation, which would cut an awaited release
        short and leave a slot held until its lease ends)."""


class StreamSlots(Protocol):
    async def take(self, address: str, account: str) -> Lease:
        """The new stream's slots; RESOURCE_EXHAUSTED when the address or
        the account holds its limit of streams already."""


class RedisStreamSlots:
    def __init__(
        self,
        batcher: ScriptBatcher,
        clock: Clock,
        limits: StreamLimits,
        *,
        lease_seconds: float = 60.0,
        timeout_seconds: float = 0.25,
        on_unavailable: Callable[[], None] | None = None,
    ) -> None:
        self._batcher = batcher
        self._clock = clock
        self._limits = limits
        self._lease_ms = int(lease_seconds * 1000)
        self._timeout_seconds = timeout_seconds
        self._on_unavailable = on_unavailable
        self._slot: Script = load_script("edge_svc", "slot")
        self._unslot: Script = load_script("edge_svc", "unslot")
        # Releases under way (held so that they are not collected mid-way).
        self._releasing: set[asyncio.Task[None]] = set()

    async def take(self, address: str, account: str) -> Lease:
        stream = os.urandom(12).hex()
        keys = (_key("ip", address), _key("account", account))
        held: list[str] = []
        for key, limit, scope in zip(
            keys, (self._limits.per_address, self._limits.per_account), ("stream-ip", "stream-account"), strict=True
        ):
            if not await self._call(self._slot, key, [self._now_ms(), self._lease_ms, limit, stream], default=1):
                await self._unslot_all(held, stream)
                raise too_many(scope, min(self._lease_ms / 1000, _RETRY_SECONDS))
            held.append(key)
        return _RedisLease(self, keys, stream, self._clock.now())

    def _release(self, keys: Sequence[str], stream: str) -> None:
        task = asyncio.get_running_loop().create_task(self._unslot_all(keys, stream))
        self._releasing.add(task)
        task.add_done_callback(self._releasing.discard)

    async def _unslot_all(self, keys: Sequence[str], stream: str) -> None:
        for key in keys:
            await self._call(self._unslot, key, [stream], default=0)

    def _now_ms(self) -> int:
        return int(self._clock.now() * 1000)

    async def _call(self, script: Script, key: str, args: list[int | str], *, default: int) -> int:
        try:
            with deadline.detached(self._timeout_seconds):
                return int(await self._batcher.call(script, [key], args))
        except BoxofficeError:
            if self._on_unavailable is not None:
                self._on_unavailable()
            return default


class _RedisLease:
    def __init__(self, slots: RedisStreamSlots, keys: tuple[str, str], stream: str, taken_at: float) -> None:
        self._slots = slots
        self._keys = keys
        self._stream = stream
        self._renewed_at = taken_at

    async def renew(self) -> None:
        slots = self._slots
        now = slots._clock.now()
        if now - self._renewed_at < slots._lease_ms / 3000:
            return
        self._renewed_at = now
        for key in self._keys:
            # A renewal is never refused: the stream already holds its slot
            # (or, its lease lapsed while Redis was away, takes it again).
            await slots._call(slots._slot, key, [slots._now_ms(), slots._lease_ms, 1 << 30, self._stream], default=1)

    def release(self) -> None:
        self._slots._release(self._keys, self._stream)


def _key(scope: str, subject: str) -> str:
    # One hash slot per subject (the rate limits' spelling).
    return f"edge:streams:{scope}:{{{subject}}}"
