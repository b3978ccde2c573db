"""Fans holding a waiting-list offer shop outside the room, and the room's
cap on active shoppers counts them (booking publishes how many with the
event's stock; queue_svc.adapters.booking_stock reads it)."""

from __future__ import annotations

import json

from gen.boxoffice.queue.v1 import queue_service_pb2 as pb
from queue_svc.adapters.booking_stock import verdict
from queue_svc.ports import StockVerdict
from tests.queue.harness import new_event_id, queue_service
from tests.support import ManualClock, Stores


def test_the_offers_are_read_with_the_verdict_and_default_to_none() -> None:
    entry = {"at_ms": 1000, "available": 0, "held": 0, "sold": 5}
    assert verdict(json.dumps(entry), now_ms=2000, max_age_ms=5000) == StockVerdict(True, 0)
    assert verdict(json.dumps({**entry, "offers": 3}), now_ms=2000, max_age_ms=5000) == StockVerdict(True, 3)
    assert verdict(json.dumps({**entry, "offers": -3}), now_ms=2000, max_age_ms=5000) == StockVerdict(True, 0)
    assert verdict(json.dumps({**entry, "offers": "x"}), now_ms=2000, max_age_ms=5000) is None
    assert verdict("[1, 2]", now_ms=2000, max_age_ms=5000) is None


async def test_open_offers_take_shopper_slots_of_the_cap(stores: Stores) -> None:
    clock = ManualClock()
    event_id = new_event_id()
    async with queue_service(stores, clock=clock) as q:
        await q.create_event(
            event_id,
            opens_at_ms=int(clock.now() * 1000) - 1000,
            admission_rate_per_second=50,
            max_active_shoppers=3,
        )
        for n in range(6):
            await q.stub.JoinQueue(pb.JoinQueueRequest(event_id=event_id, customer_id=f"fan-{n}"))
        admitter = q.app.admitter
        await admitter.tick_event(event_id, 1, stock=StockVerdict(False, offers=2))
        clock.advance(1.0)
        result = await admitter.tick_event(event_id, 1, stock=StockVerdict(False, offers=2))
        assert result is not None
        # Three slots, two of them the offers' fans: one fan admitted.
        assert result.active_shoppers == 1
        clock.advance(1.0)
        result = await admitter.tick_event(event_id, 1, stock=StockVerdict(False, offers=0))
        # The offers ended: the cap's three slots are the room's again.
        assert result is not None and result.active_shoppers == 3
