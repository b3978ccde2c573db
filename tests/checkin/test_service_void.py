"""A refunded booking's tickets scan VOID through CheckInService as soon as
the issuer has voided them (the door reads the tickets' own rows: no copy,
no cache between a refund and the gate), on the real booking and payment
servers, with rotating codes fetched by the fan as the page does."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from boxoffice import secrets, ticketcodes
from gen.boxoffice.checkin.v1 import checkin_service_pb2 as cpb
from gen.boxoffice.payment.v1 import payment_service_pb2 as pb
from tests.checkin.service import checkin_service, with_key
from tests.edge.asserting import as_fan
from tests.payment.test_proof import Mesh, mesh_of
from tests.payment.test_provider_side import _deliver_all, _paid_and_ticketed
from tests.support import Stores

# The issuer of this mesh signs with the development key.
_DEV_KEYS = f"{secrets.DEV_CHECKIN_KID}:{secrets.DEV_CHECKIN_SEED}"


@pytest.fixture
async def mesh(stores: Stores) -> AsyncIterator[Mesh]:
    async with mesh_of(stores) as opened:
        yield opened


async def test_a_refunded_bookings_tickets_scan_void_at_the_next_scan(mesh: Mesh, stores: Stores) -> None:
    event, _, payment = await _paid_and_ticketed(mesh, "zoe")
    event_id = event.event_id
    tickets = (
        await mesh.payment.stub.ListTickets(
            pb.ListTicketsRequest(access_token=mesh.token("zoe", event_id), event_id=event_id)
        )
    ).tickets
    clock = mesh.booking.clock
    async with checkin_service(stores, environ={"BOXOFFICE_CHECKIN_KEYS": _DEV_KEYS}, clock=clock) as svc:
        _, key = await svc.device(event_id)

        async def rotating(ticket: pb.Ticket) -> str:
            rotation = await svc.door.GetTicketRotation(
                cpb.GetTicketRotationRequest(ticket_id=ticket.ticket_id), metadata=as_fan("zoe")
            )
            assert rotation.code == ticket.code
            step = ticketcodes.rotation_step(clock.now())
            return ticketcodes.rotating_code(rotation.code, rotation.secret, ticket.ticket_id, step)

        async def scan(code: str) -> int:
            request = cpb.ScanRequest(event_id=event_id, code=code, gate_id="north-1")
            return int((await svc.door.Scan(request, metadata=with_key(key))).result)

        codes = [await rotating(t) for t in tickets]
        # A concert takes rotating codes only: the static code is refused.
        assert await scan(tickets[0].code) == cpb.SCAN_RESULT_EXPIRED_CODE
        assert await scan(codes[0]) == cpb.SCAN_RESULT_ADMITTED
        await mesh.payment.provider.refund_at_provider(payment.provider_payment_id, payment.amount.amount_minor)
        await _deliver_all(mesh, payment.payment_id, "charge.refunded")
        await mesh.issue_all()
        # The first scan after the void: VOID, for the admitted ticket too.
        assert [await scan(c) for c in codes] == [cpb.SCAN_RESULT_VOID, cpb.SCAN_RESULT_VOID]
