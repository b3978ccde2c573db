"""Against a real BookingService (and the sandbox provider): a declined or
failed charge gives the hold back its own expiry, so a declined card keeps
no seats; money given back at the provider without us (a refund made there,
a dispute) cancels the booking and voids its tickets, as our own refunds do."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, timedelta
from typing import Any

import grpc
import pytest

from boxoffice import ticketcodes
from boxoffice.env import Env
from boxoffice.errors import from_rpc_error
from gen.boxoffice.booking.v1 import booking_service_pb2 as bpb
from gen.boxoffice.payment.v1 import payment_service_pb2 as pb
from payment_svc.adapters.sandbox import PM_DECLINED, PM_FAIL, PM_OK
from payment_svc.ports import ChargeRequest
from tests.booking.harness import create_event, hold_request, query, seated
from tests.payment.test_proof import Mesh, _audit, mesh_of
from tests.support import Stores


@pytest.fixture
async def mesh(stores: Stores) -> AsyncIterator[Mesh]:
    async with mesh_of(stores) as opened:
        yield opened


async def _hold(mesh: Mesh, customer: str, event_id: int, **selection: Any) -> bpb.Hold:
    reply = await mesh.booking.stub.HoldSeats(hold_request(mesh.token(customer, event_id), event_id, **selection))
    hold: bpb.Hold = reply.hold
    return hold


async def _get_hold(mesh: Mesh, customer: str, hold: bpb.Hold) -> bpb.Hold:
    reply = await mesh.booking.stub.GetHold(
        bpb.GetHoldRequest(access_token=mesh.token(customer, hold.event_id), hold_id=hold.hold_id)
    )
    found: bpb.Hold = reply.hold
    return found


async def _start(mesh: Mesh, customer: str, hold: bpb.Hold, method: str) -> pb.Payment:
    reply = await mesh.payment.stub.StartPayment(
        pb.StartPaymentRequest(
            access_token=mesh.token(customer, hold.event_id), hold_id=hold.hold_id, payment_method=method
        )
    )
    payment: pb.Payment = reply.payment
    return payment


async def _deliver_all(mesh: Mesh, payment_id: str, kind: str) -> None:
    for event in await mesh.payment.provider.events(payment_id):
        if event.type == kind:
            body = event.to_body()
            await mesh.payment.stub.HandleProviderWebhook(
                pb.HandleProviderWebhookRequest(signature=mesh.payment.provider.sign(body), body=body)
            )


@pytest.mark.parametrize(
    ("method", "state"), [(PM_DECLINED, pb.PAYMENT_STATE_DECLINED), (PM_FAIL, pb.PAYMENT_STATE_FAILED)]
)
async def test_a_charge_that_does_not_go_through_gives_the_hold_its_own_expiry(
    mesh: Mesh, method: str, state: int
) -> None:
    event = await create_event(mesh.booking, [seated("A")], [("A", "1", 4)])
    hold = await _hold(mesh, "ann", event.event_id, section="A", quantity=1)
    own_expiry = hold.expires_at.ToDatetime()
    during: list[bpb.Hold] = []

    async def look(request: ChargeRequest) -> None:
        during.append(await _get_hold(mesh, "ann", hold))

    mesh.payment.provider.on_charge = look
    payment = await _start(mesh, "ann", hold, method)
    assert payment.state == state
    # While the charge ran, the hold was extended (the control: the path ran).
    assert during[0].expires_at.ToDatetime() > own_expiry + timedelta(minutes=4)
    after = await _get_hold(mesh, "ann", hold)
    assert after.state == bpb.HOLD_STATE_HELD and after.expires_at.ToDatetime() == own_expiry
    # Past its own expiry the seat is anyone's.
    mesh.booking.clock.advance(own_expiry.replace(tzinfo=UTC).timestamp() - mesh.booking.clock.now() + 1)
    assert (await _get_hold(mesh, "ann", hold)).state == bpb.HOLD_STATE_EXPIRED
    taken = await _hold(mesh, "ben", event.event_id, seats=[hold.seats[0].seat_id])
    assert taken.state == bpb.HOLD_STATE_HELD


async def test_a_declined_fan_may_pay_again_before_the_hold_expires(mesh: Mesh) -> None:
    event = await create_event(mesh.booking, [seated("A")], [("A", "1", 4)])
    hold = await _hold(mesh, "cat", event.event_id, section="A", quantity=1)
    assert (await _start(mesh, "cat", hold, PM_DECLINED)).state == pb.PAYMENT_STATE_DECLINED
    second = await _start(mesh, "cat", hold, PM_OK)
    assert second.state == pb.PAYMENT_STATE_CAPTURED
    # The second charge extended the hold again, and kept it.
    assert (await _get_hold(mesh, "cat", hold)).expires_at.ToDatetime() > hold.expires_at.ToDatetime()


async def _paid_and_ticketed(mesh: Mesh, customer: str, refund_percent: int = 0) -> tuple[Any, bpb.Hold, pb.Payment]:
    event = await create_event(
        mesh.booking,
        [seated("A")],
        [("A", "1", 4)],
        refund_percent=refund_percent,
        refundable_for=timedelta(days=5) if refund_percent else None,
    )
    hold = await _hold(mesh, customer, event.event_id, section="A", quantity=2)
    payment = await _start(mesh, customer, hold, PM_OK)
    confirmed = await mesh.payment.stub.ConfirmPayment(
        pb.ConfirmPaymentRequest(payment_id=payment.payment_id, idempotency_key=f"c-{payment.payment_id}")
    )
    assert confirmed.payment.state == pb.PAYMENT_STATE_SUCCEEDED
    await mesh.issue_all()
    return event, hold, confirmed.payment


async def _valid_tickets(mesh: Mesh, hold_id: str) -> int:
    rows = await query(
        mesh.booking, "SELECT count(*) FROM tickets WHERE hold_id = %s AND voided_at IS NULL", (hold_id,)
    )
    return int(rows[0][0])


async def _refunds(mesh: Mesh, payment_id: str) -> list[tuple[Any, ...]]:
    return await query(
        mesh.booking,
        "SELECT source, state, amount_minor, provider_refund_id FROM refunds WHERE payment_id = %s ORDER BY created_at",
        (payment_id,),
    )


@pytest.mark.parametrize("share", [1, 2])
async def test_a_refund_made_at_the_provider_cancels_the_booking_and_voids_its_tickets(mesh: Mesh, share: int) -> None:
    """Whole or half, with an event whose policy grants nothing: the money
    is already back, so the booking goes (I13), and nothing more is refunded."""
    event, hold, payment = await _paid_and_ticketed(mesh, "dee")
    assert await _valid_tickets(mesh, hold.hold_id) == 2
    amount = payment.amount.amount_minor // share
    refund_id = await mesh.payment.provider.refund_at_provider(payment.provider_payment_id, amount)
    await _deliver_all(mesh, payment.payment_id, "charge.refunded")
    await _deliver_all(mesh, payment.payment_id, "charge.refunded")  # twice: once
    await mesh.issue_all()
    after = (await mesh.payment.stub.GetPayment(pb.GetPaymentRequest(payment_id=payment.payment_id))).payment
    assert after.state == (pb.PAYMENT_STATE_REFUNDED if share == 1 else pb.PAYMENT_STATE_PARTIALLY_REFUNDED)
    assert after.refunded.amount_minor == amount
    assert await _refunds(mesh, payment.payment_id) == [("PROVIDER", "SUCCEEDED", amount, refund_id)]
    assert (await _get_hold(mesh, "dee", hold)).state == bpb.HOLD_STATE_CANCELLED
    assert await _valid_tickets(mesh, hold.hold_id) == 0
    # The provider holds what is left and nothing was refunded twice.
    key = f"hold_{hold.hold_id}_attempt_1"
    assert await mesh.payment.provider.charged_minor(key) == payment.amount.amount_minor - amount
    assert await mesh.payment.provider.refunds_of(key) == 0  # none of ours
    await _audit(mesh, event.event_id)


async def test_a_dispute_cancels_the_booking_and_voids_its_tickets(mesh: Mesh) -> None:
    event, hold, payment = await _paid_and_ticketed(mesh, "eve", refund_percent=100)
    dispute_id = await mesh.payment.provider.dispute(payment.provider_payment_id)
    await _deliver_all(mesh, payment.payment_id, "charge.dispute.created")
    await mesh.issue_all()
    after = (await mesh.payment.stub.GetPayment(pb.GetPaymentRequest(payment_id=payment.payment_id))).payment
    assert after.state == pb.PAYMENT_STATE_REFUNDED
    # The policy would grant a refund, but the money is gone already: no refund of ours.
    assert await _refunds(mesh, payment.payment_id) == [
        ("PROVIDER", "SUCCEEDED", payment.amount.amount_minor, dispute_id)
    ]
    assert await _valid_tickets(mesh, hold.hold_id) == 0
    await _audit(mesh, event.event_id)


async def test_our_own_refund_announced_by_the_provider_is_not_counted_twice(mesh: Mesh) -> None:
    event, hold, payment = await _paid_and_ticketed(mesh, "fay", refund_percent=100)
    await mesh.payment.stub.RefundPayment(
        pb.RefundPaymentRequest(payment_id=payment.payment_id, request_id="r-1", reason="asked")
    )
    await _deliver_all(mesh, payment.payment_id, "charge.refunded")
    await mesh.issue_all()
    refunds = await _refunds(mesh, payment.payment_id)
    assert [(r[0], r[1]) for r in refunds] == [("BOOKING_CANCELLED", "SUCCEEDED")]
    assert await _valid_tickets(mesh, hold.hold_id) == 0
    await _audit(mesh, event.event_id)


async def test_only_payment_may_cancel_a_booking_as_refunded_at_the_provider(mesh: Mesh) -> None:
    _, hold, _ = await _paid_and_ticketed(mesh, "gus")
    with pytest.raises(grpc.RpcError) as caught:
        await mesh.booking.operator.CancelBooking(
            bpb.CancelBookingRequest(hold_id=hold.hold_id, customer_id="gus", reason="x", refunded_at_provider=True)
        )
    err = from_rpc_error(caught.value)
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT and err.metadata["field"] == "refunded_at_provider"
    assert (await _get_hold(mesh, "gus", hold)).state == bpb.HOLD_STATE_CONFIRMED
    assert await _valid_tickets(mesh, hold.hold_id) == 2


async def test_tickets_paid_in_the_sandbox_say_so(mesh: Mesh) -> None:
    event, _, payment = await _paid_and_ticketed(mesh, "hal")
    reply = await mesh.payment.stub.ListTickets(
        pb.ListTicketsRequest(access_token=mesh.token("hal", event.event_id), event_id=event.event_id)
    )
    assert len(reply.tickets) == 2 and all(t.sandbox for t in reply.tickets)
    # A payment another provider took: its tickets do not.
    await query(
        mesh.booking, "UPDATE payments SET provider = 'stripe' WHERE payment_id = %s RETURNING 1", (payment.payment_id,)
    )
    reply = await mesh.payment.stub.ListTickets(
        pb.ListTicketsRequest(access_token=mesh.token("hal", event.event_id), event_id=event.event_id)
    )
    assert [t.sandbox for t in reply.tickets] == [False, False]


async def test_tickets_carry_signed_codes_that_the_public_keys_verify(mesh: Mesh) -> None:
    event, hold, _ = await _paid_and_ticketed(mesh, "ivy")
    reply = await mesh.payment.stub.ListTickets(
        pb.ListTicketsRequest(access_token=mesh.token("ivy", event.event_id), event_id=event.event_id)
    )
    # The issuer ran on the development key (no BOXOFFICE_CHECKIN_KEYS set).
    verifier = ticketcodes.TicketCodeVerifier(ticketcodes.read_keys(Env({})).get().public, mesh.booking.clock)
    assert len(reply.tickets) == 2
    for ticket in reply.tickets:
        claims = verifier.verify(ticket.code)
        assert (claims.ticket_id, claims.event_id, claims.section_id, claims.seat_label) == (
            ticket.ticket_id,
            event.event_id,
            ticket.section_id,
            ticket.seat_label,
        )
        assert claims.issued_at == int(ticket.issue_time.seconds)
    # A code issued before signed codes stays what it was (the gate looks it up).
    await query(
        mesh.booking,
        "UPDATE tickets SET code = 'TKT-00000000000000AA' WHERE hold_id = %s AND unit = 1 RETURNING 1",
        (hold.hold_id,),
    )
    again = await mesh.payment.stub.ListTickets(
        pb.ListTicketsRequest(access_token=mesh.token("ivy", event.event_id), event_id=event.event_id)
    )
    assert {t.unit: t.code for t in again.tickets}[1] == "TKT-00000000000000AA"
