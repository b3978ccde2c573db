"""Money and tickets agree: the attacks of the trust-boundary issue on
PaymentService, each refused. Idempotency keys belong to their payment (a
key used on a made-up payment id poisons nobody); a webhook whose money is
not the payment's moves nothing; a refund of a confirmed booking cancels it
through BookingService under the event's refund policy (tickets void, seats
back) or is refused; a missing or oversized token is UNAUTHENTICATED as at
BookingService."""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any

import grpc
import pytest

from boxoffice import db
from boxoffice.caller import CUSTOMER_METADATA_KEY
from boxoffice.errors import BoxofficeError, from_rpc_error
from gen.boxoffice.booking.v1 import booking_service_pb2 as bpb
from gen.boxoffice.payment.v1 import payment_service_pb2 as pb
from payment_svc import app as payment_app
from payment_svc.adapters.sandbox import PM_DECLINED, PM_OK
from payment_svc.idempotency import fingerprint
from payment_svc.model import RefundOrder, RefundSource
from payment_svc.webhooks import WebhookEvent
from tests.booking.harness import create_event, hold_request, query, seated
from tests.booking.harness import snapshot as booking_snapshot
from tests.payment.harness import FakeBooking, PaymentStack, new_event_id, snapshot
from tests.payment.test_proof import Mesh, mesh_of
from tests.support import Stores


def _token(stack: PaymentStack, event_id: int, customer: str) -> str:
    return stack.tokens.issue(event_id=event_id, customer_id=customer, ttl_seconds=600)[0]


async def _error(call: Any) -> BoxofficeError:
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await call
    return from_rpc_error(caught.value)


async def _started(
    stack: PaymentStack, booking: FakeBooking, method: str = PM_OK, customer: str = "alice"
) -> tuple[str, pb.Payment]:
    event_id = new_event_id()
    hold_id = booking.add_hold(event_id=event_id, customer_id=customer)
    reply = await stack.stub.StartPayment(
        pb.StartPaymentRequest(access_token=_token(stack, event_id, customer), hold_id=hold_id, payment_method=method)
    )
    return hold_id, reply.payment


async def _sold(stack: PaymentStack, booking: FakeBooking) -> tuple[str, pb.Payment]:
    hold_id, payment = await _started(stack, booking)
    reply = await stack.stub.ConfirmPayment(
        pb.ConfirmPaymentRequest(payment_id=payment.payment_id, idempotency_key=f"c-{payment.payment_id}")
    )
    assert reply.payment.state == pb.PAYMENT_STATE_SUCCEEDED
    return hold_id, reply.payment


# -- idempotency keys belong to their payment


async def test_a_key_used_on_a_made_up_payment_does_not_poison_the_customers_confirm(
    stack: PaymentStack, booking: FakeBooking
) -> None:
    """The issue's attack: ConfirmPayment of a random payment id with key
    `confirm-1` stored NOT_FOUND, and the real customer's confirm with
    `confirm-1` then got IDEMPOTENCY_KEY_REUSED."""
    key = f"confirm-1-{uuid.uuid4().hex[:8]}"  # one test run's "confirm-1"
    err = await _error(
        stack.stub.ConfirmPayment(pb.ConfirmPaymentRequest(payment_id=str(uuid.uuid4()), idempotency_key=key))
    )
    assert err.code == grpc.StatusCode.NOT_FOUND and err.reason == "PAYMENT_NOT_FOUND"
    _, payment = await _started(stack, booking)
    reply = await stack.stub.ConfirmPayment(
        pb.ConfirmPaymentRequest(payment_id=payment.payment_id, idempotency_key=key)
    )
    assert reply.payment.state == pb.PAYMENT_STATE_SUCCEEDED
    # Another customer using the same key is not refused either ...
    _, other = await _started(stack, booking, customer="bob")
    again = await stack.stub.ConfirmPayment(pb.ConfirmPaymentRequest(payment_id=other.payment_id, idempotency_key=key))
    assert again.payment.payment_id == other.payment_id and again.payment.state == pb.PAYMENT_STATE_SUCCEEDED
    assert booking.confirm_calls == 2
    # ... while one customer reusing a key for another of their payments is.
    _, second = await _started(stack, booking)
    err = await _error(
        stack.stub.ConfirmPayment(pb.ConfirmPaymentRequest(payment_id=second.payment_id, idempotency_key=key))
    )
    assert err.reason == "IDEMPOTENCY_KEY_REUSED"
    # The key still replays its first answer on its own payment.
    replay = await stack.stub.ConfirmPayment(
        pb.ConfirmPaymentRequest(payment_id=payment.payment_id, idempotency_key=key)
    )
    assert replay.SerializeToString(deterministic=True) == reply.SerializeToString(deterministic=True)


async def test_a_refund_request_id_is_scoped_to_its_payment(stack: PaymentStack, booking: FakeBooking) -> None:
    request_id = f"refund-1-{uuid.uuid4().hex[:8]}"
    err = await _error(
        stack.stub.RefundPayment(pb.RefundPaymentRequest(payment_id=str(uuid.uuid4()), request_id=request_id))
    )
    assert err.code == grpc.StatusCode.NOT_FOUND
    _, payment = await _sold(stack, booking)
    reply = await stack.stub.RefundPayment(
        pb.RefundPaymentRequest(payment_id=payment.payment_id, request_id=request_id)
    )
    assert reply.payment.state == pb.PAYMENT_STATE_REFUNDED


def _migration_sql() -> str:
    (migration,) = [m for m in payment_app.migrations() if m.name == "0003_idempotency_keys_per_customer.sql"]
    return migration.sql


async def test_keys_stored_before_the_scoping_keep_their_answers(stack: PaymentStack, booking: FakeBooking) -> None:
    """The migration moves a key stored under the old, global scope to the
    scope it has now: its payment's customer, or the payment id that no
    payment has (the poison of the issue, which then poisons nobody)."""
    _, payment = await _started(stack, booking)
    confirm_key, poison_key = f"legacy-{uuid.uuid4().hex}", f"legacy-{uuid.uuid4().hex}"
    missing = str(uuid.uuid4())
    stored = pb.ConfirmPaymentResponse(payment=payment).SerializeToString(deterministic=True)
    not_found = (
        b'{"message":"no such payment","reason":"PAYMENT_NOT_FOUND","metadata":{"payment_id":"%s"}}' % missing.encode()
    )
    async with db.transaction(stack.pool) as conn:
        for key, fp, status, response in (
            (confirm_key, fingerprint(payment.payment_id), 0, stored),
            (poison_key, fingerprint(missing), 5, not_found),
        ):
            await conn.execute(
                "INSERT INTO payment_idempotency_keys (scope, key, fingerprint, state, status_code, response, expires_at)"
                " VALUES ('ConfirmPayment', %s, %s, 'DONE', %s, %s, now() + interval '1 day')",
                (key, fp, status, response),
            )
        await conn.execute(_migration_sql())
        cur = await conn.execute(
            "SELECT key, scope FROM payment_idempotency_keys WHERE key = ANY(%s)", ([confirm_key, poison_key],)
        )
        rows = dict(await cur.fetchall())
    assert rows == {confirm_key: "ConfirmPayment/customer:alice", poison_key: f"ConfirmPayment/payment:{missing}"}
    # The legacy answer replays (the payment was CAPTURED then; it is not confirmed again) ...
    replay = await stack.stub.ConfirmPayment(
        pb.ConfirmPaymentRequest(payment_id=payment.payment_id, idempotency_key=confirm_key)
    )
    assert replay.SerializeToString(deterministic=True) == stored
    assert booking.confirm_calls == 0
    err = await _error(
        stack.stub.ConfirmPayment(pb.ConfirmPaymentRequest(payment_id=missing, idempotency_key=poison_key))
    )
    assert err.reason == "PAYMENT_NOT_FOUND"
    # ... and the poisoned key is free for the customer.
    _, mine = await _started(stack, booking)
    fresh = await stack.stub.ConfirmPayment(
        pb.ConfirmPaymentRequest(payment_id=mine.payment_id, idempotency_key=poison_key)
    )
    assert fresh.payment.state == pb.PAYMENT_STATE_SUCCEEDED


# -- webhooks carry the payment's money


def _forged(event: WebhookEvent, **data: Any) -> WebhookEvent:
    return dataclasses.replace(event, event_id="evt_forged_" + uuid.uuid4().hex[:12], data={**event.data, **data})


async def test_a_signed_webhook_with_another_amount_moves_nothing(stack: PaymentStack, booking: FakeBooking) -> None:
    """The issue's attack: a `charge.succeeded` for amount 1, signed with the
    configured secret (the development one, then), moved a DECLINED payment
    to REFUND_REQUIRED."""
    hold_id, payment = await _started(stack, booking, PM_DECLINED)
    assert payment.state == pb.PAYMENT_STATE_DECLINED
    (failed,) = [e for e in await stack.provider.events(payment.payment_id) if e.type == "charge.failed"]
    before = await snapshot(stack.pool, [hold_id])
    forgeries = [
        _forged(dataclasses.replace(failed, type="charge.succeeded"), status="captured", amount=1),
        _forged(dataclasses.replace(failed, type="charge.succeeded"), status="captured", currency="USD"),
        _forged(dataclasses.replace(failed, type="charge.succeeded"), status="captured", amount="5000"),
    ]
    for forged in forgeries:
        body = forged.to_body()
        err = await _error(
            stack.stub.HandleProviderWebhook(
                pb.HandleProviderWebhookRequest(signature=stack.provider.sign(body), body=body)
            )
        )
        assert err.code == grpc.StatusCode.INVALID_ARGUMENT and err.reason == "WEBHOOK_AMOUNT_MISMATCH"
        assert err.metadata["payment_id"] == payment.payment_id
    assert await snapshot(stack.pool, [hold_id]) == before
    got = await stack.stub.GetPayment(pb.GetPaymentRequest(payment_id=payment.payment_id))
    assert got.payment.state == pb.PAYMENT_STATE_DECLINED and got.payment.refunded.amount_minor == 0
    refused = stack.registry.get_sample_value(
        "boxoffice_webhooks_refused_total", {"type": "charge.succeeded", "reason": "WEBHOOK_AMOUNT_MISMATCH"}
    )
    assert refused == 3
    # The genuine event of the same charge still applies.
    body = failed.to_body()
    genuine = await stack.stub.HandleProviderWebhook(
        pb.HandleProviderWebhookRequest(signature=stack.provider.sign(body), body=body)
    )
    assert genuine.payment.state == pb.PAYMENT_STATE_DECLINED


async def test_a_refund_webhook_with_another_amount_finishes_nothing(stack: PaymentStack, booking: FakeBooking) -> None:
    hold_id, payment = await _sold(stack, booking)
    await stack.stub.RefundPayment(
        pb.RefundPaymentRequest(payment_id=payment.payment_id, request_id=f"r-{payment.payment_id}")
    )
    (refunded,) = [e for e in await stack.provider.events(payment.payment_id) if e.type == "charge.refunded"]
    async with db.transaction(stack.pool) as conn:  # as if the provider's answer had been lost
        await conn.execute("UPDATE refunds SET state = 'PENDING' WHERE payment_id = %s", (payment.payment_id,))
    before = await snapshot(stack.pool, [hold_id])
    forged = _forged(refunded, refund={**refunded.data["refund"], "amount": 1})
    body = forged.to_body()
    err = await _error(
        stack.stub.HandleProviderWebhook(
            pb.HandleProviderWebhookRequest(signature=stack.provider.sign(body), body=body)
        )
    )
    assert err.reason == "WEBHOOK_AMOUNT_MISMATCH"
    assert await snapshot(stack.pool, [hold_id]) == before


# -- a refund of a confirmed booking goes through its cancellation


async def test_a_refund_cancels_the_booking_under_its_policy(stack: PaymentStack, booking: FakeBooking) -> None:
    booking.refund_percent = 50
    hold_id, payment = await _sold(stack, booking)
    reply = await stack.stub.RefundPayment(
        pb.RefundPaymentRequest(payment_id=payment.payment_id, request_id=f"r-{payment.payment_id}", reason="ill")
    )
    assert reply.payment.state == pb.PAYMENT_STATE_PARTIALLY_REFUNDED
    assert reply.payment.refunded.amount_minor == 2500
    assert booking.holds[hold_id].view.state.value == "CANCELLED" and booking.cancel_calls == 1
    rows = await snapshot(stack.pool, [hold_id])
    assert [(r[3], r[6], r[7]) for r in rows["refunds"]] == [(2500, "BOOKING_CANCELLED", "SUCCEEDED")]
    assert [r[3] for r in rows["outbox"]] == ["BookingConfirmed", "BookingCancelled"]
    # The BookingCancelled event's refund, as the cancellation consumer
    # orders it, finds the refund RefundPayment made: nothing more goes back.
    event_key = f"booking-cancelled:{rows['outbox'][1][0]}"
    await stack.parts.handler.refund(
        RefundOrder(payment.payment_id, event_key, 2500, "EUR", "booking cancelled", RefundSource.BOOKING_CANCELLED)
    )
    after = await stack.stub.GetPayment(pb.GetPaymentRequest(payment_id=payment.payment_id))
    assert after.payment.refunded.amount_minor == 2500
    assert await stack.provider.refunds_of(f"hold_{hold_id}_attempt_1") == 1
    # Once cancelled, what is left is a plain refund (an operator's call).
    rest = await stack.stub.RefundPayment(
        pb.RefundPaymentRequest(payment_id=payment.payment_id, request_id=f"rest-{payment.payment_id}")
    )
    assert rest.payment.state == pb.PAYMENT_STATE_REFUNDED and booking.cancel_calls == 1


async def test_a_refund_the_policy_does_not_grant_is_refused(stack: PaymentStack, booking: FakeBooking) -> None:
    booking.refund_percent = 0
    hold_id, payment = await _sold(stack, booking)
    before = await snapshot(stack.pool, [hold_id])
    err = await _error(
        stack.stub.RefundPayment(pb.RefundPaymentRequest(payment_id=payment.payment_id, request_id="no"))
    )
    assert err.code == grpc.StatusCode.FAILED_PRECONDITION and err.reason == "REFUND_NOT_ALLOWED"
    assert err.metadata == {"payment_id": payment.payment_id, "hold_id": hold_id}
    assert await snapshot(stack.pool, [hold_id]) == before
    assert booking.holds[hold_id].view.state.value == "CONFIRMED"
    assert await stack.provider.charged_minor(f"hold_{hold_id}_attempt_1") == 5000


# -- the same against the real BookingService, relay and issuer


@pytest.fixture
async def mesh(stores: Stores) -> AsyncIterator[Mesh]:
    async with mesh_of(stores) as opened:
        yield opened


async def _sold_in_mesh(mesh: Mesh, customer: str, refund_percent: int) -> tuple[bpb.Event, bpb.Hold, pb.Payment]:
    event = await create_event(
        mesh.booking,
        [seated("A")],
        [("A", "1", 4)],
        refund_percent=refund_percent,
        refundable_for=timedelta(days=1),
    )
    reply = await mesh.booking.stub.HoldSeats(
        hold_request(mesh.token(customer, event.event_id), event.event_id, section="A", quantity=2)
    )
    hold: bpb.Hold = reply.hold
    started = await mesh.payment.stub.StartPayment(
        pb.StartPaymentRequest(
            access_token=mesh.token(customer, event.event_id), hold_id=hold.hold_id, payment_method=PM_OK
        )
    )
    confirmed = await mesh.payment.stub.ConfirmPayment(
        pb.ConfirmPaymentRequest(payment_id=started.payment.payment_id, idempotency_key="confirm-1")
    )
    assert confirmed.payment.state == pb.PAYMENT_STATE_SUCCEEDED
    await mesh.issue_all()
    return event, hold, confirmed.payment


async def _tickets_valid(mesh: Mesh, hold_id: str) -> list[bool]:
    rows = await query(
        mesh.booking, "SELECT voided_at IS NULL FROM tickets WHERE hold_id = %s ORDER BY unit", (hold_id,)
    )
    return [bool(r[0]) for r in rows]


async def test_refund_and_keep_the_seat_is_gone(mesh: Mesh) -> None:
    """The issue's attack: RefundPayment refunded a sale and its tickets
    stayed VALID. Now the booking is cancelled under its policy (80 %): the
    tickets are void, the seats for sale again, the money back once."""
    event, hold, payment = await _sold_in_mesh(mesh, "mallory", refund_percent=80)
    assert await _tickets_valid(mesh, hold.hold_id) == [True, True]
    reply = await mesh.payment.stub.RefundPayment(
        pb.RefundPaymentRequest(payment_id=payment.payment_id, request_id="refund-1", reason="changed my mind")
    )
    assert reply.payment.state == pb.PAYMENT_STATE_PARTIALLY_REFUNDED
    assert reply.payment.refunded.amount_minor == hold.amount.amount_minor * 80 // 100
    await mesh.issue_all()  # the BookingCancelled event: the issuer voids, the refund consumer finds the refund
    assert await _tickets_valid(mesh, hold.hold_id) == [False, False]
    seats = await query(
        mesh.booking,
        "SELECT status FROM seats WHERE event_id = %s AND seat_id = ANY(%s)",
        (event.event_id, [s.seat_id for s in hold.seats]),
    )
    assert [r[0] for r in seats] == ["AVAILABLE", "AVAILABLE"]
    states = await query(mesh.booking, "SELECT state FROM holds WHERE hold_id = %s", (hold.hold_id,))
    assert states == [("CANCELLED",)]
    key = f"hold_{hold.hold_id}_attempt_1"
    assert await mesh.payment.provider.refunds_of(key) == 1
    assert (
        await mesh.payment.provider.charged_minor(key) == hold.amount.amount_minor - reply.payment.refunded.amount_minor
    )
    # The seats sell again, and ticket again.
    again = await mesh.booking.stub.HoldSeats(
        hold_request(mesh.token("zoe", event.event_id), event.event_id, seats=[s.seat_id for s in hold.seats])
    )
    assert len(again.hold.seats) == 2


async def test_a_refund_the_policy_refuses_leaves_the_sale_whole(mesh: Mesh) -> None:
    event, hold, payment = await _sold_in_mesh(mesh, "olga", refund_percent=0)
    before = await booking_snapshot(mesh.booking, event.event_id)
    err = await _error(
        mesh.payment.stub.RefundPayment(pb.RefundPaymentRequest(payment_id=payment.payment_id, request_id="refund-1"))
    )
    assert (err.code, err.reason) == (grpc.StatusCode.FAILED_PRECONDITION, "REFUND_NOT_ALLOWED")
    await mesh.issue_all()
    assert await booking_snapshot(mesh.booking, event.event_id) == before
    assert await _tickets_valid(mesh, hold.hold_id) == [True, True]
    got = await mesh.payment.stub.GetPayment(pb.GetPaymentRequest(payment_id=payment.payment_id))
    assert got.payment.state == pb.PAYMENT_STATE_SUCCEEDED and got.payment.refunded.amount_minor == 0


async def test_a_refund_never_cancels_a_booking_for_nothing(mesh: Mesh) -> None:
    """BookingService's side of REFUND_NOT_ALLOWED: a cancel that must
    refund, under a policy that grants nothing, is refused and changes
    nothing."""
    event, hold, _ = await _sold_in_mesh(mesh, "nina", refund_percent=0)
    before = await booking_snapshot(mesh.booking, event.event_id)
    with pytest.raises(BoxofficeError) as caught:
        await mesh.booking.store.cancel_booking(
            hold_id=uuid.UUID(hold.hold_id),
            customer_id="nina",
            reason="refund",
            now=datetime.fromtimestamp(mesh.booking.clock.now(), UTC),
            refund_required=True,
        )
    assert (caught.value.code, caught.value.reason) == (grpc.StatusCode.FAILED_PRECONDITION, "REFUND_NOT_ALLOWED")
    assert await booking_snapshot(mesh.booking, event.event_id) == before
    assert await _tickets_valid(mesh, hold.hold_id) == [True, True]


# -- token errors as at BookingService


@pytest.mark.parametrize(("token", "reason"), [("", "TOKEN_MISSING"), ("v1." + "x" * 1100, "TOKEN_INVALID")])
async def test_a_missing_or_oversized_token_is_unauthenticated(stack: PaymentStack, token: str, reason: str) -> None:
    calls = [
        stack.stub.StartPayment(
            pb.StartPaymentRequest(access_token=token, hold_id=str(uuid.uuid4()), payment_method=PM_OK)
        ),
    ]
    if token:
        # Through the edge a fan's own tickets need no token; one that is
        # there must be sane.
        calls.append(stack.stub.ListTickets(pb.ListTicketsRequest(access_token=token, event_id=1)))
    for call in calls:
        err = await _error(call)
        assert (err.code, err.reason) == (grpc.StatusCode.UNAUTHENTICATED, reason)
    assert stack.provider.charge_calls == 0


async def test_through_the_edge_a_fans_own_tickets_need_no_token(stack: PaymentStack) -> None:
    """Tickets outlive the shopping session: the edge lists the fan it
    asserts without a token; asserting nobody is refused."""
    listed = await stack.stub.ListTickets(pb.ListTicketsRequest(event_id=1))
    assert list(listed.tickets) == []
    err = await _error(
        stack.stub.ListTickets(pb.ListTicketsRequest(event_id=1), metadata=((CUSTOMER_METADATA_KEY, ""),))
    )
    assert (err.code, err.reason) == (grpc.StatusCode.UNAUTHENTICATED, "CUSTOMER_NOT_ASSERTED")
