"""The adaptive admission rate: raised for no-shows, lowered while booking
is slow or failing, held within the room's bounds, never past the cap on
active shoppers; the target and its reason on the progress stream and in
metrics. Booking's health comes from booking's publisher
(booking_svc.jobs.health) through Redis."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import cast

import grpc
import pytest
import redis.asyncio as aioredis
from prometheus_client import CollectorRegistry

from booking_svc.jobs import health as booking_health
from boxoffice.metrics import GrpcServerMetrics
from boxoffice.server import go_code_name
from gen.boxoffice.queue.v1 import queue_service_pb2 as pb
from queue_svc.adapters import booking_health as queue_health
from queue_svc.converters import progress_pb
from queue_svc.model import RateReason
from queue_svc.ports import FanOp
from queue_svc.rate import BookingHealth, NoShowWindow, RatePolicy, target_rate
from tests.queue.harness import NO_LIMITS, keys_of, new_event_id, queue_app, room_config
from tests.support import ManualClock, Stores

POLICY = RatePolicy(slow_p99_ms=1000, error_ratio=0.05)


def test_the_target_follows_no_shows_and_booking_within_the_bounds() -> None:
    room = room_config(
        1,
        opens_at_ms=0,
        admission_rate_per_second=10,
        admission_rate_min_per_second=2,
        admission_rate_max_per_second=30,
    )
    healthy = BookingHealth(holds=500, errors=1, p50_ms=20, p99_ms=200)
    assert target_rate(room, no_show_ratio=None, health=None, policy=POLICY) == (10, RateReason.BASE)
    assert target_rate(room, no_show_ratio=0.02, health=healthy, policy=POLICY) == (10, RateReason.BASE)
    assert target_rate(room, no_show_ratio=0.5, health=healthy, policy=POLICY) == (20, RateReason.NO_SHOW_COMPENSATION)
    assert target_rate(room, no_show_ratio=0.8, health=None, policy=POLICY) == (30, RateReason.BOUNDED)
    slow = BookingHealth(holds=100, errors=0, p50_ms=400, p99_ms=2500)
    assert target_rate(room, no_show_ratio=0.5, health=slow, policy=POLICY) == (4, RateReason.BOOKING_SLOW)
    failing = BookingHealth(holds=100, errors=10, p50_ms=20, p99_ms=200)
    assert target_rate(room, no_show_ratio=None, health=failing, policy=POLICY) == (5, RateReason.BOOKING_ERRORS)
    collapsing = BookingHealth(holds=100, errors=90, p50_ms=20, p99_ms=200)
    assert target_rate(room, no_show_ratio=None, health=collapsing, policy=POLICY) == (2, RateReason.BOUNDED)
    # Three errors in five holds is too little evidence to slow everyone down.
    few = BookingHealth(holds=5, errors=3, p50_ms=20, p99_ms=200)
    assert target_rate(room, no_show_ratio=None, health=few, policy=POLICY) == (10, RateReason.BASE)
    # Unset bounds are the base itself: nothing moves, and the reason says why.
    fixed = room_config(1, opens_at_ms=0, admission_rate_per_second=10)
    assert target_rate(fixed, no_show_ratio=0.5, health=None, policy=POLICY) == (10, RateReason.BOUNDED)
    assert target_rate(fixed, no_show_ratio=None, health=slow, policy=POLICY) == (10, RateReason.BOUNDED)


def test_the_no_show_window_measures_recent_admissions_only() -> None:
    window = NoShowWindow(window_ms=60_000, min_resolved=20)
    assert window.observe(0, 0, 0) is None
    assert window.observe(10_000, 5, 10) is None  # 15 resolved: too few
    assert window.observe(20_000, 10, 30) == pytest.approx(10 / 40)
    # A minute on, only what was resolved since the reference sample counts.
    assert window.observe(70_000, 30, 30) == pytest.approx(25 / 45)
    assert window.observe(130_000, 30, 60) == pytest.approx(0 / 30)
    # Counters that went back (a flushed Redis) start a new window.
    assert window.observe(131_000, 0, 0) is None


def test_booking_and_the_queue_name_the_same_key() -> None:
    assert booking_health.HEALTH_KEY == queue_health.HEALTH_KEY


def test_the_health_of_several_replicas_is_summed_and_stale_ones_ignored() -> None:
    def entry(at_ms: int, holds: int, errors: int, p50: float, p99: float) -> str:
        return json.dumps(
            {"at_ms": at_ms, "window_ms": 5000, "holds": holds, "errors": errors, "p50_ms": p50, "p99_ms": p99}
        )

    fields = {
        b"booking-a": entry(100_000, 300, 3, 10, 80),
        b"booking-b": entry(98_000, 100, 7, 30, 900),
        b"booking-gone": entry(10_000, 999, 999, 999, 9999),
        b"garbage": b"{",
    }
    summed = queue_health.summarize(fields, now_ms=100_000, max_age_ms=15_000)
    assert summed == BookingHealth(holds=400, errors=10, p50_ms=15.0, p99_ms=900)
    assert queue_health.summarize({b"booking-gone": fields[b"booking-gone"]}, now_ms=100_000, max_age_ms=15_000) is None


@pytest.fixture
async def health_key(redis_client: aioredis.Redis) -> AsyncIterator[aioredis.Redis]:
    """The one health key, empty before and after (other tests' admitters read it)."""
    await redis_client.delete(queue_health.HEALTH_KEY)
    try:
        yield redis_client
    finally:
        await redis_client.delete(queue_health.HEALTH_KEY)


def _holds(
    registry: CollectorRegistry, metrics: GrpcServerMetrics, seconds: float, code: grpc.StatusCode, n: int
) -> None:
    labels = ("unary", booking_health.HOLD_SERVICE, booking_health.HOLD_METHOD)
    for _ in range(n):
        metrics.handled.labels(*labels, go_code_name(code)).inc()
        metrics.handling_seconds.labels(*labels).observe(seconds)


async def test_the_publisher_writes_each_window_of_hold_calls(health_key: aioredis.Redis) -> None:
    clock = ManualClock()
    registry = CollectorRegistry()
    metrics = GrpcServerMetrics.create(registry)
    # Other methods do not count.
    metrics.handling_seconds.labels("unary", booking_health.HOLD_SERVICE, "GetHold").observe(9.0)
    publisher = booking_health.HealthPublisher(registry=registry, client=health_key, clock=clock, replica="booking-a")
    _holds(registry, metrics, 0.02, grpc.StatusCode.OK, 96)
    _holds(registry, metrics, 0.02, grpc.StatusCode.FAILED_PRECONDITION, 2)  # a refusal, not a failure
    _holds(registry, metrics, 2.0, grpc.StatusCode.UNAVAILABLE, 2)
    clock.advance(5)
    first = await publisher.publish()
    assert (first["holds"], first["errors"], first["p50_ms"], first["p99_ms"]) == (100, 2, 25.0, 2500.0)
    assert first["window_ms"] == 5000
    # The next window holds only what came after.
    _holds(registry, metrics, 0.004, grpc.StatusCode.OK, 10)
    clock.advance(5)
    second = await publisher.publish()
    assert (second["holds"], second["errors"], second["p50_ms"], second["p99_ms"]) == (10, 0, 5.0, 5.0)
    read = await queue_health.RedisBookingHealth(health_key, max_age_ms=15_000).read(now_ms=int(clock.now() * 1000))
    assert read == BookingHealth(holds=10, errors=0, p50_ms=5.0, p99_ms=5.0)
    # An entry of a replica gone for long is removed by the next write.
    await health_key.hset(queue_health.HEALTH_KEY, "booking-old", json.dumps({"at_ms": 1, "holds": 0}))
    await publisher.publish()
    assert await health_key.hkeys(queue_health.HEALTH_KEY) == [b"booking-a"]


async def _admitted_at(client: aioredis.Redis, event_id: int, claim_by: int) -> list[str]:
    found = await client.zrangebyscore(keys_of(event_id).admitted, claim_by, claim_by)
    return sorted(cast(bytes, member).decode() for member in found)


async def test_no_shows_raise_the_rate_and_the_cap_still_holds(stores: Stores, health_key: aioredis.Redis) -> None:
    """Half of each tick's admissions claim at once, the others never do:
    once their claim deadline passes the measured no-show ratio climbs
    towards 1/2 and the target towards double the base (10 -> 20 a second,
    within the bound of 30), on the progress stream and in metrics; the
    active cap binds and is never exceeded."""
    clock = ManualClock()
    event_id = new_event_id()
    max_active = 100
    async with queue_app(stores, clock=clock) as queue:
        store, client = queue.store, queue.rt.redis()
        now_ms = int(clock.now() * 1000)
        room = room_config(
            event_id,
            opens_at_ms=now_ms - 1000,
            admission_rate_per_second=10,
            admission_rate_max_per_second=30,
            max_active_shoppers=max_active,
            claim_grace_ms=5_000,
        )
        await store.put_config(await queue.rooms.create(room))
        for i in range(1500):
            await store.join(event_id, f"fan-{i:04d}", "", now_ms=now_ms, random_score=0, limits=NO_LIMITS)
        admitter = queue.admitter
        await admitter.refresh()
        reasons: list[tuple[float, RateReason]] = []
        admitted_per_tick: list[int] = []
        most_active = 0
        for _ in range(80):
            clock.advance(0.5)
            tick_ms = int(clock.now() * 1000)
            [result] = [r for r in await admitter.tick(epoch=1) if r.event_id == event_id]
            admitted_per_tick.append(result.admitted)
            most_active = max(most_active, result.active_shoppers)
            reasons.append(admitter.target(event_id))
            fresh = await _admitted_at(client, event_id, tick_ms + 5_000)
            for name in fresh[::2]:
                await store.fan(event_id, name, now_ms=tick_ms, op=FanOp.CLAIM)
        assert reasons[0] == (10, RateReason.BASE)
        raised = [rate for rate, reason in reasons if reason is RateReason.NO_SHOW_COMPENSATION]
        assert raised and 10 < max(raised) <= 20  # never more than the no-shows call for
        # Settled: just under half (the odd one of a tick claims) never showed.
        assert 15 < reasons[-1][0] <= 20 and reasons[-1][1] is RateReason.NO_SHOW_COMPENSATION
        # The first tick banks; then 5 a tick (10 a second) until the first
        # deadline passes; then more, until the cap binds.
        assert admitted_per_tick[:11] == [0] + [5] * 10 and max(admitted_per_tick) > 5
        assert most_active == max_active  # the cap binds, and holds
        progress = await store.progress(event_id, now_ms=int(clock.now() * 1000))
        assert progress is not None and progress.active_shoppers <= max_active
        assert progress.rate_reason is RateReason.NO_SHOW_COMPENSATION and progress.target_rate_per_second > 10
        message = progress_pb(progress)
        assert message.target_admission_rate_per_second == round(progress.target_rate_per_second, 3)
        assert message.admission_rate_reason == pb.ADMISSION_RATE_REASON_NO_SHOW_COMPENSATION
        registry = queue.rt.registry
        labels = {"event_id": str(event_id)}
        target = registry.get_sample_value("boxoffice_queue_admission_rate_target", labels)
        assert target == progress.target_rate_per_second
        assert (
            registry.get_sample_value(
                "boxoffice_queue_admission_rate_reason", {**labels, "reason": "NO_SHOW_COMPENSATION"}
            )
            == 1
        )
        assert registry.get_sample_value("boxoffice_queue_admission_rate_reason", {**labels, "reason": "BASE"}) == 0
        assert (registry.get_sample_value("boxoffice_queue_no_shows_total", labels) or 0) > 0


async def test_booking_slow_or_failing_lowers_the_rate(stores: Stores, health_key: aioredis.Redis) -> None:
    clock = ManualClock()
    event_id = new_event_id()
    booking_registry = CollectorRegistry()
    booking_metrics = GrpcServerMetrics.create(booking_registry)
    publisher = booking_health.HealthPublisher(
        registry=booking_registry, client=health_key, clock=clock, replica="booking-a"
    )
    async with queue_app(stores, clock=clock) as queue:
        store = queue.store
        now_ms = int(clock.now() * 1000)
        room = await queue.rooms.create(
            room_config(
                event_id,
                opens_at_ms=now_ms - 1000,
                admission_rate_per_second=10,
                admission_rate_min_per_second=2,
                claim_grace_ms=30 * 60_000,  # no no-shows here
            )
        )
        await store.put_config(room)
        for i in range(500):
            await store.join(event_id, f"fan-{i:03d}", "", now_ms=now_ms, random_score=0, limits=NO_LIMITS)
        admitter = queue.admitter
        await admitter.refresh()

        async def tick() -> tuple[int, float, RateReason]:
            clock.advance(1.0)
            [result] = [r for r in await admitter.tick(epoch=1) if r.event_id == event_id]
            rate, reason = admitter.target(event_id)
            return result.admitted, rate, reason

        await tick()  # the first tick banks the allowance
        assert await tick() == (10, 10, RateReason.BASE)
        # Holds take 2.5 s at p99: 10 * 1000 / 2500 = 4 a second.
        _holds(booking_registry, booking_metrics, 2.0, grpc.StatusCode.OK, 50)
        await publisher.publish()
        assert await tick() == (10, 4, RateReason.BOOKING_SLOW)  # this tick ran at the old rate
        assert (await tick())[:1] == (4,)
        progress = await store.progress(event_id, now_ms=int(clock.now() * 1000))
        assert progress is not None and progress.rate_reason is RateReason.BOOKING_SLOW
        assert progress.target_rate_per_second == 4
        assert (
            queue.rt.registry.get_sample_value("boxoffice_queue_admission_rate_target", {"event_id": str(event_id)})
            == 4
        )
        # Half the holds fail: 10 * 0.05 / 0.5 = 1, held at the room's least, 2.
        _holds(booking_registry, booking_metrics, 0.01, grpc.StatusCode.INTERNAL, 25)
        _holds(booking_registry, booking_metrics, 0.01, grpc.StatusCode.OK, 25)
        await publisher.publish()
        assert (await tick())[1:] == (2, RateReason.BOUNDED)
        assert (await tick())[:1] == (2,)
        # Booking recovers: the base rate again.
        _holds(booking_registry, booking_metrics, 0.01, grpc.StatusCode.OK, 50)
        await publisher.publish()
        assert (await tick())[1:] == (10, RateReason.BASE)
        # Nothing fresh published (booking gone quiet): the base rate.
        clock.advance(60)
        assert (await tick())[1:] == (10, RateReason.BASE)
