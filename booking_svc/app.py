"""The booking service's composition root: the only place its objects are
built. Roles: ``server`` (BookingService with its seat gauges and hold
batcher), ``sweeper`` (hold expiry) and ``relay`` (the outbox relay).

Tests and benchmarks build through here too, replacing what they need with
:class:`Overrides` (a store class that skips a protection, the store's test
pause, a gate) instead of rebuilding the object graph by hand.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from booking_svc import demo
from booking_svc.adapters.gate import OpenGate, RedisSeatGate
from booking_svc.adapters.postgres import PgBookingStore, Pool
from booking_svc.admin_servicer import AuditedBookingServicer, BookingAdmin, BookingAdminServicer
from booking_svc.config import BookingConfig, RelayConfig
from booking_svc.handler import BookingHandler
from booking_svc.jobs.gauges import SeatGauges
from booking_svc.jobs.health import health_publisher
from booking_svc.jobs.relay import OutboxRelay
from booking_svc.jobs.stock import StockPublisher
from booking_svc.jobs.sweeper import Sweeper
from booking_svc.metrics import BookingMetrics, RelayMetrics, SweeperMetrics
from booking_svc.ports import SeatGate
from booking_svc.seatmap import SeatMapCache
from booking_svc.waitlist import Waitlist, WaitlistOfferer
from boxoffice import audit
from boxoffice.config import Env
from boxoffice.db import Migration, load_migrations
from boxoffice.lifecycle import Component, Loop
from boxoffice.runtime import Runtime
from boxoffice.server import GrpcServer
from boxoffice.sessions import EndedSessionsView

COMPONENT = "booking"
DEFAULT_GRPC_PORT = 50052
ROLES: Mapping[str, str] = {"booking-svc": "server", "sweeper": "sweeper", "relay": "relay"}

StoreClass = Callable[..., PgBookingStore]


@dataclass(frozen=True)
class Overrides:
    """What a test or a benchmark replaces in the object graph.

    ``store_class`` is called as :class:`PgBookingStore` is (a subclass
    that drops a protection, for the control half of a race test);
    ``race_pause_seconds`` is the store's test pause; ``gate`` replaces the
    configured seat gate."""

    store_class: StoreClass = PgBookingStore
    race_pause_seconds: float = 0.0
    gate: SeatGate | None = None


@dataclass(frozen=True)
class BookingServer:
    """The server role's objects, for a caller that needs more than its
    components (a test harness reads the store and the metrics)."""

    config: BookingConfig
    store: PgBookingStore
    metrics: BookingMetrics
    handler: BookingHandler
    grpc: GrpcServer
    components: list[Component] = field(default_factory=list)


def migrations() -> list[Migration]:
    return [*audit.migrations(COMPONENT), *load_migrations(COMPONENT, "booking_svc")]


def build_store(pool: Pool, config: BookingConfig, overrides: Overrides | None = None) -> PgBookingStore:
    """The Postgres store with the configured hold batching."""
    overrides = overrides or Overrides()
    return overrides.store_class(
        pool,
        race_pause_seconds=overrides.race_pause_seconds,
        hold_batch_max=config.hold_batch_max,
        hold_batches_in_flight=config.hold_batches_in_flight,
        hold_batch_overlap_min=config.hold_batch_overlap_min or None,
        hold_batch_linger_seconds=config.hold_batch_linger_seconds,
    )


def build_server(rt: Runtime, overrides: Overrides | None = None) -> BookingServer:
    overrides = overrides or Overrides()
    config = BookingConfig.from_env(rt.env)
    store = build_store(rt.pool(), config, overrides)
    metrics = BookingMetrics.create(rt.registry)
    gate: SeatGate = overrides.gate or (
        RedisSeatGate(rt.redis(), ttl_seconds=config.seat_gate_ttl_seconds, metrics=metrics)
        if config.seat_gate
        else OpenGate()
    )
    # Ended shopping sessions, read from Redis every second (see boxoffice.sessions).
    sessions = EndedSessionsView(rt.redis(), rt.clock)
    handler = BookingHandler(
        store=store,
        signer=rt.token_signer,
        clock=rt.clock,
        gate=gate,
        seat_maps=SeatMapCache(
            store,
            rt.clock,
            max_age_seconds=config.seat_map_max_age_seconds,
            load_seconds=rt.server.default_deadline_seconds,
        ),
        metrics=metrics,
        config=config,
        sessions=sessions,
    )
    # The admin API runs the same use cases; inside an audited action the
    # store's transactions join the action's (boxoffice.db.joining).
    admin = BookingAdmin(
        handler=handler,
        auditor=audit.Auditor(rt.pool()),
        waitlist=Waitlist(store, store, rt.token_signer, rt.clock),
    )
    server = rt.grpc_server(
        COMPONENT, [AuditedBookingServicer(handler, admin).registration(), BookingAdminServicer(admin).registration()]
    )
    gauges = SeatGauges(
        store, metrics, rt.clock, interval_seconds=config.stats_interval_seconds, sections=config.seat_gauge_sections
    )
    stock = StockPublisher(store, rt.redis(), rt.clock, interval_seconds=config.stock_interval_seconds)
    offerer = WaitlistOfferer(store, rt.clock, metrics, interval_seconds=config.waitlist_interval_seconds)
    # The hold batcher, as a component, waits for its batches in flight on
    # the way out (it takes new calls until the server stops).
    batcher: list[Component] = [] if store.hold_batcher is None else [store.hold_batcher]
    return BookingServer(
        config,
        store,
        metrics,
        handler,
        server,
        [
            server,
            Loop("booking-ended-sessions", sessions.run),
            Loop("booking-seat-gauges", gauges.run),
            health_publisher(rt),
            Loop("booking-stock", stock.run),
            Loop("booking-waitlist", offerer.run),
            *batcher,
        ],
    )


def build_sweeper(rt: Runtime) -> Sweeper:
    config = BookingConfig.from_env(rt.env)
    return Sweeper(
        build_store(rt.pool(), config),
        rt.clock,
        SweeperMetrics.create(rt.registry),
        interval_seconds=config.sweep_interval_seconds,
        batch_size=config.sweep_batch_size,
        request_id_ttl_seconds=config.request_id_ttl_seconds,
    )


def build_relay(rt: Runtime) -> OutboxRelay:
    relay_config = RelayConfig.from_env(rt.env)
    return OutboxRelay(
        pool=rt.pool(),
        redis=rt.redis(),
        stream=relay_config.stream,
        groups=relay_config.groups,
        metrics=RelayMetrics.create(rt.registry),
        batch_size=relay_config.batch_size,
        idle_seconds=relay_config.idle_seconds,
        repair_group=relay_config.repair_group,
        repair_after_seconds=relay_config.repair_after_seconds,
    )


def check_settings(env: Env) -> None:
    BookingConfig.from_env(env)
    RelayConfig.from_env(env)


async def build(rt: Runtime, role: str, overrides: Overrides | None = None) -> list[Component]:
    if role == "server":
        return build_server(rt, overrides).components
    if role == "sweeper":
        return [Loop("booking-sweeper", build_sweeper(rt).run)]
    if role == "relay":
        return [Loop("outbox-relay", build_relay(rt).run)]
    raise ValueError(f"booking has no role {role!r}")


async def seed_demo(rt: Runtime) -> list[str]:
    return [await demo.seed(build_store(rt.pool(), BookingConfig.from_env(rt.env)), rt.clock)]
