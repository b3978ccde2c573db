"""Refreshes the per-section seat gauges from the section counters."""

from __future__ import annotations

import asyncio
import logging

import psycopg

from booking_svc.metrics import BookingMetrics
from booking_svc.ports import BookingStore
from boxoffice import deadline
from boxoffice.errors import BoxofficeError

_log = logging.getLogger("booking_svc.jobs.gauges")


class SeatGauges:
    def __init__(self, store: BookingStore, metrics: BookingMetrics, *, interval_seconds: float) -> None:
        self._store = store
        self._metrics = metrics
        self._interval = interval_seconds

    async def refresh(self) -> None:
        with deadline.scope(5.0):
            counters = await self._store.section_counters()
        gauge = self._metrics.seats
        for c in counters:
            labels = (str(c.event_id), c.section_id)
            gauge.labels(*labels, "available").set(max(0, c.capacity + c.overbook_limit - c.sold - c.held))
            gauge.labels(*labels, "held").set(c.held)
            gauge.labels(*labels, "sold").set(c.sold)

    async def run(self) -> None:
        while True:
            try:
                await self.refresh()
            except (BoxofficeError, psycopg.Error, OSError) as err:
                _log.warning("seat gauges not refreshed", extra={"error": repr(err)})
            await asyncio.sleep(self._interval)
