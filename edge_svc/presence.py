"""Telling the waiting room which waiting fans are still there.

The edge answers fans' polls and SSE streams itself, so QueueService does
not see them; a fan who closes the tab would keep their place and waste an
admission. The reporter collects the fans the edge served per event (a
poll, and every fan with an open SSE stream) and names them in
``RecordPresence`` calls of up to 1,000 ids, once per interval (a third of
the waiting room's presence grace at most: 30 s against the default 5
minutes). One call per event per interval per thousand fans, whatever they
do in between.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
from collections import Counter, defaultdict

from boxoffice import deadline
from boxoffice.errors import BoxofficeError
from edge_svc.mesh import QUEUE, CallContext, Mesh
from gen.boxoffice.queue.v1 import queue_service_pb2 as queue_pb

_log = logging.getLogger("boxoffice.edge.presence")

BATCH = 1000


class PresenceReporter:
    """Collects and reports the fans seen, per event."""

    def __init__(self, mesh: Mesh, *, interval_seconds: float = 30.0) -> None:
        self.name = "edge-presence"
        self._mesh = mesh
        self._interval = interval_seconds
        self._seen: defaultdict[int, set[str]] = defaultdict(set)
        # Fans with an open SSE stream, counted (a fan may have two tabs).
        self._watching: defaultdict[int, Counter[str]] = defaultdict(Counter)
        self._task: asyncio.Task[None] | None = None
        # Calls made, for tests and metrics.
        self.calls = 0

    def seen(self, event_id: int, customer_id: str) -> None:
        self._seen[event_id].add(customer_id)

    def watching(self, event_id: int, customer_id: str) -> None:
        self._watching[event_id][customer_id] += 1

    def stopped_watching(self, event_id: int, customer_id: str) -> None:
        watchers = self._watching.get(event_id)
        if watchers is None:
            return
        watchers[customer_id] -= 1
        if watchers[customer_id] <= 0:
            del watchers[customer_id]
            self._seen[event_id].add(customer_id)  # seen until this moment
        if not watchers:
            del self._watching[event_id]

    async def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name=self.name)

    async def stop(self, grace_seconds: float) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self._interval)
            await self.flush()

    async def flush(self) -> None:
        """Reports everyone seen since the last flush and everyone watching."""
        seen, self._seen = self._seen, defaultdict(set)
        events = set(seen) | set(self._watching)
        for event_id in events:
            fans = sorted(seen.get(event_id, set()) | set(self._watching.get(event_id, ())))
            for start in range(0, len(fans), BATCH):
                await self._report(event_id, fans[start : start + BATCH])

    async def _report(self, event_id: int, fans: list[str]) -> None:
        ctx = CallContext(
            request_id=secrets.token_hex(16), traceparent=f"00-{secrets.token_hex(16)}-{secrets.token_hex(8)}-01"
        )
        try:
            with deadline.scope(5.0):
                await self._mesh.call(
                    QUEUE, "RecordPresence", queue_pb.RecordPresenceRequest(event_id=event_id, customer_ids=fans), ctx
                )
            self.calls += 1
        except BoxofficeError as err:
            # The next flush reports the watchers again; a missed poll costs
            # at most one interval of a grace three intervals long.
            _log.warning(
                "presence report failed", extra={"event_id": event_id, "fans": len(fans), "reason": err.reason}
            )
