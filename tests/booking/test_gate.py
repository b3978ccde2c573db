"""The optional Redis seat gate: all-or-nothing SET NX per seat on Redis 6.2
and 7, sure losers turned away before Postgres, Postgres still deciding, and
no gate key keeping a free seat from sale for longer than its short TTL."""

from __future__ import annotations

import asyncio

import redis.asyncio as aioredis
from prometheus_client import CollectorRegistry

from booking_svc.adapters.gate import RedisSeatGate
from booking_svc.metrics import BookingMetrics
from boxoffice.errors import FailedPrecondition
from boxoffice.redis import event_key
from tests.booking.harness import booking_server, call, create_event, hold_request, new_event_id, seat_ids, seated
from tests.booking.test_races import race_for_one_seat
from tests.support import Stores

GATE = {"BOXOFFICE_BOOKING_SEAT_GATE": "true", "BOXOFFICE_BOOKING_SEAT_GATE_TTL_SECONDS": "0.5"}


async def _gate_scripts(client: aioredis.Redis) -> None:
    metrics = BookingMetrics.create(CollectorRegistry())
    gate = RedisSeatGate(client, ttl_seconds=0.5, metrics=metrics)
    event_id = new_event_id()
    assert await gate.claim(event_id, [1, 2], "t1") == []
    assert await gate.claim(event_id, [3, 2, 1], "t2") == [1, 2]
    assert await client.exists(event_key(event_id, "seatgate", 3)) == 0  # all or nothing
    assert await gate.claim(event_id, [1, 2], "t1") == []  # its own keys
    assert 0 < await client.pttl(event_key(event_id, "seatgate", 1)) <= 500
    await gate.release(event_id, [1, 2], "t2")  # not t2's: nothing dropped
    assert await client.exists(event_key(event_id, "seatgate", 1)) == 1
    await gate.release(event_id, [1, 2], "t1")
    assert await gate.claim(event_id, [3, 2, 1], "t2") == []
    await gate.clear(event_id, [1, 2, 3])
    assert await client.exists(*(event_key(event_id, "seatgate", s) for s in (1, 2, 3))) == 0


async def test_gate_scripts_on_redis_6_and_7(redis_client: aioredis.Redis, embedded_redis_url: str) -> None:
    # The suite's Redis (the suite's client follows the event's slot on a
    # Redis Cluster), then the embedded Redis 6.2.
    await _gate_scripts(redis_client)
    embedded = aioredis.Redis.from_url(embedded_redis_url)
    try:
        await _gate_scripts(embedded)
    finally:
        await embedded.aclose()


async def test_gate_fails_open_when_redis_is_down() -> None:
    client = aioredis.Redis.from_url("redis://127.0.0.1:1/0", socket_connect_timeout=0.1)
    try:
        metrics = BookingMetrics.create(CollectorRegistry())
        gate = RedisSeatGate(client, ttl_seconds=0.5, metrics=metrics)
        assert await gate.claim(1, [1], "t") == []
        assert metrics.gate.labels("skipped")._value.get() == 1
    finally:
        await client.aclose()


async def test_with_the_gate_one_customer_still_wins_the_seat(stores: Stores) -> None:
    async with booking_server(stores, environ=GATE, race_pause_seconds=0.05) as booking:
        winners, holders, reasons = await race_for_one_seat(booking)
        assert (winners, holders, reasons) == (1, 1, {"SEAT_UNAVAILABLE": 49})
        assert booking.metrics.gate.labels("rejected")._value.get() > 0


async def test_a_failed_attempt_gives_its_gate_keys_back_at_once(stores: Stores, redis_client: aioredis.Redis) -> None:
    async with booking_server(stores, environ=GATE) as booking:
        event = await create_event(booking, [seated("A")], [("A", "A", 4)])
        a, b = (await seat_ids(booking, event.event_id, "A"))[:2]
        await booking.stub.HoldSeats(hold_request(booking.token("c1", event.event_id), event.event_id, [b]))
        await redis_client.delete(event_key(event.event_id, "seatgate", b))  # as if its TTL had run out
        _, err = await call(
            booking.stub.HoldSeats(hold_request(booking.token("c2", event.event_id), event.event_id, [a, b]))
        )
        assert isinstance(err, FailedPrecondition) and err.metadata["seat_ids"] == str(b)  # Postgres said no
        assert await redis_client.exists(event_key(event.event_id, "seatgate", a)) == 0
        await booking.stub.HoldSeats(hold_request(booking.token("c3", event.event_id), event.event_id, [a]))


async def test_a_stale_gate_key_blocks_a_free_seat_only_for_its_ttl(
    stores: Stores, redis_client: aioredis.Redis
) -> None:
    async with booking_server(stores, environ=GATE) as booking:
        event = await create_event(booking, [seated("A")], [("A", "A", 4)])
        seat = (await seat_ids(booking, event.event_id, "A"))[0]
        # An attempt that died between the gate and Postgres left its key.
        await redis_client.set(event_key(event.event_id, "seatgate", seat), "crashed", px=500)
        request = hold_request(booking.token("c", event.event_id), event.event_id, [seat])
        _, err = await call(booking.stub.HoldSeats(request))
        assert isinstance(err, FailedPrecondition) and err.reason == "SEAT_UNAVAILABLE"
        for _ in range(100):  # the key lapses within its TTL; the seat sells
            reply, err = await call(booking.stub.HoldSeats(request))
            if reply is not None:
                break
            await asyncio.sleep(0.05)
        assert reply is not None
