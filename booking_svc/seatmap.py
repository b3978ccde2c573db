"""The seat map cache: each process reads an event's availability from
Postgres at most once every few seconds, however many clients ask. Holds
never read it; they always go to Postgres."""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict

from booking_svc.model import SeatMap, utc
from booking_svc.ports import BookingStore
from boxoffice import deadline
from boxoffice.clock import Clock

# Events kept; the least recently read is dropped first.
_MAX_EVENTS = 256


class SeatMapCache:
    def __init__(
        self,
        store: BookingStore,
        clock: Clock,
        *,
        max_age_seconds: float,
        load_seconds: float = deadline.FALLBACK_SECONDS,
    ) -> None:
        self._store = store
        self._clock = clock
        self._max_age = max_age_seconds
        # A shared read has its own budget: it must not end with the deadline
        # of whichever caller happened to start it.
        self._load_seconds = load_seconds
        self._entries: OrderedDict[int, tuple[float, SeatMap]] = OrderedDict()
        self._loading: dict[int, asyncio.Future[SeatMap]] = {}

    async def get(self, event_id: int) -> SeatMap:
        """The event's seat map, at most ``max_age_seconds`` old. Concurrent
        misses share one read, which runs on its own deadline; each caller
        waits for it only as long as its own deadline allows."""
        entry = self._entries.get(event_id)
        if entry is not None and time.monotonic() - entry[0] <= self._max_age:
            self._entries.move_to_end(event_id)
            return entry[1]
        loading = self._loading.get(event_id)
        if loading is None:
            loading = asyncio.ensure_future(self._load(event_id))
            self._loading[event_id] = loading
            loading.add_done_callback(lambda _: self._loading.pop(event_id, None))
        async with deadline.bounded():
            return await asyncio.shield(loading)

    async def _load(self, event_id: int) -> SeatMap:
        read_at = time.monotonic()
        with deadline.detached(self._load_seconds):
            seat_map = await self._store.seat_map(event_id, utc(self._clock.now()))
        self._entries[event_id] = (read_at, seat_map)
        self._entries.move_to_end(event_id)
        while len(self._entries) > _MAX_EVENTS:
            self._entries.popitem(last=False)
        return seat_map
