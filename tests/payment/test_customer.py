"""PaymentService takes the customer from credentials, never from a body:
a payment is confirmed or read through the edge only for the fan who owns
it (another's answers as a payment that does not exist), a token counts
only for the fan the edge asserts, and nothing is stored by a refusal."""

from __future__ import annotations

import uuid
from typing import Any

import grpc
import pytest

from boxoffice import db
from boxoffice.errors import BoxofficeError, NotFound, PermissionDenied, Unauthenticated, from_rpc_error
from gen.boxoffice.payment.v1 import payment_service_pb2 as pb
from payment_svc.adapters.sandbox import PM_OK
from tests.edge.asserting import as_fan
from tests.payment.harness import FakeBooking, PaymentStack, new_event_id, snapshot

NOBODY = (("x-boxoffice-customer", ""),)


async def _error(call: Any) -> BoxofficeError:
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await call
    return from_rpc_error(caught.value)


def _token(stack: PaymentStack, event_id: int, customer: str) -> str:
    return stack.tokens.issue(event_id=event_id, customer_id=customer, ttl_seconds=600)[0]


async def _started(stack: PaymentStack, booking: FakeBooking, customer: str) -> tuple[str, int, pb.Payment]:
    event_id = new_event_id()
    hold_id = booking.add_hold(event_id=event_id, customer_id=customer)
    reply = await stack.stub.StartPayment(
        pb.StartPaymentRequest(access_token=_token(stack, event_id, customer), hold_id=hold_id, payment_method=PM_OK),
        metadata=as_fan(customer),
    )
    return hold_id, event_id, reply.payment


async def _keys(stack: PaymentStack, key: str) -> list[tuple[Any, ...]]:
    async with db.transaction(stack.pool) as conn:
        cur = await conn.execute("SELECT scope FROM payment_idempotency_keys WHERE key = %s", (key,))
        return list(await cur.fetchall())


async def test_another_fans_payment_is_not_found_and_nothing_is_stored(
    stack: PaymentStack, booking: FakeBooking
) -> None:
    hold_id, _, payment = await _started(stack, booking, "victim3")
    before = await snapshot(stack.pool, [hold_id])
    key = f"confirm-{uuid.uuid4().hex}"
    confirm = pb.ConfirmPaymentRequest(payment_id=payment.payment_id, idempotency_key=key)
    made_up = str(uuid.uuid4())
    for call in (
        stack.stub.ConfirmPayment(confirm, metadata=as_fan("fan-1")),
        stack.stub.GetPayment(pb.GetPaymentRequest(payment_id=payment.payment_id), metadata=as_fan("fan-1")),
    ):
        err = await _error(call)
        # Exactly what a payment id that does not exist answers: ids reveal nothing.
        assert isinstance(err, NotFound) and err.reason == "PAYMENT_NOT_FOUND"
        assert err.metadata == {"payment_id": payment.payment_id}
    missing = await _error(stack.stub.GetPayment(pb.GetPaymentRequest(payment_id=made_up), metadata=as_fan("fan-1")))
    assert (missing.code, missing.reason) == (err.code, err.reason)
    for call in (
        stack.stub.ConfirmPayment(confirm, metadata=NOBODY),
        stack.stub.GetPayment(pb.GetPaymentRequest(payment_id=payment.payment_id), metadata=NOBODY),
    ):
        err = await _error(call)
        assert isinstance(err, Unauthenticated) and err.reason == "CUSTOMER_NOT_ASSERTED"
    assert await snapshot(stack.pool, [hold_id]) == before
    assert await _keys(stack, key) == [] and booking.confirm_calls == 0

    # The owner confirms with the same key; an operator reads anyone's.
    mine = await stack.stub.ConfirmPayment(confirm, metadata=as_fan("victim3"))
    assert mine.payment.state == pb.PAYMENT_STATE_SUCCEEDED
    seen = await stack.operator.GetPayment(pb.GetPaymentRequest(payment_id=payment.payment_id))
    assert seen.payment.customer_id == "victim3"


async def test_a_token_counts_only_for_the_fan_the_edge_asserts(stack: PaymentStack, booking: FakeBooking) -> None:
    event_id = new_event_id()
    hold_id = booking.add_hold(event_id=event_id, customer_id="victim3")
    stolen = _token(stack, event_id, "victim3")
    before = await snapshot(stack.pool, [hold_id])
    for call in (
        stack.stub.StartPayment(
            pb.StartPaymentRequest(access_token=stolen, hold_id=hold_id, payment_method=PM_OK),
            metadata=as_fan("fan-1"),
        ),
        stack.stub.ListTickets(pb.ListTicketsRequest(access_token=stolen, event_id=event_id), metadata=as_fan("fan-1")),
    ):
        err = await _error(call)
        assert isinstance(err, PermissionDenied) and err.reason == "CUSTOMER_MISMATCH", err
    assert await snapshot(stack.pool, [hold_id]) == before
