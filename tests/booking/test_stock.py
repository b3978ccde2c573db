"""The seats left that booking publishes for the admitter (booking_svc.jobs.stock)
as the queue reads them (queue_svc.adapters.booking_stock), on real Postgres
and Redis: only the events the admitter names, sold out only once the last
seat is sold (held seats, lapsed or not, are not sold out), stale figures
say nothing."""

from __future__ import annotations

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


def test_the_wanted_events_are_read_leniently_and_bounded() -> None:
    assert wanted_events(None) == []
    assert wanted_events(b"3,x,,-4, 7 ,0") == [3, 7]
    assert len(wanted_events(",".join(str(i) for i in range(1, 20_000)))) == 10_000


def test_a_verdict_needs_a_fresh_well_formed_entry() -> None:
    fresh = '{"at_ms": 1000, "available": 0, "held": 0, "sold": 5}'
    assert booking_stock.sold_out(fresh, now_ms=2000, max_age_ms=5000) is True
    assert booking_stock.sold_out(fresh, now_ms=9000, max_age_ms=5000) is None
    assert (
        booking_stock.sold_out('{"at_ms": 1000, "available": 0, "held": 1, "sold": 5}', now_ms=2000, max_age_ms=5000)
        is False
    )
    # Nothing sold and nothing left: an event without seats is not sold out.
    assert (
        booking_stock.sold_out('{"at_ms": 1000, "available": 0, "held": 0, "sold": 0}', now_ms=2000, max_age_ms=5000)
        is False
    )
    assert booking_stock.sold_out("not json", now_ms=2000, max_age_ms=5000) is None
    assert booking_stock.sold_out('{"at_ms": 1000}', now_ms=2000, max_age_ms=5000) is None
    assert booking_stock.sold_out(None, now_ms=2000, max_age_ms=5000) is None


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
            return (await reader.sold_out([event_id], now_ms=now_ms)).get(event_id)

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
        assert (await reader.sold_out([event_id], now_ms=int(booking.clock.now() * 1000))) == {}
        # An event the admitter no longer names leaves the hash.
        await reader.want([])
        await publisher.publish()
        assert await redis_client.hexists(STOCK_KEY, str(event_id)) == 0
