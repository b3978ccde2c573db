"""The draw recorder: copies each event's log of pre-queue placements from
Redis into Postgres in batches, off the join's path, and seals the
pre-queue at opening.

Joins append each pre-queue placement (pseudonym and score) to a Redis
list in the same script that places the fan, so a placement is logged
exactly when it happens. While the pre-queue is open the recorder copies
what was appended since its last pass; once the room's opening has come it
seals the pre-queue in Redis (no join places anyone in it from then on,
whatever happens to the opening time), copies the rest of the now final
log and marks the draw sealed in Postgres, which reveals the seed and the
participants (GetPreQueueProof).

Any number of recorders may run (every admitter process runs one, leader
or not): each copy is idempotent (see ``adapters.pg_draws``).
"""

from __future__ import annotations

import logging

from boxoffice import deadline
from boxoffice.clock import Clock
from boxoffice.errors import BoxofficeError
from boxoffice.lifecycle import every
from queue_svc.metrics import DrawMetrics
from queue_svc.model import UnsealedDraw
from queue_svc.ports import DrawRepository, QueueStore

_log = logging.getLogger("queue_svc.jobs.draws")

# Placements copied per Redis read and Postgres statement.
BATCH = 1000


class DrawRecorder:
    """Copies and seals the pre-queue draws of every event."""

    def __init__(
        self,
        *,
        store: QueueStore,
        draws: DrawRepository,
        clock: Clock,
        interval_seconds: float,
        metrics: DrawMetrics,
        batch: int = BATCH,
    ) -> None:
        self._store = store
        self._metrics = metrics
        self._draws = draws
        self._clock = clock
        self._interval = interval_seconds
        self._batch = batch
        self._failing: set[int] = set()

    async def run(self) -> None:
        """The body of the recorder's background loop."""

        def failed(err: BoxofficeError) -> None:
            _log.warning("cannot list the draws to record", extra={"reason": err.reason})

        await every(self._interval, self.pass_once, failed=failed)

    async def pass_once(self) -> list[int]:
        """Record every unsealed draw once; the events it sealed."""
        with deadline.scope(max(self._interval, 1.0) * 5):
            pending = await self._draws.unsealed()
        sealed: list[int] = []
        for draw in pending:
            try:
                with deadline.scope(max(self._interval, 1.0) * 30):
                    if await self.record(draw):
                        sealed.append(draw.event_id)
                self._failing.discard(draw.event_id)
            except BoxofficeError as err:
                self._metrics.failures.inc()
                if draw.event_id not in self._failing:
                    _log.warning("cannot record a draw", extra={"event_id": draw.event_id, "reason": err.reason})
                    self._failing.add(draw.event_id)
        return sealed

    async def record(self, draw: UnsealedDraw) -> bool:
        """Copy what the event's log holds beyond what is recorded; once
        the room has opened, seal first and then copy to the end. Whether
        the draw is sealed now."""
        event_id = draw.event_id
        seal = int(self._clock.now() * 1000) >= draw.opens_at_ms
        start = draw.recorded
        while True:
            log = await self._store.pre_queue_log(event_id, start=start, count=self._batch, seal=seal)
            if log is None:  # not mirrored to Redis (yet), or lost and not rebuilt yet: the admitter sees to it
                return False
            await self._draws.record(event_id, start, log.entries)
            self._metrics.recorded.inc(len(log.entries))
            start += len(log.entries)
            if start >= log.length or not log.entries:
                break
        if not (seal and log.sealed):
            return False
        if draw.recorded > log.length:
            # Redis lost entries we had copied (a flushed or failed-over
            # Redis): what was copied is all there is.
            _log.warning("pre-queue log shorter than recorded", extra={"event_id": event_id})
        # Sealed only if the whole final log is recorded (the repository checks).
        sealed = await self._draws.seal(event_id, log.length)
        if sealed:
            self._metrics.sealed.inc()
            _log.info("pre-queue sealed", extra={"event_id": event_id, "placements": log.length})
        return sealed
