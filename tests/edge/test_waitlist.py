"""An event's waiting list through the edge, on real servers: a fan with a
place in the event's queue joins the list of a sold-out event, reads their
entry and leaves; each fan sees only their own entry; not signed in is 401,
no place in the queue is 403 WAITLIST_QUEUE_REQUIRED (an event without a
waiting room asks only the sign-in), and bad input is 400, each changing
nothing. End to end: an event sells out, fans join its list,
a buyer cancels, the first fan on the list is offered the seat, gets the
access token as the HttpOnly cookie (an app's, in the body: test_auth),
pays for the offer's hold and gets the ticket."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest

from boxoffice import access
from gen.boxoffice.booking.v1 import booking_service_pb2 as bpb
from gen.boxoffice.booking.v1 import booking_service_pb2_grpc as bpb_grpc
from tests.e2e.harness import eventually, ts
from tests.edge.asserting import as_fan
from tests.edge.fans import admit, buy, expect, signed_in
from tests.edge.harness import EdgeStack, edge_stack
from tests.edge.waitlists import entry_of, on_the_list, queued, sold_out, waitlist
from tests.support import Stores, make_runtime

pytestmark = pytest.mark.slow

WAITING = "WAITLIST_STATE_WAITING"
OFFERED = "WAITLIST_STATE_OFFERED"
TAKEN = "WAITLIST_STATE_TAKEN"
LEFT = "WAITLIST_STATE_LEFT"
PRICE = 4500


@pytest.fixture
async def stack(stores: Stores) -> AsyncIterator[EdgeStack]:
    async with edge_stack(stores, prefix="edge-waitlist") as stack:
        yield stack


async def test_join_read_and_leave_the_list(stack: EdgeStack) -> None:
    event_id, _ = await sold_out(stack)
    async with signed_in(stack) as fan, signed_in(stack) as other:
        await queued(fan, event_id)
        joined = await fan.post(waitlist(event_id, ":join"), json={"sectionId": "A", "quantity": 1})
        assert joined.status_code == 200, joined.text
        assert joined.headers["cache-control"] == "private, no-store"
        body = joined.json()
        assert body["newlyJoined"] is True
        entry = body["entry"]
        assert (entry["eventId"], entry["sectionId"], entry["quantity"], entry["state"]) == (
            str(event_id),
            "A",
            1,
            WAITING,
        )
        assert entry["ahead"] == "0" and entry["accessToken"] == ""
        # Joining again answers the entry as it is.
        again = await fan.post(waitlist(event_id, ":join"), json={"sectionId": "A", "quantity": 1})
        assert again.status_code == 200 and again.json()["newlyJoined"] is False, again.text
        assert (await entry_of(fan, event_id))["state"] == WAITING

        # Another fan's view is their own: behind the first, for any section.
        await queued(other, event_id)
        theirs = await other.post(waitlist(event_id, ":join"), json={"quantity": 2})
        assert theirs.status_code == 200, theirs.text
        seen = await entry_of(other, event_id)
        assert (seen["sectionId"], seen["quantity"], seen["ahead"]) == ("", 2, "1"), seen
        assert (await entry_of(fan, event_id))["quantity"] == 1

        left = await fan.post(waitlist(event_id, ":leave"), json={})
        assert left.status_code == 200 and left.json()["entry"]["state"] == LEFT, left.text
        assert (await entry_of(fan, event_id))["state"] == LEFT
        assert (await entry_of(other, event_id))["ahead"] == "0"


async def test_a_fan_who_never_joined_has_no_entry(stack: EdgeStack) -> None:
    event_id, _ = await sold_out(stack)
    async with signed_in(stack) as fan:
        expect(await fan.get(waitlist(event_id)), 404, "NOT_FOUND", "WAITLIST_ENTRY_NOT_FOUND")
        expect(await fan.post(waitlist(event_id, ":leave"), json={}), 404, "NOT_FOUND", "WAITLIST_ENTRY_NOT_FOUND")


async def test_not_signed_in_is_401(stack: EdgeStack) -> None:
    event_id = await stack.event(seats=1)
    async with stack.client() as anonymous:
        for reply in (
            await anonymous.post(waitlist(event_id, ":join"), json={"quantity": 1}),
            await anonymous.get(waitlist(event_id)),
            await anonymous.post(waitlist(event_id, ":leave"), json={}),
        ):
            expect(reply, 401, "UNAUTHENTICATED", "NOT_SIGNED_IN")


async def test_no_place_in_the_queue_is_403_and_changes_nothing(stack: EdgeStack) -> None:
    event_id, _ = await sold_out(stack)
    async with signed_in(stack) as fan:
        refused = expect(
            await fan.post(waitlist(event_id, ":join"), json={"sectionId": "A", "quantity": 1}),
            403,
            "PERMISSION_DENIED",
            "WAITLIST_QUEUE_REQUIRED",
        )
        assert refused.metadata == {"event_id": str(event_id)}
        expect(await fan.get(waitlist(event_id)), 404, "NOT_FOUND", "WAITLIST_ENTRY_NOT_FOUND")
        # With a place, the same join is taken.
        await queued(fan, event_id)
        joined = await fan.post(waitlist(event_id, ":join"), json={"sectionId": "A", "quantity": 1})
        assert joined.status_code == 200 and joined.json()["newlyJoined"] is True, joined.text


async def test_an_event_without_a_waiting_room_asks_only_the_sign_in(stack: EdgeStack, stores: Stores) -> None:
    """No room, no place to ask for: the signed-in fan joins (its one seat
    held by another fan, through booking as the edge, with a token of the
    mesh's signer)."""
    event_id = int(uuid.uuid4().int % 10**12) + 10**6
    operator = stack.operators["booking"].stub(bpb_grpc.BookingServiceStub)
    await operator.CreateEvent(
        bpb.CreateEventRequest(
            event_id=event_id,
            display_name="No room",
            kind=bpb.EVENT_KIND_CONCERT,
            starts_at=ts(datetime.now(UTC) + timedelta(days=30)),
            sections=[
                bpb.SectionSpec(
                    section_id="A",
                    display_name="Stalls",
                    kind=bpb.SECTION_KIND_SEATED,
                    price=bpb.Money(currency_code="EUR", amount_minor=PRICE),
                )
            ],
        )
    )
    await operator.LoadInventory(
        bpb.LoadInventoryRequest(
            event_id=event_id, rows=[bpb.SeatRowSpec(section_id="A", row_label="K", first_seat_number=1, seat_count=1)]
        )
    )
    holder = f"holder-{uuid.uuid4().hex[:8]}"
    token, _ = make_runtime(stores).token_signer.issue(event_id=event_id, customer_id=holder, ttl_seconds=3600)
    edge = stack.operators["booking"].stub(bpb_grpc.BookingServiceStub, role=access.EDGE)
    await edge.HoldSeats(
        bpb.HoldSeatsRequest(
            access_token=token,
            event_id=event_id,
            best_available=bpb.BestAvailableSelection(section_id="A", quantity=1),
        ),
        metadata=as_fan(holder),
    )
    async with signed_in(stack) as fan:
        expect(await fan.get(f"/v1/events/{event_id}/queue/position"), 404, "NOT_FOUND", "EVENT_NOT_FOUND")
        joined = await fan.post(waitlist(event_id, ":join"), json={"sectionId": "A", "quantity": 1})
        assert joined.status_code == 200 and joined.json()["entry"]["state"] == WAITING, joined.text


async def test_bad_input_is_400_and_changes_nothing(stack: EdgeStack) -> None:
    event_id, _ = await sold_out(stack)
    async with signed_in(stack) as fan:
        await queued(fan, event_id)
        join = waitlist(event_id, ":join")
        for body, reason in (
            ({"sectionId": "A", "quantity": 0}, "FIELD_REQUIRED"),
            ({"sectionId": "A", "quantity": 9}, "INVALID_FIELD"),
            ({"sectionId": "A b", "quantity": 1}, "INVALID_FIELD"),
            ({"sectionId": "NOPE", "quantity": 1}, "UNKNOWN_SECTION"),
            ({"sectionId": "A", "quantity": 1, "colour": "red"}, "MALFORMED_JSON"),
            ({"sectionId": "A", "quantity": 1, "eventId": "1"}, "INVALID_FIELD"),
        ):
            expect(await fan.post(join, json=body), 400, "INVALID_ARGUMENT", reason)
        expect(await fan.get(waitlist(event_id), params={"x": "1"}), 400, "INVALID_ARGUMENT", "INVALID_FIELD")
        expect(await fan.get("/v1/events/0/waitlist"), 400, "INVALID_ARGUMENT", "INVALID_FIELD")
        expect(await fan.get(waitlist(event_id)), 404, "NOT_FOUND", "WAITLIST_ENTRY_NOT_FOUND")


async def test_an_event_with_seats_for_sale_has_no_list_yet(stack: EdgeStack) -> None:
    event_id = await stack.event(seats=2)
    async with signed_in(stack) as fan:
        await queued(fan, event_id)
        expect(
            await fan.post(waitlist(event_id, ":join"), json={"sectionId": "A", "quantity": 1}),
            400,
            "FAILED_PRECONDITION",
            "WAITLIST_SEATS_AVAILABLE",
        )
        expect(await fan.get(waitlist(event_id)), 404, "NOT_FOUND", "WAITLIST_ENTRY_NOT_FOUND")


async def cancel(stack: EdgeStack, client: httpx.AsyncClient, booking_id: str) -> None:
    quote = await client.get(f"/v1/bookings/{booking_id}/cancellation")
    assert quote.status_code == 200 and quote.json()["allowed"] is True, quote.text
    cancelled = await client.post(
        f"/v1/bookings/{booking_id}:cancel",
        json={"quotedRefund": quote.json()["refund"]},
        headers={"Idempotency-Key": uuid.uuid4().hex},
    )
    assert cancelled.status_code == 200, cancelled.text


async def offered(client: httpx.AsyncClient, event_id: int, **kwargs: Any) -> httpx.Response:
    async def probe() -> httpx.Response | None:
        reply = await client.get(waitlist(event_id), **kwargs)
        assert reply.status_code == 200, reply.text
        return reply if reply.json()["entry"]["state"] == OFFERED else None

    return await eventually(probe, "the fan is offered seats", seconds=30)


async def test_a_cancelled_seat_goes_to_the_first_fan_on_the_list_who_buys_it(stack: EdgeStack) -> None:
    event_id = await stack.event(seats=1, max_active=10, refund_percent=100)
    buyer_name = f"buyer-{uuid.uuid4().hex[:8]}"
    async with signed_in(stack, buyer_name) as buyer, signed_in(stack) as first, signed_in(stack) as second:
        await admit(buyer, event_id)
        booking_id = await buy(buyer, event_id, 1)
        for fan in (first, second):
            await on_the_list(fan, event_id)
        assert (await entry_of(second, event_id))["ahead"] == "1"

        await cancel(stack, buyer, booking_id)
        reply = await offered(first, event_id)
        entry = reply.json()["entry"]
        # A browser gets the token as the HttpOnly cookie only.
        assert entry["accessToken"] == ""
        cookie = next(c for c in reply.headers.get_list("set-cookie") if c.startswith("bo_access="))
        assert "HttpOnly" in cookie and "Max-Age=" in cookie, cookie
        offer = entry["offer"]
        assert offer["state"] == "HOLD_STATE_HELD" and offer["sectionId"] == "A" and offer["quantity"] == 1, offer
        assert offer["amount"] == {"currencyCode": "EUR", "amountMinor": str(PRICE)}
        # The second fan still waits, now first in line; the seat is not theirs.
        assert (await entry_of(second, event_id))["state"] == WAITING

        # The offer is paid for as any hold, with the cookie the edge set.
        hold_id = offer["holdId"]
        assert (await first.get(f"/v1/holds/{hold_id}")).json()["hold"]["state"] == "HOLD_STATE_HELD"
        started = await first.post(f"/v1/holds/{hold_id}/payment", json={"paymentMethod": "pm_card_ok"})
        assert started.status_code == 200, started.text
        payment_id = started.json()["payment"]["paymentId"]
        confirmed = await first.post(f"/v1/payments/{payment_id}:confirm", headers={"Idempotency-Key": "wl-1"})
        assert confirmed.json()["payment"]["state"] == "PAYMENT_STATE_SUCCEEDED", confirmed.text

        async def ticketed() -> list[dict[str, Any]] | None:
            listed = await first.get(f"/v1/events/{event_id}/tickets", params={"holdId": hold_id})
            assert listed.status_code == 200, listed.text
            tickets: list[dict[str, Any]] = listed.json()["tickets"]
            return tickets or None

        (ticket,) = await eventually(ticketed, "the offer's ticket is issued")
        assert ticket["sectionId"] == "A"

        async def taken() -> bool | None:
            return True if (await entry_of(first, event_id))["state"] == TAKEN else None

        await eventually(taken, "the entry says the offer was taken")
