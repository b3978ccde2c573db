"""The admitter: while this process leads, one admit script per event per
tick. The cap on active shoppers holds inside the script whoever runs it;
leadership only keeps a standby from doing the same work, and the epoch it
carries lets the script refuse a deposed leader's writes.

Each tick runs at a target rate the admitter adapts (``queue_svc.rate``)
to the event's recent no-shows (from the counters each tick returns) and to
booking's published health (read once per tick for all events).

Booking also publishes each event's seats left (``booking_svc.jobs.stock``,
for the events the admitter names at each refresh; read once per tick for
all events, one HMGET): an event with every seat
sold, none available or held, is sold out. Its admit script sets the room's
sold-out flag and admits nobody while it is set; the progress stream says
ADMISSION_STATE_SOLD_OUT to every watcher. When seats come back (a
cancellation) the flag is cleared and admission goes on.

The epoch fence does not live in Redis alone. The admit script refuses an
epoch lower than the highest it has stored, but Redis replicates
asynchronously: a failover can lose the newest leader's copy, and a deposed
leader whose epoch equals the surviving copy would be let in again. So
before each tick the admitter confirms its epoch against the election's own
record (``LeaderEpochs``, where the epoch is made: the ``leader_epochs`` row
of the Postgres election, or the Kubernetes election's Lease) and skips the
tick when a later term exists; the next tick of the current leader writes
its epoch to Redis again, re-seeding the copy a failover lost. What remains
is a leader paused between that read and its script for longer than a whole
election and failover, which the Redis copy still fences unless that
failover lost it."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from typing import Protocol

from boxoffice import deadline
from boxoffice.clock import Clock
from boxoffice.errors import BoxofficeError
from queue_svc.config import QueueSettings
from queue_svc.metrics import AdmitterMetrics
from queue_svc.model import RateReason, TickResult, WaitingRoomConfig, lane_weights
from queue_svc.ports import (
    BookingHealthSource,
    BookingStockSource,
    Leadership,
    QueueStore,
    StockVerdict,
    WaitingRoomRepository,
)
from queue_svc.rate import BookingHealth, NoShowWindow, RatePolicy, target_rate

_log = logging.getLogger("queue_svc.jobs.admitter")


class RoomRebuilder(Protocol):
    """Puts back a room whose Redis data was lost (``queue_svc.rebuild``)."""

    async def generations(self) -> dict[int, tuple[int, int]]:
        """Every room's generation in Postgres, and the marker a mirror may
        write for a room without one (0: none, the room has a history)."""

    async def rebuild(self, config: WaitingRoomConfig, *, now_ms: int) -> int | None:
        """Bring the room's marker up to its generation, rebuilding its
        state first if lost; the generation after (None: try again)."""


class LeaderEpochs(Protocol):
    """The leader election's own record of the admitters' terms."""

    async def current(self) -> int | None:
        """The epoch of the latest term; None when none is recorded."""


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
        health: BookingHealthSource | None = None,
        stock: BookingStockSource | None = None,
        epochs: LeaderEpochs | None = None,
        rebuilder: RoomRebuilder | None = None,
    ) -> None:
        self._store = store
        # Rooms that lost their Redis data are rebuilt by it (None: they
        # wait; every room then counts as generation 1).
        self._rebuilder = rebuilder
        self._generations: dict[int, tuple[int, int]] = {}
        # Where each tick confirms its epoch (None: the Redis copy alone).
        self._epochs = epochs
        self._deposed_at: int | None = None
        self._health = health
        # Whether events are sold out (None: never known; rooms then keep
        # their flag as it is).
        self._stock = stock
        # Per event: the room's sold-out flag after its last tick (logged
        # when it changes).
        self._sold_out: dict[int, bool] = {}
        self._policy = RatePolicy(slow_p99_ms=settings.booking_slow_p99_ms, error_ratio=settings.booking_error_ratio)
        self._configs: dict[int, WaitingRoomConfig] = {}
        self._no_shows: dict[int, NoShowWindow] = {}
        # Per event: the rate and reason of the last tick, and the no-show
        # total it reported (the counter metric grows by the difference).
        self._targets: dict[int, tuple[float, RateReason]] = {}
        self._no_shows_seen: dict[int, int] = {}
        self._rooms = rooms
        self._clock = clock
        self._settings = settings
        self._metrics = metrics
        self._leadership = leadership
        self._event_ids: list[int] = []
        self._refreshed_at = float("-inf")
        self._failing: set[int] = set()
        # Per event with lanes: each lane's fans waiting at the last tick.
        self._waiting: dict[int, dict[str, int]] = {}

    async def run(self) -> None:
        """The body of the admitter's background loop."""
        await self._leadership.run(self.lead)

    async def lead(self, epoch: int) -> None:
        """Tick until cancelled (leadership lost or shutdown)."""
        _log.info("leading the admitters", extra={"epoch": epoch})
        loop = asyncio.get_running_loop()
        while True:
            began = loop.time()
            await self.tick(epoch)
            await asyncio.sleep(max(0.0, self._settings.tick_seconds - (loop.time() - began)))

    async def refresh(self) -> None:
        """Re-read the waiting rooms and re-mirror their configuration to
        Redis (a failed-over or flushed Redis gets it back within one
        refresh). With a rebuilder, the mirror writes no generation marker:
        what it read of a room's history may be stale by the time it writes
        (rows copied, then Redis flushed, meanwhile), and a marker on a lost
        room would strand its fans; the next admit tick finds a room without
        one and lets the rebuilder decide from Postgres as it is then."""
        with deadline.scope(max(self._settings.tick_seconds, 1.0) * 5):
            configs = await self._rooms.list_all()
            mark = 1
            if self._rebuilder is not None:
                self._generations = await self._rebuilder.generations()
                mark = 0
            for config in configs:
                await self._store.put_config(config, generation=mark)
        self._event_ids = [config.event_id for config in configs]
        self._configs = {config.event_id: config for config in configs}
        if self._stock is not None:
            await self._stock.want(self._event_ids)
        for stale in set(self._no_shows) - set(self._configs):
            del self._no_shows[stale]
        self._refreshed_at = time.monotonic()

    async def confirm(self, epoch: int) -> bool:
        """Whether ``epoch`` is still the latest term in the election's own
        record (always, without one). A record that cannot be read confirms
        nothing: the tick waits for the next."""
        if self._epochs is None:
            return True
        try:
            with deadline.scope(max(self._settings.tick_seconds, 1.0)):
                current = await self._epochs.current()
        except BoxofficeError as err:
            _log.warning("cannot confirm the admitter's epoch", extra={"epoch": epoch, "reason": err.reason})
            return False
        if current is not None and current > epoch:
            self._metrics.stale_ticks.inc()
            if self._deposed_at != epoch:
                self._deposed_at = epoch
                _log.warning(
                    "admit tick refused: a later term of the election exists",
                    extra={"epoch": epoch, "highest_epoch": current},
                )
            return False
        return True

    async def tick(self, epoch: int) -> list[TickResult]:
        """One admit script for each event, once the epoch is confirmed."""
        if not await self.confirm(epoch):
            return []
        if time.monotonic() - self._refreshed_at >= self._settings.event_refresh_seconds:
            try:
                await self.refresh()
            except BoxofficeError as err:
                _log.warning("cannot refresh the waiting rooms", extra={"reason": err.reason})
        health = await self._read_health() if self._event_ids else None
        stock = await self._read_stock() if self._event_ids else {}
        # All events at once: their scripts share pipelines, and on a Redis
        # Cluster a shard that does not answer holds back only its own events.
        ticked = await asyncio.gather(
            *(
                self.tick_event(event_id, epoch, health=health, stock=stock.get(event_id))
                for event_id in self._event_ids
            )
        )
        return [result for result in ticked if result is not None]

    async def _rebuild(self, event_id: int, now_ms: int) -> None:
        """Rebuild a room that lost its Redis data (nobody is admitted
        meanwhile: its admit script refuses until its marker is back)."""
        config = self._configs.get(event_id)
        if self._rebuilder is None or config is None:
            return
        try:
            with deadline.scope(max(self._settings.tick_seconds, 1.0) * 60):
                generation = await self._rebuilder.rebuild(config, now_ms=now_ms)
        except BoxofficeError as err:
            _log.warning("cannot rebuild a waiting room yet", extra={"event_id": event_id, "reason": err.reason})
            return
        if generation is not None:
            stamp = self._generations.get(event_id, (1, 1))[1]
            self._generations[event_id] = (generation, stamp)

    async def _read_health(self) -> BookingHealth | None:
        if self._health is None:
            return None
        with deadline.scope(max(self._settings.tick_seconds, 1.0)):
            return await self._health.read(now_ms=int(self._clock.now() * 1000))

    async def _read_stock(self) -> dict[int, StockVerdict]:
        if self._stock is None:
            return {}
        with deadline.scope(max(self._settings.tick_seconds, 1.0)):
            return await self._stock.read(self._event_ids, now_ms=int(self._clock.now() * 1000))

    def target(self, event_id: int) -> tuple[float, RateReason]:
        """The rate the next tick of the event runs at, and why."""
        return self._targets.get(event_id, (0.0, RateReason.BASE))

    def _adapt(self, event_id: int, result: TickResult, now_ms: int, health: BookingHealth | None) -> None:
        """The target of the event's next tick, from this tick's counters."""
        config = self._configs.get(event_id)
        if config is None:
            return
        window = self._no_shows.get(event_id)
        if window is None:
            window = self._no_shows[event_id] = NoShowWindow(
                int(self._settings.no_show_window_seconds * 1000), self._policy.min_resolved
            )
        ratio = window.observe(now_ms, result.no_shows_total, result.claimed_total)
        self._targets[event_id] = target_rate(config, no_show_ratio=ratio, health=health, policy=self._policy)

    async def _admit(
        self,
        event_id: int,
        *,
        now_ms: int,
        epoch: int,
        rate: float,
        reason: RateReason,
        sold_out: bool | None = None,
        outside: int = 0,
    ) -> TickResult | None:
        """One tick of the event: one admit script, or with lanes one per
        lane, each at its part of the rate and of the free slots (the
        lanes with fans waiting share by weight), then the slots still free
        to the lanes that still have fans waiting, within their own rate.
        The cap holds inside each script; the answer adds the lanes up."""
        config = self._configs.get(event_id)
        generation = self._generations.get(event_id, (0, 0))[0]
        if config is None or not config.lanes:
            return await self._store.admit(
                event_id,
                now_ms=now_ms,
                epoch=epoch,
                target_rate=rate,
                reason=reason,
                generation=generation,
                sold_out=sold_out,
                outside=outside,
            )
        views = config.lane_views()
        base = rate if rate > 0 else float(config.admission_rate_per_second)
        waiting = self._waiting.setdefault(event_id, {})
        parts = lane_weights(views, now_ms=now_ms, waiting=waiting)
        results: dict[str, TickResult] = {}

        async def admit(lane: str, share: float) -> TickResult | None:
            return await self._store.admit(
                event_id,
                now_ms=now_ms,
                epoch=epoch,
                target_rate=max(base * parts[lane], 0.001),
                reason=reason,
                lane=lane,
                slot_share=share,
                generation=generation,
                sold_out=sold_out,
                outside=outside,
            )

        for view in views:
            result = await admit(view.name, parts[view.name])
            if result is None:
                continue  # not mirrored yet: the next refresh mirrors it
            if result.stale_epoch or result.room_lost:
                return result
            results[view.name] = result
        if not results:
            return None
        latest = list(results.values())[-1]
        if latest.active_shoppers < config.max_active_shoppers:
            for lane, result in list(results.items()):
                if result.queue_length > 0:
                    again = await admit(lane, 1.0)
                    if again is not None and not again.stale_epoch:
                        results[lane] = _added(result, again)
                        latest = again
        for lane, result in results.items():
            waiting[lane] = result.queue_length
        return _lanes_total(event_id, results, latest)

    async def tick_event(
        self, event_id: int, epoch: int, *, health: BookingHealth | None = None, stock: StockVerdict | None = None
    ) -> TickResult | None:
        began = time.perf_counter()
        rate, reason = self.target(event_id)
        now_ms = int(self._clock.now() * 1000)
        try:
            with deadline.scope(max(self._settings.tick_seconds, 1.0)):
                result = await self._admit(
                    event_id,
                    now_ms=now_ms,
                    epoch=epoch,
                    rate=rate,
                    reason=reason,
                    sold_out=None if stock is None else stock.sold_out,
                    outside=0 if stock is None else stock.offers,
                )
        except BoxofficeError as err:
            if event_id not in self._failing:
                _log.warning("admit tick failed", extra={"event_id": event_id, "reason": err.reason})
                self._failing.add(event_id)
            return None
        self._failing.discard(event_id)
        self._metrics.tick_seconds.observe(time.perf_counter() - began)
        if result is None:
            # Not mirrored: a new room, or one whose Redis data is gone.
            await self._rebuild(event_id, now_ms)
            return None
        if result.room_lost:
            await self._rebuild(event_id, now_ms)
            return None
        if result.stale_epoch:
            self._metrics.stale_ticks.inc()
            _log.warning(
                "admit tick refused: a newer leader has written",
                extra={"event_id": event_id, "epoch": epoch, "highest_epoch": result.highest_epoch},
            )
            return result
        if self._sold_out.get(event_id, False) != result.sold_out:
            self._sold_out[event_id] = result.sold_out
            _log.info(
                "event sold out: admission stops" if result.sold_out else "event not sold out: admission goes on",
                extra={"event_id": event_id},
            )
        label = str(event_id)
        self._metrics.queue_length.labels(label).set(result.queue_length)
        self._metrics.active_shoppers.labels(label).set(result.active_shoppers)
        if result.admitted:
            self._metrics.admitted.labels(label).inc(result.admitted)
        if result.expired:
            self._metrics.expired.labels(label).inc(result.expired)
        if result.dropped:
            self._metrics.dropped.labels(label).inc(result.dropped)
        seen = self._no_shows_seen.get(event_id, result.no_shows_total)
        if result.no_shows_total > seen:
            self._metrics.no_shows.labels(label).inc(result.no_shows_total - seen)
        self._no_shows_seen[event_id] = result.no_shows_total
        config = self._configs.get(event_id)
        self._metrics.target_rate.labels(label).set(
            rate if rate > 0 or config is None else config.admission_rate_per_second
        )
        for each in RateReason:
            self._metrics.rate_reason.labels(label, each.name).set(1 if each is reason else 0)
        self._adapt(event_id, result, now_ms, health)
        return result


def _added(first: TickResult, second: TickResult) -> TickResult:
    """A lane's two scripts in one tick as one result."""
    return dataclasses.replace(
        second,
        admitted=first.admitted + second.admitted,
        expired=first.expired + second.expired,
        dropped=first.dropped + second.dropped,
    )


def _lanes_total(event_id: int, results: dict[str, TickResult], latest: TickResult) -> TickResult:
    """The lanes' results of one tick as the event's: counts added up, the
    shoppers as the last script saw them (the cap is the room's), the
    general lane's admitted-through score."""
    each = list(results.values())
    general = results.get("", latest)
    return TickResult(
        event_id=event_id,
        stale_epoch=False,
        admitted=sum(r.admitted for r in each),
        expired=sum(r.expired for r in each),
        active_shoppers=latest.active_shoppers,
        queue_length=sum(r.queue_length for r in each),
        admitted_through_score=general.admitted_through_score,
        admitted_total=sum(r.admitted_total for r in each),
        highest_epoch=max(r.highest_epoch for r in each),
        dropped=sum(r.dropped for r in each),
        no_shows_total=sum(r.no_shows_total for r in each),
        claimed_total=sum(r.claimed_total for r in each),
        sold_out=latest.sold_out,
    )
