"""Composition of the payment service's processes.

- ``payment-svc`` (role server): PaymentService, the sandbox provider and
  its webhook delivery, the reconciliation job, and the consumer that
  refunds cancelled bookings;
- ``issuer``: the ticket issuer.

Booking's outbox relay publishes the stream both consumers read.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import grpc

from boxoffice.db import Migration, load_migrations
from boxoffice.lifecycle import Component, Loop
from boxoffice.runtime import Runtime
from boxoffice.server import Registration
from boxoffice.streams import StreamConsumer, consumer_name
from gen.boxoffice.payment.v1 import payment_service_pb2 as pb
from gen.boxoffice.payment.v1 import payment_service_pb2_grpc as pb_grpc
from payment_svc.booking_client import GrpcBookingClient
from payment_svc.cancellations import CANCELLATION_GROUP, CancellationRefunds
from payment_svc.config import PaymentConfig
from payment_svc.idempotency import Idempotent, PgIdempotencyStore
from payment_svc.issuer import ISSUER_GROUP, PgTicketStore, TicketIssuer
from payment_svc.metrics import IssuerMetrics, ServerMetrics
from payment_svc.payments import Payments
from payment_svc.reconciler import Reconciler
from payment_svc.sandbox import PM_DECLINED, PM_FAIL, PM_OK, PM_TIMEOUT, SandboxProvider, WebhookDelivery
from payment_svc.servicer import SERVICE_NAME, PaymentServicer
from payment_svc.store import PgPaymentStore
from payment_svc.webhook_handler import PgWebhookStore, WebhookHandler
from payment_svc.webhooks import WebhookVerifier

COMPONENT = "payment"
DEFAULT_GRPC_PORT = 50053
ROLES: Mapping[str, str] = {"payment-svc": "server", "issuer": "issuer"}


def migrations() -> list[Migration]:
    return load_migrations(COMPONENT, "payment_svc")


class GrpcWebhookSink:
    """Delivers the sandbox's webhooks to PaymentService over gRPC."""

    def __init__(self, address: Callable[[], str]) -> None:
        self._address = address
        self._channel: grpc.aio.Channel | None = None
        self._stub: Any = None

    async def deliver(self, signature: str, body: bytes) -> None:
        if self._stub is None:
            self._channel = grpc.aio.insecure_channel(self._address())
            self._stub = pb_grpc.PaymentServiceStub(self._channel)
        await self._stub.HandleProviderWebhook(
            pb.HandleProviderWebhookRequest(signature=signature, body=body), timeout=10
        )

    async def close(self) -> None:
        if self._channel is not None:
            await self._channel.close()


class _Closing:
    """Closes client channels when the process stops."""

    def __init__(self, name: str, *closers: Callable[[], Any]) -> None:
        self.name = name
        self._closers = closers

    async def start(self) -> None:
        return None

    async def stop(self, grace_seconds: float) -> None:
        for close in self._closers:
            await close()


async def build(rt: Runtime, role: str) -> list[Component]:
    config = PaymentConfig.from_env(rt.env)
    if role == "server":
        return _server(rt, config)
    if role == "issuer":
        pool = rt.pool()
        metrics = IssuerMetrics.create(rt.registry)
        consumer = StreamConsumer(
            redis=rt.redis(),
            stream=config.stream,
            group=ISSUER_GROUP,
            name=consumer_name(),
            handler=TicketIssuer(pool, metrics),
            metrics=metrics.consumer,
            batch_size=config.consumer_batch_size,
            block_ms=config.consumer_block_ms,
            claim_idle_ms=config.claim_idle_ms,
            concurrency=config.consumer_concurrency,
        )
        return [Loop("ticket-issuer", consumer.run)]
    raise ValueError(f"unknown payment role {role!r}")


def _server(rt: Runtime, config: PaymentConfig) -> list[Component]:
    pool = rt.pool()
    metrics = ServerMetrics.create(rt.registry)
    provider = SandboxProvider(config.sandbox, rt.clock, pool)
    booking = GrpcBookingClient(config.booking_addr)
    store = PgPaymentStore(pool)
    payments = Payments(
        store=store, booking=booking, provider=provider, tokens=rt.token_signer, config=config, metrics=metrics
    )
    idempotency = PgIdempotencyStore(
        pool, retention_seconds=config.idempotency_retention_seconds, lock_seconds=config.idempotency_lock_seconds
    )
    webhooks = WebhookHandler(
        verifier=WebhookVerifier(config.webhook_secrets, rt.clock, config.webhook_tolerance_seconds),
        store=PgWebhookStore(pool, lock_seconds=config.idempotency_lock_seconds),
        payments=payments,
        metrics=metrics,
    )
    servicer = PaymentServicer(
        payments=payments,
        idempotent=Idempotent(idempotency),
        webhooks=webhooks,
        tickets=PgTicketStore(pool),
        tokens=rt.token_signer,
    )
    server = rt.grpc_server(
        COMPONENT,
        [Registration(SERVICE_NAME, lambda s: pb_grpc.add_PaymentServiceServicer_to_server(servicer, s))],
    )
    reconciler = Reconciler(
        payments=payments,
        store=store,
        idempotency=idempotency,
        metrics=metrics,
        interval_seconds=config.reconcile_interval_seconds,
        after_seconds=config.reconcile_after_seconds,
    )
    cancellations = StreamConsumer(
        redis=rt.redis(),
        stream=config.stream,
        group=CANCELLATION_GROUP,
        name=consumer_name(),
        handler=CancellationRefunds(payments),
        metrics=metrics.cancellations,
        batch_size=config.consumer_batch_size,
        block_ms=config.consumer_block_ms,
        claim_idle_ms=config.claim_idle_ms,
        concurrency=config.consumer_concurrency,
    )
    sink = GrpcWebhookSink(lambda: server.address)
    components: list[Component] = [server]
    if config.sandbox.webhook_mode == "auto":
        components.append(Loop("sandbox-webhooks", WebhookDelivery(provider, sink, pool).run))
    components += [
        Loop("payment-reconciler", reconciler.run),
        Loop("cancellation-refunds", cancellations.run),
        _Closing("payment-clients", booking.close, sink.close),
    ]
    return components


async def seed_demo(rt: Runtime) -> list[str]:
    return [f"pay in the sandbox with {PM_OK} (or {PM_DECLINED}, {PM_FAIL}, {PM_TIMEOUT})"]
