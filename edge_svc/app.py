"""The edge's composition root: the one place its objects are built.

Role ``edge`` (command ``boxoffice edge``, and inside ``boxoffice up``): the
HTTP server, the admission-progress hub, the rate limiter's Redis batcher
and the client channels to the four services it calls (queue, booking,
payment, check-in), dialled as the ``edge``
identity. Tests and benchmarks build through :func:`compose`, replacing only
what they must (:class:`Overrides`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from importlib import resources

from boxoffice.config import Env
from boxoffice.db import Migration
from boxoffice.lifecycle import Component
from boxoffice.redis import ScriptBatcher
from boxoffice.runtime import Runtime
from edge_svc.cache import PublicCache
from edge_svc.challenge import ExternalCheck, HumanCheck, NoCheck, ProofOfWork, RedisProofUsed
from edge_svc.config import EdgeConfig
from edge_svc.endpoints.bookings import Bookings
from edge_svc.endpoints.catalogue import Catalogue
from edge_svc.endpoints.checkin import CheckIn
from edge_svc.endpoints.checkout import Checkout
from edge_svc.endpoints.common import Callers, EdgeDeps, mount
from edge_svc.endpoints.draws import Draws
from edge_svc.endpoints.operations import Operations
from edge_svc.endpoints.queue import Queue
from edge_svc.endpoints.sessions import Sessions
from edge_svc.endpoints.transfers import Transfers
from edge_svc.endpoints.waitlist import Waitlist
from edge_svc.http import EdgeApp
from edge_svc.identity import OidcVerifier, SessionCookies, key_source
from edge_svc.mesh import BOOKING, CHECKIN, PAYMENT, QUEUE, GrpcMesh, Mesh
from edge_svc.metrics import EdgeMetrics
from edge_svc.pages import Pages
from edge_svc.presence import PresenceReporter
from edge_svc.progress import ProgressHub
from edge_svc.ratelimit import RateLimiter, RedisRateLimiter, RedisRefusals, RefusalCounter
from edge_svc.server import EdgeServer
from edge_svc.signouts import RedisSignOuts, SignOuts
from edge_svc.state import EdgeState
from edge_svc.streamslots import RedisStreamSlots, StreamLimits, StreamSlots
from edge_svc.waiting import PlaceBook, PlaceCookies

COMPONENT = "edge"
# The edge serves HTTP, not gRPC; the number is its HTTP port's default.
DEFAULT_GRPC_PORT = 8080
ROLES: Mapping[str, str] = {"edge": "server"}
# The stores the edge uses: Redis for rate limits, no database.
STORES = ("redis",)


def migrations() -> list[Migration]:
    return []


@dataclass
class Overrides:
    """What ``boxoffice up``, a test or a benchmark replaces."""

    # Settings over the environment's (addresses, port, development sign-in).
    settings: Mapping[str, object] = field(default_factory=dict)
    mesh: Mesh | None = None
    limiter: RateLimiter | None = None


@dataclass(frozen=True)
class Edge:
    """The edge's objects, for the process and for tests that look inside."""

    config: EdgeConfig
    server: EdgeServer
    hub: ProgressHub
    deps: EdgeDeps
    components: list[Component]


def openapi_document() -> bytes:
    return resources.files("edge_svc").joinpath("openapi.json").read_bytes()


def compose(rt: Runtime, overrides: Overrides | None = None) -> Edge:
    overrides = overrides or Overrides()
    config = EdgeConfig.from_env(rt.env)
    if overrides.settings:
        config = replace(config, **overrides.settings)  # type: ignore[arg-type]
    metrics = EdgeMetrics.create(rt.registry)
    components: list[Component] = []
    mesh = overrides.mesh
    if mesh is None:
        grpc_mesh = GrpcMesh(
            {
                QUEUE: rt.channel(COMPONENT, config.queue_addr),
                BOOKING: rt.channel(COMPONENT, config.booking_addr),
                PAYMENT: rt.channel(COMPONENT, config.payment_addr),
                CHECKIN: rt.channel(COMPONENT, config.checkin_addr),
            },
            metrics,
        )
        mesh = grpc_mesh
        components.append(_Closing(grpc_mesh))
    limiter = overrides.limiter
    refusals: RefusalCounter | None = None
    stream_slots: StreamSlots | None = None
    signouts: SignOuts | None = None
    if limiter is None:
        batcher = ScriptBatcher(rt.redis(), name="edge-rate-limits")
        components.append(batcher)
        limiter = RedisRateLimiter(
            batcher,
            rt.clock,
            timeout_seconds=config.rate_limit_timeout_seconds,
            on_unavailable=metrics.rate_limit_unavailable.inc,
        )
        refusals = RedisRefusals(batcher)
        signouts = RedisSignOuts(
            batcher,
            timeout_seconds=config.rate_limit_timeout_seconds,
            on_unavailable=metrics.rate_limit_unavailable.inc,
        )
        stream_slots = RedisStreamSlots(
            batcher,
            rt.clock,
            StreamLimits(per_address=config.sse_per_address, per_account=config.sse_per_account),
            timeout_seconds=config.rate_limit_timeout_seconds,
            on_unavailable=metrics.rate_limit_unavailable.inc,
        )
    hub = ProgressHub(mesh, metrics)
    presence = PresenceReporter(mesh, interval_seconds=config.presence_report_seconds)
    state = EdgeState()
    sessions = SessionCookies(config.session_keys, rt.clock, ttl_seconds=config.session_ttl_seconds)
    oidc = None if config.oidc is None else OidcVerifier(config.oidc, key_source(config.oidc), rt.clock)
    deps = EdgeDeps(
        config=config,
        clock=rt.clock,
        mesh=mesh,
        hub=hub,
        book=PlaceBook(config.place_cache_size),
        place_cookies=PlaceCookies(config.session_keys),
        sessions=sessions,
        oidc=oidc,
        limiter=limiter,
        metrics=metrics,
        registry=rt.registry,
        state=state,
        openapi=openapi_document(),
        events=PublicCache(
            max_age_seconds=config.seatmap_max_age_seconds, load_timeout_seconds=config.request_timeout_seconds
        ),
        seatmaps=PublicCache(
            max_age_seconds=config.seatmap_max_age_seconds, load_timeout_seconds=config.request_timeout_seconds
        ),
        catalogue=PublicCache(
            max_age_seconds=config.catalogue_max_age_seconds, load_timeout_seconds=config.request_timeout_seconds
        ),
        presence=presence,
        human_check=_human_check(config, rt),
        refusals=refusals,
        stream_slots=stream_slots,
        signouts=signouts,
    )
    callers = Callers(deps)
    queue = Queue(deps, callers)
    endpoints = mount(
        Sessions(deps, callers),
        Catalogue(deps),
        queue,
        Draws(deps, callers),
        Checkout(deps, callers),
        Bookings(deps, callers),
        CheckIn(deps, callers),
        Transfers(deps, callers),
        Waitlist(deps, callers, queue),
        Operations(deps),
        Pages(dev_sign_in=config.dev_sign_in),
    )
    app = EdgeApp(config, metrics, endpoints, tracing=rt.tracing, on_refused=callers.refused)
    server = EdgeServer(
        app,
        state,
        hub,
        host=config.host,
        port=config.port,
        drain_seconds=config.drain_seconds,
        grace_seconds=rt.server.shutdown_grace_seconds,
    )
    # Started in order, stopped in reverse: the server stops (and drains)
    # before the hub and the channels it uses.
    components[:0] = [hub, presence]
    components.append(server)
    return Edge(config=config, server=server, hub=hub, deps=deps, components=components)


def _human_check(config: EdgeConfig, rt: Runtime) -> HumanCheck:
    challenge = config.challenge
    if challenge.kind == "proof-of-work":
        return ProofOfWork(
            config.session_keys,
            RedisProofUsed(rt.redis(), rt.clock),
            rt.clock,
            difficulty_bits=challenge.pow_bits,
            by_event=dict(challenge.pow_bits_by_event),
        )
    if challenge.kind == "external":
        assert challenge.url is not None and challenge.secret is not None
        return ExternalCheck(challenge.url, challenge.secret)
    return NoCheck()


class _Closing:
    def __init__(self, mesh: GrpcMesh) -> None:
        self.name = "edge-channels"
        self._mesh = mesh

    async def start(self) -> None:
        return None

    async def stop(self, grace_seconds: float) -> None:
        await self._mesh.close()


def check_settings(env: Env) -> None:
    EdgeConfig.from_env(env)


async def build(rt: Runtime, role: str, overrides: Overrides | None = None) -> list[Component]:
    if role != "server":
        raise ValueError(f"the edge has no role {role!r}")
    return compose(rt, overrides).components


async def seed_demo(rt: Runtime) -> list[str]:
    return []
