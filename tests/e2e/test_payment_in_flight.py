"""Money in flight said plainly, every role running as a process of its own:
a charge the provider does not answer in time (the sandbox's
``pm_card_timeout``, past a 1 s provider timeout) is PAYMENT_PROCESSING for
the fan, not PROVIDER_TIMEOUT; the on-sale report lists it as pending with
us and is not "ok"; the reconciler asks the provider at once (its interval
is ten minutes here, and no webhook is delivered), so the payment turns
paid by itself and its tickets are issued, and then the report is "ok"."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import pytest

from boxoffice.errors import from_rpc_error
from boxoffice_cli import report as report_cli
from gen.boxoffice.booking.v1 import booking_service_pb2_grpc as bpb_grpc
from gen.boxoffice.payment.v1 import payment_service_pb2 as ppb
from gen.boxoffice.payment.v1 import payment_service_pb2_grpc as ppb_grpc
from gen.boxoffice.queue.v1 import queue_service_pb2 as qpb
from gen.boxoffice.queue.v1 import queue_service_pb2_grpc as qpb_grpc
from tests.e2e.checkout import open_event, start_payment
from tests.e2e.harness import eventually
from tests.edge.asserting import as_fan, edge_mesh_client
from tests.runtime.processes import free_port, role_processes, until_serving
from tests.support import Stores

pytestmark = pytest.mark.slow

_PENDING_LINE = "no_payment_pending_with_us"


@dataclass
class Mesh:
    queue: Any
    booking: Any
    payment: Any


@pytest.fixture
async def mesh(stores: Stores, tmp_path: Path) -> AsyncIterator[Mesh]:
    ports = {name: free_port() for name in ("queue", "booking", "payment")}
    stream = {"BOXOFFICE_TICKET_STREAM": f"ticket-issued-in-flight-{uuid.uuid4().hex[:12]}"}
    fast = {
        "BOXOFFICE_LEADER_RETRY_SECONDS": "0.2",
        "BOXOFFICE_LEADER_RENEW_DEADLINE_SECONDS": "1",
        "BOXOFFICE_LEADER_LEASE_SECONDS": "2",
        "BOXOFFICE_QUEUE_TICK_SECONDS": "0.05",
    }
    commands = [
        ("queue-svc", {**fast, "BOXOFFICE_GRPC_PORT": str(ports["queue"])}),
        ("admitter", fast),
        ("booking-svc", {"BOXOFFICE_GRPC_PORT": str(ports["booking"])}),
        (
            "payment-svc",
            {
                **stream,
                "BOXOFFICE_GRPC_PORT": str(ports["payment"]),
                "BOXOFFICE_BOOKING_ADDR": f"127.0.0.1:{ports['booking']}",
                "BOXOFFICE_PAYMENT_PROVIDER": "sandbox",
                "BOXOFFICE_SANDBOX_DELAY_SECONDS": "0.01",
                "BOXOFFICE_SANDBOX_WEBHOOK_MODE": "manual",
                # The provider answers a timeout card never; it captures 3 s later.
                "BOXOFFICE_PROVIDER_TIMEOUT_SECONDS": "1",
                "BOXOFFICE_SANDBOX_TIMEOUT_SETTLE_SECONDS": "3",
                # Only the in-flight path can settle it within the test.
                "BOXOFFICE_RECONCILE_INTERVAL_SECONDS": "600",
                "BOXOFFICE_RECONCILE_AFTER_SECONDS": "600",
            },
        ),
        ("relay", stream),
        ("issuer", {**stream, "BOXOFFICE_CONSUMER_BLOCK_MS": "100"}),
    ]
    async with (
        role_processes(stores, commands, tmp_path) as roles,
        edge_mesh_client(stores, f"127.0.0.1:{ports['queue']}") as queue,
        edge_mesh_client(stores, f"127.0.0.1:{ports['booking']}") as booking,
        edge_mesh_client(stores, f"127.0.0.1:{ports['payment']}") as payment,
    ):
        built = Mesh(
            queue.stub(qpb_grpc.QueueServiceStub),
            booking.stub(bpb_grpc.BookingServiceStub),
            payment.stub(ppb_grpc.PaymentServiceStub),
        )
        await until_serving(
            roles,
            [
                (built.queue.GetQueuePosition, qpb.GetQueuePositionRequest(event_id=1), as_fan("probe")),
                (built.payment.ListTickets, ppb.ListTicketsRequest(access_token="x", event_id=1), None),
            ],
        )
        yield built


async def _report(stores: Stores, event_id: int) -> dict[str, Any]:
    report: dict[str, Any] = await asyncio.to_thread(report_cli.read_report, stores.database_url, event_id)
    return report


def _pending(report: dict[str, Any]) -> dict[str, Any]:
    lines = {line["line"]: line for line in report["reconciliation"]["lines"]}
    pending: dict[str, Any] = lines[_PENDING_LINE]
    return pending


async def test_a_timed_out_charge_is_processing_then_paid_and_the_report_says_so(mesh: Mesh, stores: Stores) -> None:
    event_id = await open_event(mesh.booking, mesh.queue, name="Slow bank", seats=4)
    fan = as_fan("slow-bank-fan")
    started = await start_payment(
        mesh.queue, mesh.booking, mesh.payment, event_id, "slow-bank-fan", payment_method="pm_card_timeout"
    )
    payment_id = started.payment.payment_id
    assert started.payment.state == ppb.PAYMENT_STATE_PENDING

    # The fan's confirm: processing, said as such.
    with pytest.raises(grpc.aio.AioRpcError) as raised:
        await mesh.payment.ConfirmPayment(
            ppb.ConfirmPaymentRequest(payment_id=payment_id, idempotency_key=f"slow-{payment_id}"),
            metadata=fan,
            timeout=10,
        )
    error = from_rpc_error(raised.value)
    assert (error.code, error.reason) == (grpc.StatusCode.UNAVAILABLE, "PAYMENT_PROCESSING")
    assert error.metadata == {"payment_id": payment_id}

    # While it is pending with us the report lists it and is not "ok".
    report = await _report(stores, event_id)
    pending = _pending(report)
    assert report["reconciliation"]["ok"] is False
    assert (pending["ok"], pending["mismatches"]) == (False, 1)
    assert [(i["payment_id"], i["state"]) for i in pending["items"]] == [(payment_id, "PENDING")]
    assert pending["items"][0]["at_provider"] in ("processing", "captured")

    # Nobody asks again: the reconciler's in-flight path settles it.
    async def paid() -> ppb.Payment | None:
        reply = await mesh.payment.GetPayment(ppb.GetPaymentRequest(payment_id=payment_id), metadata=fan)
        return reply.payment if reply.payment.state != ppb.PAYMENT_STATE_PENDING else None

    payment = await eventually(paid, "the payment settled by itself", seconds=60)
    for _ in range(200):
        if payment.state == ppb.PAYMENT_STATE_SUCCEEDED:
            break
        await asyncio.sleep(0.05)
        payment = (await mesh.payment.GetPayment(ppb.GetPaymentRequest(payment_id=payment_id), metadata=fan)).payment
    assert payment.state == ppb.PAYMENT_STATE_SUCCEEDED

    async def issued() -> list[ppb.Ticket] | None:
        reply = await mesh.payment.ListTickets(ppb.ListTicketsRequest(event_id=event_id), metadata=fan)
        return list(reply.tickets) if len(reply.tickets) == 2 else None

    await eventually(issued, "the tickets issued", seconds=30)
    report = await _report(stores, event_id)
    assert (_pending(report)["ok"], _pending(report)["items"]) == (True, [])
    assert report["reconciliation"]["ok"] is True, report["reconciliation"]
