"""Booking's hold health, published for the queue's admitter, which lowers
the admission rate while booking is slow or failing (queue_svc.rate).

Every few seconds this replica writes what its HoldSeats calls did since
the last write, read from the process's own gRPC server metrics (so the
hold path carries no extra code), into one Redis hash:

- key :data:`HEALTH_KEY` (``boxoffice:booking:health``), read by
  ``queue_svc.adapters.booking_health``;
- field: this replica's name (``POD_NAME``, else host-pid);
- value: a JSON object ``{"at_ms", "window_ms", "holds", "errors",
  "p50_ms", "p99_ms"}``: calls completed in the window, of them failures on
  booking's side (Unknown, Internal, Unavailable, DeadlineExceeded,
  DataLoss; a refusal such as seats taken is not a failure), and the
  latency quantiles (the upper bound of the histogram bucket they fall in).

Readers ignore entries older than their maximum age; each write also
removes entries nobody has refreshed for :data:`FORGET_AFTER_MS` (replicas
gone), so the hash stays as small as the number of replicas.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import os
import socket
from dataclasses import dataclass, field
from typing import Any

import redis.asyncio as aioredis
from prometheus_client import CollectorRegistry

from boxoffice.clock import Clock
from boxoffice.lifecycle import Loop
from boxoffice.runtime import Runtime

_log = logging.getLogger("booking_svc.jobs.health")

HEALTH_KEY = "boxoffice:booking:health"
FORGET_AFTER_MS = 10 * 60 * 1000
HOLD_SERVICE = "boxoffice.booking.v1.BookingService"
HOLD_METHOD = "HoldSeats"
# grpc_code label values (go-grpc-prometheus spelling) that count as booking failing.
SERVER_ERRORS = frozenset({"Unknown", "Internal", "Unavailable", "DeadlineExceeded", "DataLoss"})


@dataclass(frozen=True)
class HoldCounts:
    """The cumulative HoldSeats figures of this process at one moment."""

    # Cumulative count per histogram upper bound (seconds; inf last).
    buckets: dict[float, float] = field(default_factory=dict)
    calls: float = 0.0
    errors: float = 0.0

    @classmethod
    def read(cls, registry: CollectorRegistry) -> HoldCounts:
        buckets: dict[float, float] = {}
        calls = errors = 0.0
        for family in registry.collect():
            if family.name not in ("grpc_server_handling_seconds", "grpc_server_handled"):
                continue
            for sample in family.samples:
                labels = sample.labels
                if labels.get("grpc_service") != HOLD_SERVICE or labels.get("grpc_method") != HOLD_METHOD:
                    continue
                if sample.name == "grpc_server_handling_seconds_bucket":
                    bound = float(labels["le"])
                    buckets[bound] = buckets.get(bound, 0.0) + sample.value
                elif sample.name == "grpc_server_handled_total":
                    calls += sample.value
                    if labels.get("grpc_code") in SERVER_ERRORS:
                        errors += sample.value
        return cls(buckets=dict(sorted(buckets.items())), calls=calls, errors=errors)

    def since(self, before: HoldCounts) -> dict[str, float]:
        """The window between ``before`` and this: holds, errors, p50_ms, p99_ms."""
        deltas = [(bound, count - before.buckets.get(bound, 0.0)) for bound, count in self.buckets.items()]
        return {
            "holds": max(0.0, self.calls - before.calls),
            "errors": max(0.0, self.errors - before.errors),
            "p50_ms": _quantile_ms(deltas, 0.50),
            "p99_ms": _quantile_ms(deltas, 0.99),
        }


def _quantile_ms(cumulative: list[tuple[float, float]], q: float) -> float:
    """The upper bound (ms) of the bucket holding quantile ``q``; an
    observation past the last finite bound counts as that bound."""
    if not cumulative or cumulative[-1][1] <= 0:
        return 0.0
    wanted = q * cumulative[-1][1]
    finite = [bound for bound, _ in cumulative if not math.isinf(bound)]
    for bound, count in cumulative:
        if count >= wanted:
            if math.isinf(bound):
                break
            return bound * 1000
    return (finite[-1] if finite else 0.0) * 1000


def replica_name() -> str:
    return os.environ.get("POD_NAME") or f"{socket.gethostname()}-{os.getpid()}"


class HealthPublisher:
    """Publishes this replica's hold health every ``interval_seconds``."""

    def __init__(
        self,
        *,
        registry: CollectorRegistry,
        client: aioredis.Redis,
        clock: Clock,
        replica: str,
        interval_seconds: float = 5.0,
    ) -> None:
        self._registry = registry
        self._client = client
        self._clock = clock
        self._replica = replica
        self._interval = interval_seconds
        self._last = HoldCounts.read(registry)
        self._last_ms = self._now_ms()

    def _now_ms(self) -> int:
        return int(self._clock.now() * 1000)

    async def publish(self) -> dict[str, Any]:
        """Write the window since the last write; the entry written."""
        counts = HoldCounts.read(self._registry)
        now_ms = self._now_ms()
        entry: dict[str, Any] = {"at_ms": now_ms, "window_ms": max(0, now_ms - self._last_ms)}
        window = counts.since(self._last)
        entry.update(holds=int(window["holds"]), errors=int(window["errors"]))
        entry.update(p50_ms=window["p50_ms"], p99_ms=window["p99_ms"])
        await self._client.hset(HEALTH_KEY, self._replica, json.dumps(entry))
        await self._forget_gone(now_ms)
        self._last, self._last_ms = counts, now_ms
        return entry

    async def _forget_gone(self, now_ms: int) -> None:
        fields: dict[Any, Any] = await self._client.hgetall(HEALTH_KEY)
        gone = []
        for name, raw in fields.items():
            try:
                at_ms = int(json.loads(raw)["at_ms"])
            except (ValueError, KeyError, TypeError):
                at_ms = 0
            if now_ms - at_ms > FORGET_AFTER_MS:
                gone.append(name)
        if gone:
            await self._client.hdel(HEALTH_KEY, *gone)

    async def run(self) -> None:
        """The body of the publisher's background loop."""
        while True:
            await asyncio.sleep(self._interval)
            try:
                await self.publish()
            except (aioredis.RedisError, OSError) as err:
                _log.warning("booking health not published", extra={"error": repr(err)})


def health_publisher(rt: Runtime) -> Loop:
    """The publisher as a component of booking's server role (its loop is
    awaited on shutdown like the server's other loops)."""
    publisher = HealthPublisher(registry=rt.registry, client=rt.redis(), clock=rt.clock, replica=replica_name())
    return Loop("booking-health", publisher.run)
