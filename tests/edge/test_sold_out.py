"""Sold out, said at once, on real servers through the edge: the last seat
sold makes the room stop admitting by itself within a few seconds, every
waiting fan's stream ends saying so, and seats that come back open it
again; a hold that lapses before the sell-out does not make it."""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
import redis.asyncio as aioredis

from boxoffice.redis import event_key
from gen.boxoffice.booking.v1 import booking_service_pb2 as bpb
from gen.boxoffice.booking.v1 import booking_service_pb2_grpc as bpb_grpc
from tests.e2e.harness import eventually
from tests.edge.fans import ADMITTED, admit, buy, hold, signed_in, state_of
from tests.edge.harness import EdgeStack, edge_stack
from tests.support import Stores

WAITING = "QUEUE_STATE_WAITING"
SOLD_OUT = "ADMISSION_STATE_SOLD_OUT"
STOCK_KEY = "boxoffice:booking:stock"


@pytest.fixture
async def stack(stores: Stores) -> AsyncIterator[EdgeStack]:
    async with edge_stack(stores, prefix="edge-soldout") as stack:
        yield stack


async def timed_events(client: httpx.AsyncClient, path: str) -> list[tuple[str, dict[str, Any], float]]:
    """The (event, data, monotonic time received) of a stream until it ends."""
    events: list[tuple[str, dict[str, Any], float]] = []
    async with client.stream("GET", path) as reply:
        assert reply.status_code == 200, await reply.aread()
        name, data = "message", ""
        async for line in reply.aiter_lines():
            if line == "":
                if data:
                    events.append((name, json.loads(data), time.monotonic()))
                name, data = "message", ""
            elif line.startswith("event: "):
                name = line[7:]
            elif line.startswith("data: "):
                data += line[6:]
    return events


async def stock(redis_client: aioredis.Redis, event_id: int) -> dict[str, int] | None:
    """What booking last published about the event's seats."""
    raw = await redis_client.hget(STOCK_KEY, str(event_id))
    return None if raw is None else {k: int(v) for k, v in json.loads(raw).items()}


async def two_ticks_after(redis_client: aioredis.Redis, event_id: int, after_ms: int) -> None:
    """Until the admitter ran a tick that began after ``after_ms`` (the
    second tick whose time is past it: the first may have read booking's
    figures just before)."""
    key = event_key(event_id, "prog")

    async def last_tick() -> int:
        return int(await redis_client.hget(key, "last") or 0)

    async def past(moment: int) -> int | None:
        last = await last_tick()
        return last if last > moment else None

    first = await eventually(lambda: past(after_ms), "an admit tick after the moment")
    await eventually(lambda: past(first), "another admit tick")


async def progress_document(client: httpx.AsyncClient, event_id: int) -> dict[str, Any]:
    reply = await client.get(f"/v1/events/{event_id}/queue/progress")
    assert reply.status_code == 200, reply.text
    found: dict[str, Any] = reply.json()["progress"]
    return found


async def test_the_last_seat_sold_stops_the_room_and_ends_every_waiting_stream(
    stack: EdgeStack, redis_client: aioredis.Redis
) -> None:
    event_id = await stack.event(seats=2, max_active=2, hold_ttl_seconds=1)
    buyer_name = f"buyer-{uuid.uuid4().hex[:8]}"
    async with (
        signed_in(stack) as lapser,
        signed_in(stack, buyer_name) as buyer,
        signed_in(stack) as first,
        signed_in(stack) as second,
    ):
        await admit(lapser, event_id)
        await admit(buyer, event_id)
        waiters = (first, second)
        for fan in waiters:
            joined = await fan.post(f"/v1/events/{event_id}/queue:join", json={})
            assert joined.status_code == 200 and joined.json()["position"]["state"] == WAITING, joined.text
        path = f"/v1/events/{event_id}/queue/position:watch"
        streams = [asyncio.create_task(timed_events(fan, path)) for fan in waiters]

        # Every seat held, then the hold lapses: nothing was sold, the room
        # stays open (held seats are not sold out; lapsed ones are free).
        lapsing = await hold(lapser, event_id, 2)
        assert lapsing["state"] == "HOLD_STATE_HELD"

        booking = stack.operators["booking"].stub(bpb_grpc.BookingServiceStub)

        async def swept() -> int | None:
            event = (await booking.GetEvent(bpb.GetEventRequest(event_id=event_id))).event
            return int(time.time() * 1000) if event.sections[0].held == 0 else None

        swept_at = await eventually(swept, "the sweeper ended the lapsed hold", seconds=30)

        async def lapse_published() -> bool | None:
            seats = await stock(redis_client, event_id)
            if seats is None or seats["at_ms"] <= swept_at:
                return None
            assert (seats["available"], seats["held"], seats["sold"]) == (2, 0, 0), seats
            return True

        await eventually(lapse_published, "booking published the lapsed hold's seats as available")
        await two_ticks_after(redis_client, event_id, int(time.time() * 1000))
        assert (await progress_document(first, event_id))["admissionState"] == "ADMISSION_STATE_OPEN"
        assert not any(stream.done() for stream in streams)

        # The last seats sell: within seconds every waiting fan hears it.
        selling_from = time.monotonic()
        booking_id = await buy(buyer, event_id, 2)
        for stream in streams:
            events = await asyncio.wait_for(stream, 30)
            name, data, received = events[-1]
            assert name == "final", events
            assert data["position"]["state"] == WAITING
            assert data["position"]["admissionState"] == SOLD_OUT
            assert received > selling_from
        # The position and the public progress document say it too, and a
        # new stream ends at once with it.
        for fan in waiters:
            position = (await fan.get(f"/v1/events/{event_id}/queue/position")).json()["position"]
            assert position["state"] == WAITING and position["admissionState"] == SOLD_OUT, position
            events = await asyncio.wait_for(timed_events(fan, path), 30)
            assert [name for name, _, _ in events] == ["final"]
            assert events[0][1]["position"]["admissionState"] == SOLD_OUT

        async def document_sold_out() -> bool | None:
            return True if (await progress_document(first, event_id))["admissionState"] == SOLD_OUT else None

        await eventually(document_sold_out, "the progress document says sold out")

        # Admission stops: both shoppers leave, freeing every slot, and
        # nobody is let in.
        for fan in (lapser, buyer):
            left = await fan.post(f"/v1/events/{event_id}/queue:leave", json={})
            assert left.status_code == 200, left.text
        await two_ticks_after(redis_client, event_id, int(time.time() * 1000))
        for fan in waiters:
            assert await state_of(fan, event_id) == WAITING

        # Seats come back (an operator cancels the booking): with nobody on
        # a waiting list for them, the room opens again and admits.
        operator = stack.operators["booking"].stub(bpb_grpc.BookingServiceStub, role="operator")
        await operator.CancelBooking(
            bpb.CancelBookingRequest(hold_id=booking_id, customer_id=buyer_name, reason="changed their mind")
        )
        for fan in waiters:

            async def admitted(fan: httpx.AsyncClient = fan) -> bool | None:
                return True if await state_of(fan, event_id) == ADMITTED else None

            await eventually(admitted, "a waiting fan is admitted once seats came back", seconds=30)
