"""A consumer group member on an outbox event stream (``ticket-issued``).

Each entry is handed to an idempotent handler and acknowledged only after
the handler returns (its work committed). An entry whose handling fails
stays pending and is retried (at once, once, when a store was
unavailable; then by the reclaim); entries a dead consumer left pending are
claimed with XAUTOCLAIM once idle long enough. Delivery is at least once,
so handlers deduplicate by the outbox event id.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import secrets
import socket
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Protocol

import psycopg
import redis.exceptions

from boxoffice import deadline
from boxoffice.errors import BoxofficeError, Unavailable
from boxoffice.redis import RedisClient
from boxoffice.streams._metrics import ConsumerMetrics

_log = logging.getLogger("boxoffice.streams")

# Budget of one entry's handling.
_HANDLE_SECONDS = 15.0


@dataclass(frozen=True, slots=True)
class StreamEntry:
    entry_id: str
    event_id: str
    aggregate_id: str
    type: str
    payload: dict[str, Any]
    # When the outbox row was written (epoch seconds).
    created_at: float
    # The W3C trace context of what wrote the row (None: none given).
    traceparent: str | None = None

    @classmethod
    def parse(cls, entry_id: bytes | str, fields: dict[bytes, bytes]) -> StreamEntry:
        def text(name: str) -> str:
            return fields[name.encode()].decode()

        payload = json.loads(fields[b"payload"])
        if not isinstance(payload, dict):
            payload = {"invalid": payload}  # the handler refuses it, by event id
        return cls(
            entry_id=entry_id.decode() if isinstance(entry_id, bytes) else entry_id,
            event_id=text("event_id"),
            aggregate_id=text("aggregateid"),
            type=text("type"),
            payload=payload,
            created_at=float(text("created_at")),
            traceparent=fields[b"traceparent"].decode("latin-1") if b"traceparent" in fields else None,
        )


class EntryHandler(Protocol):
    async def handle(self, entry: StreamEntry) -> None:
        """Apply the entry idempotently; raise to leave it pending for a retry."""


@dataclass
class ConsumerHooks:
    """Test hook at the consumer's crash point (after the work, before the ack)."""

    after_handle: Callable[[StreamEntry], Awaitable[None]] | None = None


def consumer_name() -> str:
    """A name unique to this process."""
    return f"{socket.gethostname()}-{os.getpid()}-{secrets.token_hex(3)}"


class StreamConsumer:
    def __init__(
        self,
        *,
        redis: RedisClient,
        stream: str,
        group: str,
        name: str,
        handler: EntryHandler,
        metrics: ConsumerMetrics,
        batch_size: int = 100,
        block_ms: int = 1000,
        claim_idle_ms: int = 30_000,
        concurrency: int = 16,
        hooks: ConsumerHooks | None = None,
    ) -> None:
        self._redis = redis
        self._stream = stream
        self.group = group
        self.name = name
        self._handler = handler
        self._metrics = metrics
        self._batch_size = batch_size
        self._block_ms = block_ms
        self._claim_idle_ms = claim_idle_ms
        self._concurrency = asyncio.Semaphore(max(1, concurrency))
        self._hooks = hooks or ConsumerHooks()

    async def prepare(self) -> None:
        async with deadline.bounded():
            try:
                await self._redis.xgroup_create(self._stream, self.group, id="0", mkstream=True)
            except redis.exceptions.ResponseError as err:
                if "BUSYGROUP" not in str(err):
                    raise

    async def read_once(self, *, block_ms: int | None = None) -> int:
        """Read and handle new entries; the number read."""
        block = self._block_ms if block_ms is None else block_ms
        with deadline.scope(block / 1000 + 5):
            async with deadline.bounded():
                answer: Any = await self._redis.xreadgroup(
                    self.group, self.name, {self._stream: ">"}, count=self._batch_size, block=block or None
                )
        read = 0
        for _, entries in answer or []:
            read += len(entries)
            await self._process(entries)
        return read

    async def claim_once(self) -> int:
        """Claim and handle entries idle longer than the claim time; the
        number claimed."""
        cursor: bytes | str = "0-0"
        done = 0
        for _ in range(100):  # a bounded sweep; the next round goes on
            with deadline.scope(5):
                async with deadline.bounded():
                    answer = await self._redis.xautoclaim(
                        self._stream,
                        self.group,
                        self.name,
                        self._claim_idle_ms,
                        start_id=cursor,
                        count=self._batch_size,
                    )
            cursor = answer[0]
            # An entry deleted from the stream while pending comes back empty.
            claimed = [(entry_id, fields) for entry_id, fields in answer[1] if entry_id is not None]
            self._metrics.claimed.inc(len(claimed))
            done += len(claimed)
            await self._process(claimed)
            if cursor in (b"0-0", "0-0"):
                break
        return done

    async def refresh_gauges(self) -> None:
        with deadline.scope(5):
            async with deadline.bounded():
                summary = await self._redis.xpending(self._stream, self.group)
        self._metrics.pending.set(int(summary["pending"]))

    async def _process(self, raw: list[tuple[Any, Any]]) -> None:
        """Handle a batch: entries of one order (aggregate) one after the
        other, in stream order, stopping at the first that fails; different
        orders concurrently. Acknowledge what was handled, in one call."""
        lanes: dict[str, list[StreamEntry]] = {}
        done: list[bytes | str] = []
        for entry_id, fields in raw:
            try:
                entry = StreamEntry.parse(entry_id, fields)
            except (KeyError, ValueError, UnicodeDecodeError) as err:
                self._reject(entry_id, err)
                done.append(entry_id)
                continue
            lanes.setdefault(entry.aggregate_id, []).append(entry)

        async def lane(entries: list[StreamEntry]) -> None:
            for entry in entries:
                async with self._concurrency:
                    handled = await self._handle(entry)
                if not handled:
                    return  # the rest of this order waits for the retry
                if self._hooks.after_handle is not None:
                    await self._hooks.after_handle(entry)
                done.append(entry.entry_id)

        tasks = [asyncio.ensure_future(lane(entries)) for entries in lanes.values()]
        try:
            await asyncio.gather(*tasks)
        except BaseException:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            raise
        if done:
            with deadline.scope(5):
                async with deadline.bounded():
                    await self._redis.xack(self._stream, self.group, *done)
            self._metrics.processed.inc(len(done))

    async def _handle(self, entry: StreamEntry) -> bool:
        """Whether the entry is done with (handled, or malformed). A
        handling that found a store unavailable (a database connection the
        server dropped, say) is tried once more at once, on fresh
        connections, rather than left to the reclaim's idle time: handlers
        are idempotent."""
        try:
            with deadline.scope(_HANDLE_SECONDS):
                try:
                    await self._handler.handle(entry)
                except Unavailable as err:
                    _log.info(
                        "stream entry found a store unavailable; trying once more",
                        extra={"group": self.group, "entry_id": entry.entry_id, "error": repr(err)},
                    )
                    await self._handler.handle(entry)
        except (KeyError, ValueError, TypeError) as err:
            self._reject(entry.entry_id, err)
            return True
        except (BoxofficeError, psycopg.Error, redis.exceptions.RedisError, OSError) as err:
            self._metrics.failed.inc()
            _log.warning(
                "stream entry failed; it stays pending",
                extra={"group": self.group, "entry_id": entry.entry_id, "event_id": entry.event_id, "error": repr(err)},
            )
            return False
        return True

    def _reject(self, entry_id: bytes | str, err: Exception) -> None:
        """A malformed entry can never succeed: it is acknowledged, loudly."""
        self._metrics.rejected.inc()
        _log.error(
            "malformed stream entry acknowledged",
            extra={"group": self.group, "entry_id": str(entry_id), "error": repr(err)},
        )

    async def run(self) -> None:
        """Consume until cancelled; claims what others left every so often."""
        with deadline.scope(30):
            await self.prepare()
        loop = asyncio.get_running_loop()
        next_claim = 0.0
        backoff = 0.1
        while True:
            try:
                if loop.time() >= next_claim:
                    next_claim = loop.time() + max(self._claim_idle_ms / 2000, 0.05)
                    await self.claim_once()
                    await self.refresh_gauges()
                await self.read_once()
                backoff = 0.1
            except redis.exceptions.ResponseError as err:
                # NOGROUP, or UNBLOCKED because the stream was deleted: a
                # Redis that lost its data. Make the group again (from the
                # start: handlers deduplicate) and go on.
                _log.warning(
                    "stream or group missing; creating it again", extra={"group": self.group, "error": repr(err)}
                )
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, 5.0)
                try:
                    with deadline.scope(5):
                        await self.prepare()
                except (BoxofficeError, redis.exceptions.RedisError, OSError) as again:
                    _log.warning("cannot create the group yet", extra={"group": self.group, "error": repr(again)})
            except (BoxofficeError, redis.exceptions.RedisError, OSError) as err:
                _log.warning("stream consumer step failed; retrying", extra={"group": self.group, "error": repr(err)})
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, 5.0)
