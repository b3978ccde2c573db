"""The payment tests' harness: PaymentService as ``boxoffice payment-svc``
composes it (:func:`payment_svc.app.compose_server`) on a loopback port
against the test stores, with the sandbox provider in manual mode; the
ticket issuer as ``boxoffice issuer`` composes it; and an in-memory
BookingService stand-in that writes the outbox as booking does (the proof
tests use the real BookingService instead)."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import secrets
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, cast

import grpc
import redis.asyncio as aioredis
from prometheus_client import CollectorRegistry

from boxoffice import access, db
from boxoffice.errors import (
    BoxofficeError,
    FailedPrecondition,
    NotFound,
    PermissionDenied,
    Unavailable,
    from_rpc_error,
)
from boxoffice.runtime import Pool, Runtime
from boxoffice.streams import ConsumerHooks, StreamConsumer
from boxoffice.tokens import TokenSigner
from gen.boxoffice.payment.v1 import payment_service_pb2 as pb
from gen.boxoffice.payment.v1 import payment_service_pb2_grpc as pb_grpc
from payment_svc import app as payment_app
from payment_svc.adapters.idempotency import PgIdempotencyStore
from payment_svc.adapters.payments import PgPaymentStore
from payment_svc.adapters.sandbox import SandboxProvider
from payment_svc.handler import PaymentHooks
from payment_svc.jobs.issuer import TicketIssuer
from payment_svc.jobs.reconciler import Reconciler
from payment_svc.model import ClaimedTransfer, Payment
from payment_svc.ports import BookingClient, CancelledBooking, HoldState, HoldView, IdempotencyStore
from tests.edge.asserting import edge_mesh_client
from tests.support import ManualClock, Stores, make_runtime, running

WEBHOOK_SECRET = "whsec_payment_tests_0123456789"

# The settings every payment test runs with: the sandbox answers at once and
# keeps its webhooks for the test to deliver; a charge that hangs settles
# after 0.2 s; the reconciler takes only what a test ages.
PAYMENT_ENV = {
    "BOXOFFICE_DEFAULT_DEADLINE_SECONDS": "10",
    "BOXOFFICE_DB_POOL_MAX": "10",
    "BOXOFFICE_WEBHOOK_SECRETS": WEBHOOK_SECRET,
    "BOXOFFICE_SANDBOX_WEBHOOK_MODE": "manual",
    "BOXOFFICE_SANDBOX_DELAY_SECONDS": "0",
    "BOXOFFICE_PROVIDER_TIMEOUT_SECONDS": "1",
    "BOXOFFICE_SANDBOX_HANG_SECONDS": "5",
    "BOXOFFICE_SANDBOX_TIMEOUT_SETTLE_SECONDS": "0.2",
    "BOXOFFICE_RECONCILE_AFTER_SECONDS": "3600",
}


# The fan the test edge asserts for a payment call that names none it knows
# (a payment it did not see started): the customer most tests buy as.
DEFAULT_FAN = "alice"


def new_event_id() -> int:
    return secrets.randbelow(2**40) + 1


@dataclass
class FakeHold:
    view: HoldView
    section_id: str
    seats: list[dict[str, Any]]
    quantity: int
    confirm_key: str = ""


@dataclass
class FakeBooking:
    """BookingService's payment-facing calls, in memory; a confirm writes the
    BookingConfirmed outbox row and a cancel the BookingCancelled one as
    booking does."""

    pool: Pool
    tokens: TokenSigner
    holds: dict[str, FakeHold] = field(default_factory=dict)
    confirm_calls: int = 0
    extend_calls: int = 0
    cancel_calls: int = 0
    # The expiries restore_hold_expiry was asked to give back.
    restore_calls: list[datetime] = field(default_factory=list)
    # What the event's refund policy grants on a cancellation, in percent.
    refund_percent: int = 100
    # The claimed transfers payment told of, by id.
    transfers: dict[str, ClaimedTransfer] = field(default_factory=dict)

    def add_hold(
        self, *, event_id: int, customer_id: str, amount_minor: int = 5000, seats: list[int] | None = None
    ) -> str:
        hold_id = str(uuid.uuid4())
        seat_list = [{"seat_id": s, "label": f"A-1-{s}"} for s in (seats or [])]
        self.holds[hold_id] = FakeHold(
            HoldView(hold_id, event_id, customer_id, HoldState.HELD, amount_minor, "EUR", ""),
            "A",
            seat_list,
            len(seat_list) or 2,
        )
        return hold_id

    def set_state(self, hold_id: str, state: HoldState) -> None:
        hold = self.holds[hold_id]
        hold.view = dataclasses.replace(hold.view, state=state)

    async def get_hold(self, access_token: str, hold_id: str) -> HoldView:
        hold = self.holds.get(hold_id)
        if hold is None:
            raise NotFound("no such hold", reason="HOLD_NOT_FOUND")
        claims = self.tokens.verify(access_token, event_id=hold.view.event_id)
        if claims.customer_id != hold.view.customer_id:
            raise PermissionDenied("not yours", reason="HOLD_NOT_OWNED")
        return hold.view

    async def extend_hold(self, hold_id: str, customer_id: str, extend_by_seconds: int) -> HoldView:
        self.extend_calls += 1
        hold = self.holds[hold_id]
        if hold.view.state != HoldState.HELD:
            raise FailedPrecondition("gone", reason="HOLD_EXPIRED")
        return hold.view

    async def restore_hold_expiry(self, hold_id: str, customer_id: str, expires_at: datetime) -> HoldView:
        self.restore_calls.append(expires_at)
        return self.holds[hold_id].view

    async def confirm_hold(
        self, hold_id: str, idempotency_key: str, payment_id: str, amount_minor: int, currency: str
    ) -> HoldView:
        self.confirm_calls += 1
        hold = self.holds.get(hold_id)
        if hold is None:  # another test's hold: not this stand-in's to judge
            raise Unavailable("unknown to this stand-in", reason="UNAVAILABLE")
        if hold.view.state == HoldState.CONFIRMED and hold.confirm_key == idempotency_key:
            return hold.view
        if hold.view.state != HoldState.HELD:
            raise FailedPrecondition("the hold expired", reason="HOLD_EXPIRED")
        v = hold.view
        payload = {
            "event_id": v.event_id,
            "hold_id": hold_id,
            "customer_id": v.customer_id,
            "section_id": hold.section_id,
            "seats": hold.seats,
            "quantity": hold.quantity,
            "payment_id": payment_id,
            "amount_minor": amount_minor,
            "currency": currency,
        }
        await insert_outbox(self.pool, hold_id, "BookingConfirmed", payload)
        hold.view = dataclasses.replace(v, state=HoldState.CONFIRMED, payment_id=payment_id)
        hold.confirm_key = idempotency_key
        return hold.view

    async def cancel_booking(
        self,
        hold_id: str,
        customer_id: str,
        reason: str,
        *,
        refunded_at_provider: bool = False,
        quoted_refund: tuple[int, str] | None = None,
    ) -> CancelledBooking:
        """Cancel as booking does, with a policy of ``refund_percent`` (100
        unless a test sets it): the BookingCancelled outbox row, once; for
        money given back at the provider, whatever the policy, for nothing."""
        self.cancel_calls += 1
        hold = self.holds[hold_id]
        v = hold.view
        refund = 0 if refunded_at_provider else v.amount_minor * self.refund_percent // 100
        if quoted_refund is not None:
            refund = min(refund, quoted_refund[0])
        if v.state == HoldState.CANCELLED:
            return CancelledBooking(v, refund)
        if v.state != HoldState.CONFIRMED:
            raise FailedPrecondition("not a confirmed booking", reason="BOOKING_NOT_CONFIRMED")
        if refund <= 0 and not refunded_at_provider:
            raise FailedPrecondition("the policy grants nothing", reason="REFUND_NOT_ALLOWED")
        payload = {
            "event_id": v.event_id,
            "hold_id": hold_id,
            "customer_id": v.customer_id,
            "payment_id": v.payment_id,
            "refund_amount_minor": refund,
            "currency": v.currency,
            "reason": reason,
        }
        await insert_outbox(self.pool, hold_id, "BookingCancelled", payload)
        hold.view = dataclasses.replace(v, state=HoldState.CANCELLED)
        return CancelledBooking(hold.view, refund)

    async def record_ticket_transfer(self, transfer: ClaimedTransfer) -> None:
        self.transfers.setdefault(transfer.transfer_id, transfer)


def fake_booking(rt: Runtime) -> FakeBooking:
    """The stand-in, on the payment process's pool and token keys."""
    return FakeBooking(rt.pool(), rt.token_signer)


def _compliance(booking: FakeBooking) -> BookingClient:
    return booking


async def insert_outbox(pool: Pool, aggregate_id: str, kind: str, payload: dict[str, Any]) -> str:
    event_id = str(uuid.uuid4())
    async with db.transaction(pool) as conn:
        await conn.execute(
            "INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload) VALUES (%s, 'booking', %s, %s, %s)",
            (event_id, aggregate_id, kind, json.dumps(payload)),
        )
    return event_id


@contextlib.asynccontextmanager
async def open_pool(stores: Stores, max_size: int = 10) -> AsyncIterator[Pool]:
    pool = db.create_pool(stores.database_url, min_size=1, max_size=max_size, name="test-payment")
    await pool.open(wait=True)
    try:
        yield pool
    finally:
        await pool.close()


@contextlib.asynccontextmanager
async def open_redis(stores: Stores) -> AsyncIterator[aioredis.Redis]:
    client = (
        cast(aioredis.Redis, aioredis.RedisCluster.from_url(stores.redis_url))
        if stores.redis_cluster
        else aioredis.Redis.from_url(stores.redis_url)
    )
    try:
        yield client
    finally:
        await client.aclose()


@dataclass
class PaymentStack:
    """A PaymentService served on loopback and what tests look into."""

    parts: payment_app.PaymentServer
    rt: Runtime
    booking: BookingClient
    channel: grpc.aio.Channel
    stub: Any
    # The operator's stub, for what only operators may (anyone's payment).
    operator: Any = None

    @property
    def provider(self) -> SandboxProvider:
        assert self.parts.sandbox is not None
        return self.parts.sandbox

    @property
    def store(self) -> PgPaymentStore:
        return self.parts.store

    @property
    def reconciler(self) -> Reconciler:
        return self.parts.reconciler

    @property
    def hooks(self) -> PaymentHooks:
        return self.parts.hooks

    @property
    def registry(self) -> CollectorRegistry:
        return self.rt.registry

    @property
    def pool(self) -> Pool:
        return self.rt.pool()

    @property
    def tokens(self) -> TokenSigner:
        return self.rt.token_signer


@contextlib.asynccontextmanager
async def payment_stack(
    stores: Stores,
    *,
    booking: Callable[[Runtime], BookingClient] | None = None,
    environ: dict[str, str] | None = None,
    clock: ManualClock | None = None,
    idempotency_store: Callable[..., IdempotencyStore] = PgIdempotencyStore,
) -> AsyncIterator[PaymentStack]:
    """The ``server`` role's gRPC server (its background loops are left to the
    test to drive: ``stack.reconciler``, ``stack.parts.cancellations``).
    ``booking`` makes the BookingService client from the runtime; without it
    the app's own calls BOXOFFICE_BOOKING_ADDR. ``idempotency_store``
    replaces the store of the requests' keys (a control's)."""
    rt = make_runtime(stores, environ={**PAYMENT_ENV, **(environ or {})}, clock=clock)
    client = booking(rt) if booking is not None else None
    parts = payment_app.compose_server(rt, payment_app.Overrides(booking=client, idempotency_store=idempotency_store))
    async with (
        running([*rt.infrastructure(), parts.server, parts.clients]),
        edge_mesh_client(stores, parts.server.address, fan=DEFAULT_FAN) as mesh,
    ):
        # Each call goes as a role the authorization table allows it;
        # ``channel`` is the edge's.
        yield PaymentStack(
            parts=parts,
            rt=rt,
            booking=parts.booking,
            channel=mesh.channel(access.EDGE),
            stub=mesh.stub(pb_grpc.PaymentServiceStub),
            operator=mesh.stub(pb_grpc.PaymentServiceStub, role=access.OPERATOR),
        )


@dataclass(frozen=True)
class RunningIssuer:
    """A ticket issuer as its process composes it, and its metrics registry."""

    consumer: StreamConsumer
    handler: TicketIssuer
    registry: CollectorRegistry


IssuerFactory = Callable[..., Awaitable[RunningIssuer]]


@contextlib.asynccontextmanager
async def issuers(stores: Stores, stream: str) -> AsyncIterator[IssuerFactory]:
    """Make ticket issuers on ``stream`` as ``boxoffice issuer`` composes
    them, each in a runtime of its own (its own registry); all stop at the end.

    The factory takes ``name``, and optionally ``hooks``, ``claim_idle_ms``
    and ``redis_url`` (another Redis than the suite's)."""
    async with contextlib.AsyncExitStack() as stack:

        async def make(
            name: str,
            *,
            hooks: ConsumerHooks | None = None,
            claim_idle_ms: int = 60_000,
            redis_url: str | None = None,
        ) -> RunningIssuer:
            environ = {
                "BOXOFFICE_TICKET_STREAM": stream,
                "BOXOFFICE_CONSUMER_BLOCK_MS": "1",
                "BOXOFFICE_CONSUMER_CLAIM_IDLE_MS": str(claim_idle_ms),
                "BOXOFFICE_DB_POOL_MIN": "1",
                "BOXOFFICE_DB_POOL_MAX": "4",
            }
            own = stores if redis_url is None else dataclasses.replace(stores, redis_url=redis_url, redis_cluster=False)
            rt = make_runtime(own, environ=environ)
            issuer = payment_app.compose_issuer(rt, name=name, hooks=hooks)
            await stack.enter_async_context(running(rt.infrastructure()))
            return RunningIssuer(issuer.consumer, issuer.handler, rt.registry)

        yield make


@dataclass(frozen=True)
class ConfirmRace:
    """What concurrent ConfirmPayment calls with one key answered."""

    answers: list[pb.ConfirmPaymentResponse]
    refused: list[BoxofficeError]
    # The refused calls made again once the first had answered.
    retried: list[pb.ConfirmPaymentResponse]
    # How many calls reached BookingService.ConfirmHold's window.
    executions: int


async def race_confirms(stack: PaymentStack, request: pb.ConfirmPaymentRequest, calls: int = 50) -> ConfirmRace:
    """``calls`` ConfirmPayment calls with one key at once; whichever reaches
    the confirm is held there until every other call has answered."""
    release = asyncio.Event()
    executions = 0

    async def window(payment: Payment) -> None:
        nonlocal executions
        executions += 1
        await release.wait()

    stack.hooks.before_confirm_hold = window
    try:
        running_calls: list[asyncio.Future[Any]] = [
            asyncio.ensure_future(stack.stub.ConfirmPayment(request)) for _ in range(calls)
        ]
        pending = set(running_calls)
        while len(pending) > 1:
            _, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
        release.set()
        results = await asyncio.gather(*running_calls, return_exceptions=True)
    finally:
        release.set()
        stack.hooks.before_confirm_hold = None
    answers = [r for r in results if not isinstance(r, BaseException)]
    refused = [from_rpc_error(r) for r in results if isinstance(r, grpc.aio.AioRpcError)]
    retried = list(await asyncio.gather(*(stack.stub.ConfirmPayment(request) for _ in refused)))
    return ConfirmRace(answers, refused, retried, executions)


async def confirms_all_in_the_window(
    stack: PaymentStack, request: pb.ConfirmPaymentRequest, calls: int = 50
) -> tuple[list[pb.ConfirmPaymentResponse], list[BoxofficeError], int]:
    """For a control: ``calls`` ConfirmPayment calls with one key at once,
    each that reaches BookingService.ConfirmHold's window held there until
    all ``calls`` have (a service that lets only one through fails here
    after a minute); (the answers, the refusals, how many reached the
    window)."""
    all_in = asyncio.Event()
    executions = 0

    async def window(payment: Payment) -> None:
        nonlocal executions
        executions += 1
        if executions == calls:
            all_in.set()
        async with asyncio.timeout(60):
            await all_in.wait()

    stack.hooks.before_confirm_hold = window
    try:
        results = await asyncio.gather(
            *(stack.stub.ConfirmPayment(request) for _ in range(calls)), return_exceptions=True
        )
    finally:
        stack.hooks.before_confirm_hold = None
    answers = [r for r in results if isinstance(r, pb.ConfirmPaymentResponse)]
    refused = [from_rpc_error(r) for r in results if isinstance(r, grpc.aio.AioRpcError)]
    assert len(answers) + len(refused) == calls, results
    return answers, refused, executions


async def snapshot(pool: Pool, hold_ids: list[str]) -> dict[str, Any]:
    """Everything the payment side holds about these holds: compared before
    and after a refused request to show it changed nothing."""
    async with db.transaction(pool) as conn:
        result: dict[str, Any] = {}
        for table, column in (
            ("payments", "hold_id"),
            ("tickets", "hold_id"),
        ):
            cur = await conn.execute(
                f"SELECT * FROM {table} WHERE {column} = ANY(%s::uuid[]) ORDER BY 1",
                (hold_ids,),
            )
            result[table] = await cur.fetchall()
        cur = await conn.execute(
            "SELECT * FROM refunds WHERE payment_id IN (SELECT payment_id FROM payments WHERE hold_id = ANY(%s::uuid[]))"
            " ORDER BY 1",
            (hold_ids,),
        )
        result["refunds"] = await cur.fetchall()
        cur = await conn.execute(
            "SELECT * FROM webhook_events WHERE payment_id IN "
            "(SELECT payment_id FROM payments WHERE hold_id = ANY(%s::uuid[])) ORDER BY 1",
            (hold_ids,),
        )
        result["webhooks"] = await cur.fetchall()
        cur = await conn.execute("SELECT * FROM outbox WHERE aggregateid = ANY(%s) ORDER BY seq", (hold_ids,))
        result["outbox"] = await cur.fetchall()
    return result


async def age(pool: Pool, payment_id: str, seconds: int = 7200) -> None:
    """Make a payment look untouched for a while (the reconciler's input)."""
    async with db.transaction(pool) as conn:
        await conn.execute(
            "UPDATE payments SET updated_at = now() - make_interval(secs => %s) WHERE payment_id = %s",
            (seconds, payment_id),
        )
