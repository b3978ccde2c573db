"""A PaymentService process SIGKILLed while it confirms a payment, every
role of queue, booking and payment running as a process of its own (two
payment-svc processes, as two replicas behind the edge): the fan's retry on
the other process is answered within 5 s, not after a minute of
``IDEMPOTENCY_KEY_IN_FLIGHT``; and a retry whose payment succeeded
meanwhile is answered at once, while the dead holder's lease still runs."""

from __future__ import annotations

import asyncio
import signal
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import psycopg
import pytest

from gen.boxoffice.booking.v1 import booking_service_pb2_grpc as bpb_grpc
from gen.boxoffice.payment.v1 import payment_service_pb2 as ppb
from gen.boxoffice.payment.v1 import payment_service_pb2_grpc as ppb_grpc
from gen.boxoffice.queue.v1 import queue_service_pb2 as qpb
from gen.boxoffice.queue.v1 import queue_service_pb2_grpc as qpb_grpc
from tests.e2e.checkout import open_event, start_payment
from tests.e2e.harness import eventually
from tests.edge.asserting import as_fan, edge_mesh_client
from tests.runtime.processes import Role, free_port, role_processes, until_serving
from tests.support import Stores

pytestmark = pytest.mark.slow

# The longest a fan may wait for the answer after the process died.
_ANSWER_SECONDS = 5.0


@dataclass
class Mesh:
    queue: Any
    booking: Any
    # Two payment-svc processes: the one that dies, the one the fan retries on.
    doomed: Any
    survivor: Any
    roles: dict[str, Role]


@pytest.fixture
async def mesh(stores: Stores, tmp_path: Path) -> AsyncIterator[Mesh]:
    ports = {name: free_port() for name in ("queue", "booking", "doomed", "survivor")}
    fast = {
        "BOXOFFICE_LEADER_RETRY_SECONDS": "0.2",
        "BOXOFFICE_LEADER_RENEW_DEADLINE_SECONDS": "1",
        "BOXOFFICE_LEADER_LEASE_SECONDS": "2",
        "BOXOFFICE_QUEUE_TICK_SECONDS": "0.05",
    }

    def payment(port: int) -> dict[str, str]:
        # The idempotency lease is left at its default: the one that runs.
        return {
            "BOXOFFICE_GRPC_PORT": str(port),
            "BOXOFFICE_BOOKING_ADDR": f"127.0.0.1:{ports['booking']}",
            "BOXOFFICE_PAYMENT_PROVIDER": "sandbox",
            "BOXOFFICE_SANDBOX_DELAY_SECONDS": "0.01",
            "BOXOFFICE_SANDBOX_WEBHOOK_MODE": "manual",
            "BOXOFFICE_TICKET_STREAM": f"ticket-issued-pay-kill-{uuid.uuid4().hex[:12]}",
        }

    commands = [
        ("queue-svc", {**fast, "BOXOFFICE_GRPC_PORT": str(ports["queue"])}),
        ("admitter", fast),
        ("booking-svc", {"BOXOFFICE_GRPC_PORT": str(ports["booking"])}),
        ("payment-svc", payment(ports["doomed"])),
        ("payment-svc", payment(ports["survivor"])),
    ]
    async with (
        role_processes(stores, commands, tmp_path) as roles,
        edge_mesh_client(stores, f"127.0.0.1:{ports['queue']}") as queue,
        edge_mesh_client(stores, f"127.0.0.1:{ports['booking']}") as booking,
        edge_mesh_client(stores, f"127.0.0.1:{ports['doomed']}") as doomed,
        edge_mesh_client(stores, f"127.0.0.1:{ports['survivor']}") as survivor,
    ):
        built = Mesh(
            queue.stub(qpb_grpc.QueueServiceStub),
            booking.stub(bpb_grpc.BookingServiceStub),
            doomed.stub(ppb_grpc.PaymentServiceStub),
            survivor.stub(ppb_grpc.PaymentServiceStub),
            {"booking": roles[2], "doomed": roles[3], "survivor": roles[4]},
        )
        await until_serving(
            roles,
            [
                (built.queue.GetQueuePosition, qpb.GetQueuePositionRequest(event_id=1), as_fan("probe")),
                (built.doomed.ListTickets, ppb.ListTicketsRequest(access_token="x", event_id=1), None),
                (built.survivor.ListTickets, ppb.ListTicketsRequest(access_token="x", event_id=1), None),
            ],
        )
        try:
            yield built
        finally:
            booking_process = built.roles["booking"].process
            if booking_process.returncode is None:
                booking_process.send_signal(signal.SIGCONT)


async def _key_row(stores: Stores, key: str) -> tuple[str, str | None] | None:
    """The state and lock token of the idempotency key ``key``."""
    async with await psycopg.AsyncConnection.connect(stores.database_url, autocommit=True) as conn:
        cur = await conn.execute("SELECT state, lock_token FROM payment_idempotency_keys WHERE key = %s", (key,))
        row = await cur.fetchone()
    return None if row is None else (str(row[0]), row[1])


async def _held_by_a_request(stores: Stores, key: str) -> bool | None:
    row = await _key_row(stores, key)
    return True if row is not None and row[0] == "IN_FLIGHT" else None


async def _kill_mid_confirm(mesh: Mesh, stores: Stores, payment_id: str, customer: str, key: str) -> float:
    """The doomed process claims ``key`` and calls BookingService (stopped,
    so the call hangs), and is SIGKILLed there; BookingService goes on. The
    moment of the kill."""
    booking = mesh.roles["booking"].process
    booking.send_signal(signal.SIGSTOP)
    call = asyncio.ensure_future(
        mesh.doomed.ConfirmPayment(
            ppb.ConfirmPaymentRequest(payment_id=payment_id, idempotency_key=key),
            metadata=as_fan(customer),
            timeout=60,
        )
    )
    try:
        await eventually(lambda: _held_by_a_request(stores, key), "the doomed process holding the key", seconds=30)
        # Its lease is renewed while it waits on BookingService.
        await asyncio.sleep(1.5)
        assert not call.done()
        mesh.roles["doomed"].process.send_signal(signal.SIGKILL)
        killed = time.monotonic()
        await mesh.roles["doomed"].process.wait()
    finally:
        booking.send_signal(signal.SIGCONT)
    with pytest.raises(grpc.aio.AioRpcError):
        await call
    return killed


async def _retry_until_answered(mesh: Mesh, payment_id: str, customer: str, key: str) -> tuple[ppb.Payment, int]:
    """The fan's retries on the surviving process until one is answered;
    the answer and how many were told the key is in flight."""
    in_flight = 0
    while True:
        try:
            reply = await mesh.survivor.ConfirmPayment(
                ppb.ConfirmPaymentRequest(payment_id=payment_id, idempotency_key=key),
                metadata=as_fan(customer),
                timeout=10,
            )
            return reply.payment, in_flight
        except grpc.aio.AioRpcError as err:
            assert err.code() in (grpc.StatusCode.ABORTED, grpc.StatusCode.UNAVAILABLE), err
            in_flight += err.code() == grpc.StatusCode.ABORTED
        await asyncio.sleep(0.2)


async def test_a_payment_process_killed_mid_confirm_answers_the_fan_within_seconds(mesh: Mesh, stores: Stores) -> None:
    event_id = await open_event(mesh.booking, mesh.queue, name="Killed mid-confirm", seats=4)

    # A fan whose confirm dies with its process: the retry takes the key
    # over once the dead holder's lease lapses.
    started = await start_payment(mesh.queue, mesh.booking, mesh.survivor, event_id, "kill-fan-1")
    payment_id, key = started.payment.payment_id, f"confirm-{uuid.uuid4().hex}"
    killed = await _kill_mid_confirm(mesh, stores, payment_id, "kill-fan-1", key)
    payment, in_flight = await _retry_until_answered(mesh, payment_id, "kill-fan-1", key)
    waited = time.monotonic() - killed
    assert payment.state == ppb.PAYMENT_STATE_SUCCEEDED
    assert waited < _ANSWER_SECONDS, (waited, in_flight)
    # The control: the fan did meet the dead holder's key in flight first.
    assert in_flight >= 1
    row = await _key_row(stores, key)
    assert row is not None and row[0] == "DONE"


async def test_a_retry_whose_payment_succeeded_meanwhile_is_answered_at_once(mesh: Mesh, stores: Stores) -> None:
    event_id = await open_event(mesh.booking, mesh.queue, name="Settled meanwhile", seats=4)
    started = await start_payment(mesh.queue, mesh.booking, mesh.survivor, event_id, "kill-fan-2")
    payment_id, key = started.payment.payment_id, f"confirm-{uuid.uuid4().hex}"
    await _kill_mid_confirm(mesh, stores, payment_id, "kill-fan-2", key)
    held = await _key_row(stores, key)
    assert held is not None and held[0] == "IN_FLIGHT"
    # Another request (the fan's other tab) settles the payment meanwhile.
    other = await mesh.survivor.ConfirmPayment(
        ppb.ConfirmPaymentRequest(payment_id=payment_id, idempotency_key=f"other-{key}"),
        metadata=as_fan("kill-fan-2"),
        timeout=10,
    )
    assert other.payment.state == ppb.PAYMENT_STATE_SUCCEEDED
    # The dead holder's last renewal was a moment ago (its lease runs on).
    async with await psycopg.AsyncConnection.connect(stores.database_url, autocommit=True) as conn:
        await conn.execute("UPDATE payment_idempotency_keys SET locked_at = now() WHERE key = %s", (key,))
    reply = await mesh.survivor.ConfirmPayment(
        ppb.ConfirmPaymentRequest(payment_id=payment_id, idempotency_key=key),
        metadata=as_fan("kill-fan-2"),
        timeout=10,
    )
    assert reply.payment.state == ppb.PAYMENT_STATE_SUCCEEDED
    # Answered without taking the key over: it is still the dead holder's.
    assert await _key_row(stores, key) == held
