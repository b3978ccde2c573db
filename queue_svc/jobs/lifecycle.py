"""The lifecycle recorder: copies each event's log of fans' lifecycle
events from Redis to Postgres in batches, off the hot path, and deletes
what is older than the retention.

The queue's scripts append one entry per change of a fan's state to the
event's Redis list ``{ev:<id>}:life``, in the script that makes the change
(so an entry is logged exactly when it happens, at the time the script was
given). An entry is a tab-separated string (customer ids are UTF-8 without
control characters, so a tab never occurs in one):

=====  =========================================  =======================
kind   meaning                                    fields after kind, ms,
                                                  customer
=====  =========================================  =======================
``J``  joined                                     score, 1 pre-queue / 0,
                                                  and the lane (only when
                                                  not the general one)
``A``  admitted                                   ``tick`` or ``net`` (at
                                                  once, the safety net)
``C``  claimed (the session began)
``L``  left while waiting
``E``  session ended (by the fan or a revoke)     why (may be empty)
``D``  dropped (not seen for the presence grace)
``N``  admission expired unclaimed (a no-show)
``X``  session expired
``S``  shadowed (flagged: admission reached them)
``U``  unshadowed (back in the queue)
``F``  flagged by an operator
``G``  unflagged while still waiting
=====  =========================================  =======================

Exactly once, with any number of recorders and crashes anywhere: an
entry's absolute index is the count of entries trimmed before it (a Redis
counter moved atomically with the LTRIM by ``lua/lifecycle.lua``) plus its
place in the list, and Postgres stores (event, index) once. A recorder
reads the head, inserts it (a row stored already is ignored), then trims
from the start it read; a trim from a stale start (another recorder
trimmed meanwhile) does nothing.

The log and its counter live in Redis, and go when Redis loses its data;
the room then comes back as a new generation (``queue_svc.rebuild``), and
an entry's index counts within its generation (``(generation - 1) * 2**40``
plus the trimmed count plus its place), so the entries of a rebuilt room
never collide with those stored before the loss. A room waiting for its
rebuild has nothing to copy.

The joins refused per reason (Redis counters ``{ev:<id>}:refused``) are
copied with the same pass; they only grow, so the larger total is kept.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Protocol

from prometheus_client import CollectorRegistry, Counter

from boxoffice import db, deadline
from boxoffice.clock import Clock
from boxoffice.errors import BoxofficeError
from boxoffice.lifecycle import every
from boxoffice.runtime import Pool
from queue_svc.ports import LifecycleLog

_log = logging.getLogger("queue_svc.jobs.lifecycle")

# Entries copied per Redis read and Postgres statement.
BATCH = 2000
# The retention's deletes: rows per statement, and how often (passes).
DELETE_BATCH = 10_000
RETENTION_EVERY = 60

KINDS = {
    "J": "joined",
    "A": "admitted",
    "C": "claimed",
    "L": "left",
    "E": "ended",
    "D": "dropped",
    "N": "no_show",
    "X": "expired",
    "S": "shadowed",
    "U": "unshadowed",
    "F": "flagged",
    "G": "unflagged",
}

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


@dataclass(frozen=True, slots=True)
class LifecycleRow:
    """One entry of the log, parsed, with its absolute index."""

    index: int
    kind: str
    at_ms: int
    customer_id: str
    score: int | None = None
    pre_queue: bool | None = None
    detail: str | None = None


def parse(index: int, entry: str) -> LifecycleRow | None:
    """The row of one log entry; None for an entry out of form."""
    fields = entry.split("\t")
    if len(fields) < 3 or fields[0] not in KINDS or not fields[2]:
        return None
    try:
        at_ms = int(fields[1])
        kind = KINDS[fields[0]]
        if kind == "joined":
            if len(fields) not in (5, 6) or fields[4] not in ("0", "1"):
                return None
            lane = fields[5] if len(fields) == 6 else None
            return LifecycleRow(
                index, kind, at_ms, fields[2], score=int(fields[3]), pre_queue=fields[4] == "1", detail=lane
            )
    except ValueError:
        return None
    if kind in ("admitted", "ended"):
        if len(fields) != 4:
            return None
        return LifecycleRow(index, kind, at_ms, fields[2], detail=fields[3])
    if len(fields) != 3:
        return None
    return LifecycleRow(index, kind, at_ms, fields[2])


class LifecycleSource(Protocol):
    """The Redis side: the head of an event's log, and its trim."""

    async def lifecycle_log(self, event_id: int, *, count: int) -> LifecycleLog | None:
        """Up to ``count`` entries from the log's head; None for an
        unknown event (no mirrored configuration and no log)."""

    async def trim_lifecycle(self, event_id: int, *, start: int, count: int) -> bool:
        """Drop ``count`` entries from the head if it still starts at
        ``start``; whether it did."""


class LifecycleRepository(Protocol):
    """The Postgres side (tables ``queue_lifecycle``, ``queue_refusals``)."""

    async def events(self, *, since_ms: int) -> list[int]:
        """The events with a waiting room opening at ``since_ms`` or later."""

    async def record(self, event_id: int, rows: Sequence[LifecycleRow]) -> int:
        """Store the rows (those stored already are ignored); how many were new."""

    async def record_refusals(self, event_id: int, refusals: dict[str, int]) -> None:
        """Keep the larger of each stored total and the one given."""

    async def delete_older(self, *, before_ms: int, limit: int) -> int:
        """Delete at most ``limit`` rows from before ``before_ms``; how many."""


class PgLifecycleRepository:
    """The lifecycle's rows in Postgres."""

    def __init__(self, pool: Pool) -> None:
        self._pool = pool

    async def events(self, *, since_ms: int) -> list[int]:
        async with db.transaction(self._pool) as conn:
            cur = await conn.execute(
                "SELECT event_id FROM queue_events WHERE opens_at >= %s ORDER BY event_id",
                (_EPOCH + timedelta(milliseconds=since_ms),),
            )
            rows = await cur.fetchall()
        return [int(event_id) for (event_id,) in rows]

    async def record(self, event_id: int, rows: Sequence[LifecycleRow]) -> int:
        if not rows:
            return 0
        async with db.transaction(self._pool) as conn:
            cur = await conn.execute(
                """
                INSERT INTO queue_lifecycle (event_id, idx, kind, at, customer_id, score, pre_queue, detail)
                SELECT %s, idx, kind, to_timestamp(at_ms / 1000.0), customer_id, score, pre_queue, detail
                  FROM unnest(%s::bigint[], %s::text[], %s::bigint[], %s::text[], %s::bigint[], %s::boolean[],
                              %s::text[]) AS r (idx, kind, at_ms, customer_id, score, pre_queue, detail)
                ON CONFLICT (event_id, idx) DO NOTHING
                """,
                (
                    event_id,
                    [r.index for r in rows],
                    [r.kind for r in rows],
                    [r.at_ms for r in rows],
                    [r.customer_id for r in rows],
                    [r.score for r in rows],
                    [r.pre_queue for r in rows],
                    [r.detail for r in rows],
                ),
            )
            return cur.rowcount

    async def record_refusals(self, event_id: int, refusals: dict[str, int]) -> None:
        if not refusals:
            return
        reasons = sorted(refusals)
        async with db.transaction(self._pool) as conn:
            await conn.execute(
                """
                INSERT INTO queue_refusals (event_id, reason, refused)
                SELECT %s, reason, refused FROM unnest(%s::text[], %s::bigint[]) AS r (reason, refused)
                ON CONFLICT (event_id, reason) DO UPDATE
                   SET refused = GREATEST(queue_refusals.refused, EXCLUDED.refused), updated_at = now()
                 WHERE queue_refusals.refused < EXCLUDED.refused
                """,
                (event_id, reasons, [refusals[r] for r in reasons]),
            )

    async def delete_older(self, *, before_ms: int, limit: int) -> int:
        before = _EPOCH + timedelta(milliseconds=before_ms)
        async with db.transaction(self._pool) as conn:
            cur = await conn.execute(
                """
                DELETE FROM queue_lifecycle WHERE (event_id, idx) IN (
                    SELECT event_id, idx FROM queue_lifecycle WHERE at < %s LIMIT %s)
                """,
                (before, limit),
            )
            deleted = cur.rowcount
            await conn.execute("DELETE FROM queue_refusals WHERE updated_at < %s", (before,))
        return deleted


@dataclass(frozen=True, slots=True)
class LifecycleMetrics:
    """What the lifecycle recorder does."""

    recorded: Counter
    malformed: Counter
    deleted: Counter
    failures: Counter

    @classmethod
    def create(cls, registry: CollectorRegistry) -> LifecycleMetrics:
        return cls(
            recorded=Counter(
                "boxoffice_queue_lifecycle_recorded",
                "Lifecycle entries this process stored in Postgres (an entry another process stored first is not"
                " counted).",
                registry=registry,
            ),
            malformed=Counter(
                "boxoffice_queue_lifecycle_malformed",
                "Lifecycle log entries out of form, skipped (logged).",
                registry=registry,
            ),
            deleted=Counter(
                "boxoffice_queue_lifecycle_deleted",
                "Lifecycle rows deleted for being older than the retention.",
                registry=registry,
            ),
            failures=Counter(
                "boxoffice_queue_lifecycle_failures",
                "Events whose log the recorder could not copy in a pass (tried again at the next).",
                registry=registry,
            ),
        )


class LifecycleRecorder:
    """Copies every event's lifecycle log to Postgres, and keeps the
    retention."""

    def __init__(
        self,
        *,
        source: LifecycleSource,
        repository: LifecycleRepository,
        clock: Clock,
        interval_seconds: float,
        retention_days: int,
        metrics: LifecycleMetrics,
        batch: int = BATCH,
    ) -> None:
        self._source = source
        self._repository = repository
        self._clock = clock
        self._interval = interval_seconds
        self._retention_ms = retention_days * 86_400_000
        self._metrics = metrics
        self._batch = batch
        self._failing: set[int] = set()
        self._refusals: dict[int, dict[str, int]] = {}
        self._passes = 0

    async def run(self) -> None:
        """The body of the recorder's background loop."""

        def failed(err: BoxofficeError) -> None:
            _log.warning("cannot list the events to record", extra={"reason": err.reason})

        await every(self._interval, self.pass_once, failed=failed)

    def _now_ms(self) -> int:
        return int(self._clock.now() * 1000)

    async def pass_once(self) -> int:
        """Copy every recent event's log once (and, every so many passes,
        delete what the retention no longer keeps); the entries stored."""
        since = self._now_ms() - self._retention_ms
        with deadline.scope(max(self._interval, 1.0) * 5):
            events = await self._repository.events(since_ms=since)
        stored = 0
        for event_id in events:
            try:
                with deadline.scope(max(self._interval, 1.0) * 30):
                    stored += await self.record(event_id)
                self._failing.discard(event_id)
            except BoxofficeError as err:
                self._metrics.failures.inc()
                if event_id not in self._failing:
                    _log.warning("cannot record a lifecycle", extra={"event_id": event_id, "reason": err.reason})
                    self._failing.add(event_id)
        if self._passes % RETENTION_EVERY == 0:
            await self.keep_retention()
        self._passes += 1
        return stored

    async def keep_retention(self) -> int:
        """Delete the rows older than the retention; how many."""
        deleted = 0
        while True:
            with deadline.scope(max(self._interval, 1.0) * 30):
                batch = await self._repository.delete_older(
                    before_ms=self._now_ms() - self._retention_ms, limit=DELETE_BATCH
                )
            deleted += batch
            self._metrics.deleted.inc(batch)
            if batch < DELETE_BATCH:
                return deleted

    async def record(self, event_id: int) -> int:
        """Copy the event's log to its end (as it is when read) and trim
        what was copied; the entries stored (not stored before)."""
        stored = 0
        while True:
            log = await self._source.lifecycle_log(event_id, count=self._batch)
            if log is None:
                return stored
            if log.refusals and log.refusals != self._refusals.get(event_id):
                await self._repository.record_refusals(event_id, log.refusals)
                self._refusals[event_id] = log.refusals
            if not log.entries:
                return stored
            rows = []
            for offset, entry in enumerate(log.entries):
                row = parse(log.start + offset, entry)
                if row is None:
                    self._metrics.malformed.inc()
                    _log.warning(
                        "lifecycle entry out of form", extra={"event_id": event_id, "index": log.start + offset}
                    )
                else:
                    rows.append(row)
            new = await self._repository.record(event_id, rows)
            stored += new
            self._metrics.recorded.inc(new)
            await self._source.trim_lifecycle(event_id, start=log.start, count=len(log.entries))
            if len(log.entries) < self._batch:
                return stored
