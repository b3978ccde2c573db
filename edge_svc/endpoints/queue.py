"""The queue: a fan's join (and the challenge before it), position, stream
and leave, and the event's public admission progress.

The edge answers a waiting fan's polls itself, from the fan's place and the
event's progress (:mod:`edge_svc.waiting`); QueueService is called for the
fan only on a join, a leave, and when admission reaches them.
"""

from __future__ import annotations

import json
from collections.abc import Mapping

from starlette.responses import Response

from boxoffice import lanes
from boxoffice.errors import BoxofficeError, InvalidArgument
from edge_svc.cache import PreparedDocument, PublicCache, etag_of
from edge_svc.challenge import ProofOfWork
from edge_svc.endpoints.common import (
    ACCESS_COOKIE,
    PLACE_COOKIE,
    Callers,
    EdgeDeps,
    call_context,
    event_id_of,
    read_message,
    rfc3339,
    to_json,
)
from edge_svc.endpoints.sse import PositionStream
from edge_svc.http import Cookie, Ctx, Handler, json_response
from edge_svc.identity import Session
from edge_svc.mesh import QUEUE
from edge_svc.waiting import ADMITTED, WAITING, Admission, Place, estimate, place_from, shown_to
from gen.boxoffice.queue.v1 import queue_service_pb2 as queue_pb

# How long a poll waits for an event's first progress snapshot.
_FIRST_SNAPSHOT_SECONDS = 2.0

# The refusals of a join at the edge's door that the on-sale report counts.
_DOOR_REFUSALS = frozenset({"TOO_MANY_REQUESTS", "PROOF_REQUIRED", "PROOF_INVALID", "PROOF_REUSED"})


class Queue:
    def __init__(self, deps: EdgeDeps, callers: Callers) -> None:
        self._d = deps
        self._callers = callers
        self._positions = PositionStream(deps, self._claim)
        # The progress document of each event: its snapshot and prepared answers.
        self._progress_documents: dict[tuple[int, str], tuple[queue_pb.AdmissionProgress, PreparedDocument]] = {}

    def endpoints(self) -> Mapping[str, Handler]:
        return {
            "GetQueueChallenge": self.get_queue_challenge,
            "JoinQueue": self.join_queue,
            "GetQueuePosition": self.get_queue_position,
            "WatchQueuePosition": self.watch_queue_position,
            "GetAdmissionProgress": self.get_admission_progress,
            "LeaveQueue": self.leave_queue,
        }

    async def get_queue_challenge(self, ctx: Ctx) -> Response:
        session = await self._callers.fan(ctx)
        event_id = event_id_of(ctx)
        check = self._d.human_check
        body: dict[str, object] = {"kind": check.kind if check.required(event_id) else "none"}
        if isinstance(check, ProofOfWork) and check.required(event_id):
            issued = check.issue(event_id, session.customer_id)
            body.update(
                challenge=issued.challenge,
                difficultyBits=issued.difficulty_bits,
                expiresAt=rfc3339(issued.expires_at),
                algorithm="sha256-leading-zero-bits",
            )
        return json_response(json.dumps(body).encode())

    async def join_queue(self, ctx: Ctx) -> Response:
        event_id = event_id_of(ctx)
        try:
            session = await self._callers.fan(ctx)
            request = queue_pb.JoinQueueRequest()
            await read_message(ctx, request, max_bytes=self._d.config.max_body_bytes)
            await self._human(ctx, event_id, session)
        except BoxofficeError as err:
            # The on-sale report counts the joins refused at the door.
            if err.reason in _DOOR_REFUSALS and self._d.refusals is not None:
                await self._d.refusals.count(event_id, err.reason.lower())
            raise
        request.event_id = event_id
        request.client_id = ctx.client_ip
        reply = await self._d.mesh.call(QUEUE, "JoinQueue", request, call_context(ctx, session.customer_id))
        if reply.position.state == WAITING:
            await self._remember_waiting(ctx, reply.position)
        return json_response(to_json(reply))

    async def _human(self, ctx: Ctx, event_id: int, session: Session) -> None:
        """The join's challenge, unless the fan already holds a place (a join
        again is idempotent and gains nothing)."""
        if self.place(ctx, event_id, session.customer_id) is None:
            await self._callers.human(ctx, event_id, session)

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

    async def get_queue_position(self, ctx: Ctx) -> Response:
        session = await self._callers.fan(ctx)
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

    def place(self, ctx: Ctx, event_id: int, customer: str) -> Place | None:
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
            call_context(ctx, customer),
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

    async def watch_queue_position(self, ctx: Ctx) -> Response:
        session = await self._callers.fan(ctx)
        return await self._positions.open(ctx, event_id_of(ctx), session, self)

    async def get_admission_progress(self, ctx: Ctx) -> Response:
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

    async def leave_queue(self, ctx: Ctx) -> Response:
        session = await self._callers.fan(ctx)
        event_id = event_id_of(ctx)
        request = queue_pb.LeaveQueueRequest()
        await read_message(ctx, request, max_bytes=self._d.config.max_body_bytes)
        request.event_id = event_id
        call = call_context(ctx, session.customer_id)
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


def _admitted(event_id: int, customer: str, admission: Admission) -> queue_pb.QueuePosition:
    position = queue_pb.QueuePosition(
        event_id=event_id, customer_id=customer, state=ADMITTED, access_token=admission.token, lane=admission.lane
    )
    position.access_token_expires_at.CopyFrom(admission.expires_at)
    return position


def _lane_query(value: str | None) -> str:
    """A lane named in a query ("" or "general": the general lane)."""
    if value is None or value in ("", "general"):
        return ""
    if not lanes.is_name(value):
        raise InvalidArgument("lane must be a lane's name", reason="INVALID_FIELD", metadata={"field": "lane"})
    return value
