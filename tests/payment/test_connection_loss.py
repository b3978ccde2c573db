"""PaymentService when Postgres ends a connection in the middle of one of
its own transactions (pg_terminate_backend on the backend that waits, inside
the transaction, for a row this test locked): the transaction runs once
more on a fresh connection, and the call answers as if nothing happened."""

from __future__ import annotations

from collections.abc import Awaitable
from typing import Any

import pytest

from boxoffice import db
from gen.boxoffice.payment.v1 import payment_service_pb2 as pb
from payment_svc.adapters.payments import PgPaymentStore
from payment_svc.model import PaymentState
from payment_svc.ports import HoldState
from tests.payment.cuts import cut_once_inside
from tests.payment.harness import FakeBooking, PaymentStack, new_event_id
from tests.support import Stores

_LOCK_PAYMENT = "SELECT 1 FROM payments WHERE payment_id = %s FOR UPDATE"


async def _captured(stack: PaymentStack, booking: FakeBooking) -> tuple[str, str]:
    """A hold and its captured payment's id."""
    event_id = new_event_id()
    hold_id = booking.add_hold(event_id=event_id, customer_id="alice")
    token = stack.tokens.issue(event_id=event_id, customer_id="alice", ttl_seconds=600)[0]
    started = await stack.stub.StartPayment(
        pb.StartPaymentRequest(access_token=token, hold_id=hold_id, payment_method="pm_card_ok")
    )
    assert started.payment.state == pb.PAYMENT_STATE_CAPTURED
    return hold_id, started.payment.payment_id


async def test_a_confirm_cut_inside_its_transaction_answers_succeeded(
    stack: PaymentStack, booking: FakeBooking, stores: Stores
) -> None:
    hold_id, payment_id = await _captured(stack, booking)
    request = pb.ConfirmPaymentRequest(payment_id=payment_id, idempotency_key=f"cut-{payment_id}")

    def confirm() -> Awaitable[pb.ConfirmPaymentResponse]:
        return stack.stub.ConfirmPayment(request, timeout=60)  # type: ignore[no-any-return]

    task, waited = await cut_once_inside(stores, _LOCK_PAYMENT, (payment_id,), confirm)
    reply = await task
    # The move to SUCCEEDED was cut, then ran again on another connection.
    assert len(waited) == 2 and waited[0] != waited[1]
    assert reply.payment.state == pb.PAYMENT_STATE_SUCCEEDED
    assert booking.holds[hold_id].view.state == HoldState.CONFIRMED
    again = await stack.stub.ConfirmPayment(request)
    assert again.payment.state == pb.PAYMENT_STATE_SUCCEEDED


async def test_control_the_same_cut_without_the_retry_is_a_lost_connection(
    stack: PaymentStack, booking: FakeBooking, stores: Stores
) -> None:
    """The store's move called past its retry (``__wrapped__``) meets the same
    cut as a lost connection: the cut is real, and the retry is what saves it."""
    _, payment_id = await _captured(stack, booking)
    store: PgPaymentStore = stack.store
    bare = PgPaymentStore.transition.__wrapped__  # type: ignore[attr-defined]

    def move() -> Awaitable[Any]:
        return bare(store, payment_id, [PaymentState.CAPTURED], PaymentState.SUCCEEDED)  # type: ignore[no-any-return]

    task, waited = await cut_once_inside(stores, _LOCK_PAYMENT, (payment_id,), move)
    with pytest.raises(db.ConnectionLost):
        await task
    assert len(waited) == 1
    payment = await store.get(payment_id)
    assert payment is not None and payment.state == PaymentState.CAPTURED
