"""The seats left that booking publishes for the admitter (booking_svc.jobs.stock)
as the queue reads them (queue_svc.adapters.booking_stock), on real Postgres
and Redis: only the events the admitter names, sold out only once the last
seat is sold (held seats, lapsed or not, are not sold out), stale figures
say nothing."""

from __future__ import annotations

from typing import Any

import redis.asyncio as aioredis

from booking_svc.jobs.stock import STOCK_KEY, WANTED_KEY, StockPublisher, wanted_events
from gen.boxoffice.booking.v1 import booking_service_pb2 as pb
from queue_svc.adapters import booking_stock
from queue_svc.adapters.booking_stock import RedisBookingStock
from tests.booking.harness import Booking, booking_server, create_event, general, hold_request
from tests.support import Stores


async def _buy(booking: Booking, customer: str, event_id: int, quantity: int) -> None:
    """A hold, confirmed as PaymentService confirms it once the money is in."""
    token = booking.token(customer, event_id)
    hold = (await booking.stub.HoldSeats(hold_request(token, event_id, section="G", quantity=quantity))).hold
    paid = pb.Money(currency_code=hold.amount.currency_code, amount_minor=hold.amount.amount_minor)
    await booking.stub.ConfirmHold(
        pb.ConfirmHoldRequest(
            hold_id=hold.hold_id, idempotency_key=f"c-{hold.hold_id}", payment_id=f"p-{hold.hold_id}", amount_paid=paid
        )
    )


def _sold_out(raw: Any, *, now_ms: int, max_age_ms: int) -> bool | None:
    """An entry's sold-out verdict as the admitter reads it; None when it
    says nothing (missing, malformed or stale)."""
    found = booking_stock.verdict(raw, now_ms=now_ms, max_age_ms=max_age_ms)
    return None if found is None else found.sold_out


def test_the_wanted_events_are_read_leniently_and_bounded() -> None:
    assert wanted_events(None) == []
    assert wanted_events(b"3,x,,-4, 7 ,0") == [3, 7]
    assert len(wanted_events(",".join(str(i) for i in range(1, 20_000)))) == 10_000


def test_a_verdict_needs_a_fresh_well_formed_entry() -> None:
    fresh = '{"at_ms": 1000, "available": 0, "held": 0, "sold": 5}'
    assert _sold_out(fresh, now_ms=2000, max_age_ms=5000) is True
    assert _sold_out(fresh, now_ms=9000, max_age_ms=5000) is None
    assert _sold_out('{"at_ms": 1000, "available": 0, "held": 1, "sold": 5}', now_ms=2000, max_age_ms=5000) is False
    # Nothing sold and nothing left: an event without seats is not sold out.
    assert _sold_out('{"at_ms": 1000, "available": 0, "held": 0, "sold": 0}', now_ms=2000, max_age_ms=5000) is False
    assert _sold_out("not json", now_ms=2000, max_age_ms=5000) is None
    assert _sold_out('{"at_ms": 1000}', now_ms=2000, max_age_ms=5000) is None
    assert _sold_out(None, now_ms=2000, max_age_ms=5000) is None


async def test_only_the_last_seat_sold_makes_an_event_sold_out(stores: Stores, redis_client: aioredis.Redis) -> None:
    async with booking_server(stores) as booking:
        store = booking.store
        event = await create_event(booking, [general("G", 3)])
        other = await create_event(booking, [general("G", 3)])
        event_id = event.event_id
        reader = RedisBookingStock(redis_client, max_age_ms=60_000)
        publisher = StockPublisher(store, redis_client, booking.clock, interval_seconds=1.0)

        async def verdict() -> bool | None:
            await publisher.publish()
            now_ms = int(booking.clock.now() * 1000)
            found = (await reader.read([event_id], now_ms=now_ms)).get(event_id)
            return None if found is None else found.sold_out

        # Not named by the admitter: not published.
        await redis_client.delete(WANTED_KEY)
        assert await verdict() is None
        await reader.want([event_id])
        assert await verdict() is False
        assert await redis_client.hexists(STOCK_KEY, str(other.event_id)) == 0

        token = booking.token("fan", event_id)
        held = (await booking.stub.HoldSeats(hold_request(token, event_id, section="G", quantity=3))).hold
        # Every seat held, none sold: not sold out (holds may lapse).
        assert await verdict() is False
        await booking.stub.ReleaseHold(pb.ReleaseHoldRequest(access_token=token, hold_id=held.hold_id))
        await _buy(booking, "a", event_id, 2)
        assert await verdict() is False
        await _buy(booking, "b", event_id, 1)
        assert await verdict() is True

        # Booking stops publishing: the figures age out and say nothing.
        booking.clock.advance(120)
        assert (await reader.read([event_id], now_ms=int(booking.clock.now() * 1000))) == {}
        # An event the admitter no longer names leaves the hash.
        await reader.want([])
        await publisher.publish()
        assert await redis_client.hexists(STOCK_KEY, str(event_id)) == 0
