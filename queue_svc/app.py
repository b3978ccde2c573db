"""Composition of the queue service's processes: ``queue-svc`` serves
boxoffice.queue.v1.QueueService, ``admitter`` runs the leader-elected
admitter."""

from __future__ import annotations

import logging
from collections.abc import Mapping

from boxoffice.db import Migration, load_migrations
from boxoffice.errors import AlreadyExists
from boxoffice.lifecycle import Component, Loop
from boxoffice.redis import ScriptBatcher
from boxoffice.runtime import Runtime
from queue_svc import model
from queue_svc.admitter import Admitter, Leadership
from queue_svc.config import QueueSettings
from queue_svc.events import PgEventQueueRepository
from queue_svc.metrics import AdmitterMetrics, ServerMetrics
from queue_svc.progress import ProgressHub
from queue_svc.service import QueueHandler
from queue_svc.servicer import QueueServicer
from queue_svc.store import RedisQueueStore

COMPONENT = "queue"
DEFAULT_GRPC_PORT = 50051
ROLES: Mapping[str, str] = {"queue-svc": "server", "admitter": "admitter"}

# The elected role's name (a Postgres advisory-lock key, a Lease name).
LEADER_ROLE = "admitter"

# The demo event of `boxoffice up`.
DEMO_EVENT_ID = 1

_log = logging.getLogger("queue_svc.app")


def migrations() -> list[Migration]:
    from boxoffice import leader

    return [*leader.migrations(), *load_migrations(COMPONENT, "queue_svc")]


def build_server(rt: Runtime, settings: QueueSettings) -> tuple[list[Component], QueueHandler]:
    """The server role's components (in start order) and its handler."""
    batcher = ScriptBatcher(rt.redis(), name="queue-redis-batcher")
    store = RedisQueueStore(batcher)
    metrics = ServerMetrics.create(rt.registry)
    hub = ProgressHub(
        store=store,
        clock=rt.clock,
        drain=rt.drain,
        interval_seconds=settings.watch_interval_seconds,
        call_seconds=settings.stream_call_seconds,
        metrics=metrics,
    )
    handler = QueueHandler(
        store=store,
        events=PgEventQueueRepository(rt.pool()),
        hub=hub,
        signer=rt.token_signer,
        clock=rt.clock,
        settings=settings,
        metrics=metrics,
    )
    server = rt.grpc_server(COMPONENT, [QueueServicer(handler).registration()])
    return [batcher, hub, server], handler


def build_admitter(rt: Runtime, settings: QueueSettings, leadership: Leadership) -> tuple[list[Component], Admitter]:
    """The admitter role's components and its admitter."""
    batcher = ScriptBatcher(rt.redis(), name="queue-redis-batcher")
    admitter = Admitter(
        store=RedisQueueStore(batcher),
        events=PgEventQueueRepository(rt.pool()),
        clock=rt.clock,
        settings=settings,
        metrics=AdmitterMetrics.create(rt.registry),
        leadership=leadership,
    )
    return [batcher, Loop("admitter", admitter.run)], admitter


async def build(rt: Runtime, role: str) -> list[Component]:
    settings = QueueSettings.from_env(rt.env)
    if role == "server":
        components, _ = build_server(rt, settings)
        return components
    if role == "admitter":
        from boxoffice.leader import create_leadership

        components, _ = build_admitter(rt, settings, create_leadership(rt, LEADER_ROLE))
        return components
    raise ValueError(f"unknown role {role!r}")


async def seed_demo(rt: Runtime) -> list[str]:
    """The demo event's waiting room, open now, if it has none."""
    events = PgEventQueueRepository(rt.pool())
    config = model.EventQueueConfig(
        event_id=DEMO_EVENT_ID,
        opens_at_ms=int(rt.clock.now() * 1000),
        pre_queue_window_ms=model.DEFAULT_PRE_QUEUE_WINDOW_MS,
        admission_rate_per_second=20,
        max_active_shoppers=200,
        session_length_ms=model.DEFAULT_SESSION_LENGTH_MS,
        token_ttl_ms=model.DEFAULT_TOKEN_TTL_MS,
        claim_grace_ms=model.DEFAULT_CLAIM_GRACE_MS,
        paused=False,
    )
    try:
        stored = await events.create(config)
    except AlreadyExists:
        return []
    batcher = ScriptBatcher(rt.redis(), name="queue-redis-batcher")
    await RedisQueueStore(batcher).put_config(stored)
    return [
        f"event {DEMO_EVENT_ID} waiting room open: {stored.admission_rate_per_second} admissions/s, "
        f"{stored.max_active_shoppers} shoppers at most"
    ]
