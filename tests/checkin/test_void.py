"""A refunded booking's tickets are VOID at the door as soon as the issuer
has voided them: the door reads the tickets' own rows (no copy, no cache),
and a ticket admitted before its refund does not admit again."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime

import pytest
from prometheus_client import CollectorRegistry

from boxoffice import ticketcodes
from boxoffice.env import Env
from checkin_svc.adapters.postgres import PgCheckInStore
from checkin_svc.handler import CheckInHandler
from checkin_svc.metrics import CheckInMetrics
from checkin_svc.model import Scan, ScanResult
from gen.boxoffice.payment.v1 import payment_service_pb2 as pb
from tests.checkin.harness import EventsAllowing
from tests.payment.harness import open_pool
from tests.payment.test_proof import Mesh, mesh_of
from tests.payment.test_provider_side import _deliver_all, _paid_and_ticketed
from tests.support import Stores


@pytest.fixture
async def mesh(stores: Stores) -> AsyncIterator[Mesh]:
    async with mesh_of(stores) as opened:
        yield opened


async def test_a_refunded_bookings_tickets_scan_void(mesh: Mesh, stores: Stores) -> None:
    event, _, payment = await _paid_and_ticketed(mesh, "zoe")
    tickets = (
        await mesh.payment.stub.ListTickets(
            pb.ListTicketsRequest(access_token=mesh.token("zoe", event.event_id), event_id=event.event_id)
        )
    ).tickets
    # The issuer signed with the development key (no BOXOFFICE_CHECKIN_KEYS).
    keys = ticketcodes.read_keys(Env({})).get()
    async with open_pool(stores) as pool:
        clock = mesh.booking.clock
        verifier = ticketcodes.TicketCodeVerifier(keys.public, clock)
        metrics = CheckInMetrics.create(CollectorRegistry())
        door = CheckInHandler(PgCheckInStore(pool), verifier, clock, EventsAllowing(), metrics, EventsAllowing(set()))

        async def scan(code: str) -> ScanResult:
            return (await door.scan(Scan(event.event_id, code, "north-1", "d1", datetime.now(UTC)))).result

        assert await scan(tickets[0].code) is ScanResult.ADMITTED
        await mesh.payment.provider.refund_at_provider(payment.provider_payment_id, payment.amount.amount_minor)
        await _deliver_all(mesh, payment.payment_id, "charge.refunded")
        # Before the issuer has handled the cancellation the ticket is still valid.
        assert await scan(tickets[1].code) is ScanResult.ADMITTED
        assert await scan(tickets[1].code) is ScanResult.ALREADY_CHECKED_IN
        await mesh.issue_all()
        # The next scan after the void: VOID, for the admitted ticket too.
        assert [await scan(t.code) for t in tickets] == [ScanResult.VOID, ScanResult.VOID]
