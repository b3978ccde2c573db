"""The queue service's composition root, the only place its objects are
built: ``queue-svc`` serves boxoffice.queue.v1.QueueService, ``admitter``
runs the leader-elected admitter.

:class:`QueueApp` holds the object graph of one process on one Runtime.
Each part is built once, when first asked for, so a test or a benchmark
takes the parts it needs (the store, the handler, an admitter) from it and
replaces what it must through the constructor's overrides: settings, a
leadership. The clock is the Runtime's (``Runtime.from_env(clock=...)``).
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import TYPE_CHECKING

from boxoffice import audit
from boxoffice.config import Env
from boxoffice.db import Migration, load_migrations
from boxoffice.errors import AlreadyExists
from boxoffice.lifecycle import Component, Loop
from boxoffice.redis import ScriptBatcher
from boxoffice.runtime import Runtime
from boxoffice.server import GrpcServer
from boxoffice.sessions import EndedSessions
from queue_svc import model
from queue_svc.adapters import (
    PgDrawRepository,
    PgWaitingRoomRepository,
    RedisBookingHealth,
    RedisBookingStock,
    RedisQueueStore,
)
from queue_svc.adapters.leader_epochs import PgLeaderEpochs
from queue_svc.adapters.pg_access_codes import PgAccessCodeRepository
from queue_svc.adapters.pg_fan_draws import PgFanDrawRepository
from queue_svc.adapters.pg_generations import PgRoomGenerations
from queue_svc.adapters.pg_staff_passes import PgStaffPassBindings
from queue_svc.adapters.redis_rebuild import RedisRoomImages
from queue_svc.admin_servicer import AuditedQueueServicer, QueueAdmin, QueueAdminServicer
from queue_svc.config import QueueSettings
from queue_svc.fan_draws import FanDrawer, FanDraws
from queue_svc.handler import QueueHandler
from queue_svc.jobs import Admitter, DrawRecorder, ProgressHub
from queue_svc.jobs.lifecycle import LifecycleMetrics, LifecycleRecorder, PgLifecycleRepository
from queue_svc.lanes import LaneDoor
from queue_svc.metrics import AdmitterMetrics, DrawMetrics, RebuildMetrics, ServerMetrics
from queue_svc.passes import StaffPasses
from queue_svc.ports import Leadership
from queue_svc.rebuild import Rebuilder

if TYPE_CHECKING:
    from boxoffice.leader import Epochs

COMPONENT = "queue"
DEFAULT_GRPC_PORT = 50051
ROLES: Mapping[str, str] = {"queue-svc": "server", "admitter": "admitter"}

# The elected role's name (a Postgres advisory-lock key, a Lease name).
LEADER_ROLE = "admitter"

# The demo event of `boxoffice up`.
DEMO_EVENT_ID = 1


def migrations() -> list[Migration]:
    from boxoffice import leader

    return [*leader.migrations(), *audit.migrations(COMPONENT), *load_migrations(COMPONENT, "queue_svc")]


class QueueApp:
    """The queue's objects on one Runtime, each built on first use."""

    def __init__(
        self,
        rt: Runtime,
        *,
        settings: QueueSettings | None = None,
        leadership: Leadership | None = None,
    ) -> None:
        self.rt = rt
        self.settings = settings or QueueSettings.from_env(rt.env)
        self._leadership = leadership

    # -- stores ---------------------------------------------------------------

    @functools.cached_property
    def batcher(self) -> ScriptBatcher:
        """Every Redis call of the process, in shared pipelines."""
        return ScriptBatcher(self.rt.redis(), name="queue-redis-batcher")

    @functools.cached_property
    def store(self) -> RedisQueueStore:
        return RedisQueueStore(self.batcher)

    @functools.cached_property
    def generations(self) -> PgRoomGenerations:
        """Each room's generation and history (queue_svc.rebuild)."""
        return PgRoomGenerations(self.rt.pool())

    @functools.cached_property
    def rebuilder(self) -> Rebuilder:
        """Puts back a room whose Redis data was lost, from Postgres."""
        return Rebuilder(
            generations=self.generations,
            images=RedisRoomImages(self.batcher),
            store=self.store,
            metrics=RebuildMetrics.create(self.rt.registry),
        )

    @functools.cached_property
    def rooms(self) -> PgWaitingRoomRepository:
        # Inside an audited admin action its transactions join the action's,
        # so a change commits with its audit row (boxoffice.db.joining).
        return PgWaitingRoomRepository(self.rt.pool())

    @functools.cached_property
    def draws(self) -> PgDrawRepository:
        """The pre-queue draws (on the joinable pool too: a room's draw is
        made in the transaction that creates the room)."""
        return PgDrawRepository(self.rt.pool())

    @functools.cached_property
    def codes(self) -> PgAccessCodeRepository:
        """The lanes' access codes (on the joinable pool: a batch is stored
        in the transaction of its audit row)."""
        return PgAccessCodeRepository(self.rt.pool())

    @functools.cached_property
    def staff_passes(self) -> StaffPasses:
        return StaffPasses(self.rt.token_signer, self.rt.clock)

    @functools.cached_property
    def fan_draw_repository(self) -> PgFanDrawRepository:
        return PgFanDrawRepository(self.rt.pool())

    @functools.cached_property
    def fan_draws(self) -> FanDraws:
        return FanDraws(repo=self.fan_draw_repository, door=self.door, clock=self.rt.clock)

    @functools.cached_property
    def door(self) -> LaneDoor:
        return LaneDoor(
            rooms=self.rooms,
            codes=self.codes,
            staff=self.staff_passes,
            clock=self.rt.clock,
            refusals=self.store,
            staff_bindings=PgStaffPassBindings(self.rt.pool(), self.store),
        )

    # -- the server role ------------------------------------------------------

    @functools.cached_property
    def server_metrics(self) -> ServerMetrics:
        return ServerMetrics.create(self.rt.registry)

    @functools.cached_property
    def hub(self) -> ProgressHub:
        return ProgressHub(
            store=self.store,
            clock=self.rt.clock,
            drain=self.rt.drain,
            interval_seconds=self.settings.watch_interval_seconds,
            call_seconds=self.settings.stream_call_seconds,
            metrics=self.server_metrics,
            presence_seconds=self.settings.presence_report_seconds,
        )

    @functools.cached_property
    def handler(self) -> QueueHandler:
        return QueueHandler(
            store=self.store,
            rooms=self.rooms,
            hub=self.hub,
            signer=self.rt.token_signer,
            clock=self.rt.clock,
            settings=self.settings,
            metrics=self.server_metrics,
            draws=self.draws,
            sessions=EndedSessions(self.rt.redis()),
            door=self.door,
            fan_draws=self.fan_draws,
            generations=self.generations,
        )

    @functools.cached_property
    def server(self) -> GrpcServer:
        return self.rt.grpc_server(
            COMPONENT,
            [
                AuditedQueueServicer(self.handler, self.admin).registration(),
                QueueAdminServicer(self.admin, self.handler).registration(),
            ],
        )

    @functools.cached_property
    def admin(self) -> QueueAdmin:
        """The waiting rooms' administration, every change audited."""
        return QueueAdmin(
            handler=self.handler,
            store=self.store,
            auditor=audit.Auditor(self.rt.pool()),
            clock=self.rt.clock,
            door=self.door,
            codes=self.codes,
            staff=self.staff_passes,
            fan_draws=self.fan_draws,
        )

    # -- the admitter role ----------------------------------------------------

    @functools.cached_property
    def leadership(self) -> Leadership:
        """The override, else the election configured by the environment."""
        if self._leadership is not None:
            return self._leadership
        from boxoffice.leader import create_leadership

        return create_leadership(self.rt, LEADER_ROLE)

    @functools.cached_property
    def admitter(self) -> Admitter:
        return Admitter(
            store=self.store,
            rooms=self.rooms,
            clock=self.rt.clock,
            settings=self.settings,
            metrics=AdmitterMetrics.create(self.rt.registry),
            leadership=self.leadership,
            health=self.booking_health,
            stock=self.booking_stock,
            epochs=self.leader_epochs,
            rebuilder=self.rebuilder,
        )

    @functools.cached_property
    def leader_epochs(self) -> PgLeaderEpochs | Epochs | None:
        """Where each admit tick confirms its epoch: the election's own
        record of its terms, the Postgres election's table (migrated with the
        queue's, read through the pool) or the Kubernetes election's Lease;
        with a Leadership override, the Redis fence alone."""
        from boxoffice.leader import LeaderConfig, lease_epochs

        if self._leadership is not None:
            return None
        if LeaderConfig.from_env(self.rt.env).backend == "kubernetes":
            return lease_epochs(self.rt, LEADER_ROLE)
        return PgLeaderEpochs(self.rt.pool(), LEADER_ROLE)

    @functools.cached_property
    def draw_recorder(self) -> DrawRecorder:
        """Copies the pre-queue placements to Postgres and seals each
        pre-queue at opening."""
        return DrawRecorder(
            store=self.store,
            draws=self.draws,
            clock=self.rt.clock,
            interval_seconds=self.settings.draw_record_seconds,
            metrics=DrawMetrics.create(self.rt.registry),
        )

    @functools.cached_property
    def lifecycle_recorder(self) -> LifecycleRecorder:
        """Copies the fans' lifecycle log to Postgres and keeps its retention."""
        return LifecycleRecorder(
            source=self.store,
            repository=PgLifecycleRepository(self.rt.pool()),
            clock=self.rt.clock,
            interval_seconds=self.settings.lifecycle_record_seconds,
            retention_days=self.settings.lifecycle_retention_days,
            metrics=LifecycleMetrics.create(self.rt.registry),
        )

    @functools.cached_property
    def booking_health(self) -> RedisBookingHealth:
        """What booking publishes about its holds, for the adaptive rate."""
        return RedisBookingHealth(self.rt.redis(), max_age_ms=int(self.settings.booking_health_max_age_seconds * 1000))

    @functools.cached_property
    def booking_stock(self) -> RedisBookingStock:
        """Whether events are sold out, as booking publishes it."""
        return RedisBookingStock(self.rt.redis(), max_age_ms=int(self.settings.booking_stock_max_age_seconds * 1000))

    # -- roles ----------------------------------------------------------------

    def components(self, role: str) -> list[Component]:
        """One role's components, in start order (the Runtime's
        infrastructure starts before them)."""
        if role == "server":
            return [self.batcher, self.hub, self.server]
        if role == "admitter":
            epochs = self.leader_epochs
            return [
                self.batcher,
                # The Lease's reader (its API client closes at shutdown).
                *([epochs] if epochs is not None and not isinstance(epochs, PgLeaderEpochs) else []),
                Loop("admitter", self.admitter.run),
                Loop("draw-recorder", self.draw_recorder.run),
                Loop("fan-drawer", FanDrawer(self.fan_draws, interval_seconds=self.settings.draw_record_seconds).run),
                Loop("lifecycle-recorder", self.lifecycle_recorder.run),
            ]
        raise ValueError(f"queue has no role {role!r}")


async def build(rt: Runtime, role: str) -> list[Component]:
    return QueueApp(rt).components(role)


def check_settings(env: Env) -> None:
    from boxoffice.leader import LeaderConfig

    QueueSettings.from_env(env)
    LeaderConfig.from_env(env)


async def seed_demo(rt: Runtime) -> list[str]:
    """The demo event's waiting room, open now, if it has none."""
    queue = QueueApp(rt)
    config = model.WaitingRoomConfig(
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
        stored = await queue.rooms.create(config)
    except AlreadyExists:
        return []
    await queue.draws.get_or_create(DEMO_EVENT_ID)
    await queue.store.put_config(stored)
    return [
        f"event {DEMO_EVENT_ID} waiting room open: {stored.admission_rate_per_second} admissions/s, "
        f"{stored.max_active_shoppers} shoppers at most"
    ]
