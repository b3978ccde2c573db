"""The issue's proof, against a real BookingService and PaymentService on
loopback, real Postgres and Redis, the relay and the issuer: one key and 50
concurrent confirms, a webhook twenty times, money after the hold was resold,
and an audit that every sale has exactly one ticket and every ticket a sale."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import uuid
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import grpc
import pytest
from prometheus_client import CollectorRegistry

from booking_svc.jobs.relay import OutboxRelay
from booking_svc.metrics import RelayMetrics
from boxoffice.errors import from_rpc_error
from boxoffice.streams import StreamConsumer
from gen.boxoffice.booking.v1 import booking_service_pb2 as bpb
from gen.boxoffice.payment.v1 import payment_service_pb2 as pb
from payment_svc.adapters.idempotency import PgIdempotencyStore
from payment_svc.adapters.sandbox import PM_DECLINED, PM_OK
from payment_svc.jobs.cancellations import CANCELLATION_GROUP
from payment_svc.jobs.issuer import ISSUER_GROUP
from payment_svc.ports import IdempotencyStore
from tests.booking.harness import Booking, booking_server, create_event, general, hold_request, query, seated
from tests.payment.harness import (
    PaymentStack,
    age,
    confirms_all_in_the_window,
    issuers,
    open_pool,
    open_redis,
    payment_stack,
    race_confirms,
)
from tests.payment.unsafe import NoInFlightClaimStore
from tests.support import Stores


@dataclass
class Mesh:
    booking: Booking
    payment: PaymentStack
    relay: OutboxRelay
    issuer: StreamConsumer
    refunds: StreamConsumer

    def token(self, customer: str, event_id: int) -> str:
        return self.booking.token(customer, event_id)

    async def issue_all(self) -> None:
        """Relay every committed outbox row and consume the stream dry."""
        while await self.relay.publish_once() > 0:
            pass
        for consumer in (self.issuer, self.refunds):
            while await consumer.read_once(block_ms=0) > 0:
                pass


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextlib.asynccontextmanager
async def mesh_of(
    stores: Stores,
    *,
    idempotency_store: Callable[..., IdempotencyStore] = PgIdempotencyStore,
    payment_environ: Mapping[str, str] | None = None,
) -> AsyncIterator[Mesh]:
    """BookingService and PaymentService on loopback, sharing a clock the
    test moves, PaymentService calling BookingService over gRPC as its
    process does; booking's relay and the two consumers of its stream (the
    issuer, the cancellation refunds), driven by the test.
    ``idempotency_store`` replaces PaymentService's store of request keys;
    ``payment_environ`` adds to PaymentService's settings."""
    stream = f"ticket-issued-proof-{uuid.uuid4().hex[:12]}"
    port = _free_port()
    async with (
        booking_server(stores, environ={"BOXOFFICE_GRPC_PORT": str(port)}) as booking,
        payment_stack(
            stores,
            environ={
                "BOXOFFICE_BOOKING_ADDR": f"127.0.0.1:{port}",
                "BOXOFFICE_TICKET_STREAM": stream,
                "BOXOFFICE_DB_POOL_MAX": "20",
                **(payment_environ or {}),
            },
            clock=booking.clock,
            idempotency_store=idempotency_store,
        ) as payment,
        issuers(stores, stream) as make_issuer,
        open_pool(stores, max_size=20) as pool,
        open_redis(stores) as redis_conn,
    ):
        relay = OutboxRelay(
            pool=pool,
            redis=redis_conn,
            stream=stream,
            groups=[ISSUER_GROUP, CANCELLATION_GROUP],
            metrics=RelayMetrics.create(CollectorRegistry()),
        )
        await relay.prepare()
        issuer = (await make_issuer("issuer-1")).consumer
        yield Mesh(booking, payment, relay, issuer, payment.parts.cancellations)


@pytest.fixture
async def mesh(stores: Stores) -> AsyncIterator[Mesh]:
    async with mesh_of(stores) as opened:
        yield opened


async def _hold(mesh: Mesh, customer: str, event_id: int, **selection: Any) -> bpb.Hold:
    reply = await mesh.booking.stub.HoldSeats(hold_request(mesh.token(customer, event_id), event_id, **selection))
    hold: bpb.Hold = reply.hold
    return hold


async def _start(mesh: Mesh, customer: str, hold: bpb.Hold, method: str = PM_OK) -> pb.Payment:
    reply = await mesh.payment.stub.StartPayment(
        pb.StartPaymentRequest(
            access_token=mesh.token(customer, hold.event_id), hold_id=hold.hold_id, payment_method=method
        )
    )
    payment: pb.Payment = reply.payment
    return payment


async def _confirm(mesh: Mesh, payment_id: str, key: str | None = None) -> pb.Payment:
    reply = await mesh.payment.stub.ConfirmPayment(
        pb.ConfirmPaymentRequest(payment_id=payment_id, idempotency_key=key or f"confirm-{payment_id}")
    )
    payment: pb.Payment = reply.payment
    return payment


async def _outbox(mesh: Mesh, hold_id: str) -> list[str]:
    rows = await query(mesh.booking, "SELECT type FROM outbox WHERE aggregateid = %s ORDER BY seq", (hold_id,))
    return [r[0] for r in rows]


async def _tickets(mesh: Mesh, event_id: int) -> list[tuple[Any, ...]]:
    return await query(
        mesh.booking,
        "SELECT hold_id::text, unit, seat_id, voided_at IS NULL FROM tickets WHERE event_id = %s ORDER BY 1, 2",
        (event_id,),
    )


async def _audit(mesh: Mesh, event_id: int) -> None:
    """Every sale has exactly one valid ticket per seat (or place); every
    valid ticket is a sale. Sales as BookingService tells them (its API)."""
    confirmed: list[bpb.Hold] = []
    page_token = ""
    while True:
        # Every customer's holds: the operator's listing.
        page = await mesh.booking.operator.ListHolds(
            bpb.ListHoldsRequest(event_id=event_id, page_size=1000, page_token=page_token)
        )
        confirmed.extend(h for h in page.holds if h.state == bpb.HOLD_STATE_CONFIRMED)
        page_token = page.next_page_token
        if not page_token:
            break
    valid = [t for t in await _tickets(mesh, event_id) if t[3]]
    sold_seats = sorted((h.hold_id, s.seat_id) for h in confirmed for s in h.seats)
    assert sorted((t[0], t[2]) for t in valid if t[2] is not None) == sold_seats
    per_hold: dict[str, int] = {}
    for hold_id, *_ in valid:
        per_hold[hold_id] = per_hold.get(hold_id, 0) + 1
    assert per_hold == {h.hold_id: h.quantity for h in confirmed}
    event = await mesh.booking.stub.GetEvent(bpb.GetEventRequest(event_id=event_id))
    assert sum(section.sold for section in event.event.sections) == len(valid)


async def test_fifty_concurrent_confirms_with_one_key(mesh: Mesh) -> None:
    event = await create_event(mesh.booking, [seated("A")], [("A", "1", 10)])
    hold = await _hold(mesh, "ann", event.event_id, section="A", quantity=2)
    payment = await _start(mesh, "ann", hold)
    assert payment.state == pb.PAYMENT_STATE_CAPTURED
    request = pb.ConfirmPaymentRequest(payment_id=payment.payment_id, idempotency_key=f"one-{payment.payment_id}")
    race = await race_confirms(mesh.payment, request)  # every duplicate answers while the first is in the window
    assert len(race.answers) == 1
    assert {(e.code, e.reason) for e in race.refused} == {(grpc.StatusCode.ABORTED, "IDEMPOTENCY_KEY_IN_FLIGHT")}
    first = race.answers[0].SerializeToString(deterministic=True)
    assert all(r.SerializeToString(deterministic=True) == first for r in race.retried)
    assert race.answers[0].payment.state == pb.PAYMENT_STATE_SUCCEEDED and race.executions == 1
    # One payment, one sale, one outbox row, one ticket per seat.
    payments = await query(mesh.booking, "SELECT count(*) FROM payments WHERE hold_id = %s", (hold.hold_id,))
    assert payments[0][0] == 1
    assert await _outbox(mesh, hold.hold_id) == ["BookingConfirmed"]
    assert await mesh.payment.provider.charged_minor(f"hold_{hold.hold_id}_attempt_1") == hold.amount.amount_minor
    await mesh.issue_all()
    await mesh.issue_all()  # nothing more
    assert len(await _tickets(mesh, event.event_id)) == 2
    await _audit(mesh, event.event_id)


async def test_control_without_the_in_flight_claim_every_duplicate_reaches_booking(stores: Stores) -> None:
    """The same fifty confirms against a PaymentService whose keys have no
    in-flight claim (tests/payment/unsafe.py), with the real BookingService:
    all fifty run the confirm and are in its window at once, where the proof
    above has one run and forty-nine ABORTED; the proof would fail. What
    still makes one sale of them is BookingService's own key (the confirm's,
    derived from the payment): one confirmation, one BookingConfirmed."""
    # Its calls wait in the window until all fifty are there, however long a
    # loaded machine takes.
    async with mesh_of(
        stores, idempotency_store=NoInFlightClaimStore, payment_environ={"BOXOFFICE_DEFAULT_DEADLINE_SECONDS": "90"}
    ) as mesh:
        event = await create_event(mesh.booking, [seated("A")], [("A", "1", 10)])
        hold = await _hold(mesh, "ann", event.event_id, section="A", quantity=2)
        payment = await _start(mesh, "ann", hold)
        request = pb.ConfirmPaymentRequest(payment_id=payment.payment_id, idempotency_key=f"one-{payment.payment_id}")
        answers, refused, executions = await confirms_all_in_the_window(mesh.payment, request)
        assert (executions, len(answers), refused) == (50, 50, [])
        assert {a.payment.state for a in answers} == {pb.PAYMENT_STATE_SUCCEEDED}
        confirmations = await query(
            mesh.booking, "SELECT count(*) FROM confirmations WHERE hold_id = %s", (hold.hold_id,)
        )
        assert confirmations[0][0] == 1
        assert await _outbox(mesh, hold.hold_id) == ["BookingConfirmed"]


async def test_a_webhook_delivered_twenty_times(mesh: Mesh) -> None:
    event = await create_event(mesh.booking, [general("GA", capacity=100)])
    hold = await _hold(mesh, "ben", event.event_id, section="GA", quantity=3)
    payment = await _start(mesh, "ben", hold)
    (succeeded,) = [e for e in await mesh.payment.provider.events(payment.payment_id) if e.type == "charge.succeeded"]
    body = succeeded.to_body()

    async def deliver() -> Any:
        return await mesh.payment.stub.HandleProviderWebhook(
            pb.HandleProviderWebhookRequest(signature=mesh.payment.provider.sign(body), body=body)
        )

    results = await asyncio.gather(*(deliver() for _ in range(20)), return_exceptions=True)
    answers = [r for r in results if not isinstance(r, BaseException)]
    refused = [r for r in results if isinstance(r, BaseException)]
    assert all(from_rpc_error(r).reason == "WEBHOOK_IN_FLIGHT" for r in refused if isinstance(r, grpc.RpcError))
    assert len(answers) + len(refused) == 20 and sum(not a.duplicate for a in answers) == 1
    for _ in refused:
        assert (await deliver()).duplicate
    final = await mesh.payment.stub.GetPayment(pb.GetPaymentRequest(payment_id=payment.payment_id))
    assert final.payment.state == pb.PAYMENT_STATE_SUCCEEDED
    assert await _outbox(mesh, hold.hold_id) == ["BookingConfirmed"]
    await mesh.issue_all()
    assert [t[1] for t in await _tickets(mesh, event.event_id)] == [1, 2, 3]
    await _audit(mesh, event.event_id)


async def test_payment_after_the_hold_expired_and_was_resold_is_refunded(mesh: Mesh) -> None:
    event = await create_event(mesh.booking, [seated("A")], [("A", "1", 4)])
    first = await _hold(mesh, "cat", event.event_id, section="A", quantity=1)
    seat = first.seats[0].seat_id
    payment = await _start(mesh, "cat", first)
    assert payment.state == pb.PAYMENT_STATE_CAPTURED
    # The customer vanishes past the hold's extended expiry; someone else
    # takes the seat.
    mesh.booking.clock.advance(timedelta(hours=2).total_seconds())
    second = await _hold(mesh, "dan", event.event_id, seats=[seat])
    assert [s.seat_id for s in second.seats] == [seat]
    late = await _confirm(mesh, payment.payment_id)
    assert late.state == pb.PAYMENT_STATE_REFUNDED and late.failure_reason == "HOLD_EXPIRED"
    assert late.refunded.amount_minor == late.amount.amount_minor
    assert await mesh.payment.provider.charged_minor(f"hold_{first.hold_id}_attempt_1") == 0
    kept = await mesh.booking.stub.GetHold(
        bpb.GetHoldRequest(access_token=mesh.token("dan", event.event_id), hold_id=second.hold_id)
    )
    assert kept.hold.state == bpb.HOLD_STATE_HELD and [s.seat_id for s in kept.hold.seats] == [seat]
    # The new holder pays and gets the seat's only ticket.
    paid = await _confirm(mesh, (await _start(mesh, "dan", second)).payment_id)
    assert paid.state == pb.PAYMENT_STATE_SUCCEEDED
    await mesh.issue_all()
    assert await _tickets(mesh, event.event_id) == [(second.hold_id, 1, seat, True)]
    await _audit(mesh, event.event_id)


async def test_every_sale_one_ticket_across_a_mixed_day(mesh: Mesh) -> None:
    """Paid by confirm, by webhook only, by the reconciler only, declined,
    expired, cancelled with a refund: the audit holds, and the cancelled
    booking's money comes back once."""
    event = await create_event(
        mesh.booking,
        [seated("A"), general("GA", capacity=50)],
        [("A", "1", 20)],
        refund_percent=50,
        refundable_for=timedelta(days=5),
    )
    holds = [await _hold(mesh, f"c{i}", event.event_id, section="A", quantity=2) for i in range(6)]
    holds.append(await _hold(mesh, "c6", event.event_id, section="GA", quantity=4))
    payments = [await _start(mesh, f"c{i}", h, PM_DECLINED if i == 3 else PM_OK) for i, h in enumerate(holds)]
    await _confirm(mesh, payments[0].payment_id)
    await _confirm(mesh, payments[6].payment_id)
    for event_ in await mesh.payment.provider.events(payments[1].payment_id):  # paid by its webhook
        body = event_.to_body()
        await mesh.payment.stub.HandleProviderWebhook(
            pb.HandleProviderWebhookRequest(signature=mesh.payment.provider.sign(body), body=body)
        )
    await age(mesh.payment.pool, payments[2].payment_id)  # no webhook, no confirm: reconciled
    await mesh.payment.reconciler.reconcile_once()
    await _confirm(mesh, payments[3].payment_id)  # declined
    # payments[4]: captured, never confirmed, and its hold resold after expiry.
    mesh.booking.clock.advance(timedelta(hours=2).total_seconds())
    resold = await _hold(mesh, "late", event.event_id, seats=[s.seat_id for s in holds[4].seats])
    assert (await _confirm(mesh, payments[4].payment_id)).state == pb.PAYMENT_STATE_REFUNDED
    # payments[5]: paid, then the booking is cancelled.
    await _confirm(mesh, payments[5].payment_id)
    cancelled = await mesh.booking.stub.CancelBooking(
        bpb.CancelBookingRequest(hold_id=holds[5].hold_id, customer_id="c5", reason="cannot come")
    )
    await mesh.issue_all()
    await mesh.issue_all()
    await _audit(mesh, event.event_id)
    states = {
        i: (await mesh.payment.stub.GetPayment(pb.GetPaymentRequest(payment_id=p.payment_id))).payment
        for i, p in enumerate(payments)
    }
    assert [states[i].state for i in range(7)] == [
        pb.PAYMENT_STATE_SUCCEEDED,
        pb.PAYMENT_STATE_SUCCEEDED,
        pb.PAYMENT_STATE_SUCCEEDED,
        pb.PAYMENT_STATE_DECLINED,
        pb.PAYMENT_STATE_REFUNDED,
        pb.PAYMENT_STATE_PARTIALLY_REFUNDED,
        pb.PAYMENT_STATE_SUCCEEDED,
    ]
    assert states[5].refunded.amount_minor == cancelled.refund_amount.amount_minor > 0
    tickets = await _tickets(mesh, event.event_id)
    assert {t[0] for t in tickets if not t[3]} == {holds[5].hold_id}  # the cancelled booking's, void
    assert resold.hold_id not in {t[0] for t in tickets}  # held, not sold
    refunds = await query(mesh.booking, "SELECT count(*) FROM refunds WHERE payment_id = %s", (states[5].payment_id,))
    assert refunds[0][0] == 1
