"""Postgres drops every connection of the mesh (pg_terminate_backend on
this test session's own database) before each step of each fan's
checkout, every role running as a process of its own: no call answers
UNAVAILABLE, and each booking's tickets are listed within 5 s of its confirm (the issuer's broken pooled connections
used to hold them until the stream's reclaim, 30 s). A connection of the
payment process ended inside one of its own transactions costs the confirm
nothing either."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import grpc
import psycopg
import pytest

from gen.boxoffice.booking.v1 import booking_service_pb2 as bpb
from gen.boxoffice.booking.v1 import booking_service_pb2_grpc as bpb_grpc
from gen.boxoffice.payment.v1 import payment_service_pb2 as ppb
from gen.boxoffice.payment.v1 import payment_service_pb2_grpc as ppb_grpc
from gen.boxoffice.queue.v1 import queue_service_pb2 as qpb
from gen.boxoffice.queue.v1 import queue_service_pb2_grpc as qpb_grpc
from tests.e2e.checkout import admitted, open_event
from tests.e2e.harness import eventually
from tests.edge.asserting import as_fan, edge_mesh_client
from tests.payment.cuts import cut_once_inside
from tests.runtime.processes import free_port, role_processes
from tests.support import Stores

pytestmark = pytest.mark.slow

_FANS = 4
# The longest a booking's tickets may take after its confirm answered.
_TICKET_SECONDS = 5.0


@dataclass
class Mesh:
    queue: Any
    booking: Any
    payment: Any


@pytest.fixture
async def mesh(stores: Stores, tmp_path: Path) -> AsyncIterator[Mesh]:
    """Every role of queue, booking and payment as a process of its own
    (``boxoffice <role>``), with fast timings and a ticket stream of its own;
    stubs as the edge."""
    ports = {name: free_port() for name in ("queue", "booking", "payment")}
    stream = {"BOXOFFICE_TICKET_STREAM": f"ticket-issued-pg-loss-{uuid.uuid4().hex[:12]}"}
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
        # Until every server answers (a made-up place or token: refused).
        calls: list[tuple[Any, Any, Any]] = [
            (built.queue.GetQueuePosition, qpb.GetQueuePositionRequest(event_id=1), as_fan("probe")),
            (built.booking.GetHold, bpb.GetHoldRequest(access_token="x", hold_id=str(uuid.uuid4())), None),
            (built.payment.ListTickets, ppb.ListTicketsRequest(access_token="x", event_id=1), None),
        ]
        for method, request, metadata in calls:
            for _ in range(600):
                try:
                    await method(request, metadata=metadata, timeout=5)
                    break
                except grpc.aio.AioRpcError as err:
                    if err.code() != grpc.StatusCode.UNAVAILABLE:
                        break
                for role in roles:
                    assert role.process.returncode is None, f"{role.command} ended: {role.stderr()}"
                await asyncio.sleep(0.1)
        yield built


async def _cut(stores: Stores) -> int:
    """End every session on this test session's database (the mesh's pools,
    its relay's and elections' connections); how many."""
    database = urlsplit(stores.database_url).path.lstrip("/")
    async with await psycopg.AsyncConnection.connect(stores.admin_url, autocommit=True) as admin:
        cur = await admin.execute(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE datname = %s AND pid <> pg_backend_pid()",
            (database,),
        )
        row = await cur.fetchone()
    assert row is not None
    return int(row[0])


async def test_dropped_connections_cost_no_unavailable_and_no_late_ticket(mesh: Mesh, stores: Stores) -> None:
    event_id = await open_event(mesh.booking, mesh.queue, name="Connections cut", seats=2 * _FANS)
    lags: list[float] = []
    cut = 0
    for n in range(_FANS):
        customer = f"cut-fan-{n}"
        token = await admitted(mesh.queue, event_id, customer_id=customer)
        cut += await _cut(stores)
        held = (
            await mesh.booking.HoldSeats(
                bpb.HoldSeatsRequest(
                    access_token=token,
                    event_id=event_id,
                    best_available=bpb.BestAvailableSelection(section_id="A", quantity=2),
                    request_id=f"cut-{event_id}-{n}",
                )
            )
        ).hold
        cut += await _cut(stores)
        again = await mesh.booking.GetHold(bpb.GetHoldRequest(access_token=token, hold_id=held.hold_id))
        assert again.hold.state == bpb.HOLD_STATE_HELD
        cut += await _cut(stores)
        started = await mesh.payment.StartPayment(
            ppb.StartPaymentRequest(access_token=token, hold_id=held.hold_id, payment_method="pm_card_ok")
        )
        cut += await _cut(stores)
        confirmed = await mesh.payment.ConfirmPayment(
            ppb.ConfirmPaymentRequest(payment_id=started.payment.payment_id, idempotency_key=f"cut-{held.hold_id}")
        )
        assert confirmed.payment.state == ppb.PAYMENT_STATE_SUCCEEDED
        answered = time.monotonic()

        async def listed(hold_id: str = held.hold_id, token: str = token) -> list[ppb.Ticket] | None:
            reply = await mesh.payment.ListTickets(
                ppb.ListTicketsRequest(access_token=token, event_id=event_id, hold_id=hold_id)
            )
            return list(reply.tickets) if len(reply.tickets) == 2 else None

        await eventually(listed, f"the tickets of {customer}", seconds=30)
        lags.append(time.monotonic() - answered)
    # Every step met connections the server had ended (the control: the
    # cuts reached the mesh's connections, not an empty database).
    assert cut >= 4 * _FANS
    assert max(lags) < _TICKET_SECONDS, lags


async def test_a_confirm_cut_inside_the_payment_process_answers_succeeded(mesh: Mesh, stores: Stores) -> None:
    """The payment process's move to SUCCEEDED waits for the payment's row
    (locked here) inside its transaction, and that backend is ended: the
    move runs again on a fresh connection and the fan is told SUCCEEDED."""
    event_id = await open_event(mesh.booking, mesh.queue, name="Cut inside a transaction", seats=2)
    token = await admitted(mesh.queue, event_id, customer_id="inside-fan")
    held = (
        await mesh.booking.HoldSeats(
            bpb.HoldSeatsRequest(
                access_token=token,
                event_id=event_id,
                best_available=bpb.BestAvailableSelection(section_id="A", quantity=2),
                request_id=f"inside-{event_id}",
            )
        )
    ).hold
    started = await mesh.payment.StartPayment(
        ppb.StartPaymentRequest(access_token=token, hold_id=held.hold_id, payment_method="pm_card_ok")
    )
    payment_id = started.payment.payment_id
    request = ppb.ConfirmPaymentRequest(payment_id=payment_id, idempotency_key=f"inside-{held.hold_id}")
    task, waited = await cut_once_inside(
        stores,
        "SELECT 1 FROM payments WHERE payment_id = %s FOR UPDATE",
        (payment_id,),
        lambda: mesh.payment.ConfirmPayment(request, timeout=60),
    )
    confirmed = await task
    assert len(waited) == 2 and waited[0] != waited[1]
    assert confirmed.payment.state == ppb.PAYMENT_STATE_SUCCEEDED

    async def listed() -> list[ppb.Ticket] | None:
        reply = await mesh.payment.ListTickets(
            ppb.ListTicketsRequest(access_token=token, event_id=event_id, hold_id=held.hold_id)
        )
        return list(reply.tickets) if len(reply.tickets) == 2 else None

    await eventually(listed, "the tickets of the confirm that was cut", seconds=_TICKET_SECONDS)
