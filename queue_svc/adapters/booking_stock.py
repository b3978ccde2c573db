"""Whether events are sold out, as booking publishes it for the admitter
(``ports.BookingStockSource``).

The contract, shared with ``booking_svc.jobs.stock`` (which writes it): the
admitter names the events it wants in :data:`WANTED_KEY` (their ids,
comma-separated); booking answers in one Redis hash, :data:`STOCK_KEY`; one field per event (its id in decimal),
whose value is a JSON object ``{"at_ms", "available", "held", "sold",
"offers"}``: when booking read it (Unix ms) and the event's seats over all
its sections (available: capacity and overbooking left; held: holds not
ended yet; sold) and the fans holding an open waiting-list offer (absent:
none). An event is sold out when it sold seats and has none available or
held; the offers' fans shop outside the room, and its cap on shoppers
counts them. An entry older than the reader's maximum age (booking not
publishing) says nothing: the room keeps its flag as it is.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from typing import Any

import redis.asyncio as aioredis

from queue_svc.ports import StockVerdict

_log = logging.getLogger("queue_svc.adapters.booking_stock")

# The key booking publishes each event's seats under (booking_svc.jobs.stock).
STOCK_KEY = "boxoffice:booking:stock"
# Where the admitter names the events it wants booking to publish.
WANTED_KEY = "boxoffice:booking:stock:events"


def verdict(raw: Any, *, now_ms: int, max_age_ms: int) -> StockVerdict | None:
    """One entry's verdict: None when it is missing, malformed or stale."""
    if raw is None:
        return None
    try:
        entry = json.loads(raw)
        at_ms, available, held, sold = (int(entry[k]) for k in ("at_ms", "available", "held", "sold"))
        offers = max(0, int(entry.get("offers", 0)))
    except (ValueError, KeyError, TypeError, AttributeError):
        return None
    if now_ms - at_ms > max_age_ms:
        return None
    return StockVerdict(available <= 0 and held <= 0 and sold > 0, offers)


class RedisBookingStock:
    """Reads the stock hash; one HMGET per read, for all the events asked."""

    def __init__(self, client: aioredis.Redis, *, max_age_ms: int) -> None:
        self._client = client
        self._max_age_ms = max_age_ms

    async def want(self, event_ids: Sequence[int]) -> None:
        """Name the events whose seats booking should publish (a failed
        write is logged: the next refresh writes again)."""
        try:
            await self._client.set(WANTED_KEY, ",".join(str(event_id) for event_id in event_ids))
        except (aioredis.RedisError, OSError) as err:
            _log.warning("booking stock not asked for", extra={"error": repr(err)})

    async def read(self, event_ids: Sequence[int], *, now_ms: int) -> dict[int, StockVerdict]:
        """Each event's verdict that booking published lately; an event
        with none (or Redis not answering) is left out: not known now."""
        if not event_ids:
            return {}
        try:
            values: list[Any] = await self._client.hmget(STOCK_KEY, [str(event_id) for event_id in event_ids])
        except (aioredis.RedisError, OSError) as err:
            _log.warning("booking stock not read", extra={"error": repr(err)})
            return {}
        verdicts: dict[int, StockVerdict] = {}
        for event_id, raw in zip(event_ids, values, strict=True):
            found = verdict(raw, now_ms=now_ms, max_age_ms=self._max_age_ms)
            if found is not None:
                verdicts[event_id] = found
        return verdicts
