"""Each process follows each watched event's admission progress once and
fans it out in memory to all of its streams: Redis work per tick is one
read per watched event, whatever the number of watchers."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator

from boxoffice import deadline
from boxoffice.clock import Clock
from boxoffice.errors import BoxofficeError, Unavailable
from boxoffice.server import Drain
from queue_svc.metrics import ServerMetrics
from queue_svc.model import Progress
from queue_svc.store import QueueStore

_log = logging.getLogger("queue_svc.progress")


def draining() -> Unavailable:
    return Unavailable("the server is shutting down; watch again", reason="DRAINING")


class EventFeed:
    """The latest progress of one event and a way to wait for the next."""

    def __init__(self, event_id: int) -> None:
        self.event_id = event_id
        self.latest: Progress | None = None
        self.subscribers = 0
        self.closed = False
        self._changed = asyncio.Event()
        self.task: asyncio.Task[None] | None = None

    def publish(self, progress: Progress) -> None:
        self.latest = progress
        changed, self._changed = self._changed, asyncio.Event()
        changed.set()

    def close(self) -> None:
        self.closed = True
        self._changed.set()

    async def next(self, seen: Progress | None) -> Progress:
        """The first progress newer than ``seen``; UNAVAILABLE (DRAINING)
        when the process shuts down."""
        while True:
            if self.closed:
                raise draining()
            latest = self.latest
            if latest is not None and latest is not seen:
                return latest
            await self._changed.wait()


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
    ) -> None:
        self.name = "queue-progress-hub"
        self._store = store
        self._clock = clock
        self._drain = drain
        self._interval = interval_seconds
        self._call_seconds = call_seconds
        self._metrics = metrics
        self._feeds: dict[int, EventFeed] = {}
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

    @contextlib.asynccontextmanager
    async def subscribe(self, event_id: int) -> AsyncIterator[EventFeed]:
        """The event's feed, followed while anyone is subscribed."""
        if self._drain.draining:
            raise draining()
        feed = self._feeds.get(event_id)
        if feed is None:
            feed = self._feeds[event_id] = EventFeed(event_id)
            feed.task = asyncio.get_running_loop().create_task(self._follow(feed), name=f"progress:{event_id}")
        feed.subscribers += 1
        try:
            yield feed
        finally:
            feed.subscribers -= 1
            if feed.subscribers == 0 and self._feeds.get(event_id) is feed:
                del self._feeds[event_id]
                if feed.task is not None:
                    feed.task.cancel()

    async def _follow(self, feed: EventFeed) -> None:
        loop = asyncio.get_running_loop()
        failing = False
        while not feed.closed:
            began = loop.time()
            try:
                with deadline.scope(self._call_seconds):
                    progress = await self._store.progress(feed.event_id, now_ms=int(self._clock.now() * 1000))
                self._metrics.progress_reads.inc()
                if progress is not None:
                    feed.publish(progress)
                failing = False
            except BoxofficeError as err:
                if not failing:  # once per outage, not once per tick
                    _log.warning("cannot read progress", extra={"event_id": feed.event_id, "reason": err.reason})
                failing = True
            await asyncio.sleep(max(0.0, self._interval - (loop.time() - began)))
