"""The mailer's composition root: the one place its objects are built.

One role (``ROLES``): ``mailer``, a consumer group on booking's outbox
stream (as the ticket issuer is) plus a sweep that sends what was left
pending (a resend, a crash between send and mark). Its relay is
``BOXOFFICE_SMTP_URL``; without one, `boxoffice up` keeps each message as an
``.eml`` file under ``<data dir>/mail/`` while ``boxoffice mailer``, the
cluster's role, refuses to start. Tests and benchmarks build through
:func:`compose_mailer`, replacing only what they must.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from email.headerregistry import Address
from pathlib import Path

from boxoffice import audit
from boxoffice.config import ConfigError, Env
from boxoffice.db import Migration, load_migrations
from boxoffice.lifecycle import Component, Loop
from boxoffice.runtime import Runtime
from boxoffice.streams import ConsumerHooks, StreamConsumer, consumer_name
from mail_svc.adapters.deliveries import PgDeliveryStore
from mail_svc.adapters.pace import SharedPace
from mail_svc.adapters.relays import EmlFolder, SmtpRelay
from mail_svc.admin import MailAdmin, MailAdminServicer
from mail_svc.config import SMTP_URL, MailConfig, addr_spec
from mail_svc.jobs.mailer import (
    MAILER_GROUP,
    Mailer,
    MailHooks,
    MailPolicy,
    OfferSweep,
    ResendSweep,
    TransferSweep,
    new_message_id,
)
from mail_svc.metrics import MailMetrics
from mail_svc.model import Kind
from mail_svc.ports import Relay
from mail_svc.render import Renderer

COMPONENT = "mail"
DEFAULT_GRPC_PORT = 50054
ROLES: Mapping[str, str] = {"mailer": "mailer"}
# `boxoffice up` runs the mailer with the others (the flag its banner reads).
UP_ENV = "BOXOFFICE_UP"


def migrations() -> list[Migration]:
    return load_migrations(COMPONENT, "mail_svc")


@dataclass(frozen=True)
class MailerRole:
    """The ``mailer`` role: what it runs, and what tests look into."""

    config: MailConfig
    consumer: StreamConsumer
    mailer: Mailer
    sweep: ResendSweep
    store: PgDeliveryStore
    relay: Relay
    metrics: MailMetrics
    # Writes to the friends of new ticket transfers.
    transfers: TransferSweep
    # Writes to the fans offered seats from a waiting list.
    offers: OfferSweep

    @property
    def components(self) -> list[Component]:
        return [
            Loop("mailer", self.consumer.run),
            Loop("mail-resends", self.sweep.run),
            Loop("mail-transfers", self.transfers.run),
            Loop("mail-offers", self.offers.run),
            _RelayCloser(self.relay),
        ]


class _RelayCloser:
    name = "mail-relay"

    def __init__(self, relay: Relay) -> None:
        self._relay = relay

    async def start(self) -> None:
        return None

    async def stop(self, grace_seconds: float) -> None:
        await self._relay.close()


def relay_of(rt: Runtime, config: MailConfig) -> Relay:
    """The configured relay (the .eml folder without one), paced at
    BOXOFFICE_MAIL_RATE for all the mailers together (the pace is in Redis)."""
    relay: Relay = SmtpRelay(config.smtp) if config.smtp is not None else EmlFolder(config.outbox_dir)
    return SharedPace(relay, rt.redis(), config.rate_per_second, rt.clock)


def compose_mailer(
    rt: Runtime,
    *,
    relay: Relay | None = None,
    name: str | None = None,
    hooks: MailHooks | None = None,
    consumer_hooks: ConsumerHooks | None = None,
) -> MailerRole:
    """The ``mailer`` role's object graph (``relay``, ``name`` and the hooks for tests)."""
    config = MailConfig.from_env(rt.env)
    store = PgDeliveryStore(rt.pool())
    metrics = MailMetrics.create(rt.registry)
    relay = relay or relay_of(rt, config)
    domain = Address(addr_spec=addr_spec(config.mail_from)).domain
    mailer = Mailer(
        store=store,
        relay=relay,
        renderer=Renderer(mail_from=config.mail_from, tickets_url=config.tickets_url, claim_url=config.claim_url),
        metrics=metrics,
        policy=MailPolicy(
            busy_attempts=config.busy_attempts,
            busy_backoff_seconds=config.busy_backoff_seconds,
            tickets_wait_seconds=config.tickets_wait_seconds,
            domain=domain,
        ),
        clock=rt.clock,
        hooks=hooks,
        tracing=rt.tracing,
    )
    consumer = StreamConsumer(
        redis=rt.redis(),
        stream=config.stream,
        group=MAILER_GROUP,
        name=name or consumer_name(),
        handler=mailer,
        metrics=metrics.consumer,
        batch_size=config.consumer_batch_size,
        block_ms=config.consumer_block_ms,
        claim_idle_ms=config.claim_idle_ms,
        concurrency=config.consumer_concurrency,
        hooks=consumer_hooks,
    )
    sweep = ResendSweep(
        mailer, store, interval_seconds=config.sweep_seconds, stale_seconds=max(config.claim_idle_ms / 1000, 1.0)
    )
    transfers = TransferSweep(mailer, store, store, interval_seconds=config.transfer_interval_seconds)
    offers = OfferSweep(mailer, store, interval_seconds=config.offer_interval_seconds)
    return MailerRole(
        config=config,
        consumer=consumer,
        mailer=mailer,
        sweep=sweep,
        store=store,
        relay=relay,
        metrics=metrics,
        transfers=transfers,
        offers=offers,
    )


def compose_admin(rt: Runtime) -> MailAdminServicer:
    """MailAdminService, for the process that serves it (PaymentService's:
    see the contract's comment). It reads and queues the mailer's records
    on the process's pool, every resend audited in the same transaction."""
    config = MailConfig.from_env(rt.env)
    domain = Address(addr_spec=addr_spec(config.mail_from)).domain

    def message_id(hold_id: str, kind: Kind) -> str:
        return new_message_id(hold_id, kind, domain)

    pool = rt.pool()
    admin = MailAdmin(store=PgDeliveryStore(pool), auditor=audit.Auditor(pool), message_id=message_id)
    return MailAdminServicer(admin)


def check_settings(env: Env) -> None:
    config = MailConfig.from_env(env)
    if config.smtp is None and env.raw(UP_ENV) != "true":
        raise ConfigError(f"the mailer needs a relay: set {SMTP_URL} (smtp://host:port or smtps://host:port)")


async def build(rt: Runtime, role: str) -> list[Component]:
    if role == "mailer":
        check_settings(rt.env)
        return compose_mailer(rt).components
    raise ValueError(f"unknown mail role {role!r}")


def banner(env: Env) -> str:
    """`boxoffice up`'s line about mail."""
    config = MailConfig.from_env(env)
    if config.smtp is None:
        try:
            shown = str(config.outbox_dir.relative_to(Path.cwd()))
        except ValueError:
            shown = str(config.outbox_dir)
        return f"{shown} (no relay set)"
    return f"smtp{'s' if config.smtp.implicit_tls else ''}://{config.smtp.name}"


async def seed_demo(rt: Runtime) -> list[str]:
    return []
