"""The admitter: while this process leads, one admit script per event per
tick. The cap on active shoppers holds inside the script whoever runs it;
leadership only keeps a standby from doing the same work, and the epoch it
carries lets the script refuse a deposed leader's writes."""

from __future__ import annotations

import asyncio
import logging
import time

from boxoffice import deadline
from boxoffice.clock import Clock
from boxoffice.errors import BoxofficeError
from queue_svc.config import QueueSettings
from queue_svc.metrics import AdmitterMetrics
from queue_svc.model import TickResult
from queue_svc.ports import Leadership, QueueStore, WaitingRoomRepository

_log = logging.getLogger("queue_svc.jobs.admitter")


class Admitter:
    """Admits fans of every event, tick after tick, while leading."""

    def __init__(
        self,
        *,
        store: QueueStore,
        rooms: WaitingRoomRepository,
        clock: Clock,
        settings: QueueSettings,
        metrics: AdmitterMetrics,
        leadership: Leadership,
    ) -> None:
        self._store = store
        self._rooms = rooms
        self._clock = clock
        self._settings = settings
        self._metrics = metrics
        self._leadership = leadership
        self._event_ids: list[int] = []
        self._refreshed_at = float("-inf")
        self._failing: set[int] = set()

    async def run(self) -> None:
        """The body of the admitter's background loop."""
        await self._leadership.run(self.lead)

    async def lead(self, epoch: int) -> None:
        """Tick until cancelled (leadership lost or shutdown)."""
        _log.info("leading the admitters", extra={"epoch": epoch})
        self._metrics.leading.set(1)
        loop = asyncio.get_running_loop()
        try:
            while True:
                began = loop.time()
                await self.tick(epoch)
                await asyncio.sleep(max(0.0, self._settings.tick_seconds - (loop.time() - began)))
        finally:
            self._metrics.leading.set(0)

    async def refresh(self) -> None:
        """Re-read the waiting rooms and re-mirror their configuration to
        Redis (a failed-over or flushed Redis gets it back within one
        refresh)."""
        with deadline.scope(max(self._settings.tick_seconds, 1.0) * 5):
            configs = await self._rooms.list_all()
            for config in configs:
                await self._store.put_config(config)
        self._event_ids = [config.event_id for config in configs]
        self._refreshed_at = time.monotonic()

    async def tick(self, epoch: int) -> list[TickResult]:
        """One admit script for each event."""
        if time.monotonic() - self._refreshed_at >= self._settings.event_refresh_seconds:
            try:
                await self.refresh()
            except BoxofficeError as err:
                _log.warning("cannot refresh the waiting rooms", extra={"reason": err.reason})
        results: list[TickResult] = []
        for event_id in self._event_ids:
            result = await self.tick_event(event_id, epoch)
            if result is not None:
                results.append(result)
        return results

    async def tick_event(self, event_id: int, epoch: int) -> TickResult | None:
        began = time.perf_counter()
        try:
            with deadline.scope(max(self._settings.tick_seconds, 1.0)):
                result = await self._store.admit(event_id, now_ms=int(self._clock.now() * 1000), epoch=epoch)
        except BoxofficeError as err:
            if event_id not in self._failing:
                _log.warning("admit tick failed", extra={"event_id": event_id, "reason": err.reason})
                self._failing.add(event_id)
            return None
        self._failing.discard(event_id)
        self._metrics.tick_seconds.observe(time.perf_counter() - began)
        if result is None:
            return None
        if result.stale_epoch:
            self._metrics.stale_ticks.inc()
            _log.warning(
                "admit tick refused: a newer leader has written",
                extra={"event_id": event_id, "epoch": epoch, "highest_epoch": result.highest_epoch},
            )
            return result
        label = str(event_id)
        self._metrics.queue_length.labels(label).set(result.queue_length)
        self._metrics.active_shoppers.labels(label).set(result.active_shoppers)
        if result.admitted:
            self._metrics.admitted.labels(label).inc(result.admitted)
        if result.expired:
            self._metrics.expired.labels(label).inc(result.expired)
        return result
