"""What every area of endpoints shares: the objects the composition root
passes them (:class:`EdgeDeps`), who is calling (:class:`Callers`), the
request helpers (bodies, proto3 JSON both ways, ids, query parameters,
cookies, the mesh's call context) and :func:`mount`, which puts the areas'
endpoints together against the route table.

This module imports no area: every area imports it.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Protocol

from google.protobuf import json_format
from google.protobuf.message import Message
from prometheus_client import CollectorRegistry

from boxoffice import boundedjson, validate
from boxoffice.clock import Clock
from boxoffice.errors import BoxofficeError, InvalidArgument, PermissionDenied, Unauthenticated
from edge_svc import errors
from edge_svc.cache import PublicCache
from edge_svc.challenge import PROOF_HEADER, Attempt, HumanCheck, proof_required
from edge_svc.config import EdgeConfig
from edge_svc.http import Ctx, Handler, read_body
from edge_svc.identity import OidcVerifier, Session, SessionCookies
from edge_svc.mesh import CallContext, Mesh
from edge_svc.metrics import EdgeMetrics
from edge_svc.presence import PresenceReporter
from edge_svc.progress import ProgressHub
from edge_svc.ratelimit import Limit, RateLimiter, RefusalCounter
from edge_svc.routes import ROUTES
from edge_svc.signouts import SignOuts
from edge_svc.state import EdgeState
from edge_svc.streamslots import StreamSlots
from edge_svc.waiting import PlaceBook, PlaceCookies

SESSION_COOKIE = "bo_session"
ACCESS_COOKIE = "bo_access"
PLACE_COOKIE = "bo_place"
ACCESS_HEADER = "boxoffice-access-token"

_MUTATING = frozenset({"POST", "PUT", "PATCH", "DELETE"})
# How deep a request's JSON body may nest (the deepest request nests 3).
MAX_BODY_DEPTH = 16
# ASCII digits only: str.isdigit also takes "²" (which int() refuses) and
# other scripts' digits (which int() reads as another spelling of a number).
_DIGITS = re.compile(r"[0-9]+")


@dataclass(frozen=True)
class EdgeDeps:
    """What the endpoints use, built by the composition root."""

    config: EdgeConfig
    clock: Clock
    mesh: Mesh
    hub: ProgressHub
    book: PlaceBook
    place_cookies: PlaceCookies
    sessions: SessionCookies
    oidc: OidcVerifier | None
    limiter: RateLimiter
    metrics: EdgeMetrics
    registry: CollectorRegistry
    state: EdgeState
    openapi: bytes
    events: PublicCache
    seatmaps: PublicCache
    # The catalogue's answers, by query (GET /v1/events).
    catalogue: PublicCache
    presence: PresenceReporter
    human_check: HumanCheck
    # Where joins refused at the door are counted per event (None: nowhere).
    refusals: RefusalCounter | None = None
    # The open streams' slots per address and account (None: not limited).
    stream_slots: StreamSlots | None = None
    # Session cookies signed out (None: a cookie lasts until it expires).
    signouts: SignOuts | None = None


class Area(Protocol):
    """A group of endpoints (sessions, the queue, ...): each names the
    routes it answers, by the route table's names."""

    def endpoints(self) -> Mapping[str, Handler]: ...


def mount(*areas: Area) -> Mapping[str, Handler]:
    """Every route's endpoint, by route name: each route of
    :data:`edge_svc.routes.ROUTES` answered by exactly one area, and no
    area answering a route the table does not have."""
    table: dict[str, Handler] = {}
    for area in areas:
        for name, endpoint in area.endpoints().items():
            if name in table:
                raise ValueError(f"route {name} has two endpoints")
            table[name] = endpoint
    routed = {route.name for route in ROUTES}
    if missing := sorted(routed - table.keys()):
        raise ValueError(f"routes without an endpoint: {', '.join(missing)}")
    if unknown := sorted(table.keys() - routed):
        raise ValueError(f"endpoints of no route: {', '.join(unknown)}")
    return table


class Callers:
    """Who is calling (the route table's FAN and SHOPPER), with the CSRF
    check for cookies and the per-IP and per-account limits."""

    def __init__(self, deps: EdgeDeps) -> None:
        self._d = deps
        config = deps.config
        self._ip_limit = Limit(config.ip_rate_per_second, config.ip_burst)
        self._account_limit = Limit(config.account_rate_per_second, config.account_burst)

    async def fan(self, ctx: Ctx) -> Session:
        """The signed-in fan (route table: FAN and SHOPPER routes), after the
        CSRF check for cookies and the per-IP and per-account limits (both
        checked at once, in one pipeline to Redis; a caller who is not
        signed in meets the per-IP limit before the refusal)."""
        try:
            session = await self._identify(ctx)
        except BoxofficeError:
            await self.ip_limit(ctx)
            raise
        ctx.customer_id = session.customer_id
        limits = await asyncio.gather(
            self.ip_limit(ctx),
            self._limit("account", session.customer_id, self._account_limit),
            return_exceptions=True,
        )
        for outcome in limits:
            if isinstance(outcome, BaseException):
                raise outcome
        if session.via == "cookie" and ctx.request.method in _MUTATING:
            self.same_site(ctx)
        return session

    async def shopper(self, ctx: Ctx) -> tuple[Session, str]:
        """A signed-in fan and their access token (route table: SHOPPER)."""
        session = await self.fan(ctx)
        return session, self.access_token(ctx, required=True)

    def access_token(self, ctx: Ctx, *, required: bool) -> str:
        token = ctx.request.headers.get(ACCESS_HEADER) or ctx.request.cookies.get(ACCESS_COOKIE, "")
        if required and not token:
            raise Unauthenticated(
                "an access token is required: wait in the queue until you are admitted", reason="TOKEN_MISSING"
            )
        return token

    async def ip_limit(self, ctx: Ctx) -> None:
        """The per-IP limit alone (for a caller who is not signed in)."""
        ctx.limited = True
        await self._limit("ip", ctx.client_ip, self._ip_limit)

    async def refused(self, client_ip: str) -> None:
        """Counts a request answered with an error against the per-IP limit
        (one that did not meet it on its way: a public document, a route
        that does not exist, a request that could not be read)."""
        await self._limit("ip", client_ip, self._ip_limit)

    async def limit(self, ctx: Ctx, scope: str, limit: Limit) -> None:
        """A route's own per-address limit (``scope`` names it), which
        counts as the request's per-address check."""
        ctx.limited = True
        await self._limit(scope, ctx.client_ip, limit)

    async def limit_subject(self, scope: str, subject: str, limit: Limit) -> None:
        """A limit of something other than an address or a fan (a gate
        device), counted under ``scope``."""
        await self._limit(scope, subject, limit)

    def same_site(self, ctx: Ctx) -> None:
        """A cookie-authenticated change must come from the edge's own pages
        (or a configured origin): Origin first, else Sec-Fetch-Site."""
        headers = ctx.request.headers
        origin = headers.get("origin")
        if origin is not None:
            if origin == ctx.origin or origin in self._d.config.origins:
                return
        elif headers.get("sec-fetch-site", "same-origin") in ("same-origin", "none"):
            return
        raise PermissionDenied(
            "a request from another site cannot change anything here",
            reason="CROSS_SITE_REQUEST",
            metadata={"origin": (origin or "")[:200]},
        )

    async def human(self, ctx: Ctx, event_id: int, session: Session) -> None:
        """The event's challenge (proof of work or the external check), as
        the join and the fan draw's registration ask it: PROOF_REQUIRED
        without the header, PROOF_INVALID or PROOF_REUSED for a bad one."""
        check = self._d.human_check
        if not check.required(event_id):
            return
        proof = ctx.request.headers.get(PROOF_HEADER)
        if not proof:
            raise proof_required(check.kind)
        await check.verify(Attempt(event_id, session.customer_id, ctx.client_ip, proof))

    async def _identify(self, ctx: Ctx) -> Session:
        headers = ctx.request.headers
        authorization = headers.get("authorization")
        if authorization is not None:
            scheme, _, credentials = authorization.partition(" ")
            if scheme.lower() != "bearer" or not credentials.strip():
                raise Unauthenticated(
                    "Authorization must be a bearer token", reason="BEARER_INVALID", metadata={"check": "format"}
                )
            if self._d.oidc is None:
                raise Unauthenticated(
                    "this edge accepts no bearer tokens (OpenID Connect is not configured)",
                    reason="BEARER_INVALID",
                    metadata={"check": "issuer"},
                )
            session = await self._d.oidc.verify(credentials.strip())
        else:
            cookie = ctx.request.cookies.get(SESSION_COOKIE)
            if not cookie:
                raise errors.not_signed_in()
            session = self._d.sessions.verify(cookie)
            signouts = self._d.signouts
            if signouts is not None and await signouts.signed_out(cookie):
                raise Unauthenticated("this session was signed out; sign in again", reason="SESSION_INVALID")
        return session

    async def _limit(self, scope: str, subject: str, limit: Limit) -> None:
        try:
            await self._d.limiter.check(scope, subject, limit)
        except BoxofficeError:
            self._d.metrics.rate_limited.labels(scope).inc()
            raise


def to_json(message: Message) -> bytes:
    """The proto3 JSON mapping of ``message`` (camelCase; every field, as
    grpc-gateway emits them)."""
    return json.dumps(
        json_format.MessageToDict(message, always_print_fields_with_no_presence=True), separators=(",", ":")
    ).encode()


def parse_json(body: bytes, message: Message, *, edge_fields: tuple[str, ...]) -> None:
    """Fills ``message`` from a JSON body; refuses a body nested deeper than
    :data:`MAX_BODY_DEPTH` (before the parser recurses into it), unknown
    fields and the fields the edge fills itself."""
    try:
        # Read within bounds first; then the protobuf parser (which refuses
        # duplicate keys and unknown fields) reads what is now safe to read.
        boundedjson.loads(body or b"{}", max_bytes=max(len(body), 2), max_depth=MAX_BODY_DEPTH)
        json_format.Parse(body.decode("utf-8", errors="strict") or "{}", message)
    except (json_format.ParseError, ValueError, RecursionError) as err:
        raise errors.malformed_json(str(err)[:300]) from None
    for name in edge_fields:
        field = message.DESCRIPTOR.fields_by_name.get(name)
        if field is not None and _is_set(message, name):
            raise InvalidArgument(
                f"{field.json_name} is set by the edge, not by the request",
                reason="INVALID_FIELD",
                metadata={"field": field.json_name},
            )


async def read_message(ctx: Ctx, message: Message, *, max_bytes: int) -> None:
    """Fills ``message`` from the request's JSON body (at most ``max_bytes``),
    refusing the fields the route's edge fills itself."""
    parse_json(await read_body(ctx.request, max_bytes), message, edge_fields=ctx.route.edge_fields)


def _is_set(message: Message, name: str) -> bool:
    value = getattr(message, name)
    if isinstance(value, Message):
        return message.HasField(name)
    if isinstance(value, str | bytes | int | float | bool):
        return bool(value)
    return len(value) > 0


def event_id_of(ctx: Ctx) -> int:
    text = ctx.params["event_id"]
    if not _DIGITS.fullmatch(text) or len(text) > 19 or not 0 < int(text) < 2**63:
        raise InvalidArgument(
            "event_id must be a positive integer", reason="INVALID_FIELD", metadata={"field": "event_id"}
        )
    return int(text)


def call_context(ctx: Ctx, fan: str | None) -> CallContext:
    """How the mesh is called for this request, asserting ``fan`` (None: no fan)."""
    return CallContext(request_id=ctx.request_id, traceparent=ctx.traceparent, fan=fan)


def unknown_query(names: set[str]) -> InvalidArgument:
    name = sorted(names)[0]
    return InvalidArgument(
        f"unknown query parameter {name[:64]!r}", reason="INVALID_FIELD", metadata={"field": name[:64]}
    )


def int_query(value: str | None, name: str, *, maximum: int = 1000) -> int:
    if value is None or value == "":
        return 0
    if not _DIGITS.fullmatch(value) or len(value) > 9:
        raise InvalidArgument(f"{name} must be a whole number", reason="INVALID_FIELD", metadata={"field": name})
    return validate.int_range(name, int(value), minimum=0, maximum=maximum)


def rfc3339(epoch_seconds: int) -> str:
    return datetime.fromtimestamp(epoch_seconds, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
