"""Booking's health as booking publishes it for the admitter
(``ports.BookingHealthSource``).

The contract, shared with ``booking_svc.jobs.health`` (which writes it):
one Redis hash, :data:`HEALTH_KEY`; one field per booking replica (its
name), whose value is a JSON object describing that replica's HoldSeats
calls over its last publishing window:

- ``at_ms``     when it was published (Unix ms)
- ``window_ms`` the window it covers
- ``holds``     HoldSeats calls completed in the window
- ``errors``    of them, failures on booking's side (UNKNOWN, INTERNAL,
  UNAVAILABLE, DEADLINE_EXCEEDED, DATA_LOSS); refusals such as seats taken
  or a limit reached are not errors
- ``p50_ms``, ``p99_ms`` the latency quantiles of those calls (ms)

A reader takes the fields published within its maximum age and sums them:
holds and errors add up, the p99 is the worst replica's, the p50 the
holds-weighted mean. A field nobody refreshes (a replica gone) ages out.
"""

from __future__ import annotations

import json
import logging
from typing import Any

import redis.asyncio as aioredis

from queue_svc.rate import BookingHealth

_log = logging.getLogger("queue_svc.adapters.booking_health")

# The key booking publishes its health under (booking_svc.jobs.health).
HEALTH_KEY = "boxoffice:booking:health"


def summarize(fields: dict[Any, Any], *, now_ms: int, max_age_ms: int) -> BookingHealth | None:
    """The replicas' fresh entries summed; None when none is fresh."""
    holds = errors = 0
    weighted_p50 = 0.0
    p99 = 0.0
    fresh = False
    for raw in fields.values():
        try:
            entry = json.loads(raw)
            at_ms, n, failed = int(entry["at_ms"]), int(entry["holds"]), int(entry["errors"])
            entry_p50, entry_p99 = float(entry["p50_ms"]), float(entry["p99_ms"])
        except (ValueError, KeyError, TypeError):
            continue
        if now_ms - at_ms > max_age_ms:
            continue
        fresh = True
        holds += n
        errors += failed
        weighted_p50 += entry_p50 * n
        if n > 0:
            p99 = max(p99, entry_p99)
    if not fresh:
        return None
    return BookingHealth(holds=holds, errors=errors, p50_ms=weighted_p50 / holds if holds else 0.0, p99_ms=p99)


class RedisBookingHealth:
    """Reads the health hash; one HGETALL per read."""

    def __init__(self, client: aioredis.Redis, *, max_age_ms: int) -> None:
        self._client = client
        self._max_age_ms = max_age_ms

    async def read(self, *, now_ms: int) -> BookingHealth | None:
        """None as well when Redis cannot be read: the admitter then
        adapts to no-shows alone."""
        try:
            fields: dict[Any, Any] = await self._client.hgetall(HEALTH_KEY)
        except (aioredis.RedisError, OSError) as err:
            _log.warning("booking health not read", extra={"error": repr(err)})
            return None
        return summarize(fields, now_ms=now_ms, max_age_ms=self._max_age_ms)
