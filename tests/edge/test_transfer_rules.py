"""What a claimed transfer changes beyond the ticket, on the real mesh
through the edge: booking learns of it (RecordTicketTransfer, told again
until it answers, recorded once), so the receiver's ticket limit at
HoldSeats counts the ticket and the sender's no longer does; the buyer's own
cancel of a booking a friend holds a ticket of is refused
(TICKETS_TRANSFERRED, quote and cancel alike) while a cancel that goes
through withdraws the pending offers; an operator's refund still voids
every ticket, the friend's included, which the friend sees VOID."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Any

import grpc
import httpx
import psycopg
import pytest
from google.protobuf import timestamp_pb2
from prometheus_client import CollectorRegistry

from boxoffice import access, ticketcodes
from boxoffice.clock import SystemClock
from boxoffice.env import Env
from checkin_svc.adapters.postgres import PgCheckInStore
from checkin_svc.handler import CheckInHandler
from checkin_svc.metrics import CheckInMetrics
from checkin_svc.model import Scan, ScanResult
from gen.boxoffice.booking.v1 import booking_service_pb2 as bpb
from gen.boxoffice.booking.v1 import booking_service_pb2_grpc as bpb_grpc
from gen.boxoffice.payment.v1 import payment_service_pb2 as ppb
from gen.boxoffice.payment.v1 import payment_service_pb2_grpc as ppb_grpc
from tests.checkin.harness import EventsAllowing
from tests.e2e.harness import eventually
from tests.edge.fans import admit
from tests.edge.harness import EdgeStack, edge_stack, error_of
from tests.edge.transfer_fans import buy_tickets, claim, claim_secret, offer, signed_in, tickets_of
from tests.payment.harness import open_pool
from tests.support import Stores

pytestmark = pytest.mark.slow

PRICE = 4500


@pytest.fixture(scope="module")
async def stack(stores: Stores) -> AsyncIterator[EdgeStack]:
    async with edge_stack(stores, prefix="edge-transfer-rules") as opened:
        yield opened


async def _customer(client: httpx.AsyncClient) -> str:
    reply = await client.get("/v1/session")
    assert reply.status_code == 200, reply.text
    return str(reply.json()["customerId"])


async def _give(stores: Stores, sender: httpx.AsyncClient, friend: httpx.AsyncClient, ticket_id: str) -> dict[str, Any]:
    """``sender`` transfers the ticket and ``friend`` claims it; the claim's answer."""
    transfer = await offer(sender, ticket_id)
    claimed = await claim(friend, transfer["transferId"], await claim_secret(stores, transfer["transferId"]))
    assert claimed.status_code == 200, claimed.text
    found: dict[str, Any] = claimed.json()
    return found


async def _hold(client: httpx.AsyncClient, event_id: int, quantity: int) -> httpx.Response:
    return await client.post(
        f"/v1/events/{event_id}/holds", json={"bestAvailable": {"sectionId": "A", "quantity": quantity}}
    )


async def _booking_rows(stores: Stores, event_id: int) -> list[Any]:
    """What booking recorded of the event's claimed transfers."""
    async with await psycopg.AsyncConnection.connect(stores.database_url) as conn:
        cur = await conn.execute(
            "SELECT transfer_id::text, hold_id::text, unit, generation, sender_id, receiver_id "
            "FROM claimed_transfers WHERE event_id = %s ORDER BY claimed_at, transfer_id",
            (event_id,),
        )
        return list(await cur.fetchall())


async def _sql(stores: Stores, statement: str, *params: Any) -> None:
    async with await psycopg.AsyncConnection.connect(stores.database_url, autocommit=True) as conn:
        await conn.execute(statement, params)


async def _told(stores: Stores, transfer_id: str) -> bool:
    async with await psycopg.AsyncConnection.connect(stores.database_url) as conn:
        cur = await conn.execute(
            "SELECT booking_told_at IS NOT NULL FROM ticket_transfers WHERE transfer_id = %s", (transfer_id,)
        )
        row = await cur.fetchone()
    assert row is not None
    return bool(row[0])


async def _state(stores: Stores) -> tuple[list[Any], list[Any], list[Any]]:
    """Every claimed transfer, ticket and hold as stored (to prove nothing changed)."""
    async with await psycopg.AsyncConnection.connect(stores.database_url) as conn:
        rows = []
        for query in (
            "SELECT * FROM claimed_transfers ORDER BY transfer_id",
            "SELECT ticket_id, voided_at, transferred_at FROM tickets ORDER BY ticket_id",
            "SELECT hold_id, state FROM holds ORDER BY hold_id",
        ):
            cur = await conn.execute(query)
            rows.append(list(await cur.fetchall()))
    return rows[0], rows[1], rows[2]


async def test_a_received_ticket_counts_against_the_receivers_limit_and_no_longer_the_senders(
    stack: EdgeStack, stores: Stores
) -> None:
    event_id = await stack.event(seats=8, max_tickets_per_customer=2)
    async with signed_in(stack, "sender", "friend") as (sender, friend):
        given, _kept = await buy_tickets(sender, event_id, 2)
        claimed = await _give(stores, sender, friend, given["ticketId"])
        # Booking knows of it as soon as the claim answers.
        assert await _booking_rows(stores, event_id) == [
            (
                claimed["transfer"]["transferId"],
                given["holdId"],
                int(given["unit"]),
                1,
                await _customer(sender),
                await _customer(friend),
            )
        ]
        # The friend has one ticket of two: two more are refused, one is not.
        await admit(friend, event_id)
        refused = await _hold(friend, event_id, 2)
        assert error_of(refused) == (400, "FAILED_PRECONDITION", "TICKET_LIMIT_REACHED"), refused.text
        assert refused.json()["error"]["details"][0]["metadata"] == {"limit": "2", "held": "0", "bought": "1"}
        assert (await _hold(friend, event_id, 1)).status_code == 200
        # The sender gave one of their two away: one more is theirs to hold.
        mine = await _hold(sender, event_id, 1)
        assert mine.status_code == 200, mine.text
        again = await _hold(sender, event_id, 1)
        assert error_of(again)[2] == "TICKET_LIMIT_REACHED"


async def test_booking_is_told_again_until_it_answers_and_records_a_transfer_once(
    stack: EdgeStack, stores: Stores
) -> None:
    event_id = await stack.event(seats=8, max_tickets_per_customer=2)
    async with signed_in(stack, "sender", "friend") as (sender, friend):
        given, _kept = await buy_tickets(sender, event_id, 2)
        claimed = await _give(stores, sender, friend, given["ticketId"])
        transfer_id = claimed["transfer"]["transferId"]
        recorded = await _booking_rows(stores, event_id)
        assert len(recorded) == 1 and await _told(stores, transfer_id)

        # Booking never got it (its call failed after the claim committed):
        # the payment server's loop tells it again.
        await _sql(stores, "DELETE FROM claimed_transfers WHERE transfer_id = %s", transfer_id)
        await _sql(stores, "UPDATE ticket_transfers SET booking_told_at = NULL WHERE transfer_id = %s", transfer_id)

        async def retold() -> bool | None:
            return True if await _told(stores, transfer_id) else None

        await eventually(retold, "the transfer told again")
        assert await _booking_rows(stores, event_id) == recorded
        # Booking got it but its answer was lost: told again, recorded once.
        await _sql(stores, "UPDATE ticket_transfers SET booking_told_at = NULL WHERE transfer_id = %s", transfer_id)
        await eventually(retold, "the transfer told once more")
        assert await _booking_rows(stores, event_id) == recorded
        await admit(friend, event_id)
        assert error_of(await _hold(friend, event_id, 2))[2] == "TICKET_LIMIT_REACHED"

        # The RPC itself, as payment calls it: the same transfer again is
        # recorded_before; its id with other details, an unknown booking and
        # bad input are refused, changing nothing.
        booking = stack.operators["booking"].stub(bpb_grpc.BookingServiceStub, role=access.PAYMENT)
        when = timestamp_pb2.Timestamp()
        when.FromDatetime(datetime.now(UTC))
        row = recorded[0]
        same = bpb.RecordTicketTransferRequest(
            transfer_id=transfer_id,
            event_id=event_id,
            booking_id=row[1],
            unit=row[2],
            generation=row[3],
            sender_customer_id=row[4],
            receiver_customer_id=row[5],
            claimed_at=when,
        )
        assert (await booking.RecordTicketTransfer(same)).recorded_before is True
        before = await _state(stores)
        other = bpb.RecordTicketTransferRequest()
        other.CopyFrom(same)
        other.receiver_customer_id = "someone-else"
        unknown = bpb.RecordTicketTransferRequest()
        unknown.CopyFrom(same)
        unknown.transfer_id, unknown.booking_id = str(uuid.uuid4()), str(uuid.uuid4())
        wrong_event = bpb.RecordTicketTransferRequest()
        wrong_event.CopyFrom(same)
        wrong_event.transfer_id, wrong_event.event_id = str(uuid.uuid4()), event_id + 1
        cases: list[tuple[bpb.RecordTicketTransferRequest, grpc.StatusCode]] = [
            (other, grpc.StatusCode.FAILED_PRECONDITION),
            (unknown, grpc.StatusCode.NOT_FOUND),
            (wrong_event, grpc.StatusCode.NOT_FOUND),
        ]
        for field, value in (
            ("transfer_id", "not-a-uuid"),
            ("booking_id", ""),
            ("unit", 0),
            ("generation", 0),
            ("sender_customer_id", ""),
            ("receiver_customer_id", "x" * 129),
            ("event_id", 0),
        ):
            bad = bpb.RecordTicketTransferRequest()
            bad.CopyFrom(same)
            bad.transfer_id = str(uuid.uuid4())
            setattr(bad, field, value)
            cases.append((bad, grpc.StatusCode.INVALID_ARGUMENT))
        no_time = bpb.RecordTicketTransferRequest()
        no_time.CopyFrom(same)
        no_time.transfer_id = str(uuid.uuid4())
        no_time.ClearField("claimed_at")
        cases.append((no_time, grpc.StatusCode.INVALID_ARGUMENT))
        for request, code in cases:
            with pytest.raises(grpc.aio.AioRpcError) as failed:
                await booking.RecordTicketTransfer(request)
            assert failed.value.code() == code, (request, failed.value.details())
        assert await _state(stores) == before


async def test_the_buyers_cancel_is_refused_while_a_friend_holds_a_ticket_of_the_booking(
    stack: EdgeStack, stores: Stores
) -> None:
    event_id = await stack.event(seats=8, refund_percent=100)
    async with signed_in(stack, "sender", "friend") as (sender, friend):
        given, _kept = await buy_tickets(sender, event_id, 2)
        booking_id = given["holdId"]
        claimed = await _give(stores, sender, friend, given["ticketId"])

        quote = await sender.get(f"/v1/bookings/{booking_id}/cancellation")
        assert quote.status_code == 200, quote.text
        assert (quote.json()["allowed"], quote.json()["reason"]) == (False, "TICKETS_TRANSFERRED")
        before = await _state(stores)
        body = {"quotedRefund": {"currencyCode": "EUR", "amountMinor": str(2 * PRICE)}}
        refused = await sender.post(f"/v1/bookings/{booking_id}:cancel", json=body, headers={"Idempotency-Key": "c1"})
        assert error_of(refused) == (400, "FAILED_PRECONDITION", "TICKETS_TRANSFERRED"), refused.text
        assert refused.json()["error"]["details"][0]["metadata"] == {"hold_id": booking_id, "tickets": "1"}
        assert await _state(stores) == before
        assert [t["state"] for t in await tickets_of(friend, event_id)] == ["TICKET_STATE_VALID"]

        # Once the friend gives it back, the booking is the buyer's to cancel again.
        await _give(stores, friend, sender, claimed["ticket"]["ticketId"])
        quote = await sender.get(f"/v1/bookings/{booking_id}/cancellation")
        assert quote.json()["allowed"] is True, quote.text
        cancelled = await sender.post(
            f"/v1/bookings/{booking_id}:cancel",
            json={"quotedRefund": quote.json()["refund"]},
            headers={"Idempotency-Key": "c2"},
        )
        assert cancelled.status_code == 200, cancelled.text


async def test_a_cancel_that_goes_through_withdraws_the_bookings_pending_transfers(
    stack: EdgeStack, stores: Stores
) -> None:
    event_id = await stack.event(seats=8, refund_percent=100)
    async with signed_in(stack, "sender", "friend") as (sender, friend):
        given, _kept = await buy_tickets(sender, event_id, 2)
        transfer = await offer(sender, given["ticketId"])
        secret = await claim_secret(stores, transfer["transferId"])
        quote = await sender.get(f"/v1/bookings/{given['holdId']}/cancellation")
        assert quote.json()["allowed"] is True, quote.text
        cancelled = await sender.post(
            f"/v1/bookings/{given['holdId']}:cancel",
            json={"quotedRefund": quote.json()["refund"]},
            headers={"Idempotency-Key": "c1"},
        )
        assert cancelled.status_code == 200, cancelled.text
        # Withdrawn by the cancel itself: the link claims nothing.
        late = await claim(friend, transfer["transferId"], secret)
        assert error_of(late) == (400, "FAILED_PRECONDITION", "TRANSFER_CANCELLED"), late.text
        assert await tickets_of(friend, event_id) == []


async def test_an_operators_refund_voids_the_friends_claimed_ticket_too(stack: EdgeStack, stores: Stores) -> None:
    event_id = await stack.event(seats=8, refund_percent=100, max_tickets_per_customer=2)
    async with signed_in(stack, "sender", "friend") as (sender, friend):
        given, _kept = await buy_tickets(sender, event_id, 2)
        claimed = await _give(stores, sender, friend, given["ticketId"])
        payment = stack.operators["payment"].stub(ppb_grpc.PaymentServiceStub, role=access.OPERATOR)
        await payment.RefundPayment(
            ppb.RefundPaymentRequest(payment_id=given["paymentId"], reason="event moved", request_id="refund-1")
        )

        async def void() -> list[dict[str, Any]] | None:
            found = await tickets_of(friend, event_id)
            return found if [t["state"] for t in found] == ["TICKET_STATE_VOID"] else None

        (ticket,) = await eventually(void, "the friend's ticket void")
        assert ticket["ticketId"] == claimed["ticket"]["ticketId"]
        keys = ticketcodes.read_keys(Env({})).get()
        clock = SystemClock()
        async with open_pool(stores, max_size=2) as pool:
            door = CheckInHandler(
                PgCheckInStore(pool),
                ticketcodes.TicketCodeVerifier(keys.public, clock),
                clock,
                EventsAllowing(),
                CheckInMetrics.create(CollectorRegistry()),
                EventsAllowing(set()),
            )
            scanned = await door.scan(Scan(event_id, ticket["code"], "north-1", "d1", datetime.now(UTC)))
        assert scanned.result is ScanResult.VOID
        # The void ticket no longer counts against the friend's limit.
        await admit(friend, event_id)
        held = await _hold(friend, event_id, 2)
        assert held.status_code == 200, held.text
