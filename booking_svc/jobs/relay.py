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

A Redis that loses its data takes the stream with it. The stream has a
marker (``{<stream>}:gen``, a random token the relay writes and
remembers); a relay that finds it gone or changed knows the stream was
lost and, within a second, makes the groups again and publishes anew every
row the repair group (the issuer) has not processed (:meth:`check_stream`).
The slower :meth:`repair_lost` remains for a loss no relay saw (all of them
down meanwhile).
"""

from __future__ import annotations

import asyncio
import json
import logging
import secrets
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
        # The stream's marker, and the token this relay last saw in it.
        self._marker_key = f"{{{stream}}}:gen"
        self._marker: bytes | str | None = None

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

    async def check_stream(self) -> int:
        """Notice a stream that Redis lost (its marker gone, or another
        relay's new one since this relay last looked): make the groups
        again and publish anew the rows the repair group has not processed.
        The number of rows; 0 on a relay's first look (it does not know
        what came before it: :meth:`repair_lost` covers that)."""
        async with deadline.bounded():
            current: bytes | str | None = await self._redis.get(self._marker_key)
            if current is not None and current == self._marker:
                return 0
            if current is None:
                await self._redis.set(self._marker_key, secrets.token_hex(8), nx=True)
                current = await self._redis.get(self._marker_key)
        first, self._marker = self._marker is None, current
        if first:
            return 0
        _log.warning("the ticket stream was lost with Redis's data; publishing again", extra={"stream": self._stream})
        with deadline.scope(30):
            await self.prepare()
            return await self._republish(age_seconds=0.0)

    async def _republish(self, *, age_seconds: float) -> int:
        """Mark unpublished the booking events published ``age_seconds``
        ago or more that the repair group never processed; how many."""
        if self._repair_group is None:
            return 0
        repaired = 0
        while True:
            async with db.transaction(self._pool) as conn:
                cur = await conn.execute(
                    """
                    UPDATE outbox SET published_at = NULL
                     WHERE id IN (
                         SELECT o.id FROM outbox o
                          WHERE o.published_at <= now() - make_interval(secs => %s)
                            AND o.type IN ('BookingConfirmed', 'BookingCancelled')
                            AND NOT EXISTS (SELECT 1 FROM processed_stream_events p
                                             WHERE p.consumer = %s AND p.event_id = o.id)
                          LIMIT 1000)
                    """,
                    (age_seconds, self._repair_group),
                )
                batch = cur.rowcount
            repaired += batch
            if batch < 1000:
                break
        if repaired:
            self._metrics.republished.inc(repaired)
            _log.warning("outbox rows lost from the stream are published again", extra={"rows": repaired})
        return repaired

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
        return await self._republish(age_seconds=self._repair_after)

    async def run(self) -> None:
        """Publish until cancelled; a failing store is retried with backoff."""
        with deadline.scope(30):
            await self.prepare()
        backoff = 0.1
        loop = asyncio.get_running_loop()
        next_housekeeping = 0.0
        next_repair = loop.time() + 30.0
        next_check = 0.0
        while True:
            try:
                if loop.time() >= next_check:
                    next_check = loop.time() + 1.0
                    with deadline.scope(10):
                        await self.check_stream()
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
