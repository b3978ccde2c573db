"""End to end, through the real gRPC APIs only: join -> admitted -> hold ->
pay -> ticket. Every role of every service runs as `boxoffice up` composes
them (queue server and admitter, booking server and sweeper, payment server
with the sandbox provider delivering signed webhooks, the outbox relay, the
ticket issuer), each service on its own loopback port."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import pytest

from boxoffice import secrets, ticketcodes
from boxoffice.clock import SystemClock
from boxoffice.ticketcodes import TicketCodeVerifier
from gen.boxoffice.booking.v1 import booking_service_pb2 as bpb
from gen.boxoffice.booking.v1 import booking_service_pb2_grpc as bpb_grpc
from gen.boxoffice.payment.v1 import payment_service_pb2 as ppb
from gen.boxoffice.payment.v1 import payment_service_pb2_grpc as ppb_grpc
from gen.boxoffice.queue.v1 import queue_service_pb2 as qpb
from gen.boxoffice.queue.v1 import queue_service_pb2_grpc as qpb_grpc
from tests.e2e.checkout import admitted, open_event
from tests.e2e.harness import eventually, whole_mesh
from tests.edge.asserting import edge_mesh_client
from tests.support import Stores


@dataclass
class Mesh:
    queue: Any
    booking: Any
    payment: Any


@pytest.fixture
async def mesh(stores: Stores) -> AsyncIterator[Mesh]:
    async with whole_mesh(stores, "ticket-issued-e2e") as addresses:
        # Each call goes as a role the authorization table allows it (the
        # edge for the fan's calls, the operator for CreateEvent).
        async with (
            edge_mesh_client(stores, addresses["queue"]) as queue,
            edge_mesh_client(stores, addresses["booking"]) as booking,
            edge_mesh_client(stores, addresses["payment"]) as payment,
        ):
            yield Mesh(
                queue.stub(qpb_grpc.QueueServiceStub),
                booking.stub(bpb_grpc.BookingServiceStub),
                payment.stub(ppb_grpc.PaymentServiceStub),
            )


async def _tickets(mesh: Mesh, token: str, event_id: int, hold_id: str, count: int) -> list[ppb.Ticket]:
    async def listed() -> list[ppb.Ticket] | None:
        reply = await mesh.payment.ListTickets(
            ppb.ListTicketsRequest(access_token=token, event_id=event_id, hold_id=hold_id)
        )
        tickets = list(reply.tickets)
        return tickets if len(tickets) >= count else None

    return await eventually(listed, f"{count} tickets for {hold_id}")


async def test_join_admitted_hold_pay_ticket(mesh: Mesh) -> None:
    event_id = await open_event(mesh.booking, mesh.queue, name="End to end", seats=8)

    # A fan pays and confirms.
    token = await admitted(mesh.queue, event_id, customer_id="fan-1")
    held = await mesh.booking.HoldSeats(
        bpb.HoldSeatsRequest(
            access_token=token,
            event_id=event_id,
            best_available=bpb.BestAvailableSelection(section_id="A", quantity=2),
        )
    )
    hold = held.hold
    assert hold.state == bpb.HOLD_STATE_HELD and hold.amount.amount_minor == 9000
    started = await mesh.payment.StartPayment(
        ppb.StartPaymentRequest(access_token=token, hold_id=hold.hold_id, payment_method="pm_card_ok")
    )
    assert started.payment.state == ppb.PAYMENT_STATE_CAPTURED
    confirmed = await mesh.payment.ConfirmPayment(
        ppb.ConfirmPaymentRequest(payment_id=started.payment.payment_id, idempotency_key=f"e2e-{hold.hold_id}")
    )
    assert confirmed.payment.state == ppb.PAYMENT_STATE_SUCCEEDED
    tickets = await _tickets(mesh, token, event_id, hold.hold_id, 2)
    assert sorted(t.seat_id for t in tickets) == sorted(s.seat_id for s in hold.seats)
    assert all(t.state == ppb.TICKET_STATE_VALID for t in tickets)
    # Each code is signed with the check-in key of the mesh (on its test stores,
    # the development key) and says which ticket of which event it is.
    dev = ticketcodes.parse_keys(f"{secrets.DEV_CHECKIN_KID}:{secrets.DEV_CHECKIN_SEED}")
    verifier = TicketCodeVerifier(dev.public, SystemClock())
    claims = {t.ticket_id: verifier.verify(t.code) for t in tickets}
    assert all(c.ticket_id == ticket_id and c.event_id == event_id for ticket_id, c in claims.items())
    after = await mesh.booking.GetHold(bpb.GetHoldRequest(access_token=token, hold_id=hold.hold_id))
    assert after.hold.state == bpb.HOLD_STATE_CONFIRMED
    await mesh.queue.EndShoppingSession(
        qpb.EndShoppingSessionRequest(event_id=event_id, customer_id="fan-1", reason=qpb.SESSION_END_REASON_COMPLETED)
    )

    # Another fan pays and never confirms: the provider's signed webhook does.
    other = await admitted(mesh.queue, event_id, customer_id="fan-2")
    held2 = await mesh.booking.HoldSeats(
        bpb.HoldSeatsRequest(
            access_token=other,
            event_id=event_id,
            best_available=bpb.BestAvailableSelection(section_id="A", quantity=1),
        )
    )
    await mesh.payment.StartPayment(
        ppb.StartPaymentRequest(access_token=other, hold_id=held2.hold.hold_id, payment_method="pm_card_ok")
    )
    (ticket,) = await _tickets(mesh, other, event_id, held2.hold.hold_id, 1)
    assert ticket.seat_id == held2.hold.seats[0].seat_id
    # Each customer sees only their own tickets.
    mine = await mesh.payment.ListTickets(ppb.ListTicketsRequest(access_token=other, event_id=event_id))
    assert [t.hold_id for t in mine.tickets] == [held2.hold.hold_id]
