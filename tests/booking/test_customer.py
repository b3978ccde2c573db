"""BookingService takes the customer from credentials, never from a body:
the edge lists and cancels its asserted fan's holds only, a token is
honoured only for the fan the edge asserts, and an operator sees and
cancels anyone's. Each refusal changes nothing."""

from __future__ import annotations

from datetime import timedelta

from boxoffice.errors import PermissionDenied, Unauthenticated
from gen.boxoffice.booking.v1 import booking_service_pb2 as pb
from tests.booking.harness import Booking, booking_server, call, create_event, hold_request, seat_ids, seated, snapshot
from tests.edge.asserting import as_fan
from tests.support import Stores

NOBODY = (("x-boxoffice-customer", ""),)


async def _sale(booking: Booking) -> tuple[pb.Event, pb.Hold, pb.Hold]:
    """An event where victim3 holds two seats and has bought two more."""
    event = await create_event(
        booking, [seated("A", price=1000)], [("A", "A", 6)], refund_percent=100, refundable_for=timedelta(days=1)
    )
    seats = await seat_ids(booking, event.event_id, "A")
    token = booking.token("victim3", event.event_id)
    bought = (await booking.stub.HoldSeats(hold_request(token, event.event_id, seats[:2]))).hold
    await booking.stub.ConfirmHold(
        pb.ConfirmHoldRequest(
            hold_id=bought.hold_id,
            idempotency_key=f"c-{bought.hold_id}",
            payment_id=f"pay-{bought.hold_id}",
            amount_paid=bought.amount,
        )
    )
    held = (await booking.stub.HoldSeats(hold_request(token, event.event_id, seats[2:4]))).hold
    return event, bought, held


async def test_the_edge_lists_only_its_asserted_fans_holds(stores: Stores) -> None:
    async with booking_server(stores) as booking:
        event, bought, held = await _sale(booking)
        seats = await seat_ids(booking, event.event_id, "A")
        own = await booking.stub.HoldSeats(
            hold_request(booking.token("fan-1", event.event_id), event.event_id, seats[4:5])
        )
        everyone = {
            h.hold_id for h in (await booking.operator.ListHolds(pb.ListHoldsRequest(event_id=event.event_id))).holds
        }
        assert everyone == {bought.hold_id, held.hold_id, own.hold.hold_id}

        # The attack: ListHolds {event_id} listed every customer's holds.
        mine = await booking.stub.ListHolds(pb.ListHoldsRequest(event_id=event.event_id), metadata=as_fan("fan-1"))
        assert [h.hold_id for h in mine.holds] == [own.hold.hold_id]
        _, err = await call(
            booking.stub.ListHolds(
                pb.ListHoldsRequest(event_id=event.event_id, customer_id="victim3"), metadata=as_fan("fan-1")
            )
        )
        assert isinstance(err, PermissionDenied) and err.reason == "CUSTOMER_MISMATCH"
        _, err = await call(booking.stub.ListHolds(pb.ListHoldsRequest(event_id=event.event_id), metadata=NOBODY))
        assert isinstance(err, Unauthenticated) and err.reason == "CUSTOMER_NOT_ASSERTED"

        # An operator lists any one customer's.
        theirs = await booking.operator.ListHolds(pb.ListHoldsRequest(event_id=event.event_id, customer_id="victim3"))
        assert {h.hold_id for h in theirs.holds} == {bought.hold_id, held.hold_id}


async def test_the_edge_cancels_only_its_asserted_fans_booking(stores: Stores) -> None:
    async with booking_server(stores) as booking:
        event, bought, _ = await _sale(booking)
        before = await snapshot(booking, event.event_id)
        for request, metadata, refusal in (
            # Another's booking, naming them: the body may not name another fan.
            (
                pb.CancelBookingRequest(hold_id=bought.hold_id, customer_id="victim3", reason="r"),
                as_fan("fan-1"),
                "CUSTOMER_MISMATCH",
            ),
            # Another's booking, naming nobody: the asserted fan does not own it.
            (pb.CancelBookingRequest(hold_id=bought.hold_id, reason="r"), as_fan("fan-1"), "NOT_HOLD_OWNER"),
        ):
            _, err = await call(booking.stub.CancelBooking(request, metadata=metadata))
            assert isinstance(err, PermissionDenied) and err.reason == refusal, err
        _, err = await call(
            booking.stub.CancelBooking(pb.CancelBookingRequest(hold_id=bought.hold_id, reason="r"), metadata=NOBODY)
        )
        assert isinstance(err, Unauthenticated) and err.reason == "CUSTOMER_NOT_ASSERTED"
        assert await snapshot(booking, event.event_id) == before

        # The fan's own, with no customer in the body.
        reply = await booking.stub.CancelBooking(
            pb.CancelBookingRequest(hold_id=bought.hold_id, reason="mine"), metadata=as_fan("victim3")
        )
        assert reply.hold.state == pb.HOLD_STATE_CANCELLED


async def test_an_operator_cancels_anyones_booking_naming_its_customer(stores: Stores) -> None:
    async with booking_server(stores) as booking:
        event, bought, _ = await _sale(booking)
        before = await snapshot(booking, event.event_id)
        _, err = await call(booking.operator.CancelBooking(pb.CancelBookingRequest(hold_id=bought.hold_id, reason="r")))
        assert err is not None and err.reason == "FIELD_REQUIRED" and err.metadata == {"field": "customer_id"}
        assert await snapshot(booking, event.event_id) == before
        reply = await booking.operator.CancelBooking(
            pb.CancelBookingRequest(hold_id=bought.hold_id, customer_id="victim3", reason="venue")
        )
        assert reply.hold.state == pb.HOLD_STATE_CANCELLED


async def test_a_token_counts_only_for_the_fan_the_edge_asserts(stores: Stores) -> None:
    async with booking_server(stores) as booking:
        event, _, held = await _sale(booking)
        seats = await seat_ids(booking, event.event_id, "A")
        stolen = booking.token("victim3", event.event_id)
        before = await snapshot(booking, event.event_id)
        for attempt in (
            booking.stub.HoldSeats(hold_request(stolen, event.event_id, seats[4:6]), metadata=as_fan("fan-1")),
            booking.stub.GetHold(
                pb.GetHoldRequest(access_token=stolen, hold_id=held.hold_id), metadata=as_fan("fan-1")
            ),
            booking.stub.ReleaseHold(
                pb.ReleaseHoldRequest(access_token=stolen, hold_id=held.hold_id), metadata=as_fan("fan-1")
            ),
        ):
            _, err = await call(attempt)
            assert isinstance(err, PermissionDenied) and err.reason == "CUSTOMER_MISMATCH", err
        assert await snapshot(booking, event.event_id) == before
