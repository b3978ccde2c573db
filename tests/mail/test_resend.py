"""`boxoffice admin tickets resend`, against real servers: PaymentService's
process serving MailAdminService over mTLS, the mailer, a real relay
(aiosmtpd with STARTTLS and AUTH) and real Postgres and Redis. A message the
relay refused (550) is recorded FAILED and shown by the command, which
queues it; the mailer's sweep sends it once the relay accepts, with its
own Message-ID, and the resend is audited. Bad input answers a clear error
and changes nothing; the fan's address is never shown."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from email.message import EmailMessage
from typing import Any

import grpc
import pytest
import redis.asyncio as aioredis

from boxoffice import access, audit
from boxoffice.errors import from_rpc_error
from boxoffice.runtime import Pool
from gen.boxoffice.mail.v1 import mail_admin_service_pb2 as mpb
from gen.boxoffice.mail.v1 import mail_admin_service_pb2_grpc as mpb_grpc
from mail_svc.adapters.deliveries import PgDeliveryStore
from mail_svc.admin import SERVICE_NAME
from tests.e2e.harness import run_admin
from tests.mail.harness import Booking, mailer_of, make_booking, publish
from tests.mail.relay import RelayState
from tests.payment.harness import PaymentStack, fake_booking, payment_stack
from tests.support import Stores, client_channel

ADDRESS = "fan@example.test"


@pytest.fixture
async def stack(stores: Stores) -> AsyncIterator[PaymentStack]:
    async with payment_stack(stores, booking=fake_booking) as opened:
        yield opened


@pytest.fixture
async def operator(stores: Stores, stack: PaymentStack) -> AsyncIterator[Any]:
    async with client_channel(stores, stack.parts.server.address, access.OPERATOR) as channel:
        yield mpb_grpc.MailAdminServiceStub(channel)


async def _records(pool: Pool) -> list[tuple[Any, ...]]:
    async with pool.connection() as conn:
        cur = await conn.execute("SELECT * FROM mail_deliveries ORDER BY hold_id, kind")
        return list(await cur.fetchall())


async def _resend(stores: Stores, stack: PaymentStack, *args: str) -> str:
    done = await run_admin(stores, {"payment": stack.parts.server.address}, "tickets", *args)
    assert done.code == 0, done.err
    assert ADDRESS not in done.out
    return done.out


async def _failed_booking(
    stores: Stores, pool: Pool, redis: aioredis.Redis, relay: RelayState, environ: dict[str, str]
) -> Booking:
    """A booking whose tickets' message the relay refused for good (550)."""
    relay.rcpt_answers[:] = ["550 5.1.1 No such user here"]
    booking = await make_booking(pool, email=ADDRESS)
    async with mailer_of(stores, environ) as role:
        await publish(redis, role.config.stream, booking)
        await role.consumer.read_once(block_ms=100)
    return booking


async def test_a_550_is_shown_by_the_resend_command_and_sent_once_the_relay_accepts(
    stores: Stores,
    pool: Pool,
    redis: aioredis.Redis,
    relay: tuple[int, RelayState],
    environ: dict[str, str],
    stack: PaymentStack,
) -> None:
    _, state = relay
    booking = await _failed_booking(stores, pool, redis, state, environ)

    def ours() -> list[EmailMessage]:
        # The sweeps also send what other tests of this database left due
        # (to this relay): only this booking's messages count here.
        return [m for m in state.messages() if m["To"] == ADDRESS]

    async def delivery_state() -> tuple[str, int]:
        (delivery,) = await PgDeliveryStore(pool).deliveries(booking.hold_id)
        return delivery.state, delivery.attempts

    assert ours() == []
    async with mailer_of(stores, environ) as role:
        # A refusal is for good: the sweep leaves it alone until an operator asks.
        await role.sweep.run_once()
        assert await delivery_state() == ("FAILED", 1) and ours() == []
        listed = await _resend(stores, stack, "deliveries", booking.hold_id)
        assert "tickets  FAILED" in listed and "550 5.1.1 No such user here" in listed
        shown = await _resend(stores, stack, "resend", booking.hold_id)
        assert "tickets  FAILED -> resend queued" in shown, shown
        assert "550 5.1.1 No such user here" in shown
        assert "1 queued" in shown
        # The command queued it; the mailer sends it, now that the relay accepts.
        assert ours() == []
        await role.sweep.run_once()
        assert await delivery_state() == ("SENT", 2)
        await role.sweep.run_once()
    (message,) = ours()
    assert message["To"] == ADDRESS
    (delivery,) = await PgDeliveryStore(pool).deliveries(booking.hold_id)
    assert delivery.state == "SENT" and delivery.attempts == 2 and delivery.sent_at is not None
    assert message["Message-ID"] == delivery.message_id
    after = await _resend(stores, stack, "resend", booking.hold_id)
    assert "tickets  SENT" in after and "resend queued" not in after
    assert "nothing to resend" in after
    # Each resend is audited as the operator's, without the address.
    rows = [e for e in await audit.entries(pool, service=SERVICE_NAME) if e.request["booking_id"] == booking.hold_id]
    assert [(e.method, e.caller_role, e.outcome) for e in rows] == [("ResendTickets", access.OPERATOR, audit.OK)] * 2
    first = rows[-1]
    assert first.before is not None and first.after is not None
    assert first.before["deliveries"][0]["state"] == "DELIVERY_STATE_FAILED"
    assert first.after["deliveries"][0]["state"] == "DELIVERY_STATE_PENDING"
    assert ADDRESS not in repr(rows)


async def test_a_paid_booking_never_sent_gets_its_tickets_message(
    stores: Stores,
    pool: Pool,
    relay: tuple[int, RelayState],
    environ: dict[str, str],
    stack: PaymentStack,
    operator: Any,
) -> None:
    _, state = relay
    booking = await make_booking(pool, email=ADDRESS, language="vi")
    reply = await operator.ResendTickets(mpb.ResendTicketsRequest(booking_id=booking.hold_id.upper()), timeout=10)
    (delivery,) = reply.deliveries
    assert delivery.kind == mpb.MESSAGE_KIND_TICKETS and delivery.resend_queued
    assert delivery.state == mpb.DELIVERY_STATE_PENDING and delivery.attempts == 0
    async with mailer_of(stores, environ) as role:
        assert await role.sweep.run_once() == 1
    (message,) = state.messages()
    assert message["Content-Language"] == "vi" and message["Message-ID"] == delivery.message_id
    listed = await operator.ListDeliveries(mpb.ListDeliveriesRequest(booking_id=booking.hold_id), timeout=10)
    assert [(d.kind, d.state, d.resend_queued) for d in listed.deliveries] == [
        (mpb.MESSAGE_KIND_TICKETS, mpb.DELIVERY_STATE_SENT, False)
    ]
    assert listed.deliveries[0].HasField("sent_time")


async def test_bad_input_answers_a_clear_error_and_changes_nothing(
    stores: Stores,
    pool: Pool,
    redis: aioredis.Redis,
    relay: tuple[int, RelayState],
    environ: dict[str, str],
    stack: PaymentStack,
    operator: Any,
) -> None:
    await _failed_booking(stores, pool, redis, relay[1], environ)
    before = await _records(pool)
    unknown = str(uuid.uuid4())
    cases = [
        ("", grpc.StatusCode.INVALID_ARGUMENT, "FIELD_REQUIRED"),
        ("not-a-booking", grpc.StatusCode.INVALID_ARGUMENT, "INVALID_FIELD"),
        ("x" * 100_000, grpc.StatusCode.INVALID_ARGUMENT, "INVALID_FIELD"),
        (unknown, grpc.StatusCode.NOT_FOUND, "BOOKING_NOT_FOUND"),
    ]
    for booking_id, code, reason in cases:
        for call, request in (
            (operator.ResendTickets, mpb.ResendTicketsRequest(booking_id=booking_id)),
            (operator.ListDeliveries, mpb.ListDeliveriesRequest(booking_id=booking_id)),
        ):
            with pytest.raises(grpc.aio.AioRpcError) as raised:
                await call(request, timeout=10)
            assert raised.value.code() == code, (booking_id[:20], raised.value)
            answered = from_rpc_error(raised.value)
            assert answered.reason == reason
            if code == grpc.StatusCode.INVALID_ARGUMENT:
                assert answered.metadata["field"] == "booking_id"
            else:
                assert answered.metadata["booking_id"] == unknown
    assert await _records(pool) == before
    # The command: a malformed id is a usage error that sends nothing, an
    # unknown booking a failed call.
    address = {"payment": stack.parts.server.address}
    malformed = await run_admin(stores, address, "tickets", "resend", "not-a-booking")
    assert malformed.code == 2 and "is not a booking id" in malformed.err
    missing = await run_admin(stores, address, "tickets", "resend", unknown)
    assert missing.code == 1 and "NOT_FOUND BOOKING_NOT_FOUND" in missing.err, missing.err
    assert await _records(pool) == before
    # Only operators: the edge is refused, and nothing changes.
    async with client_channel(stores, stack.parts.server.address, access.EDGE) as channel:
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await mpb_grpc.MailAdminServiceStub(channel).ResendTickets(
                mpb.ResendTicketsRequest(booking_id=before[0][0].hex if before else unknown), timeout=10
            )
    assert refused.value.code() == grpc.StatusCode.PERMISSION_DENIED
    assert await _records(pool) == before
