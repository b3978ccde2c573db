"""`boxoffice admin refund`, end to end: the command runs as its own process
against the whole mesh as the operator and refunds what is left of a paid
payment (the way a refund the provider refused is asked for again); the
same request id replays the first answer; bad input is a usage error that
sends nothing, an unknown payment a failed call, and an identity that is
not the operator's is refused."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest

from boxoffice import access
from gen.boxoffice.booking.v1 import booking_service_pb2_grpc as bpb_grpc
from gen.boxoffice.payment.v1 import payment_service_pb2 as ppb
from gen.boxoffice.payment.v1 import payment_service_pb2_grpc as ppb_grpc
from gen.boxoffice.queue.v1 import queue_service_pb2_grpc as qpb_grpc
from tests.e2e.checkout import checkout_event, start_payment
from tests.e2e.harness import Result, run_admin, whole_mesh
from tests.edge.asserting import as_fan, edge_mesh_client
from tests.support import Stores

FAN = "fan-refunded"


@pytest.fixture
async def addresses(stores: Stores) -> AsyncIterator[dict[str, str]]:
    # Manual webhooks: only the test's own calls settle the payment.
    async with whole_mesh(stores, "ticket-issued-admin-refund", webhooks="manual") as found:
        yield found


async def _paid(stores: Stores, addresses: dict[str, str]) -> ppb.Payment:
    """A fan's payment for two seats (90.00 EUR), confirmed, of an event
    whose cancellations are refunded in full."""
    event_id = await checkout_event(addresses, stores, refund_percent=100)
    async with (
        edge_mesh_client(stores, addresses["queue"]) as queue,
        edge_mesh_client(stores, addresses["booking"]) as booking,
        edge_mesh_client(stores, addresses["payment"]) as payment,
    ):
        payments = payment.stub(ppb_grpc.PaymentServiceStub)
        started = await start_payment(
            queue.stub(qpb_grpc.QueueServiceStub),
            booking.stub(bpb_grpc.BookingServiceStub),
            payments,
            event_id,
            FAN,
        )
        fan: Any = as_fan(FAN)
        confirmed = await payments.ConfirmPayment(
            ppb.ConfirmPaymentRequest(
                payment_id=started.payment.payment_id, idempotency_key=f"pay-{started.payment.payment_id}"
            ),
            metadata=fan,
        )
    assert confirmed.payment.state == ppb.PAYMENT_STATE_SUCCEEDED
    paid: ppb.Payment = confirmed.payment
    return paid


async def _stored(stores: Stores, addresses: dict[str, str], payment_id: str) -> ppb.Payment:
    async with edge_mesh_client(stores, addresses["payment"]) as client:
        reply = await client.stub(ppb_grpc.PaymentServiceStub, role=access.OPERATOR).GetPayment(
            ppb.GetPaymentRequest(payment_id=payment_id)
        )
    stored: ppb.Payment = reply.payment
    return stored


async def test_an_operator_refunds_a_paid_payment_once_per_request_id(
    stores: Stores, addresses: dict[str, str]
) -> None:
    paid = await _paid(stores, addresses)

    async def refund(*args: str) -> Result:
        return await run_admin(stores, addresses, "refund", paid.payment_id, *args)

    done = await refund("--reason", "the stage blocks the view", "--request-id", "refund-1")
    assert done.code == 0, done.err
    line = f"payment {paid.payment_id}: REFUNDED, 90.00 EUR refunded of 90.00 EUR (request id refund-1)\n"
    assert done.out == line
    stored = await _stored(stores, addresses, paid.payment_id)
    assert stored.state == ppb.PAYMENT_STATE_REFUNDED and stored.refunded.amount_minor == 9000
    # The same request id (a command cut off and run again) replays the answer.
    again = await refund("--reason", "the stage blocks the view", "--request-id", "refund-1")
    assert (again.code, again.out) == (0, line)
    # A new request id for a payment refunded in full is refused, and changes nothing.
    more = await refund("--reason", "again", "--request-id", "refund-2")
    assert more.code == 1 and "FAILED_PRECONDITION PAYMENT_NOT_REFUNDABLE" in more.err, more.err
    assert (await _stored(stores, addresses, paid.payment_id)).refunded.amount_minor == 9000


async def test_without_a_request_id_the_command_makes_one_and_prints_it(
    stores: Stores, addresses: dict[str, str]
) -> None:
    paid = await _paid(stores, addresses)
    done = await run_admin(stores, addresses, "refund", paid.payment_id, "--reason", "cancelled show")
    assert done.code == 0, done.err
    assert done.out.startswith(
        f"payment {paid.payment_id}: REFUNDED, 90.00 EUR refunded of 90.00 EUR (request id admin-"
    )


async def test_bad_input_sends_nothing_and_only_the_operator_may_refund(
    stores: Stores, addresses: dict[str, str]
) -> None:
    paid = await _paid(stores, addresses)
    for args, needle in (
        (["refund", "not-a-payment", "--reason", "x"], "'not-a-payment' is not a payment id (a UUID)"),
        (["refund", paid.payment_id, "--reason", "   "], "the reason is 1 to 500 characters"),
        (["refund", paid.payment_id, "--reason", "x" * 501], "the reason is 1 to 500 characters"),
        (["refund", paid.payment_id, "--reason", "x", "--request-id", "r" * 65], "the request id is 1 to 64"),
        (["refund", paid.payment_id], "the following arguments are required: --reason"),
    ):
        result = await run_admin(stores, addresses, *args)
        assert result.code == 2 and needle in result.err, (args, result.err)
    unknown = await run_admin(stores, addresses, "refund", str(uuid.uuid4()), "--reason", "x")
    assert unknown.code == 1 and "NOT_FOUND PAYMENT_NOT_FOUND" in unknown.err, unknown.err
    # The edge's certificate is not the operator's: RefundPayment refuses it.
    edge = await run_admin(
        stores, addresses, "refund", paid.payment_id, "--reason", "x", files=stores.pki.files(access.EDGE)
    )
    assert edge.code == 1 and "PERMISSION_DENIED" in edge.err, edge.err
    stored = await _stored(stores, addresses, paid.payment_id)
    assert stored.state == ppb.PAYMENT_STATE_SUCCEEDED and stored.refunded.amount_minor == 0
