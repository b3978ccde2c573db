"""One admission-progress stream per event, whatever the number of fans.

The hub follows ``WatchAdmissionProgress`` of each event some request asked
about, keeps the latest snapshot, and wakes everyone waiting for the next
one (the SSE streams of every fan of that event) with one event set. A
follower reconnects by itself with backoff when the stream breaks; it stops
when nobody asked about its event for ``idle_seconds`` and nobody watches.
An event the waiting room does not know is remembered as such for a while,
so that a flood of made-up event ids opens no streams.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
from collections import OrderedDict
from collections.abc import Callable

from boxoffice.errors import BoxofficeError, NotFound, Unavailable
from edge_svc.mesh import Mesh
from edge_svc.metrics import EdgeMetrics
from edge_svc.waiting import ProgressView
from gen.boxoffice.queue.v1 import queue_service_pb2 as queue_pb

_log = logging.getLogger("boxoffice.edge.progress")

# Backoff between reconnects of a broken progress stream (seconds).
_BACKOFF_MIN_SECONDS = 0.1
_BACKOFF_MAX_SECONDS = 5.0


def _unavailable(event_id: int) -> Unavailable:
    return Unavailable(
        "the waiting room's progress is not available yet; try again shortly",
        reason="PROGRESS_UNAVAILABLE",
        metadata={"event_id": str(event_id), "retry_after_seconds": "2"},
    )


class _Follower:
    """The stream of one event: its latest snapshot and who waits for the next.

    While anyone watches, one timer per event beats every heartbeat interval
    and wakes all the watchers at once (each SSE stream then sends its
    keep-alive), instead of a timeout per stream re-armed at every wait."""

    def __init__(self, event_id: int, now: float, lane: str = "") -> None:
        self.event_id = event_id
        # The lane ("" the general one): each lane has its own progress.
        self.lane = lane
        self.snapshot: queue_pb.AdmissionProgress | None = None
        self.view: ProgressView | None = None
        self.version = 0
        self.changed = asyncio.Event()
        self.failure: BoxofficeError | None = None
        self.last_asked = now
        self.watchers = 0
        self.task: asyncio.Task[None] | None = None
        self.beats = 0
        self.heartbeat_seconds = 0.0
        self._beat_timer: asyncio.TimerHandle | None = None

    def publish(self, snapshot: queue_pb.AdmissionProgress) -> None:
        self.snapshot = snapshot
        self.view = ProgressView.of(snapshot)
        self.version += 1
        self.failure = None
        self.wake()

    def wake(self) -> None:
        changed, self.changed = self.changed, asyncio.Event()
        changed.set()

    def watched(self, heartbeat_seconds: float) -> None:
        self.watchers += 1
        if heartbeat_seconds > 0 and self._beat_timer is None:
            self.heartbeat_seconds = heartbeat_seconds
            self._beat_timer = asyncio.get_running_loop().call_later(heartbeat_seconds, self._beat)

    def unwatched(self) -> None:
        self.watchers -= 1
        if self.watchers <= 0:
            self.stop_beating()

    @property
    def beating(self) -> bool:
        return self._beat_timer is not None

    def stop_beating(self) -> None:
        if self._beat_timer is not None:
            self._beat_timer.cancel()
            self._beat_timer = None

    def _beat(self) -> None:
        self.beats += 1
        self._beat_timer = asyncio.get_running_loop().call_later(self.heartbeat_seconds, self._beat)
        self.wake()


class ProgressHub:
    """Follows each asked-about event's admission progress once."""

    def __init__(
        self,
        mesh: Mesh,
        metrics: EdgeMetrics,
        *,
        idle_seconds: float = 60.0,
        max_events: int = 1000,
        unknown_ttl_seconds: float = 30.0,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.name = "edge-progress"
        self._mesh = mesh
        self._metrics = metrics
        self._idle_seconds = idle_seconds
        self._max_events = max_events
        self._unknown_ttl = unknown_ttl_seconds
        self._monotonic = monotonic
        self._followers: dict[tuple[int, str], _Follower] = {}
        # Events (and lanes) the waiting room said it does not know, until when.
        self._unknown: OrderedDict[tuple[int, str], tuple[float, BoxofficeError]] = OrderedDict()
        self._reaper: asyncio.Task[None] | None = None
        self._stopping = False
        self.draining = False
        # Streams open to QueueService now (tests and the gauge read it).
        self.streams_open = 0

    async def start(self) -> None:
        self._reaper = asyncio.create_task(self._reap(), name="edge-progress-reaper")

    async def stop(self, grace_seconds: float) -> None:
        self._stopping = True
        tasks = [f.task for f in self._followers.values() if f.task is not None]
        if self._reaper is not None:
            tasks.append(self._reaper)
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        for follower in self._followers.values():
            follower.stop_beating()
        self._followers.clear()

    def _follower(self, event_id: int, lane: str = "") -> _Follower:
        key = (event_id, lane)
        known = self._unknown.get(key)
        if known is not None:
            until, failure = known
            if until > self._monotonic():
                raise failure
            del self._unknown[key]
        follower = self._followers.get(key)
        if follower is None:
            if self._stopping:
                raise _unavailable(event_id)
            if len(self._followers) >= self._max_events:
                raise _unavailable(event_id)
            follower = self._followers[key] = _Follower(event_id, self._monotonic(), lane)
            follower.task = asyncio.create_task(self._follow(follower), name=f"edge-progress-{event_id}-{lane}")
        follower.last_asked = self._monotonic()
        return follower

    async def latest(self, event_id: int, *, wait_seconds: float, lane: str = "") -> queue_pb.AdmissionProgress:
        """The latest snapshot of the event's lane ("" the general one),
        waiting up to ``wait_seconds`` for the first one; NOT_FOUND for an
        event without a waiting room (or such a lane), UNAVAILABLE
        (PROGRESS_UNAVAILABLE) when there is none in time."""
        follower = self._follower(event_id, lane)
        if follower.snapshot is not None:
            return follower.snapshot
        if follower.failure is not None and not isinstance(follower.failure, NotFound):
            raise _unavailable(event_id)
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(wait_seconds):
                while follower.snapshot is None and follower.failure is None:
                    await follower.changed.wait()
        if follower.snapshot is not None:
            return follower.snapshot
        if isinstance(follower.failure, NotFound):
            raise follower.failure
        raise _unavailable(event_id)

    def watch(self, event_id: int, *, heartbeat_seconds: float = 0.0, lane: str = "") -> Watch:
        """A watcher of the snapshots of the event's lane (the SSE streams);
        it keeps them followed while open. With ``heartbeat_seconds``, the
        one heartbeat timer of the lane wakes its watchers that often."""
        follower = self._follower(event_id, lane)
        follower.watched(heartbeat_seconds)
        return Watch(self, follower)

    def _unwatch(self, follower: _Follower) -> None:
        follower.unwatched()
        follower.last_asked = self._monotonic()

    def wake_all(self) -> None:
        """Wakes every watcher (the edge is draining: streams end)."""
        self.draining = True
        for follower in self._followers.values():
            follower.wake()

    def followed(self) -> int:
        """Events followed now."""
        return len(self._followers)

    def heartbeat_timers(self) -> int:
        """Heartbeat timers armed now (one per watched event, whatever the
        number of its streams)."""
        return sum(1 for follower in self._followers.values() if follower.beating)

    async def _follow(self, follower: _Follower) -> None:
        backoff = _BACKOFF_MIN_SECONDS
        event_id, key = follower.event_id, (follower.event_id, follower.lane)
        try:
            while not self._stopping:
                opened = False
                try:
                    async for snapshot in self._mesh.watch_progress(event_id, follower.lane):
                        if not opened:
                            opened = True
                            self.streams_open += 1
                            self._metrics.progress_streams.inc()
                        backoff = _BACKOFF_MIN_SECONDS
                        self._metrics.progress_updates.inc()
                        follower.publish(snapshot)
                except NotFound as err:
                    self._forget_unknown(follower, err)
                    return
                except BoxofficeError as err:
                    follower.failure = err
                    _log.warning(
                        "admission progress stream broke; reconnecting",
                        extra={"event_id": event_id, "reason": err.reason, "code": err.code.name},
                    )
                finally:
                    if opened:
                        self.streams_open -= 1
                        self._metrics.progress_streams.dec()
                # Wake waiters so that they see the failure, then back off.
                follower.wake()
                await asyncio.sleep(backoff * (0.5 + random.random()))
                backoff = min(_BACKOFF_MAX_SECONDS, backoff * 2)
        finally:
            if self._followers.get(key) is follower and not self._stopping and follower.failure is None:
                self._followers.pop(key, None)

    def _forget_unknown(self, follower: _Follower, err: NotFound) -> None:
        follower.failure = err
        key = (follower.event_id, follower.lane)
        self._unknown[key] = (self._monotonic() + self._unknown_ttl, err)
        while len(self._unknown) > 10 * self._max_events:
            self._unknown.popitem(last=False)
        self._followers.pop(key, None)
        follower.stop_beating()
        follower.wake()

    async def _reap(self) -> None:
        """Stops following events nobody asked about for ``idle_seconds``."""
        while True:
            await asyncio.sleep(max(0.05, self._idle_seconds / 4))
            now = self._monotonic()
            for key, follower in list(self._followers.items()):
                if follower.watchers <= 0 and now - follower.last_asked > self._idle_seconds:
                    self._followers.pop(key, None)
                    follower.stop_beating()
                    if follower.task is not None:
                        follower.task.cancel()


class Watch:
    """One watcher of an event's snapshots (see :meth:`ProgressHub.watch`)."""

    def __init__(self, hub: ProgressHub, follower: _Follower) -> None:
        self._hub = hub
        self._follower = follower
        self._closed = False

    @property
    def snapshot(self) -> queue_pb.AdmissionProgress | None:
        return self._follower.snapshot

    @property
    def version(self) -> int:
        return self._follower.version

    @property
    def view(self) -> ProgressView | None:
        """The latest snapshot's numbers (see :class:`ProgressView`)."""
        return self._follower.view

    @property
    def beats(self) -> int:
        """Heartbeats of the event so far."""
        return self._follower.beats

    @property
    def gone(self) -> NotFound | None:
        """NOT_FOUND once the waiting room no longer knows the event."""
        failure = self._follower.failure
        return failure if isinstance(failure, NotFound) else None

    async def woken(self) -> None:
        """Until the event's watchers are next woken: a snapshot, a broken
        stream, a heartbeat or the drain (one event shared by all of them)."""
        await self._follower.changed.wait()

    async def next(self, after_version: int) -> queue_pb.AdmissionProgress | None:
        """The first snapshot newer than ``after_version`` (None when the
        stream broke meanwhile and none is newer)."""
        follower = self._follower
        while follower.version <= after_version:
            if follower.failure is not None and isinstance(follower.failure, NotFound):
                raise follower.failure
            await follower.changed.wait()
            if follower.version <= after_version and (follower.failure is not None or self._hub.draining):
                return None
        return follower.snapshot

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._hub._unwatch(self._follower)
