"""PaymentService on a real gRPC server and real Postgres, with the sandbox
provider and a BookingService stand-in: start, confirm, idempotency keys,
declines, timeouts, refunds, the reconciler."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import grpc
import pytest

from boxoffice import db
from boxoffice.errors import BoxofficeError, from_rpc_error
from gen.boxoffice.payment.v1 import payment_service_pb2 as pb
from payment_svc.adapters.sandbox import PM_DECLINED, PM_FAIL, PM_OK, PM_TIMEOUT
from payment_svc.ports import HoldState
from tests.payment.harness import (
    FakeBooking,
    PaymentStack,
    age,
    confirms_all_in_the_window,
    fake_booking,
    new_event_id,
    payment_stack,
    race_confirms,
    snapshot,
)
from tests.payment.unsafe import NoInFlightClaimStore
from tests.support import Stores


def _token(stack: PaymentStack, event_id: int, customer: str) -> str:
    return stack.tokens.issue(event_id=event_id, customer_id=customer, ttl_seconds=600)[0]


async def _error(call: Any) -> BoxofficeError:
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await call
    return from_rpc_error(caught.value)


async def _started(
    stack: PaymentStack, booking: FakeBooking, method: str = PM_OK, **hold: Any
) -> tuple[str, pb.Payment]:
    event_id = new_event_id()
    hold_id = booking.add_hold(event_id=event_id, customer_id="alice", **hold)
    reply = await stack.stub.StartPayment(
        pb.StartPaymentRequest(access_token=_token(stack, event_id, "alice"), hold_id=hold_id, payment_method=method)
    )
    return hold_id, reply.payment


async def _outbox_rows(stack: PaymentStack, hold_id: str) -> int:
    async with db.transaction(stack.pool) as conn:
        cur = await conn.execute("SELECT count(*) FROM outbox WHERE aggregateid = %s", (hold_id,))
        row = await cur.fetchone()
    return int(row[0]) if row else 0


async def test_start_captures_and_confirm_sells(stack: PaymentStack, booking: FakeBooking) -> None:
    hold_id, payment = await _started(stack, booking)
    assert payment.state == pb.PAYMENT_STATE_CAPTURED
    assert payment.amount.amount_minor == 5000 and payment.provider_payment_id.startswith("ch_")
    assert booking.extend_calls == 1
    reply = await stack.stub.ConfirmPayment(
        pb.ConfirmPaymentRequest(payment_id=payment.payment_id, idempotency_key=f"k-1-{payment.payment_id}")
    )
    assert reply.payment.state == pb.PAYMENT_STATE_SUCCEEDED
    assert booking.holds[hold_id].view.state == HoldState.CONFIRMED
    assert await _outbox_rows(stack, hold_id) == 1
    got = await stack.stub.GetPayment(pb.GetPaymentRequest(payment_id=payment.payment_id))
    assert got.payment.state == pb.PAYMENT_STATE_SUCCEEDED


async def test_start_twice_returns_the_live_payment(stack: PaymentStack, booking: FakeBooking) -> None:
    event_id = new_event_id()
    hold_id = booking.add_hold(event_id=event_id, customer_id="alice")
    token = _token(stack, event_id, "alice")
    request = pb.StartPaymentRequest(access_token=token, hold_id=hold_id, payment_method=PM_OK)
    replies = await asyncio.gather(*(stack.stub.StartPayment(request) for _ in range(10)))
    assert len({r.payment.payment_id for r in replies}) == 1
    assert stack.provider.charge_calls == 1
    assert await stack.provider.charged_minor(f"hold_{hold_id}_attempt_1") == 5000


async def test_start_refuses_another_customers_token(stack: PaymentStack, booking: FakeBooking) -> None:
    event_id = new_event_id()
    hold_id = booking.add_hold(event_id=event_id, customer_id="alice")
    before = await snapshot(stack.pool, [hold_id])
    err = await _error(
        stack.stub.StartPayment(
            pb.StartPaymentRequest(
                access_token=_token(stack, event_id, "mallory"), hold_id=hold_id, payment_method=PM_OK
            )
        )
    )
    assert err.code == grpc.StatusCode.PERMISSION_DENIED
    forged = _token(stack, event_id, "alice")[:-2] + "xx"
    err = await _error(
        stack.stub.StartPayment(pb.StartPaymentRequest(access_token=forged, hold_id=hold_id, payment_method=PM_OK))
    )
    assert err.code == grpc.StatusCode.UNAUTHENTICATED
    assert await snapshot(stack.pool, [hold_id]) == before
    assert stack.provider.charge_calls == 0


@pytest.mark.parametrize(
    ("request_fields", "field"),
    [
        ({"hold_id": "not-a-uuid", "payment_method": PM_OK}, "hold_id"),
        ({"hold_id": str(uuid.uuid4()), "payment_method": ""}, "payment_method"),
        ({"hold_id": str(uuid.uuid4()), "payment_method": "x" * 201}, "payment_method"),
    ],
)
async def test_start_bad_input_is_invalid_argument(
    stack: PaymentStack, request_fields: dict[str, str], field: str
) -> None:
    err = await _error(stack.stub.StartPayment(pb.StartPaymentRequest(access_token="t", **request_fields)))
    assert err.code == grpc.StatusCode.INVALID_ARGUMENT
    assert err.metadata["field"] == field
    assert stack.provider.charge_calls == 0


@pytest.mark.parametrize(
    ("method", "state", "reason"),
    [(PM_DECLINED, pb.PAYMENT_STATE_DECLINED, "card_declined"), (PM_FAIL, pb.PAYMENT_STATE_FAILED, "processing_error")],
)
async def test_declined_and_failed_charges(
    stack: PaymentStack, booking: FakeBooking, method: str, state: int, reason: str
) -> None:
    hold_id, payment = await _started(stack, booking, method)
    assert payment.state == state and payment.failure_reason == reason
    reply = await stack.stub.ConfirmPayment(
        pb.ConfirmPaymentRequest(payment_id=payment.payment_id, idempotency_key=f"k-{payment.payment_id}")
    )
    assert reply.payment.state == state
    assert booking.confirm_calls == 0 and await _outbox_rows(stack, hold_id) == 0
    # A new attempt with another card is a new payment with a new provider key.
    event_id = booking.holds[hold_id].view.event_id
    retry = await stack.stub.StartPayment(
        pb.StartPaymentRequest(access_token=_token(stack, event_id, "alice"), hold_id=hold_id, payment_method=PM_OK)
    )
    assert retry.payment.payment_id != payment.payment_id
    assert retry.payment.state == pb.PAYMENT_STATE_CAPTURED


async def test_timeout_stays_pending_until_the_provider_settles(stack: PaymentStack, booking: FakeBooking) -> None:
    hold_id, payment = await _started(stack, booking, PM_TIMEOUT)
    assert payment.state == pb.PAYMENT_STATE_PENDING
    # The charge settles at the provider 0.2 s after it was made; until the
    # provider says so, confirm answers a retryable error and stores nothing.
    for _ in range(100):
        try:
            reply = await stack.stub.ConfirmPayment(
                pb.ConfirmPaymentRequest(
                    payment_id=payment.payment_id, idempotency_key=f"same-key-{payment.payment_id}"
                )
            )
            break
        except grpc.aio.AioRpcError as err:
            assert from_rpc_error(err).reason == "PAYMENT_PROCESSING"
            await asyncio.sleep(0.05)
    assert reply.payment.state == pb.PAYMENT_STATE_SUCCEEDED
    assert await stack.provider.charged_minor(f"hold_{hold_id}_attempt_1") == 5000
    assert await _outbox_rows(stack, hold_id) == 1


async def test_confirm_replays_the_first_answer_and_refuses_other_parameters(
    stack: PaymentStack, booking: FakeBooking
) -> None:
    _, first = await _started(stack, booking)
    _, second = await _started(stack, booking)
    a = await stack.stub.ConfirmPayment(
        pb.ConfirmPaymentRequest(payment_id=first.payment_id, idempotency_key=f"key-a-{first.payment_id}")
    )
    b = await stack.stub.ConfirmPayment(
        pb.ConfirmPaymentRequest(payment_id=first.payment_id, idempotency_key=f"key-a-{first.payment_id}")
    )
    assert a.SerializeToString(deterministic=True) == b.SerializeToString(deterministic=True)
    err = await _error(
        stack.stub.ConfirmPayment(
            pb.ConfirmPaymentRequest(payment_id=second.payment_id, idempotency_key=f"key-a-{first.payment_id}")
        )
    )
    assert err.code == grpc.StatusCode.INVALID_ARGUMENT and err.reason == "IDEMPOTENCY_KEY_REUSED"
    still = await stack.stub.GetPayment(pb.GetPaymentRequest(payment_id=second.payment_id))
    assert still.payment.state == pb.PAYMENT_STATE_CAPTURED


async def test_confirm_replays_errors_too(stack: PaymentStack) -> None:
    missing = str(uuid.uuid4())
    first = await _error(
        stack.stub.ConfirmPayment(pb.ConfirmPaymentRequest(payment_id=missing, idempotency_key=f"e-{missing}"))
    )
    again = await _error(
        stack.stub.ConfirmPayment(pb.ConfirmPaymentRequest(payment_id=missing, idempotency_key=f"e-{missing}"))
    )
    assert first.code == again.code == grpc.StatusCode.NOT_FOUND
    assert (first.reason, first.metadata, first.message) == (again.reason, again.metadata, again.message)


async def test_concurrent_confirms_one_key_one_sale(stack: PaymentStack, booking: FakeBooking) -> None:
    hold_id, payment = await _started(stack, booking)
    request = pb.ConfirmPaymentRequest(payment_id=payment.payment_id, idempotency_key=f"race-{payment.payment_id}")
    # Every duplicate answers while the first is held inside the window.
    race = await race_confirms(stack, request)
    assert len(race.answers) == 1 and len(race.refused) == 49
    assert {(e.code, e.reason) for e in race.refused} == {(grpc.StatusCode.ABORTED, "IDEMPOTENCY_KEY_IN_FLIGHT")}
    first = race.answers[0].SerializeToString(deterministic=True)
    assert all(r.SerializeToString(deterministic=True) == first for r in race.retried)
    assert race.executions == 1 and booking.confirm_calls == 1
    assert race.answers[0].payment.state == pb.PAYMENT_STATE_SUCCEEDED
    assert await _outbox_rows(stack, hold_id) == 1


async def test_control_without_the_in_flight_marker_every_duplicate_confirms(stores: Stores) -> None:
    """Control: the same race against a PaymentService whose keys have no
    in-flight claim (tests/payment/unsafe.py): every duplicate runs the
    confirm, and none is refused. The assertions above (one execution,
    forty-nine ABORTED) would catch it."""
    # Its calls wait in the window until all fifty are there, however long a
    # loaded machine takes.
    async with payment_stack(
        stores,
        booking=fake_booking,
        idempotency_store=NoInFlightClaimStore,
        environ={"BOXOFFICE_DEFAULT_DEADLINE_SECONDS": "90"},
    ) as stack:
        assert isinstance(stack.booking, FakeBooking)
        _, payment = await _started(stack, stack.booking)
        request = pb.ConfirmPaymentRequest(payment_id=payment.payment_id, idempotency_key=f"race-{payment.payment_id}")
        answers, refused, executions = await confirms_all_in_the_window(stack, request)
        assert (executions, len(answers), refused) == (50, 50, [])
        assert stack.booking.confirm_calls == 50


async def test_paid_after_the_hold_is_gone_is_refunded(stack: PaymentStack, booking: FakeBooking) -> None:
    hold_id, payment = await _started(stack, booking)
    booking.set_state(hold_id, HoldState.EXPIRED)
    reply = await stack.stub.ConfirmPayment(
        pb.ConfirmPaymentRequest(payment_id=payment.payment_id, idempotency_key=f"x-{payment.payment_id}")
    )
    assert reply.payment.state == pb.PAYMENT_STATE_REFUNDED
    assert reply.payment.failure_reason == "HOLD_EXPIRED"
    assert reply.payment.refunded.amount_minor == 5000
    assert await stack.provider.charged_minor(f"hold_{hold_id}_attempt_1") == 0
    assert await _outbox_rows(stack, hold_id) == 0


async def test_refunds_partial_full_replayed_and_bounded(stack: PaymentStack, booking: FakeBooking) -> None:
    hold_id, payment = await _started(stack, booking)
    await stack.stub.ConfirmPayment(
        pb.ConfirmPaymentRequest(payment_id=payment.payment_id, idempotency_key=f"c-{payment.payment_id}")
    )
    part = pb.RefundPaymentRequest(
        payment_id=payment.payment_id,
        amount=pb.Money(currency_code="EUR", amount_minor=1500),
        reason="goodwill",
        request_id=f"r-1-{payment.payment_id}",
    )
    first = await stack.stub.RefundPayment(part)
    assert first.payment.state == pb.PAYMENT_STATE_PARTIALLY_REFUNDED and first.payment.refunded.amount_minor == 1500
    again = await stack.stub.RefundPayment(part)
    assert again.SerializeToString(deterministic=True) == first.SerializeToString(deterministic=True)
    changed = pb.RefundPaymentRequest()
    changed.CopyFrom(part)
    changed.amount.amount_minor = 100
    err = await _error(stack.stub.RefundPayment(changed))
    assert err.reason == "IDEMPOTENCY_KEY_REUSED"
    too_much = pb.RefundPaymentRequest(
        payment_id=payment.payment_id,
        amount=pb.Money(currency_code="EUR", amount_minor=3501),
        request_id=f"r-2-{payment.payment_id}",
    )
    err = await _error(stack.stub.RefundPayment(too_much))
    assert err.code == grpc.StatusCode.FAILED_PRECONDITION and err.reason == "REFUND_EXCEEDS_PAYMENT"
    rest = await stack.stub.RefundPayment(
        pb.RefundPaymentRequest(payment_id=payment.payment_id, request_id=f"r-3-{payment.payment_id}")
    )
    assert rest.payment.state == pb.PAYMENT_STATE_REFUNDED and rest.payment.refunded.amount_minor == 5000
    assert await stack.provider.charged_minor(f"hold_{hold_id}_attempt_1") == 0
    assert await stack.provider.refunds_of(f"hold_{hold_id}_attempt_1") == 2


async def test_concurrent_refunds_never_exceed_the_payment(stack: PaymentStack, booking: FakeBooking) -> None:
    hold_id, payment = await _started(stack, booking)
    await stack.stub.ConfirmPayment(
        pb.ConfirmPaymentRequest(payment_id=payment.payment_id, idempotency_key=f"c-{payment.payment_id}")
    )
    requests = [
        pb.RefundPaymentRequest(
            payment_id=payment.payment_id,
            amount=pb.Money(currency_code="EUR", amount_minor=2000),
            request_id=f"r{i}-{payment.payment_id}",
        )
        for i in range(10)
    ]
    results = await asyncio.gather(*(stack.stub.RefundPayment(r) for r in requests), return_exceptions=True)
    ok = [r for r in results if not isinstance(r, BaseException)]
    assert len(ok) == 2  # 2 x 2000 <= 5000 < 3 x 2000
    final = await stack.stub.GetPayment(pb.GetPaymentRequest(payment_id=payment.payment_id))
    assert final.payment.refunded.amount_minor == 4000
    assert await stack.provider.refunds_of(f"hold_{hold_id}_attempt_1") == 2


async def test_reconciler_settles_a_capture_nobody_confirmed(stack: PaymentStack, booking: FakeBooking) -> None:
    """The lost webhook: the provider captured, no webhook came, the client
    never confirmed. The reconciler confirms the hold."""
    hold_id, payment = await _started(stack, booking)
    assert payment.state == pb.PAYMENT_STATE_CAPTURED
    await age(stack.pool, payment.payment_id)
    await stack.reconciler.reconcile_once()
    final = await stack.stub.GetPayment(pb.GetPaymentRequest(payment_id=payment.payment_id))
    assert final.payment.state == pb.PAYMENT_STATE_SUCCEEDED
    assert await _outbox_rows(stack, hold_id) == 1
    assert stack.registry.get_sample_value("boxoffice_payments", {"state": "captured"}) is not None


async def test_reconciler_settles_a_charge_whose_answer_was_lost(stack: PaymentStack, booking: FakeBooking) -> None:
    hold_id, payment = await _started(stack, booking, PM_TIMEOUT)
    assert payment.state == pb.PAYMENT_STATE_PENDING
    await asyncio.sleep(0.3)  # the provider settles the charge meanwhile
    await age(stack.pool, payment.payment_id)
    await stack.reconciler.reconcile_once()
    final = await stack.stub.GetPayment(pb.GetPaymentRequest(payment_id=payment.payment_id))
    assert final.payment.state == pb.PAYMENT_STATE_SUCCEEDED
    assert await _outbox_rows(stack, hold_id) == 1
