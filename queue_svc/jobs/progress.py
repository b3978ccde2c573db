"""Each process follows each watched event's admission progress once and
fans it out in memory to all of its streams: Redis work per tick is one
read per watched event, whatever the number of watchers."""

from __future__ import annotations

import asyncio
import logging

from boxoffice import deadline
from boxoffice.clock import Clock
from boxoffice.errors import BoxofficeError
from boxoffice.server import Drain
from queue_svc.errors import draining
from queue_svc.metrics import ServerMetrics
from queue_svc.model import AdmissionState, Progress
from queue_svc.ports import QueueStore

_log = logging.getLogger("queue_svc.jobs.progress")


def _moved_key(progress: Progress) -> tuple[int, int, int, int, AdmissionState]:
    """What a waiting fan's place depends on."""
    return (
        progress.admitted_total,
        progress.admitted_through_score,
        progress.pre_queue_joined,
        progress.queue_length,
        progress.admission_state,
    )


def _changed_key(progress: Progress) -> tuple[object, ...]:
    """What an admission-progress watcher is shown."""
    return (*_moved_key(progress), progress.active_shoppers, round(progress.rate_per_second, 1))


class EventFeed:
    """The latest progress of one event and a way to wait for the next.

    Readers of fans' places wake only when something a place depends on
    moved; readers of the whole progress also when the rate or the number
    of shoppers changed. A read that changes nothing wakes nobody.
    """

    def __init__(self, event_id: int, lane: str = "") -> None:
        self.event_id = event_id
        # The lane ("" the general one): each lane has its own progress.
        self.lane = lane
        self.latest: Progress | None = None
        self.subscribers = 0
        # The fans this process's position watchers follow (with their
        # number of streams), reported as present every so often.
        self.watching: dict[str, int] = {}
        self.closed = False
        self._moved: list[asyncio.Future[None]] = []
        self._changed = asyncio.Event()
        self._moved_key: tuple[object, ...] | None = None
        self._changed_key: tuple[object, ...] | None = None
        self.task: asyncio.Task[None] | None = None

    def publish(self, progress: Progress) -> None:
        self.latest = progress
        moved = _moved_key(progress)
        if moved != self._moved_key:
            self._moved_key = moved
            self._wake_moved()
        changed = _changed_key(progress)
        if changed != self._changed_key:
            self._changed_key = changed
            event, self._changed = self._changed, asyncio.Event()
            event.set()

    def _wake_moved(self) -> None:
        waiters, self._moved = self._moved, []
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)

    def close(self) -> None:
        self.closed = True
        self._wake_moved()
        self._changed.set()

    def moved(self) -> asyncio.Future[None]:
        """Done at the next publish in which a fan's place may have moved
        (or at close). One future per waiter, awaited directly: this is
        every watcher's wait at every tick."""
        waiter = asyncio.get_running_loop().create_future()
        if self.closed:
            waiter.set_result(None)
        else:
            self._moved.append(waiter)
        return waiter

    async def next(self, seen: Progress | None, *, any_change: bool = False) -> Progress:
        """The first progress newer than ``seen`` in which a fan's place
        may have moved (``any_change``: in which anything shown changed);
        UNAVAILABLE (DRAINING) when the process shuts down."""
        while True:
            if self.closed:
                raise draining()
            latest = self.latest
            if latest is not None and latest is not seen:
                return latest
            if any_change:
                await self._changed.wait()
            else:
                await self.moved()


class ProgressHub:
    """Per-event feeds, each refreshed by one task while it has subscribers.

    A component: ``start`` watches the drain (every stream is told to end
    when it begins), ``stop`` cancels and awaits the refresh tasks.
    """

    def __init__(
        self,
        *,
        store: QueueStore,
        clock: Clock,
        drain: Drain,
        interval_seconds: float,
        call_seconds: float,
        metrics: ServerMetrics,
        presence_seconds: float = 30.0,
    ) -> None:
        self.name = "queue-progress-hub"
        self._store = store
        self._clock = clock
        self._drain = drain
        self._interval = interval_seconds
        self._call_seconds = call_seconds
        self._presence_seconds = presence_seconds
        self._metrics = metrics
        self._feeds: dict[tuple[int, str], EventFeed] = {}
        self._drain_task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        self._drain_task = asyncio.get_running_loop().create_task(self._close_on_drain())

    async def stop(self, grace_seconds: float) -> None:
        tasks = [feed.task for feed in self._feeds.values() if feed.task is not None]
        if self._drain_task is not None:
            tasks.append(self._drain_task)
        for feed in self._feeds.values():
            feed.close()
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.wait(tasks, timeout=max(grace_seconds, 0.1))

    async def _close_on_drain(self) -> None:
        await self._drain.wait()
        for feed in self._feeds.values():
            feed.close()

    @property
    def feeds(self) -> int:
        return len(self._feeds)

    def join(self, event_id: int, *, watcher: str = "", lane: str = "") -> EventFeed:
        """The feed of the event's lane ("" the general one), followed while
        anyone has joined it; every ``join`` is paired with a ``leave``
        (with the same ``watcher``: the fan a position watch follows,
        reported present while it does)."""
        if self._drain.draining:
            raise draining()
        key = (event_id, lane)
        feed = self._feeds.get(key)
        if feed is None:
            feed = self._feeds[key] = EventFeed(event_id, lane)
            feed.task = asyncio.get_running_loop().create_task(self._follow(feed), name=f"progress:{event_id}:{lane}")
        feed.subscribers += 1
        if watcher:
            feed.watching[watcher] = feed.watching.get(watcher, 0) + 1
        return feed

    def leave(self, feed: EventFeed, *, watcher: str = "") -> None:
        if watcher:
            streams = feed.watching.get(watcher, 0) - 1
            if streams > 0:
                feed.watching[watcher] = streams
            else:
                feed.watching.pop(watcher, None)
        feed.subscribers -= 1
        key = (feed.event_id, feed.lane)
        if feed.subscribers == 0 and self._feeds.get(key) is feed:
            del self._feeds[key]
            if feed.task is not None:
                feed.task.cancel()

    async def _follow(self, feed: EventFeed) -> None:
        loop = asyncio.get_running_loop()
        failing = False
        # A watch starts with a read of the fan's place, which sees them.
        presence_due = loop.time() + self._presence_seconds
        while not feed.closed:
            began = loop.time()
            try:
                # Counted when made, answered or not (a read that times out
                # was still sent).
                self._metrics.progress_reads.inc()
                with deadline.scope(self._call_seconds):
                    progress = await self._store.progress(
                        feed.event_id, now_ms=int(self._clock.now() * 1000), lane=feed.lane
                    )
                if progress is not None:
                    feed.publish(progress)
                if feed.watching and began >= presence_due:
                    presence_due = began + self._presence_seconds
                    self._metrics.presence_reports.inc()
                    with deadline.scope(self._call_seconds):
                        await self._store.record_presence(
                            feed.event_id, list(feed.watching), now_ms=int(self._clock.now() * 1000)
                        )
                failing = False
            except BoxofficeError as err:
                if not failing:  # once per outage, not once per tick
                    _log.warning("cannot read progress", extra={"event_id": feed.event_id, "reason": err.reason})
                failing = True
            except Exception:
                # The feed outlives a bad read: its watchers would wait forever.
                _log.exception("reading progress failed", extra={"event_id": feed.event_id})
                failing = True
            await asyncio.sleep(max(0.0, self._interval - (loop.time() - began)))
