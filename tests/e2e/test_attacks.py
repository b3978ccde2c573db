"""The attacks of the trust-boundary issue, each against real servers over
mTLS (every role of every service as `boxoffice up` composes them), each
refused, and each leaving the sale as it was.

The scene: victim3 is admitted, has bought two seats (a confirmed booking,
tickets VALID, payment SUCCEEDED) and holds two more; the attacker, fan-1,
is admitted too and calls through the edge as a fan can (the edge asserts
fan-1), or with whatever certificate of the mesh it can get.

The poisoned idempotency key is also proven against PaymentService alone in
tests/payment/test_money.py. The development-secret webhook is proven where
its two halves live: a process off the embedded stores refuses development
secrets (tests/runtime/test_secrets.py), and a signed webhook whose amount
is not the payment's moves nothing (tests/payment/test_money.py).
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import grpc
import psycopg
import pytest
from google.protobuf import duration_pb2

from boxoffice import access
from boxoffice.errors import BoxofficeError, NotFound, PermissionDenied, Unauthenticated, from_rpc_error
from gen.boxoffice.booking.v1 import booking_service_pb2 as bpb
from gen.boxoffice.booking.v1 import booking_service_pb2_grpc as bpb_grpc
from gen.boxoffice.payment.v1 import payment_service_pb2 as ppb
from gen.boxoffice.payment.v1 import payment_service_pb2_grpc as ppb_grpc
from gen.boxoffice.queue.v1 import queue_admin_service_pb2 as qapb
from gen.boxoffice.queue.v1 import queue_admin_service_pb2_grpc as qapb_grpc
from gen.boxoffice.queue.v1 import queue_service_pb2 as qpb
from gen.boxoffice.queue.v1 import queue_service_pb2_grpc as qpb_grpc
from tests.e2e.checkout import admitted, open_event
from tests.e2e.harness import eventually, ts, whole_mesh
from tests.edge.asserting import EdgeMeshClient, as_fan
from tests.support import Stores

VICTIM = "victim3"
ATTACKER = "fan-1"
# Every role of the mesh but payment (the only one ConfirmHold answers).
NOT_PAYMENT = tuple(r for r in access.ROLES if r != access.PAYMENT)


@dataclass
class Mesh:
    stores: Stores
    queue: EdgeMeshClient
    booking: EdgeMeshClient
    payment: EdgeMeshClient

    def as_role(self, service: str, role: str) -> Any:
        client, factory = {
            "queue": (self.queue, qpb_grpc.QueueServiceStub),
            "queue-admin": (self.queue, qapb_grpc.QueueAdminServiceStub),
            "booking": (self.booking, bpb_grpc.BookingServiceStub),
            "payment": (self.payment, ppb_grpc.PaymentServiceStub),
        }[service]
        return client.stub(factory, role=role)


@pytest.fixture
async def mesh(stores: Stores) -> AsyncIterator[Mesh]:
    async with whole_mesh(stores, "ticket-issued-attacks") as addresses:
        clients = [EdgeMeshClient(stores, addresses[name]) for name in ("queue", "booking", "payment")]
        try:
            yield Mesh(stores, *clients)
        finally:
            for client in clients:
                await client.close()


@dataclass
class Scene:
    event_id: int
    victim_token: str
    attacker_token: str
    bought: bpb.Hold
    held: bpb.Hold
    payment: ppb.Payment


async def _admitted(mesh: Mesh, event_id: int, fan: str) -> str:
    return await admitted(mesh.as_role("queue", access.EDGE), event_id, metadata=as_fan(fan))


async def _scene(mesh: Mesh) -> Scene:
    event_id = await open_event(
        mesh.as_role("booking", access.OPERATOR),
        mesh.as_role("queue", access.OPERATOR),
        name="Attacks",
        seats=20,
        refund_percent=100,
        refundable_days=7,
        max_seats_per_customer=8,
    )
    victim = await _admitted(mesh, event_id, VICTIM)
    attacker = await _admitted(mesh, event_id, ATTACKER)
    booking = mesh.booking.stub(bpb_grpc.BookingServiceStub)
    payment = mesh.payment.stub(ppb_grpc.PaymentServiceStub)

    def best(token: str, quantity: int) -> bpb.HoldSeatsRequest:
        return bpb.HoldSeatsRequest(
            access_token=token,
            event_id=event_id,
            best_available=bpb.BestAvailableSelection(section_id="A", quantity=quantity),
        )

    bought = (await booking.HoldSeats(best(victim, 2))).hold
    started = await payment.StartPayment(
        ppb.StartPaymentRequest(access_token=victim, hold_id=bought.hold_id, payment_method="pm_card_ok")
    )
    confirmed = await payment.ConfirmPayment(
        ppb.ConfirmPaymentRequest(payment_id=started.payment.payment_id, idempotency_key=f"victim-{bought.hold_id}")
    )
    assert confirmed.payment.state == ppb.PAYMENT_STATE_SUCCEEDED

    async def issued() -> bool | None:
        reply = await payment.ListTickets(ppb.ListTicketsRequest(access_token=victim, event_id=event_id))
        return True if len(reply.tickets) == 2 else None

    await eventually(issued, "the victim's tickets")
    held = (await booking.HoldSeats(best(victim, 2))).hold
    return Scene(event_id, victim, attacker, bought, held, confirmed.payment)


async def _state(mesh: Mesh, scene: Scene) -> dict[str, Any]:
    """What the sale is in Postgres, and the victim's place in the queue."""
    rows: dict[str, Any] = {}
    async with await psycopg.AsyncConnection.connect(mesh.stores.database_url, autocommit=True) as conn:
        for name, sql in (
            ("holds", "SELECT hold_id::text, state, expires_at FROM holds WHERE event_id = %s ORDER BY 1"),
            ("seats", "SELECT seat_id, status, hold_id::text FROM seats WHERE event_id = %s ORDER BY 1"),
            ("tickets", "SELECT hold_id::text, seat_id, voided_at FROM tickets WHERE event_id = %s ORDER BY 1, 2"),
            ("payments", "SELECT payment_id::text, state, refunded_minor FROM payments WHERE event_id = %s ORDER BY 1"),
            (
                "outbox",
                "SELECT o.type FROM outbox o JOIN holds h ON o.aggregateid = h.hold_id::text "
                "WHERE h.event_id = %s ORDER BY o.seq",
            ),
        ):
            cur = await conn.execute(sql, (scene.event_id,))
            rows[name] = await cur.fetchall()
    config = await mesh.as_role("queue", access.OPERATOR).GetEventQueue(
        qpb.GetEventQueueRequest(event_id=scene.event_id)
    )
    rows["config"] = config.config.SerializeToString(deterministic=True)
    place = await mesh.as_role("queue", access.EDGE).GetQueuePosition(
        qpb.GetQueuePositionRequest(event_id=scene.event_id), metadata=as_fan(VICTIM)
    )
    rows["victim"] = place.position.state
    return rows


async def _refused(call: Any) -> BoxofficeError:
    try:
        answer = await call
    except grpc.aio.AioRpcError as err:
        return from_rpc_error(err)
    raise AssertionError(f"answered {answer}")


def _denied(err: BoxofficeError, reason: str) -> None:
    assert isinstance(err, PermissionDenied) and err.reason == reason, err


async def test_free_tickets_refund_and_keep_and_the_admin_calls_are_refused_to_every_caller_but_their_own(
    mesh: Mesh,
) -> None:
    scene = await _scene(mesh)
    before = await _state(mesh, scene)
    # Free tickets: ConfirmHold with a made-up payment id and no token.
    confirm = bpb.ConfirmHoldRequest(
        hold_id=scene.held.hold_id,
        idempotency_key="free",
        payment_id=f"made-up-{uuid.uuid4().hex}",
        amount_paid=scene.held.amount,
    )
    for role in NOT_PAYMENT:
        _denied(await _refused(mesh.as_role("booking", role).ConfirmHold(confirm)), "CALLER_NOT_ALLOWED")
    edge = access.EDGE
    fan = as_fan(ATTACKER)
    for call in (
        # Refund and keep: the buyer refunds themselves.
        mesh.as_role("payment", edge).RefundPayment(
            ppb.RefundPaymentRequest(payment_id=scene.payment.payment_id, request_id="mine"), metadata=fan
        ),
        # 1,800 s more on someone else's hold.
        mesh.as_role("booking", edge).ExtendHold(
            bpb.ExtendHoldRequest(
                hold_id=scene.held.hold_id, customer_id=VICTIM, extend_by=duration_pb2.Duration(seconds=1800)
            ),
            metadata=fan,
        ),
        # Pause, throttle, and the admin service's pause.
        mesh.as_role("queue", edge).PauseAdmission(qpb.PauseAdmissionRequest(event_id=scene.event_id), metadata=fan),
        mesh.as_role("queue", edge).UpdateEventQueue(
            qpb.UpdateEventQueueRequest(
                config=qpb.EventQueueConfig(
                    event_id=scene.event_id, opens_at=ts(datetime.now(UTC)), admission_rate_per_second=1
                )
            ),
            metadata=fan,
        ),
        mesh.as_role("queue-admin", edge).PauseWaitingRoom(
            qapb.PauseWaitingRoomRequest(event_id=scene.event_id), metadata=fan
        ),
    ):
        _denied(await _refused(call), "CALLER_NOT_ALLOWED")
    assert await _state(mesh, scene) == before


async def test_a_fan_gets_no_token_session_holds_or_booking_of_another(mesh: Mesh) -> None:
    scene = await _scene(mesh)
    before = await _state(mesh, scene)
    fan = as_fan(ATTACKER)
    queue = mesh.as_role("queue", access.EDGE)
    booking = mesh.as_role("booking", access.EDGE)
    # A token for a named customer, and the victim's session ended for them.
    for call in (
        queue.GetQueuePosition(qpb.GetQueuePositionRequest(event_id=scene.event_id, customer_id=VICTIM), metadata=fan),
        queue.EndShoppingSession(
            qpb.EndShoppingSessionRequest(
                event_id=scene.event_id, customer_id=VICTIM, reason=qpb.SESSION_END_REASON_COMPLETED
            ),
            metadata=fan,
        ),
        queue.LeaveQueue(qpb.LeaveQueueRequest(event_id=scene.event_id, customer_id=VICTIM), metadata=fan),
        # Another's holds, listed by naming them.
        booking.ListHolds(bpb.ListHoldsRequest(event_id=scene.event_id, customer_id=VICTIM), metadata=fan),
        # Another's booking, cancelled by naming them.
        booking.CancelBooking(
            bpb.CancelBookingRequest(hold_id=scene.bought.hold_id, customer_id=VICTIM, reason="x"), metadata=fan
        ),
        # The victim's token, replayed by the attacker's session at the edge.
        booking.HoldSeats(
            bpb.HoldSeatsRequest(
                access_token=scene.victim_token,
                event_id=scene.event_id,
                best_available=bpb.BestAvailableSelection(section_id="A", quantity=1),
            ),
            metadata=fan,
        ),
    ):
        _denied(await _refused(call), "CUSTOMER_MISMATCH")
    # Another's booking, cancelled naming nobody: the attacker owns no such booking.
    _denied(
        await _refused(
            booking.CancelBooking(bpb.CancelBookingRequest(hold_id=scene.bought.hold_id, reason="x"), metadata=fan)
        ),
        "NOT_HOLD_OWNER",
    )
    # Listing the event's holds lists the attacker's own: none.
    listed = await booking.ListHolds(bpb.ListHoldsRequest(event_id=scene.event_id), metadata=fan)
    assert list(listed.holds) == []
    assert await _state(mesh, scene) == before


async def test_another_fans_payment_is_neither_confirmed_nor_read_and_keys_poison_nobody(mesh: Mesh) -> None:
    scene = await _scene(mesh)
    payment = mesh.as_role("payment", access.EDGE)
    fan = as_fan(ATTACKER)
    # The victim starts paying for the held seats; the attacker knows the id.
    started = await payment.StartPayment(
        ppb.StartPaymentRequest(
            access_token=scene.victim_token, hold_id=scene.held.hold_id, payment_method="pm_card_ok"
        ),
        metadata=as_fan(VICTIM),
    )

    async def settled() -> bool | None:
        # The provider's webhook confirms the payment and tickets follow;
        # the scene stands still before the attacks.
        reply = await payment.ListTickets(
            ppb.ListTicketsRequest(access_token=scene.victim_token, event_id=scene.event_id), metadata=as_fan(VICTIM)
        )
        return True if len(reply.tickets) == 4 else None

    await eventually(settled, "the victim's second sale")
    before = await _state(mesh, scene)
    key = f"confirm-1-{uuid.uuid4().hex[:8]}"
    for call in (
        payment.ConfirmPayment(
            ppb.ConfirmPaymentRequest(payment_id=started.payment.payment_id, idempotency_key=key), metadata=fan
        ),
        payment.GetPayment(ppb.GetPaymentRequest(payment_id=scene.payment.payment_id), metadata=fan),
        # The poisoned key: a made-up payment id with the key the victim will use.
        payment.ConfirmPayment(
            ppb.ConfirmPaymentRequest(payment_id=str(uuid.uuid4()), idempotency_key=key), metadata=fan
        ),
    ):
        err = await _refused(call)
        assert isinstance(err, NotFound) and err.reason == "PAYMENT_NOT_FOUND", err
    # The victim's token is not the attacker's to pay with or list tickets by.
    for call in (
        payment.ListTickets(
            ppb.ListTicketsRequest(access_token=scene.victim_token, event_id=scene.event_id), metadata=fan
        ),
    ):
        _denied(await _refused(call), "CUSTOMER_MISMATCH")
    assert await _state(mesh, scene) == before
    # The victim's confirm with the same key is whole.
    mine = await payment.ConfirmPayment(
        ppb.ConfirmPaymentRequest(payment_id=started.payment.payment_id, idempotency_key=key), metadata=as_fan(VICTIM)
    )
    assert mine.payment.state == ppb.PAYMENT_STATE_SUCCEEDED


async def _refused_within(call: Any, reason: str, seconds: float) -> float:
    """How long until ``call()`` is refused with ``reason`` (fails after
    ``seconds``); until then it may answer anything."""
    began = time.monotonic()
    while True:
        try:
            await call()
        except grpc.aio.AioRpcError as err:
            if from_rpc_error(err).reason == reason:
                return time.monotonic() - began
        elapsed = time.monotonic() - began
        assert elapsed < seconds, f"still answered after {elapsed:.2f} s"
        await asyncio.sleep(0.05)


async def test_a_sessions_token_stops_working_at_booking_within_two_seconds_of_its_end(mesh: Mesh) -> None:
    """EndShoppingSession, then an operator's RevokeCustomer: the ended
    session's token holds nothing within 2 s; a new session's token works."""
    scene = await _scene(mesh)
    queue = mesh.as_role("queue", access.EDGE)
    booking = mesh.as_role("booking", access.EDGE)
    victim = as_fan(VICTIM)

    def hold(token: str) -> Any:
        return booking.HoldSeats(
            bpb.HoldSeatsRequest(
                access_token=token,
                event_id=scene.event_id,
                best_available=bpb.BestAvailableSelection(section_id="A", quantity=1),
            ),
            metadata=victim,
        )

    old = scene.victim_token

    def get(token: str, hold_id: str) -> Any:
        return booking.GetHold(bpb.GetHoldRequest(access_token=token, hold_id=hold_id), metadata=victim)

    await get(old, scene.held.hold_id)
    await queue.EndShoppingSession(
        qpb.EndShoppingSessionRequest(event_id=scene.event_id, reason=qpb.SESSION_END_REASON_COMPLETED),
        metadata=victim,
    )
    before = await _state(mesh, scene)
    took = await _refused_within(lambda: get(old, scene.held.hold_id), "SESSION_ENDED", 2.0)
    assert took < 2.0
    for call in (
        hold(old),
        booking.ReleaseHold(bpb.ReleaseHoldRequest(access_token=old, hold_id=scene.held.hold_id), metadata=victim),
    ):
        err = await _refused(call)
        assert isinstance(err, Unauthenticated) and err.reason == "SESSION_ENDED", err
    # A refused token changed nothing.
    assert await _state(mesh, scene) == before

    # A new session: the victim queues again and is admitted again.
    fresh = await _admitted(mesh, scene.event_id, VICTIM)
    held = await hold(fresh)
    assert held.hold.state == bpb.HOLD_STATE_HELD
    err = await _refused(hold(old))
    assert err.reason == "SESSION_ENDED"

    # An operator revokes the customer: the new session's token dies too.
    await mesh.queue.stub(qapb_grpc.QueueAdminServiceStub, role=access.OPERATOR).RevokeCustomer(
        qapb.RevokeCustomerRequest(event_id=scene.event_id, customer_id=VICTIM)
    )
    await _refused_within(lambda: get(fresh, held.hold.hold_id), "SESSION_ENDED", 2.0)
    err = await _refused(hold(fresh))
    assert err.reason == "SESSION_ENDED"
