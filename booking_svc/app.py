"""Composition of the booking service's processes: the BookingService server
(with its seat gauges), the hold-expiry sweeper and the outbox relay."""

from __future__ import annotations

from collections.abc import Mapping

from booking_svc import demo
from booking_svc.config import BookingConfig, RelayConfig
from booking_svc.gate import OpenGate, RedisSeatGate, SeatGate
from booking_svc.handler import BookingHandler
from booking_svc.jobs.relay import OutboxRelay
from booking_svc.metrics import BookingMetrics, RelayMetrics, SweeperMetrics
from booking_svc.seatmap import SeatMapCache
from booking_svc.servicer import BookingServicer
from booking_svc.stats import SeatGauges
from booking_svc.store import PgBookingStore
from booking_svc.sweeper import Sweeper
from boxoffice.db import Migration, load_migrations
from boxoffice.lifecycle import Component, Loop
from boxoffice.runtime import Runtime

COMPONENT = "booking"
DEFAULT_GRPC_PORT = 50052
ROLES: Mapping[str, str] = {"booking-svc": "server", "sweeper": "sweeper", "relay": "relay"}


def migrations() -> list[Migration]:
    return load_migrations(COMPONENT, "booking_svc")


def build_handler(rt: Runtime, config: BookingConfig, store: PgBookingStore, metrics: BookingMetrics) -> BookingHandler:
    gate: SeatGate = (
        RedisSeatGate(rt.redis(), ttl_seconds=config.seat_gate_ttl_seconds, metrics=metrics)
        if config.seat_gate
        else OpenGate()
    )
    return BookingHandler(
        store=store,
        signer=rt.token_signer,
        clock=rt.clock,
        gate=gate,
        seat_maps=SeatMapCache(store, rt.clock, max_age_seconds=config.seat_map_max_age_seconds),
        metrics=metrics,
        config=config,
    )


async def build(rt: Runtime, role: str) -> list[Component]:
    config = BookingConfig.from_env(rt.env)
    store = PgBookingStore(
        rt.pool(),
        hold_batch_max=config.hold_batch_max,
        hold_batches_in_flight=config.hold_batches_in_flight,
        hold_batch_overlap_min=config.hold_batch_overlap_min or None,
        hold_batch_linger_seconds=config.hold_batch_linger_seconds,
    )
    if role == "server":
        metrics = BookingMetrics.create(rt.registry)
        servicer = BookingServicer(build_handler(rt, config, store, metrics))
        gauges = SeatGauges(store, metrics, interval_seconds=config.stats_interval_seconds)
        # The hold batcher, as a component, waits for its batches in flight
        # on the way out (it takes new calls until the server stops).
        batcher: list[Component] = [] if store.hold_batcher is None else [store.hold_batcher]
        return [
            rt.grpc_server(COMPONENT, [servicer.registration()]),
            Loop("booking-seat-gauges", gauges.run),
            *batcher,
        ]
    if role == "sweeper":
        sweeper = Sweeper(
            store,
            rt.clock,
            SweeperMetrics.create(rt.registry),
            interval_seconds=config.sweep_interval_seconds,
            batch_size=config.sweep_batch_size,
            request_id_ttl_seconds=config.request_id_ttl_seconds,
        )
        return [Loop("booking-sweeper", sweeper.run)]
    if role == "relay":
        relay_config = RelayConfig.from_env(rt.env)
        relay = OutboxRelay(
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
        return [Loop("outbox-relay", relay.run)]
    raise ValueError(f"booking has no role {role!r}")


async def seed_demo(rt: Runtime) -> list[str]:
    return [await demo.seed(PgBookingStore(rt.pool()), rt.clock)]
