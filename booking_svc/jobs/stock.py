"""What is left of each event's seats, published for the queue's admitter,
which stops admitting to an event once every seat of it is sold
(``queue_svc.adapters.booking_stock`` reads it).

Booking is the arbiter of seats; the admitter must not ask Postgres per fan
or per tick. The admitter names the events it runs waiting rooms for in
:data:`WANTED_KEY` (their ids, comma-separated; rewritten at each of its
refreshes). Every ``interval_seconds`` each booking replica's loop reads
that key, the counters of those events' sections (one statement, by primary
key: its cost follows the number of waiting rooms, not the catalogue nor the
fans) and writes each event's totals into one Redis hash:

- key :data:`STOCK_KEY` (``boxoffice:booking:stock``);
- field: the event id (decimal);
- value: a JSON object ``{"at_ms", "available", "held", "sold", "offers"}``:
  when it was read (Unix ms) and the event's seats over all its sections:
  available (capacity and overbooking left, never below 0 per section),
  held (holds not ended yet, lapsed ones included until the sweeper or a
  new hold ends them), sold, and the fans holding an open waiting-list
  offer (shoppers the room did not admit, which its cap on shoppers
  counts).

An event is sold out when it has sections and nothing is available or held
in any of them: a hold that lapses frees its seats again (available), so
only the last seat sold makes it. The waiting list's seats are not for the
room's fans: a section that fans wait for on the list counts nothing
available or held (what comes back is theirs), and the seats open offers
hold are not counted as held; so a sold-out event whose list has fans stays
closed, and reopens once nobody waits and seats are free. Every replica writes the same figures, so
several writing at once only refresh one another. Events no longer wanted
(or gone from Postgres) are removed from the hash.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

import psycopg
import redis.asyncio as aioredis

from booking_svc.model import SectionCounters, utc
from booking_svc.waitlist_model import WaitlistReservations
from boxoffice import deadline
from boxoffice.clock import Clock
from boxoffice.errors import BoxofficeError

_log = logging.getLogger("booking_svc.jobs.stock")

STOCK_KEY = "boxoffice:booking:stock"
WANTED_KEY = "boxoffice:booking:stock:events"
# At most this many events are read per pass (the first ids named).
MAX_EVENTS = 10_000


def wanted_events(raw: object) -> list[int]:
    """The event ids the admitter named (malformed parts are skipped)."""
    if raw is None:
        return []
    text = raw.decode() if isinstance(raw, bytes) else str(raw)
    ids: list[int] = []
    for part in text.split(","):
        part = part.strip()
        if part.isdigit() and 0 < int(part) < 2**63:
            ids.append(int(part))
        if len(ids) >= MAX_EVENTS:
            break
    return ids


@dataclass(frozen=True, slots=True)
class EventStock:
    """One event's seats over all of its sections."""

    available: int = 0
    held: int = 0
    sold: int = 0
    # Fans holding an open waiting-list offer.
    offers: int = 0

    @property
    def sold_out(self) -> bool:
        return self.available == 0 and self.held == 0 and self.sold > 0


def stock_of(
    counters: list[SectionCounters], reservations: WaitlistReservations | None = None
) -> dict[int, EventStock]:
    """Each event's totals from its sections' counters, less what the
    waiting list holds on to (``reservations``)."""
    reserved = reservations or WaitlistReservations()
    totals: dict[int, EventStock] = {}
    for c in counters:
        before = totals.get(c.event_id, EventStock())
        key = (c.event_id, c.section_id)
        waited = key in reserved.waited
        totals[c.event_id] = EventStock(
            available=before.available + (0 if waited else max(0, c.capacity + c.overbook_limit - c.sold - c.held)),
            held=before.held + (0 if waited else max(0, c.held - reserved.offered.get(key, 0))),
            sold=before.sold + c.sold,
            offers=reserved.offers.get(c.event_id, 0),
        )
    return totals


class StockSource(Protocol):
    """What the publisher reads: the sections' counters and the waiting
    lists' hold on them."""

    async def event_counters(self, event_ids: Sequence[int]) -> list[SectionCounters]: ...

    async def waitlist_reservations(self, event_ids: Sequence[int], now: datetime) -> WaitlistReservations: ...


class StockPublisher:
    """Publishes every event's seats left every ``interval_seconds``."""

    def __init__(
        self, store: StockSource, client: aioredis.Redis, clock: Clock, *, interval_seconds: float = 1.0
    ) -> None:
        self._store = store
        self._client = client
        self._clock = clock
        self._interval = interval_seconds

    async def publish(self) -> dict[int, EventStock]:
        """Read the counters and write every event's entry; what was written."""
        with deadline.scope(max(self._interval, 1.0) * 5):
            wanted = wanted_events(await self._client.get(WANTED_KEY))
            counters = await self._store.event_counters(wanted) if wanted else []
            reservations = await self._store.waitlist_reservations(wanted, utc(self._clock.now())) if wanted else None
        stock = stock_of(counters, reservations)
        at_ms = int(self._clock.now() * 1000)
        entries = {
            str(event_id): json.dumps(
                {
                    "at_ms": at_ms,
                    "available": each.available,
                    "held": each.held,
                    "sold": each.sold,
                    "offers": each.offers,
                },
                separators=(",", ":"),
            )
            for event_id, each in stock.items()
        }
        with deadline.scope(max(self._interval, 1.0) * 5):
            if entries:
                await self._client.hset(STOCK_KEY, mapping=entries)  # type: ignore[arg-type]
            known = await self._client.hkeys(STOCK_KEY)
            gone = [name for name in known if (name.decode() if isinstance(name, bytes) else str(name)) not in entries]
            if gone:
                await self._client.hdel(STOCK_KEY, *gone)
        return stock

    async def run(self) -> None:
        """The body of the publisher's background loop."""
        while True:
            try:
                await self.publish()
            except (BoxofficeError, psycopg.Error, aioredis.RedisError, OSError) as err:
                _log.warning("seat stock not published", extra={"error": repr(err)})
            await asyncio.sleep(self._interval)
