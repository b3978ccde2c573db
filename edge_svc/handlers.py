"""What each route of the edge does (one method per route of
:data:`edge_svc.routes.ROUTES`, named after it).

Every handler first answers the route table's question, who may call it
and acting as whom (:meth:`Handlers._fan`, :meth:`Handlers._shopper`), then
parses, calls the mesh as the edge asserting that fan, and answers the
proto3 JSON of the RPC's response.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from google.protobuf import json_format
from google.protobuf.message import Message
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from starlette.responses import Response

from boxoffice import lanes, validate
from boxoffice.clock import Clock
from boxoffice.errors import (
    BoxofficeError,
    InvalidArgument,
    NotFound,
    PermissionDenied,
    Unauthenticated,
)
from edge_svc import errors
from edge_svc.cache import PreparedDocument, PublicCache, etag_of
from edge_svc.challenge import PROOF_HEADER, Attempt, HumanCheck, ProofOfWork, proof_required
from edge_svc.config import EdgeConfig
from edge_svc.http import PRIVATE, Cookie, Ctx, Handler, json_response, read_body
from edge_svc.identity import OidcVerifier, Session, SessionCookies, is_customer_id
from edge_svc.mesh import BOOKING, PAYMENT, QUEUE, CallContext, Mesh
from edge_svc.metrics import EdgeMetrics
from edge_svc.presence import PresenceReporter
from edge_svc.progress import ProgressHub
from edge_svc.ratelimit import Limit, RateLimiter, RefusalCounter
from edge_svc.routes import ROUTES, Who
from edge_svc.sse import PositionStream
from edge_svc.state import EdgeState
from edge_svc.waiting import ADMITTED, WAITING, Admission, PlaceBook, PlaceCookies, estimate, place_from
from gen.boxoffice.booking.v1 import booking_service_pb2 as booking_pb
from gen.boxoffice.payment.v1 import payment_service_pb2 as payment_pb
from gen.boxoffice.queue.v1 import queue_service_pb2 as queue_pb

SESSION_COOKIE = "bo_session"
ACCESS_COOKIE = "bo_access"
PLACE_COOKIE = "bo_place"
ACCESS_HEADER = "boxoffice-access-token"

_MUTATING = frozenset({"POST", "PUT", "PATCH", "DELETE"})
# How long a poll waits for an event's first progress snapshot.
_FIRST_SNAPSHOT_SECONDS = 2.0
_NAME = re.compile(r"^[^\x00-\x1f\x7f]{1,64}$")
# ASCII digits only: str.isdigit also takes "²" (which int() refuses) and
# other scripts' digits (which int() reads as another spelling of a number).
_DIGITS = re.compile(r"[0-9]+")
# Webhook bodies are at most this long (PaymentService's limit).
_WEBHOOK_MAX_BYTES = 64 * 1024

# Answers of the services that, for a hold, mean "not yours or not there":
# answered alike, so that hold ids reveal nothing.
_NOT_YOUR_HOLD = frozenset({"NOT_HOLD_OWNER", "HOLD_NOT_FOUND", "TOKEN_WRONG_EVENT"})


def to_json(message: Message) -> bytes:
    """The proto3 JSON mapping of ``message`` (camelCase; every field, as
    grpc-gateway emits them)."""
    return json.dumps(
        json_format.MessageToDict(message, always_print_fields_with_no_presence=True), separators=(",", ":")
    ).encode()


def parse_json(body: bytes, message: Message, *, edge_fields: tuple[str, ...]) -> None:
    """Fills ``message`` from a JSON body; refuses unknown fields and the
    fields the edge fills itself."""
    try:
        json_format.Parse(body.decode("utf-8", errors="strict") or "{}", message)
    except (json_format.ParseError, UnicodeDecodeError, RecursionError) as err:
        raise errors.malformed_json(str(err)) from None
    for name in edge_fields:
        field = message.DESCRIPTOR.fields_by_name.get(name)
        if field is not None and _is_set(message, name):
            raise InvalidArgument(
                f"{field.json_name} is set by the edge, not by the request",
                reason="INVALID_FIELD",
                metadata={"field": field.json_name},
            )


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


def _ctx_call(ctx: Ctx, fan: str | None) -> CallContext:
    return CallContext(request_id=ctx.request_id, traceparent=ctx.traceparent, fan=fan)


@dataclass(frozen=True)
class EdgeDeps:
    """What the handlers use, built by the composition root."""

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
    presence: PresenceReporter
    human_check: HumanCheck
    # Where joins refused at the door are counted per event (None: nowhere).
    refusals: RefusalCounter | None = None


class Handlers:
    """One method per route."""

    def __init__(self, deps: EdgeDeps) -> None:
        self._d = deps
        config = deps.config
        self._ip_limit = Limit(config.ip_rate_per_second, config.ip_burst)
        self._account_limit = Limit(config.account_rate_per_second, config.account_burst)
        self._positions = PositionStream(deps, self._claim)
        # The progress document of each event: its snapshot and prepared answers.
        self._progress_documents: dict[tuple[int, str], tuple[queue_pb.AdmissionProgress, PreparedDocument]] = {}

    def table(self, others: Mapping[str, Handler] | None = None) -> Mapping[str, Handler]:
        """Every route's handler, by route name: ``others`` (the pages), else
        this object's method named after the route."""
        others = others or {}
        return {route.name: others.get(route.name) or getattr(self, f"_{_snake(route.name)}") for route in ROUTES}

    # -- who is calling --------------------------------------------------

    async def _fan(self, ctx: Ctx) -> Session:
        """The signed-in fan (route table: FAN and SHOPPER routes), after the
        CSRF check for cookies and the per-IP and per-account limits (both
        checked at once, in one pipeline to Redis; a caller who is not
        signed in meets the per-IP limit before the refusal)."""
        try:
            session = await self._identify(ctx)
        except BoxofficeError:
            await self._limit(ctx, "ip", ctx.client_ip, self._ip_limit)
            raise
        ctx.customer_id = session.customer_id
        limits = await asyncio.gather(
            self._limit(ctx, "ip", ctx.client_ip, self._ip_limit),
            self._limit(ctx, "account", session.customer_id, self._account_limit),
            return_exceptions=True,
        )
        for outcome in limits:
            if isinstance(outcome, BaseException):
                raise outcome
        if session.via == "cookie" and ctx.request.method in _MUTATING:
            self._same_site(ctx)
        return session

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
        return session

    def _same_site(self, ctx: Ctx) -> None:
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

    async def _limit(self, ctx: Ctx, scope: str, subject: str, limit: Limit) -> None:
        try:
            await self._d.limiter.check(scope, subject, limit)
        except BoxofficeError:
            self._d.metrics.rate_limited.labels(scope).inc()
            raise

    def _access_token(self, ctx: Ctx, *, required: bool) -> str:
        token = ctx.request.headers.get(ACCESS_HEADER) or ctx.request.cookies.get(ACCESS_COOKIE, "")
        if required and not token:
            raise Unauthenticated(
                "an access token is required: wait in the queue until you are admitted", reason="TOKEN_MISSING"
            )
        return token

    # -- sessions --------------------------------------------------------

    async def _create_session(self, ctx: Ctx) -> Response:
        if not self._d.config.dev_sign_in:
            raise NotFound("development sign-in is off", reason="SIGN_IN_DISABLED")
        await self._limit(ctx, "ip", ctx.client_ip, self._ip_limit)
        self._same_site(ctx)
        body = await read_body(ctx.request, 4096)
        try:
            document = json.loads(body or b"{}")
            name = document.get("name") if isinstance(document, dict) else None
        except (ValueError, UnicodeDecodeError):
            raise errors.malformed_json("not a JSON object") from None
        if not isinstance(name, str) or not _NAME.match(name.strip()) or not is_customer_id(name.strip()):
            raise InvalidArgument(
                "name must be 1 to 64 printable characters", reason="INVALID_FIELD", metadata={"field": "name"}
            )
        value, session = self._d.sessions.issue(name.strip())
        ctx.customer_id = session.customer_id
        ctx.cookies_out.append(Cookie(SESSION_COOKIE, value, self._d.sessions.ttl_seconds))
        return json_response(_session_json(session))

    async def _get_session(self, ctx: Ctx) -> Response:
        return json_response(_session_json(await self._fan(ctx)))

    async def _delete_session(self, ctx: Ctx) -> Response:
        for name in (SESSION_COOKIE, ACCESS_COOKIE, PLACE_COOKIE):
            ctx.cookies_out.append(Cookie(name, "", 0))
        return json_response(b"{}")

    # -- public documents ------------------------------------------------

    async def _get_event(self, ctx: Ctx) -> Response:
        event_id = event_id_of(ctx)

        async def load() -> bytes:
            reply = await self._d.mesh.call(
                BOOKING, "GetEvent", booking_pb.GetEventRequest(event_id=event_id), _ctx_call(ctx, None)
            )
            return to_json(reply)

        return await self._d.events.answer(ctx, (event_id,), load)

    async def _get_seat_map(self, ctx: Ctx) -> Response:
        event_id = event_id_of(ctx)
        section = ctx.request.query_params.get("sectionId", "")
        unknown = set(ctx.request.query_params) - {"sectionId"}
        if unknown:
            raise _unknown_query(unknown)

        async def load() -> bytes:
            reply = await self._d.mesh.call(
                BOOKING,
                "GetSeatMap",
                booking_pb.GetSeatMapRequest(event_id=event_id, section_id=section),
                _ctx_call(ctx, None),
            )
            return to_json(reply)

        return await self._d.seatmaps.answer(ctx, (event_id, section), load)

    async def _get_admission_progress(self, ctx: Ctx) -> Response:
        event_id = event_id_of(ctx)
        lane = _lane_query(ctx.request.query_params.get("lane"))
        snapshot = await self._d.hub.latest(event_id, wait_seconds=_FIRST_SNAPSHOT_SECONDS, lane=lane)
        # One body, ETag and answer head per snapshot, however many fans poll it.
        key = (event_id, lane)
        cached = self._progress_documents.get(key)
        if cached is None or cached[0] is not snapshot:
            body = to_json(queue_pb.WatchAdmissionProgressResponse(progress=snapshot))
            cached = (snapshot, PublicCache.prepare(body, etag_of(body), self._d.config.progress_max_age_seconds))
            self._progress_documents[key] = cached
            while len(self._progress_documents) > 10_000:
                self._progress_documents.pop(next(iter(self._progress_documents)))
        return cached[1].answer(ctx)

    async def _get_pre_queue_proof(self, ctx: Ctx) -> Response:
        return await self._proof(ctx, "GetPreQueueProof", queue_pb.GetPreQueueProofRequest)

    async def _get_fan_draw_proof(self, ctx: Ctx) -> Response:
        return await self._proof(ctx, "GetFanDrawProof", queue_pb.GetFanDrawProofRequest)

    async def _proof(
        self,
        ctx: Ctx,
        method: str,
        request_type: type[queue_pb.GetPreQueueProofRequest] | type[queue_pb.GetFanDrawProofRequest],
    ) -> Response:
        """A draw's public proof (the pre-queue's or the verified-fan
        draw's), one page, loaded once per page and max age."""
        event_id = event_id_of(ctx)
        query = ctx.request.query_params
        unknown = set(query) - {"pageSize", "pageToken"}
        if unknown:
            raise _unknown_query(unknown)
        page_size = _int_query(query.get("pageSize"), "pageSize", maximum=10_000)
        page_token = query.get("pageToken", "")

        async def load() -> bytes:
            request = request_type(event_id=event_id, page_size=page_size, page_token=page_token)
            return to_json(await self._d.mesh.call(QUEUE, method, request, _ctx_call(ctx, None)))

        return await self._d.events.answer(ctx, (method, event_id, page_size, page_token), load)

    async def _register_for_fan_draw(self, ctx: Ctx) -> Response:
        session = await self._fan(ctx)
        request = queue_pb.RegisterForFanDrawRequest()
        parse_json(
            await read_body(ctx.request, self._d.config.max_body_bytes), request, edge_fields=ctx.route.edge_fields
        )
        request.event_id = event_id_of(ctx)
        reply = await self._d.mesh.call(QUEUE, "RegisterForFanDraw", request, _ctx_call(ctx, session.customer_id))
        return json_response(to_json(reply))

    async def _get_fan_draw_result(self, ctx: Ctx) -> Response:
        session = await self._fan(ctx)
        request = queue_pb.GetFanDrawResultRequest(event_id=event_id_of(ctx))
        reply = await self._d.mesh.call(QUEUE, "GetFanDrawResult", request, _ctx_call(ctx, session.customer_id))
        return json_response(to_json(reply))

    # -- the waiting room ------------------------------------------------

    async def _get_queue_challenge(self, ctx: Ctx) -> Response:
        session = await self._fan(ctx)
        event_id = event_id_of(ctx)
        check = self._d.human_check
        body: dict[str, object] = {"kind": check.kind if check.required(event_id) else "none"}
        if isinstance(check, ProofOfWork) and check.required(event_id):
            issued = check.issue(event_id, session.customer_id)
            body.update(
                challenge=issued.challenge,
                difficultyBits=issued.difficulty_bits,
                expiresAt=_rfc3339(issued.expires_at),
                algorithm="sha256-leading-zero-bits",
            )
        return json_response(json.dumps(body).encode())

    async def _join_queue(self, ctx: Ctx) -> Response:
        event_id = event_id_of(ctx)
        try:
            session = await self._fan(ctx)
            request = queue_pb.JoinQueueRequest()
            parse_json(
                await read_body(ctx.request, self._d.config.max_body_bytes), request, edge_fields=ctx.route.edge_fields
            )
            await self._human(ctx, event_id, session)
        except BoxofficeError as err:
            # The on-sale report counts the joins refused at the door.
            if err.reason in _DOOR_REFUSALS and self._d.refusals is not None:
                await self._d.refusals.count(event_id, err.reason.lower())
            raise
        request.event_id = event_id
        request.client_id = ctx.client_ip
        reply = await self._d.mesh.call(QUEUE, "JoinQueue", request, _ctx_call(ctx, session.customer_id))
        if reply.position.state == WAITING:
            await self._remember_waiting(ctx, reply.position)
        return json_response(to_json(reply))

    async def _human(self, ctx: Ctx, event_id: int, session: Session) -> None:
        """The join's challenge, unless the fan already holds a place (a join
        again is idempotent and gains nothing)."""
        check = self._d.human_check
        if not check.required(event_id) or self.place(ctx, event_id, session.customer_id) is not None:
            return
        proof = ctx.request.headers.get(PROOF_HEADER)
        if not proof:
            raise proof_required(check.kind)
        await check.verify(Attempt(event_id, session.customer_id, ctx.client_ip, proof))

    async def _remember_waiting(self, ctx: Ctx, position: queue_pb.QueuePosition) -> None:
        """Keeps a waiting fan's exact place (in memory and in their cookie),
        with the event's progress as the edge sees it now."""
        try:
            progress = await self._d.hub.latest(position.event_id, wait_seconds=0.5, lane=position.lane)
        except BoxofficeError:
            progress = None
        place = place_from(position, progress, now_ms=int(self._d.clock.now() * 1000))
        self._d.book.put(place)
        ctx.cookies_out.append(Cookie(PLACE_COOKIE, self._d.place_cookies.encode(place), self._d.sessions.ttl_seconds))

    async def _get_queue_position(self, ctx: Ctx) -> Response:
        session = await self._fan(ctx)
        event_id = event_id_of(ctx)
        position = await self.position(ctx, event_id, session)
        if position.state == WAITING:
            # The waiting room does not see the polls the edge answers.
            self._d.presence.seen(event_id, session.customer_id)
        return json_response(self._position_json(ctx, session, position))

    def _position_json(self, ctx: Ctx, session: Session, position: queue_pb.QueuePosition) -> bytes:
        """A position for the fan: a browser gets the access token only as an
        HttpOnly cookie, never in a body its scripts can read."""
        if position.access_token:
            remaining = max(1, position.access_token_expires_at.seconds - int(self._d.clock.now()))
            ctx.cookies_out.append(Cookie(ACCESS_COOKIE, position.access_token, remaining))
        return to_json(queue_pb.GetQueuePositionResponse(position=shown_to(session, position)))

    async def position(self, ctx: Ctx, event_id: int, session: Session) -> queue_pb.QueuePosition:
        """The fan's position, from the progress when the edge knows their
        place; from QueueService when admission reached them or the edge has
        never seen them."""
        customer = session.customer_id
        admission = self._d.book.admission(event_id, customer, self._d.clock.now())
        if admission is not None:
            return _admitted(event_id, customer, admission)
        place = self.place(ctx, event_id, customer)
        if place is not None:
            progress = await self._d.hub.latest(event_id, wait_seconds=_FIRST_SNAPSHOT_SECONDS, lane=place.lane)
            estimated = estimate(place, progress)
            if estimated is not None:
                return estimated
        return await self._claim(ctx, event_id, customer)

    def place(self, ctx: Ctx, event_id: int, customer: str) -> Any:
        place = self._d.book.get(event_id, customer)
        if place is None:
            cookie = ctx.request.cookies.get(PLACE_COOKIE)
            if cookie:
                place = self._d.place_cookies.decode(cookie, event_id=event_id, customer_id=customer)
                if place is not None:
                    self._d.book.put(place)
        return place

    async def _claim(self, ctx: Ctx, event_id: int, customer: str) -> queue_pb.QueuePosition:
        """GetQueuePosition for the fan: their token once admitted (the first
        read claims the admission), or their exact place."""
        reply = await self._d.mesh.call(
            QUEUE,
            "GetQueuePosition",
            queue_pb.GetQueuePositionRequest(event_id=event_id),
            _ctx_call(ctx, customer),
        )
        position: queue_pb.QueuePosition = reply.position
        if position.state == ADMITTED and position.access_token:
            self._d.metrics.admissions_fetched.inc()
            self._d.book.admitted(
                event_id, customer, Admission(position.access_token, position.access_token_expires_at, position.lane)
            )
        elif position.state == WAITING:
            await self._remember_waiting(ctx, position)
        else:
            self._d.book.forget(event_id, customer)
        return position

    async def _watch_queue_position(self, ctx: Ctx) -> Response:
        session = await self._fan(ctx)
        return await self._positions.open(ctx, event_id_of(ctx), session, self)

    async def _leave_queue(self, ctx: Ctx) -> Response:
        session = await self._fan(ctx)
        event_id = event_id_of(ctx)
        request = queue_pb.LeaveQueueRequest()
        parse_json(
            await read_body(ctx.request, self._d.config.max_body_bytes), request, edge_fields=ctx.route.edge_fields
        )
        request.event_id = event_id
        call = _ctx_call(ctx, session.customer_id)
        reply = await self._d.mesh.call(QUEUE, "LeaveQueue", request, call)
        if reply.position.state == ADMITTED:
            ended = await self._d.mesh.call(
                QUEUE,
                "EndShoppingSession",
                queue_pb.EndShoppingSessionRequest(event_id=event_id, reason=queue_pb.SESSION_END_REASON_ABANDONED),
                call,
            )
            reply = queue_pb.LeaveQueueResponse(position=ended.position)
        self._d.book.forget(event_id, session.customer_id)
        ctx.cookies_out.append(Cookie(PLACE_COOKIE, "", 0))
        ctx.cookies_out.append(Cookie(ACCESS_COOKIE, "", 0))
        return json_response(to_json(reply))

    # -- holds and payments ----------------------------------------------

    async def _shopper(self, ctx: Ctx) -> tuple[Session, str]:
        """A signed-in fan and their access token (route table: SHOPPER)."""
        session = await self._fan(ctx)
        return session, self._access_token(ctx, required=True)

    async def _hold_call(self, ctx: Ctx, service: str, method: str, request: Message, session: Session) -> Any:
        try:
            return await self._d.mesh.call(service, method, request, _ctx_call(ctx, session.customer_id))
        except BoxofficeError as err:
            if err.reason in _NOT_YOUR_HOLD:
                raise errors.not_found("hold") from None
            raise

    async def _hold_seats(self, ctx: Ctx) -> Response:
        session, token = await self._shopper(ctx)
        request = booking_pb.HoldSeatsRequest()
        parse_json(
            await read_body(ctx.request, self._d.config.max_body_bytes), request, edge_fields=ctx.route.edge_fields
        )
        request.event_id = event_id_of(ctx)
        request.access_token = token
        reply = await self._d.mesh.call(BOOKING, "HoldSeats", request, _ctx_call(ctx, session.customer_id))
        return json_response(to_json(reply))

    async def _get_hold(self, ctx: Ctx) -> Response:
        session, token = await self._shopper(ctx)
        request = booking_pb.GetHoldRequest(access_token=token, hold_id=ctx.params["hold_id"])
        return json_response(to_json(await self._hold_call(ctx, BOOKING, "GetHold", request, session)))

    async def _release_hold(self, ctx: Ctx) -> Response:
        session, token = await self._shopper(ctx)
        request = booking_pb.ReleaseHoldRequest(access_token=token, hold_id=ctx.params["hold_id"])
        return json_response(to_json(await self._hold_call(ctx, BOOKING, "ReleaseHold", request, session)))

    async def _start_payment(self, ctx: Ctx) -> Response:
        session, token = await self._shopper(ctx)
        request = payment_pb.StartPaymentRequest()
        parse_json(
            await read_body(ctx.request, self._d.config.max_body_bytes), request, edge_fields=ctx.route.edge_fields
        )
        request.access_token = token
        request.hold_id = ctx.params["hold_id"]
        return json_response(to_json(await self._hold_call(ctx, PAYMENT, "StartPayment", request, session)))

    async def _confirm_payment(self, ctx: Ctx) -> Response:
        session = await self._fan(ctx)
        key = ctx.request.headers.get("idempotency-key", "")
        if not key:
            raise InvalidArgument(
                "the Idempotency-Key header is required", reason="FIELD_REQUIRED", metadata={"field": "Idempotency-Key"}
            )
        request = payment_pb.ConfirmPaymentRequest()
        parse_json(
            await read_body(ctx.request, self._d.config.max_body_bytes), request, edge_fields=ctx.route.edge_fields
        )
        request.payment_id = ctx.params["payment_id"]
        request.idempotency_key = key
        reply = await self._d.mesh.call(PAYMENT, "ConfirmPayment", request, _ctx_call(ctx, session.customer_id))
        return json_response(to_json(reply))

    async def _get_payment(self, ctx: Ctx) -> Response:
        session = await self._fan(ctx)
        request = payment_pb.GetPaymentRequest(payment_id=ctx.params["payment_id"])
        reply = await self._d.mesh.call(PAYMENT, "GetPayment", request, _ctx_call(ctx, session.customer_id))
        return json_response(to_json(reply))

    async def _list_tickets(self, ctx: Ctx) -> Response:
        session = await self._fan(ctx)
        query = ctx.request.query_params
        unknown = set(query) - {"holdId", "pageSize", "pageToken"}
        if unknown:
            raise _unknown_query(unknown)
        request = payment_pb.ListTicketsRequest(
            event_id=event_id_of(ctx),
            access_token=self._access_token(ctx, required=False),
            hold_id=query.get("holdId", ""),
            page_size=_int_query(query.get("pageSize"), "pageSize"),
            page_token=query.get("pageToken", ""),
        )
        try:
            reply = await self._d.mesh.call(PAYMENT, "ListTickets", request, _ctx_call(ctx, session.customer_id))
        except BoxofficeError as err:
            if request.access_token and err.reason.startswith(("TOKEN_", "SESSION_ENDED")):
                # A stale token cookie: the fan's own tickets need none.
                request.access_token = ""
                reply = await self._d.mesh.call(PAYMENT, "ListTickets", request, _ctx_call(ctx, session.customer_id))
            else:
                raise
        return json_response(to_json(reply))

    async def _handle_provider_webhook(self, ctx: Ctx) -> Response:
        body = await read_body(ctx.request, _WEBHOOK_MAX_BYTES)
        signature = ctx.request.headers.get(self._d.config.webhook_signature_header, "")
        request = payment_pb.HandleProviderWebhookRequest(signature=signature, body=body)
        reply = await self._d.mesh.call(PAYMENT, "HandleProviderWebhook", request, _ctx_call(ctx, None))
        return json_response(to_json(reply))

    # -- operations ------------------------------------------------------

    async def _get_health(self, ctx: Ctx) -> Response:
        return Response("ok\n", media_type="text/plain", headers={"cache-control": PRIVATE})

    async def _get_readiness(self, ctx: Ctx) -> Response:
        ready = self._d.state.ready
        return Response(
            "ready\n" if ready else "not ready\n",
            status_code=200 if ready else 503,
            media_type="text/plain",
            headers={"cache-control": PRIVATE},
        )

    async def _get_metrics(self, ctx: Ctx) -> Response:
        return Response(generate_latest(self._d.registry), media_type=CONTENT_TYPE_LATEST)

    async def _get_open_api(self, ctx: Ctx) -> Response:
        return self._d.events.fresh(ctx, self._d.openapi, 300)


def shown_to(session: Session, position: queue_pb.QueuePosition) -> queue_pb.QueuePosition:
    """The position as the fan sees it: a browser (a cookie session) gets
    the access token only as an HttpOnly cookie, never in a body its scripts
    can read; an app gets it in the body."""
    if session.via != "cookie" or not position.access_token:
        return position
    shown = queue_pb.QueuePosition()
    shown.CopyFrom(position)
    shown.access_token = ""
    return shown


def _admitted(event_id: int, customer: str, admission: Admission) -> queue_pb.QueuePosition:
    position = queue_pb.QueuePosition(
        event_id=event_id, customer_id=customer, state=ADMITTED, access_token=admission.token, lane=admission.lane
    )
    position.access_token_expires_at.CopyFrom(admission.expires_at)
    return position


def _rfc3339(epoch_seconds: int) -> str:
    return datetime.fromtimestamp(epoch_seconds, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _session_json(session: Session) -> bytes:
    return json.dumps({"customerId": session.customer_id, "expiresAt": _rfc3339(session.expires_at)}).encode()


def _unknown_query(names: set[str]) -> InvalidArgument:
    name = sorted(names)[0]
    return InvalidArgument(
        f"unknown query parameter {name[:64]!r}", reason="INVALID_FIELD", metadata={"field": name[:64]}
    )


# The refusals of a join at the edge's door that the on-sale report counts.
_DOOR_REFUSALS = frozenset({"TOO_MANY_REQUESTS", "PROOF_REQUIRED", "PROOF_INVALID", "PROOF_REUSED"})


def _lane_query(value: str | None) -> str:
    """A lane named in a query ("" or "general": the general lane)."""
    if value is None or value in ("", "general"):
        return ""
    if not lanes.is_name(value):
        raise InvalidArgument("lane must be a lane's name", reason="INVALID_FIELD", metadata={"field": "lane"})
    return value


def _int_query(value: str | None, name: str, *, maximum: int = 1000) -> int:
    if value is None or value == "":
        return 0
    if not _DIGITS.fullmatch(value) or len(value) > 9:
        raise InvalidArgument(f"{name} must be a whole number", reason="INVALID_FIELD", metadata={"field": name})
    return validate.int_range(name, int(value), minimum=0, maximum=maximum)


def _snake(name: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()


__all__ = ["ACCESS_COOKIE", "PLACE_COOKIE", "SESSION_COOKIE", "EdgeDeps", "Handlers", "Who"]
