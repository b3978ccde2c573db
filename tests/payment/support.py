"""Helpers for the payment tests: a PaymentService on a real loopback gRPC
server against the test stores, with the sandbox provider in manual mode,
and an in-memory BookingService stand-in that writes the outbox as booking
does (the proof tests use the real BookingService instead)."""

from __future__ import annotations

import contextlib
import json
import secrets
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import grpc
import redis.asyncio as aioredis
from prometheus_client import CollectorRegistry

from boxoffice import db
from boxoffice.clock import Clock, SystemClock
from boxoffice.config import Env, ServerConfig
from boxoffice.errors import FailedPrecondition, NotFound, PermissionDenied, Unavailable
from boxoffice.metrics import GrpcServerMetrics
from boxoffice.runtime import Pool
from boxoffice.server import Drain, GrpcServer, Registration
from boxoffice.tokens import TokenSigner
from gen.boxoffice.payment.v1 import payment_service_pb2_grpc as pb_grpc
from payment_svc.booking_client import BookingClient, HoldState, HoldView
from payment_svc.config import PaymentConfig
from payment_svc.idempotency import Idempotent, PgIdempotencyStore
from payment_svc.issuer import PgTicketStore
from payment_svc.metrics import ServerMetrics
from payment_svc.payments import PaymentHooks, Payments
from payment_svc.reconciler import Reconciler
from payment_svc.sandbox import SandboxProvider
from payment_svc.servicer import SERVICE_NAME, PaymentServicer
from payment_svc.store import PgPaymentStore
from payment_svc.webhook_handler import PgWebhookStore, WebhookHandler
from payment_svc.webhooks import WebhookVerifier
from tests.support import Stores

TOKEN_KEYS = {"test": b"payment-tests-signing-key-0123456789"}
WEBHOOK_SECRET = "whsec_payment_tests_0123456789"


def new_event_id() -> int:
    return secrets.randbelow(2**40) + 1


def signer(clock: Clock | None = None) -> TokenSigner:
    return TokenSigner(TOKEN_KEYS, "test", clock or SystemClock())


def payment_config(**environ: str) -> PaymentConfig:
    env = {
        "BOXOFFICE_WEBHOOK_SECRETS": WEBHOOK_SECRET,
        "BOXOFFICE_SANDBOX_WEBHOOK_MODE": "manual",
        "BOXOFFICE_SANDBOX_DELAY_SECONDS": "0",
        "BOXOFFICE_PROVIDER_TIMEOUT_SECONDS": "1",
        "BOXOFFICE_SANDBOX_HANG_SECONDS": "5",
        "BOXOFFICE_SANDBOX_TIMEOUT_SETTLE_SECONDS": "0.2",
        "BOXOFFICE_RECONCILE_AFTER_SECONDS": "3600",
        **environ,
    }
    return PaymentConfig.from_env(Env(env))


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
    BookingConfirmed outbox row as booking does."""

    pool: Pool
    tokens: TokenSigner
    holds: dict[str, FakeHold] = field(default_factory=dict)
    confirm_calls: int = 0
    extend_calls: int = 0

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
        v = hold.view
        hold.view = HoldView(v.hold_id, v.event_id, v.customer_id, state, v.amount_minor, v.currency, v.payment_id)

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
        hold.view = HoldView(
            v.hold_id, v.event_id, v.customer_id, HoldState.CONFIRMED, v.amount_minor, v.currency, payment_id
        )
        hold.confirm_key = idempotency_key
        return hold.view


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
    client = aioredis.Redis.from_url(stores.redis_url)
    try:
        yield client
    finally:
        await client.aclose()


@dataclass
class PaymentStack:
    """A PaymentService served on loopback and what tests look into."""

    address: str
    channel: grpc.aio.Channel
    stub: Any
    provider: SandboxProvider
    payments: Payments
    store: PgPaymentStore
    reconciler: Reconciler
    metrics: ServerMetrics
    registry: CollectorRegistry
    pool: Pool
    tokens: TokenSigner
    hooks: PaymentHooks


@contextlib.asynccontextmanager
async def payment_stack(
    pool: Pool,
    booking: BookingClient,
    *,
    tokens: TokenSigner | None = None,
    clock: Clock | None = None,
    config: PaymentConfig | None = None,
) -> AsyncIterator[PaymentStack]:
    clock = clock or SystemClock()
    tokens = tokens or signer(clock)
    config = config or payment_config()
    registry = CollectorRegistry()
    metrics = ServerMetrics.create(registry)
    provider = SandboxProvider(config.sandbox, clock, pool)
    store = PgPaymentStore(pool)
    hooks = PaymentHooks()
    payments = Payments(
        store=store, booking=booking, provider=provider, tokens=tokens, config=config, metrics=metrics, hooks=hooks
    )
    idempotency = PgIdempotencyStore(
        pool, retention_seconds=config.idempotency_retention_seconds, lock_seconds=config.idempotency_lock_seconds
    )
    webhooks = WebhookHandler(
        verifier=WebhookVerifier(config.webhook_secrets, clock, config.webhook_tolerance_seconds),
        store=PgWebhookStore(pool, lock_seconds=config.idempotency_lock_seconds),
        payments=payments,
        metrics=metrics,
    )
    servicer = PaymentServicer(
        payments=payments,
        idempotent=Idempotent(idempotency),
        webhooks=webhooks,
        tickets=PgTicketStore(pool),
        tokens=tokens,
    )
    server = GrpcServer(
        name="payment",
        config=ServerConfig.from_env(Env({"BOXOFFICE_DEFAULT_DEADLINE_SECONDS": "10"}), default_grpc_port=0),
        metrics=GrpcServerMetrics.create(registry),
        services=[Registration(SERVICE_NAME, lambda s: pb_grpc.add_PaymentServiceServicer_to_server(servicer, s))],
        drain=Drain(),
    )
    reconciler = Reconciler(
        payments=payments,
        store=store,
        idempotency=idempotency,
        metrics=metrics,
        interval_seconds=config.reconcile_interval_seconds,
        after_seconds=config.reconcile_after_seconds,
    )
    await server.start()
    channel = grpc.aio.insecure_channel(server.address)
    try:
        yield PaymentStack(
            address=server.address,
            channel=channel,
            stub=pb_grpc.PaymentServiceStub(channel),
            provider=provider,
            payments=payments,
            store=store,
            reconciler=reconciler,
            metrics=metrics,
            registry=registry,
            pool=pool,
            tokens=tokens,
            hooks=hooks,
        )
    finally:
        await channel.close()
        await server.stop(0)


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
