"""A fan's checkout through the mesh for end-to-end tests: an event to buy
from, and the calls the edge makes for the fan up to StartPayment."""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

from gen.boxoffice.booking.v1 import booking_service_pb2 as bpb
from gen.boxoffice.booking.v1 import booking_service_pb2_grpc as bpb_grpc
from gen.boxoffice.payment.v1 import payment_service_pb2 as ppb
from gen.boxoffice.payment.v1 import payment_service_pb2_grpc as ppb_grpc
from gen.boxoffice.queue.v1 import queue_service_pb2 as qpb
from gen.boxoffice.queue.v1 import queue_service_pb2_grpc as qpb_grpc
from tests.e2e.harness import eventually, ts
from tests.edge.asserting import as_fan, edge_mesh_client
from tests.support import Stores


async def open_event(
    booking: Any,
    queue: Any,
    *,
    name: str,
    seats: int,
    refund_percent: int | None = None,
    refundable_days: int = 29,
    max_seats_per_customer: int = 0,
) -> int:
    """A new event in 30 days of ``seats`` seats in section A (45.00 EUR
    each) whose waiting room is open now (100 admissions a second, ten
    shoppers at once), made through ``booking`` and ``queue`` (BookingService
    and QueueService stubs, as the edge or the operator); its id.
    ``refund_percent``: what a cancellation refunds until
    ``refundable_days`` from now (None: no refunds)."""
    event_id = int(uuid.uuid4().int % 10**12) + 10**6
    now = datetime.now(UTC)
    policy = (
        None
        if refund_percent is None
        else bpb.RefundPolicy(refundable_until=ts(now + timedelta(days=refundable_days)), refund_percent=refund_percent)
    )
    await booking.CreateEvent(
        bpb.CreateEventRequest(
            event_id=event_id,
            display_name=name,
            kind=bpb.EVENT_KIND_CONCERT,
            starts_at=ts(now + timedelta(days=30)),
            max_seats_per_customer=max_seats_per_customer,
            refund_policy=policy,
            sections=[
                bpb.SectionSpec(
                    section_id="A",
                    display_name="Stalls",
                    kind=bpb.SECTION_KIND_SEATED,
                    price=bpb.Money(currency_code="EUR", amount_minor=4500),
                )
            ],
        )
    )
    await booking.LoadInventory(
        bpb.LoadInventoryRequest(
            event_id=event_id,
            rows=[bpb.SeatRowSpec(section_id="A", row_label="K", first_seat_number=1, seat_count=seats)],
        )
    )
    await queue.CreateEventQueue(
        qpb.CreateEventQueueRequest(
            config=qpb.EventQueueConfig(
                event_id=event_id,
                opens_at=ts(now - timedelta(seconds=1)),
                admission_rate_per_second=100,
                max_active_shoppers=10,
            )
        )
    )
    return event_id


async def checkout_event(addresses: Mapping[str, str], stores: Stores, *, refund_percent: int | None = None) -> int:
    """:func:`open_event` of four seats, made as the edge over the whole
    mesh's ``addresses``."""
    async with (
        edge_mesh_client(stores, addresses["queue"]) as queue,
        edge_mesh_client(stores, addresses["booking"]) as booking,
    ):
        return await open_event(
            booking.stub(bpb_grpc.BookingServiceStub),
            queue.stub(qpb_grpc.QueueServiceStub),
            name="Checkout",
            seats=4,
            refund_percent=refund_percent,
        )


async def admitted(queue: Any, event_id: int, *, customer_id: str = "", metadata: Any = None) -> str:
    """Join ``event_id``'s queue and wait until admitted; the access token.
    ``customer_id`` goes in the requests, ``metadata`` with them (the edge
    asserting the fan: then the request's customer may be left empty)."""
    joined = await queue.JoinQueue(qpb.JoinQueueRequest(event_id=event_id, customer_id=customer_id), metadata=metadata)
    assert joined.position.state in (qpb.QUEUE_STATE_WAITING, qpb.QUEUE_STATE_ADMITTED)

    async def token() -> str | None:
        reply = await queue.GetQueuePosition(
            qpb.GetQueuePositionRequest(event_id=event_id, customer_id=customer_id), metadata=metadata
        )
        position = reply.position
        return position.access_token if position.state == qpb.QUEUE_STATE_ADMITTED and position.access_token else None

    return await eventually(token, f"{customer_id or 'the fan'} admitted")


async def start_payment(
    queue: qpb_grpc.QueueServiceAsyncStub,
    booking: bpb_grpc.BookingServiceAsyncStub,
    payment: ppb_grpc.PaymentServiceAsyncStub,
    event_id: int,
    customer_id: str,
    payment_method: str = "pm_card_ok",
) -> ppb.StartPaymentResponse:
    """The fan's checkout up to StartPayment, as the edge calls it for them:
    join, admitted, two seats held, the payment started (by default with a
    card that pays)."""
    fan: Any = as_fan(customer_id)
    access_token = await admitted(queue, event_id, customer_id=customer_id, metadata=fan)
    held = await booking.HoldSeats(
        bpb.HoldSeatsRequest(
            access_token=access_token,
            event_id=event_id,
            best_available=bpb.BestAvailableSelection(section_id="A", quantity=2),
        ),
        metadata=fan,
    )
    started: ppb.StartPaymentResponse = await payment.StartPayment(
        ppb.StartPaymentRequest(access_token=access_token, hold_id=held.hold.hold_id, payment_method=payment_method),
        metadata=fan,
    )
    return started
