"""The payment service's composition root: the one place its objects are built.

Roles (``ROLES``):

- ``payment-svc`` (role ``server``): PaymentService, its provider (the
  sandbox and its webhook delivery, or Stripe: ``BOXOFFICE_PAYMENT_PROVIDER``),
  the reconciler, the consumer that refunds cancelled bookings, and the
  loop that tells booking of claimed ticket transfers it has not
  acknowledged (:class:`~payment_svc.transfers.TicketTransfers`); it
  also serves the mailer's MailAdminService (``mail_svc.app.compose_admin``);
- ``issuer``: the ticket issuer.

Both consumers read booking's outbox stream, which booking's relay publishes.
Tests and benchmarks build through :func:`compose_server` and
:func:`compose_issuer`, replacing only what they must (:class:`Overrides`);
the clock, the registry and the settings come with the :class:`Runtime`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field

from boxoffice import audit, ticketcodes
from boxoffice.config import Env
from boxoffice.db import Migration, load_migrations
from boxoffice.lifecycle import Component, Loop
from boxoffice.runtime import Runtime
from boxoffice.server import GrpcServer
from boxoffice.streams import ConsumerHooks, ConsumerMetrics, EntryHandler, StreamConsumer, consumer_name
from mail_svc import app as mail_app
from payment_svc.adapters.booking import GrpcBookingClient
from payment_svc.adapters.idempotency import PgIdempotencyStore
from payment_svc.adapters.payments import PgPaymentStore
from payment_svc.adapters.sandbox import PM_DECLINED, PM_FAIL, PM_OK, PM_TIMEOUT, SandboxProvider
from payment_svc.adapters.stripe_provider import StripeProvider, StripeWebhooks
from payment_svc.adapters.tickets import PgTicketStore
from payment_svc.adapters.transfers import PgTransferStore
from payment_svc.adapters.webhook_events import PgWebhookStore
from payment_svc.adapters.webhook_sink import GrpcWebhookSink
from payment_svc.config import STRIPE, PaymentConfig
from payment_svc.fan_cancel import FanCancellation
from payment_svc.handler import PaymentHandler, PaymentHooks
from payment_svc.idempotency import Idempotent
from payment_svc.inflight import ChargesInFlight
from payment_svc.jobs.cancellations import CANCELLATION_GROUP, CancellationRefunds
from payment_svc.jobs.issuer import ISSUER_GROUP, TicketIssuer
from payment_svc.jobs.reconciler import Reconciler
from payment_svc.jobs.sandbox_webhooks import WebhookDelivery
from payment_svc.metrics import IssuerMetrics, ServerMetrics
from payment_svc.ports import BookingClient, IdempotencyStore, PaymentProvider, WebhookReader
from payment_svc.provider_webhooks import ProviderWebhooks
from payment_svc.servicer import PaymentServicer
from payment_svc.transfers import TicketTransfers
from payment_svc.webhooks import SignedWebhooks, WebhookVerifier

COMPONENT = "payment"
DEFAULT_GRPC_PORT = 50053
ROLES: Mapping[str, str] = {"payment-svc": "server", "issuer": "issuer"}


def migrations() -> list[Migration]:
    # The audit log of the resends it serves (MailAdminService).
    return [*audit.migrations(COMPONENT), *load_migrations(COMPONENT, "payment_svc")]


@dataclass
class Overrides:
    """What a test or a benchmark replaces; ``None`` keeps what a process builds."""

    # Default: BookingService over gRPC at BOXOFFICE_BOOKING_ADDR.
    booking: BookingClient | None = None
    # Default: the configured provider (the sandbox keeps its records in the
    # service's database).
    provider: PaymentProvider | None = None
    # Default: no hooks.
    hooks: PaymentHooks = field(default_factory=PaymentHooks)
    # Where the requests' idempotency keys live, called as
    # PgIdempotencyStore is (a control test's store drops a protection).
    idempotency_store: Callable[..., IdempotencyStore] = PgIdempotencyStore


class _Closing:
    """Closes client channels when the process stops."""

    def __init__(self, name: str, *closers: Callable[[], Awaitable[None]]) -> None:
        self.name = name
        self._closers = closers

    async def start(self) -> None:
        return None

    async def stop(self, grace_seconds: float) -> None:
        for close in self._closers:
            await close()


@dataclass(frozen=True)
class PaymentServer:
    """The ``server`` role: what it runs, and what tests and benchmarks look into."""

    config: PaymentConfig
    server: GrpcServer
    handler: PaymentHandler
    webhooks: ProviderWebhooks
    store: PgPaymentStore
    booking: BookingClient
    provider: PaymentProvider
    # The sandbox when it is the provider (tests read its records and sign as it).
    sandbox: SandboxProvider | None
    reconciler: Reconciler
    cancellations: StreamConsumer
    metrics: ServerMetrics
    hooks: PaymentHooks
    # The background loops, started after the server.
    loops: list[Component]
    # Closes the clients' channels when the process stops.
    clients: Component

    @property
    def components(self) -> list[Component]:
        return [self.server, *self.loops, self.clients]


@dataclass(frozen=True)
class Issuer:
    """The ``issuer`` role: the consumer, its handler and its metrics."""

    consumer: StreamConsumer
    handler: TicketIssuer
    metrics: IssuerMetrics


def _consumer(
    rt: Runtime,
    config: PaymentConfig,
    *,
    group: str,
    handler: EntryHandler,
    metrics: ConsumerMetrics,
    name: str | None = None,
    hooks: ConsumerHooks | None = None,
) -> StreamConsumer:
    return StreamConsumer(
        redis=rt.redis(),
        stream=config.stream,
        group=group,
        name=name or consumer_name(),
        handler=handler,
        metrics=metrics,
        batch_size=config.consumer_batch_size,
        block_ms=config.consumer_block_ms,
        claim_idle_ms=config.claim_idle_ms,
        concurrency=config.consumer_concurrency,
        hooks=hooks,
    )


def compose_server(rt: Runtime, overrides: Overrides | None = None) -> PaymentServer:
    """The ``server`` role's object graph."""
    overrides = overrides or Overrides()
    config = PaymentConfig.from_env(rt.env)
    pool = rt.pool()
    metrics = ServerMetrics.create(rt.registry)
    sandbox: SandboxProvider | None = None
    stripe_provider: StripeProvider | None = None
    provider: PaymentProvider
    reader: WebhookReader
    verifier = WebhookVerifier(config.webhook_secret_source.get, rt.clock, config.webhook_tolerance_seconds)
    if config.provider == STRIPE:
        assert config.stripe is not None
        reader = StripeWebhooks(config.webhook_secret_source.get, rt.clock, config.webhook_tolerance_seconds)
    else:
        reader = SignedWebhooks(verifier)
    if overrides.provider is not None:
        provider = overrides.provider
    elif config.stripe is not None:
        provider = stripe_provider = StripeProvider(config.stripe, call_timeout_seconds=config.provider_timeout_seconds)
    else:
        provider = sandbox = SandboxProvider(config.sandbox, rt.clock, pool)
    booking_channel: GrpcBookingClient | None = None
    booking: BookingClient
    if overrides.booking is None:
        booking = booking_channel = GrpcBookingClient(rt.channel(COMPONENT, config.booking_addr))
    else:
        booking = overrides.booking
    store = PgPaymentStore(pool)
    idempotency = overrides.idempotency_store(
        pool, retention_seconds=config.idempotency_retention_seconds, lease_seconds=config.idempotency_lease_seconds
    )
    # Asked about at once, then at most every reconcile interval.
    in_flight = ChargesInFlight(first_seconds=0.5, longest_seconds=config.reconcile_interval_seconds)
    handler = PaymentHandler(
        store=store,
        tickets=PgTicketStore(pool),
        booking=booking,
        provider=provider,
        tokens=rt.token_signer,
        config=config,
        metrics=metrics,
        in_flight=in_flight,
        hooks=overrides.hooks,
    )
    webhooks = ProviderWebhooks(
        payments=handler,
        store=store,
        webhook_events=PgWebhookStore(pool, lease_seconds=config.idempotency_lease_seconds),
        booking=booking,
        reader=reader,
        metrics=metrics,
        lease_seconds=config.idempotency_lease_seconds,
        tracing=rt.tracing,
    )
    # Claims re-issue tickets with codes signed as the issuer signs them.
    codes = ticketcodes.TicketCodeSigner(ticketcodes.read_keys(rt.env).get, rt.clock)
    transfer_store = PgTransferStore(pool, codes=codes)
    transfers = TicketTransfers(transfer_store, rt.clock, booking)
    servicer = PaymentServicer(
        handler=handler,
        webhooks=webhooks,
        idempotent=Idempotent(idempotency, lease_seconds=config.idempotency_lease_seconds),
        cancellation=FanCancellation(payments=handler, store=store, booking=booking, transfers=transfer_store),
        transfers=transfers,
    )
    # The mailer's admin contract is served here (the contract says why).
    mail_admin = mail_app.compose_admin(rt)
    server = rt.grpc_server(COMPONENT, [servicer.registration(), mail_admin.registration()])
    reconciler = Reconciler(
        payments=handler,
        store=store,
        idempotency=idempotency,
        metrics=metrics,
        in_flight=in_flight,
        interval_seconds=config.reconcile_interval_seconds,
        after_seconds=config.reconcile_after_seconds,
    )
    cancellations = _consumer(
        rt, config, group=CANCELLATION_GROUP, handler=CancellationRefunds(handler), metrics=metrics.cancellations
    )
    loops: list[Component] = []
    closers: list[Callable[[], Awaitable[None]]] = []
    if booking_channel is not None:
        closers.append(booking_channel.close)
    if stripe_provider is not None:
        closers.append(stripe_provider.close)
    if sandbox is not None and config.sandbox.webhook_mode == "auto":
        sink = GrpcWebhookSink(lambda: rt.channel(COMPONENT, server.local_address))
        loops.append(Loop("sandbox-webhooks", WebhookDelivery(sandbox, sink, pool).run))
        closers.append(sink.close)
    loops += [
        Loop("payment-reconciler", reconciler.run),
        Loop("cancellation-refunds", cancellations.run),
        Loop("transfers-to-booking", transfers.run),
    ]
    return PaymentServer(
        config=config,
        server=server,
        handler=handler,
        webhooks=webhooks,
        store=store,
        booking=booking,
        provider=provider,
        sandbox=sandbox,
        reconciler=reconciler,
        cancellations=cancellations,
        metrics=metrics,
        hooks=overrides.hooks,
        loops=loops,
        clients=_Closing("payment-clients", *closers),
    )


def compose_issuer(rt: Runtime, *, name: str | None = None, hooks: ConsumerHooks | None = None) -> Issuer:
    """The ``issuer`` role's object graph (``name`` and ``hooks`` for tests)."""
    config = PaymentConfig.from_env(rt.env)
    metrics = IssuerMetrics.create(rt.registry)
    keys = ticketcodes.read_keys(rt.env)
    codes = ticketcodes.TicketCodeSigner(keys.get, rt.clock)
    handler = TicketIssuer(PgTicketStore(rt.pool(), codes=codes), metrics, tracing=rt.tracing)
    consumer = _consumer(
        rt, config, group=ISSUER_GROUP, handler=handler, metrics=metrics.consumer, name=name, hooks=hooks
    )
    return Issuer(consumer=consumer, handler=handler, metrics=metrics)


def check_settings(env: Env) -> None:
    PaymentConfig.from_env(env)
    ticketcodes.read_keys(env)


async def build(rt: Runtime, role: str) -> list[Component]:
    if role == "server":
        return compose_server(rt).components
    if role == "issuer":
        return [Loop("ticket-issuer", compose_issuer(rt).consumer.run)]
    raise ValueError(f"unknown payment role {role!r}")


async def seed_demo(rt: Runtime) -> list[str]:
    if PaymentConfig.from_env(rt.env).provider == STRIPE:
        return ["payments go to Stripe (BOXOFFICE_PAYMENT_PROVIDER=stripe)"]
    return [f"pay in the sandbox with {PM_OK} (or {PM_DECLINED}, {PM_FAIL}, {PM_TIMEOUT})"]
