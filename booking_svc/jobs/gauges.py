"""Refreshes the per-section seat gauges from the section counters.

One series per section and state is what a dashboard of an on-sale wants,
and what a catalogue of 100,000 events cannot afford: the gauges follow the
sections of events not yet started, the soonest first, at most
``BOXOFFICE_BOOKING_SEAT_GAUGE_SECTIONS`` of them, and say how many they
left out. A section that leaves the set (its event started, or sooner ones
took its place) loses its series. The refresh hands the event loop back
every hundred sections, so that calls are served while it runs.
"""

from __future__ import annotations

import asyncio
import logging

import psycopg

from booking_svc.metrics import BookingMetrics
from booking_svc.model import utc
from booking_svc.ports import BookingStore
from boxoffice import deadline
from boxoffice.clock import Clock
from boxoffice.errors import BoxofficeError

_log = logging.getLogger("booking_svc.jobs.gauges")
_STATES = ("available", "held", "sold")
# Sections set between two yields to the event loop.
_SLICE = 100


class SeatGauges:
    def __init__(
        self, store: BookingStore, metrics: BookingMetrics, clock: Clock, *, interval_seconds: float, sections: int
    ) -> None:
        self._store = store
        self._metrics = metrics
        self._clock = clock
        self._interval = interval_seconds
        self._sections = sections
        self._exported: set[tuple[str, str]] = set()

    async def refresh(self) -> None:
        with deadline.scope(5.0):
            page = await self._store.section_counters(starting_after=utc(self._clock.now()), limit=self._sections)
        gauge = self._metrics.seats
        exported: set[tuple[str, str]] = set()
        for n, c in enumerate(page.counters, start=1):
            labels = (str(c.event_id), c.section_id)
            exported.add(labels)
            gauge.labels(*labels, "available").set(max(0, c.capacity + c.overbook_limit - c.sold - c.held))
            gauge.labels(*labels, "held").set(c.held)
            gauge.labels(*labels, "sold").set(c.sold)
            if n % _SLICE == 0:
                await asyncio.sleep(0)
        for n, labels in enumerate(self._exported - exported, start=1):
            for state in _STATES:
                gauge.remove(*labels, state)
            if n % _SLICE == 0:
                await asyncio.sleep(0)
        self._exported = exported
        self._metrics.seat_gauges_omitted.set(page.total - len(page.counters))

    async def run(self) -> None:
        while True:
            try:
                await self.refresh()
            except (BoxofficeError, psycopg.Error, OSError) as err:
                _log.warning("seat gauges not refreshed", extra={"error": repr(err)})
            await asyncio.sleep(self._interval)
