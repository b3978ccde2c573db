"""The outbox relay (DESIGN.md flow 8): committed outbox rows to the Redis
Stream, at least once, in order per order (aggregate).

One transaction per batch: lock the oldest unpublished rows with ``FOR
UPDATE SKIP LOCKED`` (replicas take disjoint batches), XADD them, then mark
them ``published_at`` and commit. A relay that dies between XADD and commit
leaves its rows unpublished: they go out again (consumers deduplicate by
event id), never lost. Rows are found by ``published_at IS NULL``, never by
``seq > last``: a sequence number is taken before its transaction commits,
so a row can commit after a later one was already published.

Per-order order with replicas: a row is published only when no older row
of the same aggregate is still unpublished (or locked by another relay).
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import psycopg
import redis.asyncio as aioredis
import redis.exceptions

from booking_svc.metrics import RelayMetrics
from boxoffice import db, deadline
from boxoffice.errors import BoxofficeError
from boxoffice.runtime import Pool

_log = logging.getLogger("booking_svc.relay")

_BATCH_SQL = """
WITH candidates AS (
    SELECT id, aggregatetype, aggregateid, type, payload, created_at, seq, traceparent
      FROM outbox
     WHERE published_at IS NULL
     ORDER BY seq
     LIMIT %(limit)s
       FOR UPDATE SKIP LOCKED
), heads AS (
    SELECT aggregateid, min(seq) AS seq
      FROM outbox
     WHERE published_at IS NULL AND aggregateid IN (SELECT aggregateid FROM candidates)
     GROUP BY aggregateid
)
SELECT c.id::text, c.aggregatetype, c.aggregateid, c.type, c.payload::text, c.created_at, c.seq, c.traceparent
  FROM candidates c JOIN heads h ON h.aggregateid = c.aggregateid AND h.seq = c.seq
 ORDER BY c.seq
"""


@dataclass(frozen=True, slots=True)
class OutboxRow:
    id: str
    aggregatetype: str
    aggregateid: str
    type: str
    payload: str
    created_at: datetime
    seq: int
    # The trace context of the call that wrote the row (None: none).
    traceparent: str | None = None

    def fields(self) -> dict[str, str]:
        fields = {
            "event_id": self.id,
            "aggregatetype": self.aggregatetype,
            "aggregateid": self.aggregateid,
            "type": self.type,
            "payload": self.payload,
            "created_at": f"{self.created_at.timestamp():.6f}",
            "seq": str(self.seq),
        }
        if self.traceparent:
            # The consumer's work joins the writer's trace.
            fields["traceparent"] = self.traceparent
        return fields


@dataclass
class RelayHooks:
    """Test hooks at the relay's crash points; no-ops in production."""

    before_publish: Callable[[Sequence[OutboxRow]], Awaitable[None]] | None = None
    after_publish: Callable[[Sequence[OutboxRow]], Awaitable[None]] | None = None


class OutboxRelay:
    # The batch query; a test's control relay replaces it.
    batch_sql = _BATCH_SQL

    def __init__(
        self,
        *,
        pool: Pool,
        redis: aioredis.Redis,
        stream: str,
        groups: Sequence[str],
        metrics: RelayMetrics,
        batch_size: int = 200,
        idle_seconds: float = 0.05,
        repair_group: str | None = None,
        repair_after_seconds: float = 120.0,
        hooks: RelayHooks | None = None,
    ) -> None:
        self._pool = pool
        self._redis = redis
        self._stream = stream
        self._groups = tuple(groups)
        self._metrics = metrics
        self._batch_size = batch_size
        self._idle_seconds = idle_seconds
        self._repair_group = repair_group
        self._repair_after = repair_after_seconds
        self._hooks = hooks or RelayHooks()

    async def prepare(self) -> None:
        """Create the stream and its consumer groups (from its start), so that
        no group misses what is published before its consumers first run."""
        async with deadline.bounded():
            for group in self._groups:
                try:
                    await self._redis.xgroup_create(self._stream, group, id="0", mkstream=True)
                except redis.exceptions.ResponseError as err:
                    if "BUSYGROUP" not in str(err):
                        raise

    async def publish_once(self) -> int:
        """Publish one batch; the number of rows published."""
        async with db.transaction(self._pool) as conn:
            cur = await conn.execute(self.batch_sql, {"limit": self._batch_size})
            rows = [OutboxRow(*row) for row in await cur.fetchall()]
            if not rows:
                return 0
            if self._hooks.before_publish is not None:
                await self._hooks.before_publish(rows)
            async with deadline.bounded():
                pipe = self._redis.pipeline(transaction=False)
                for row in rows:
                    pipe.xadd(self._stream, row.fields())  # type: ignore[arg-type]
                await pipe.execute()
            if self._hooks.after_publish is not None:
                await self._hooks.after_publish(rows)
            await conn.execute(
                "UPDATE outbox SET published_at = now() WHERE id = ANY(%s::uuid[])", ([row.id for row in rows],)
            )
        self._metrics.published.inc(len(rows))
        return len(rows)

    async def refresh_gauges(self) -> None:
        async with db.transaction(self._pool) as conn:
            cur = await conn.execute(
                "SELECT count(*), coalesce(extract(epoch FROM now() - min(created_at)), 0) "
                "FROM outbox WHERE published_at IS NULL"
            )
            row = await cur.fetchone()
        if row is not None:
            self._metrics.pending.set(int(row[0]))
            self._metrics.lag_seconds.set(float(row[1]))

    async def trim(self, *, approximate: bool = True) -> int:
        """Drop stream entries every group has acknowledged (approximately:
        whole nodes only, which is cheap)."""
        async with deadline.bounded():
            try:
                groups: list[dict[str, Any]] = await self._redis.xinfo_groups(self._stream)
            except redis.exceptions.ResponseError:
                groups = []  # no stream yet
            if len(groups) < len(self._groups):
                # A Redis that lost its data lost the groups too: make them
                # again before anything is trimmed.
                await self.prepare()
                return 0
            oldest_needed: tuple[int, int] | None = None
            for group in groups:
                name = group["name"]
                summary = await self._redis.xpending(self._stream, name)
                if summary["pending"]:
                    needed = _parse_id(summary["min"])
                else:
                    ms, seq = _parse_id(group["last-delivered-id"])
                    needed = (ms, seq + 1)
                oldest_needed = needed if oldest_needed is None else min(oldest_needed, needed)
            assert oldest_needed is not None
            if oldest_needed <= (0, 1):
                return 0
            return int(
                await self._redis.xtrim(
                    self._stream, minid=f"{oldest_needed[0]}-{oldest_needed[1]}", approximate=approximate
                )
            )

    async def repair_lost(self) -> int:
        """Publish again the rows a Redis that lost data took with it.

        Only when the repair group (the issuer) has read and acknowledged
        everything the stream holds: then a booking event published a while
        ago that the issuer never recorded as processed can only have been
        lost on the way, and its row is marked unpublished again. A slow or
        stopped issuer is never mistaken for a loss. The number of rows.
        """
        if self._repair_group is None:
            return 0
        async with deadline.bounded():
            try:
                stream: dict[str, Any] = await self._redis.xinfo_stream(self._stream)
                groups: list[dict[str, Any]] = await self._redis.xinfo_groups(self._stream)
            except redis.exceptions.ResponseError:
                return 0  # no stream yet
        group = next((g for g in groups if _text(g["name"]) == self._repair_group), None)
        if group is None or group["pending"] or _text(group["last-delivered-id"]) != _text(stream["last-generated-id"]):
            return 0
        async with db.transaction(self._pool) as conn:
            cur = await conn.execute(
                """
                UPDATE outbox SET published_at = NULL
                 WHERE id IN (
                     SELECT o.id FROM outbox o
                      WHERE o.published_at < now() - make_interval(secs => %s)
                        AND o.type IN ('BookingConfirmed', 'BookingCancelled')
                        AND NOT EXISTS (SELECT 1 FROM processed_stream_events p
                                         WHERE p.consumer = %s AND p.event_id = o.id)
                      LIMIT 1000)
                """,
                (self._repair_after, self._repair_group),
            )
            repaired = cur.rowcount
        if repaired:
            self._metrics.republished.inc(repaired)
            _log.warning("outbox rows lost from the stream are published again", extra={"rows": repaired})
        return repaired

    async def run(self) -> None:
        """Publish until cancelled; a failing store is retried with backoff."""
        with deadline.scope(30):
            await self.prepare()
        backoff = 0.1
        loop = asyncio.get_running_loop()
        next_housekeeping = 0.0
        next_repair = loop.time() + 30.0
        while True:
            try:
                with deadline.scope(10):
                    published = await self.publish_once()
                    if loop.time() >= next_housekeeping:
                        next_housekeeping = loop.time() + 5.0
                        await self.refresh_gauges()
                        await self.trim()
                if loop.time() >= next_repair:
                    next_repair = loop.time() + 30.0
                    with deadline.scope(30):
                        await self.repair_lost()
                backoff = 0.1
            except (BoxofficeError, psycopg.Error, redis.exceptions.RedisError, OSError) as err:
                _log.warning("outbox relay step failed; retrying", extra={"error": repr(err)})
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, 5.0)
                continue
            if published < self._batch_size:
                await asyncio.sleep(self._idle_seconds)


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


def _parse_id(value: bytes | str) -> tuple[int, int]:
    text = value.decode() if isinstance(value, bytes) else value
    ms, _, seq = text.partition("-")
    return int(ms), int(seq or 0)


def payload_of(fields: dict[bytes, bytes]) -> dict[str, Any]:
    loaded = json.loads(fields[b"payload"])
    if not isinstance(loaded, dict):
        raise ValueError("payload is not an object")
    return loaded
