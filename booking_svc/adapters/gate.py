"""An optional Redis gate in front of HoldSeats: a short-lived SET NX key per
seat turns away attempts on seats another attempt has just claimed, before
they cost Postgres a lock wait. Postgres still decides every hold; the gate
only ever says no for a short TTL, and fails open when Redis does."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence

import redis.asyncio as aioredis
from redis.exceptions import RedisError

from booking_svc.metrics import BookingMetrics
from booking_svc.ports import SeatGate
from boxoffice import deadline
from boxoffice.redis import event_key, load_script

_log = logging.getLogger("booking_svc.adapters.gate")

# The gate is an optimisation: it never spends more than this of a call.
_GATE_BUDGET_SECONDS = 0.2


class OpenGate:
    """No gate: every attempt goes to Postgres."""

    async def claim(self, event_id: int, seat_ids: Sequence[int], token: str) -> list[int]:
        return []

    async def release(self, event_id: int, seat_ids: Sequence[int], token: str) -> None:
        return None

    async def clear(self, event_id: int, seat_ids: Sequence[int]) -> None:
        return None


class RedisSeatGate:
    def __init__(self, client: aioredis.Redis, *, ttl_seconds: float, metrics: BookingMetrics) -> None:
        self._client = client
        self._ttl_ms = max(1, int(ttl_seconds * 1000))
        self._metrics = metrics
        self._acquire = load_script("booking_svc", "gate_acquire")
        self._release = load_script("booking_svc", "gate_release")

    @staticmethod
    def _keys(event_id: int, seat_ids: Sequence[int]) -> list[str]:
        return [event_key(event_id, "seatgate", seat_id) for seat_id in seat_ids]

    async def claim(self, event_id: int, seat_ids: Sequence[int], token: str) -> list[int]:
        try:
            async with asyncio.timeout(min(deadline.remaining(), _GATE_BUDGET_SECONDS)):
                taken = await self._acquire.run(self._client, self._keys(event_id, seat_ids), [token, self._ttl_ms])
        except (RedisError, OSError, TimeoutError) as err:
            self._metrics.gate.labels("skipped").inc()
            _log.warning("seat gate skipped", extra={"error": type(err).__name__})
            return []
        if taken:
            self._metrics.gate.labels("rejected").inc()
            return sorted(seat_ids[int(i) - 1] for i in taken)
        self._metrics.gate.labels("passed").inc()
        return []

    async def release(self, event_id: int, seat_ids: Sequence[int], token: str) -> None:
        try:
            async with asyncio.timeout(_GATE_BUDGET_SECONDS):
                await self._release.run(self._client, self._keys(event_id, seat_ids), [token])
        except (RedisError, OSError, TimeoutError):
            pass  # the keys lapse on their own within the TTL

    async def clear(self, event_id: int, seat_ids: Sequence[int]) -> None:
        if not seat_ids:
            return
        try:
            async with asyncio.timeout(_GATE_BUDGET_SECONDS):
                await self._client.delete(*self._keys(event_id, seat_ids))
        except (RedisError, OSError, TimeoutError):
            pass  # the keys lapse on their own within the TTL


def _compliance(client: aioredis.Redis, metrics: BookingMetrics) -> list[SeatGate]:
    return [OpenGate(), RedisSeatGate(client, ttl_seconds=1.0, metrics=metrics)]
