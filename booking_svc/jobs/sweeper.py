"""The expiry sweeper: lapsed holds become EXPIRED and give their seats and
counters back, so that the seat map is right. Holds lapse lazily anyway (the
hold statement reclaims them); the sweeper is what frees seats nobody asks
for. Safe with several replicas: each pass locks its batch SKIP LOCKED."""

from __future__ import annotations

import asyncio
import logging
from datetime import timedelta

import psycopg

from booking_svc.metrics import SweeperMetrics
from booking_svc.model import SweepResult, utc
from booking_svc.ports import BookingStore
from boxoffice import deadline
from boxoffice.clock import Clock
from boxoffice.errors import BoxofficeError

_log = logging.getLogger("booking_svc.jobs.sweeper")

# Batches per pass before the sweeper yields to its interval again.
_MAX_BATCHES_PER_PASS = 50
# Budget of one batch's transaction.
_BATCH_SECONDS = 10.0
# Request ids are pruned once every this many passes.
_PRUNE_EVERY = 600


class Sweeper:
    def __init__(
        self,
        store: BookingStore,
        clock: Clock,
        metrics: SweeperMetrics,
        *,
        interval_seconds: float,
        batch_size: int,
        request_id_ttl_seconds: int,
    ) -> None:
        self._store = store
        self._clock = clock
        self._metrics = metrics
        self._interval = interval_seconds
        self._batch_size = batch_size
        self._request_ttl = timedelta(seconds=request_id_ttl_seconds)
        self._passes = 0

    async def sweep_once(self) -> SweepResult:
        """End every hold lapsed by now (in batches); what was freed."""
        holds = seats = 0
        for _ in range(_MAX_BATCHES_PER_PASS):
            with deadline.scope(_BATCH_SECONDS):
                result = await self._store.sweep(now=utc(self._clock.now()), batch_size=self._batch_size)
            holds += result.holds
            seats += result.seats
            self._metrics.released_holds.inc(result.holds)
            self._metrics.released_seats.inc(result.seats)
            if result.holds < self._batch_size:
                break
        self._passes += 1
        if self._passes % _PRUNE_EVERY == 1:
            with deadline.scope(_BATCH_SECONDS):
                await self._store.forget_requests(older_than=utc(self._clock.now()) - self._request_ttl)
        return SweepResult(holds, seats)

    async def run(self) -> None:
        """Sweep every interval until cancelled. A failed pass (database
        down, deadline) is logged and tried again next time."""
        while True:
            try:
                result = await self.sweep_once()
                self._metrics.passes.labels("ok").inc()
                if result.holds:
                    _log.info("holds expired", extra={"holds": result.holds, "seats": result.seats})
            except (BoxofficeError, psycopg.Error, OSError) as err:
                self._metrics.passes.labels("error").inc()
                _log.warning("sweep failed", extra={"error": repr(err)})
            await asyncio.sleep(self._interval)
