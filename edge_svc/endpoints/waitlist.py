"""An event's waiting list, for the signed-in fan: join it once the event
(or a section) is sold out, read their place and, once seats come back to
them, the offer, and leave it (BookingService's JoinWaitlist,
GetWaitlistEntry and LeaveWaitlist, the edge asserting the fan).

Joining asks what the queue's join asks: the sign-in, and when the event
has a waiting room, the fan's place in it (which they got through the
room's door: its challenge and, for a lane, its code or pass). A fan with
no place there is refused 403 WAITLIST_QUEUE_REQUIRED before booking is
asked.

An offer's access token goes out as an admitted fan's does: a browser gets
it as the HttpOnly access-token cookie only, an app in the body.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Protocol, TypeVar

from starlette.responses import Response

from boxoffice.errors import BoxofficeError, PermissionDenied
from edge_svc.endpoints.checkout import fan_language
from edge_svc.endpoints.common import (
    ACCESS_COOKIE,
    Callers,
    EdgeDeps,
    call_context,
    event_id_of,
    read_message,
    to_json,
    unknown_query,
)
from edge_svc.http import Cookie, Ctx, Handler, json_response
from edge_svc.identity import Session
from edge_svc.mesh import BOOKING
from gen.boxoffice.booking.v1 import booking_service_pb2 as booking_pb
from gen.boxoffice.queue.v1 import queue_service_pb2 as queue_pb

# Queue states that mean the fan never took a place in the event's room.
_NO_PLACE = frozenset({queue_pb.QUEUE_STATE_UNSPECIFIED, queue_pb.QUEUE_STATE_NOT_IN_QUEUE})

# The answers that carry the fan's entry.
_Answer = TypeVar(
    "_Answer",
    booking_pb.JoinWaitlistResponse,
    booking_pb.GetWaitlistEntryResponse,
    booking_pb.LeaveWaitlistResponse,
)


class QueuePlaces(Protocol):
    """The fan's place in an event's waiting room, as the queue's routes
    answer it (NOT_FOUND EVENT_NOT_FOUND when the event has no room)."""

    async def position(self, ctx: Ctx, event_id: int, session: Session) -> queue_pb.QueuePosition: ...


class Waitlist:
    def __init__(self, deps: EdgeDeps, callers: Callers, places: QueuePlaces) -> None:
        self._d = deps
        self._callers = callers
        self._places = places

    def endpoints(self) -> Mapping[str, Handler]:
        return {
            "JoinWaitlist": self.join_waitlist,
            "GetWaitlistEntry": self.get_waitlist_entry,
            "LeaveWaitlist": self.leave_waitlist,
        }

    async def join_waitlist(self, ctx: Ctx) -> Response:
        session = await self._callers.fan(ctx)
        event_id = event_id_of(ctx)
        request = booking_pb.JoinWaitlistRequest()
        await read_message(ctx, request, max_bytes=self._d.config.max_body_bytes)
        request.event_id = event_id
        await self._in_the_queue(ctx, event_id, session)
        # The offer's e-mail goes to the fan's verified address, in their language.
        call = dataclasses.replace(
            call_context(ctx, session.customer_id),
            email=session.email,
            language=fan_language(ctx.request.headers.get("accept-language", "")),
        )
        reply = await self._d.mesh.call(BOOKING, "JoinWaitlist", request, call)
        return json_response(self._shown(ctx, session, reply))

    async def _in_the_queue(self, ctx: Ctx, event_id: int, session: Session) -> None:
        """Refuses a fan with no place in the event's waiting room (an event
        without one asks nothing more than the sign-in)."""
        try:
            position = await self._places.position(ctx, event_id, session)
        except BoxofficeError as err:
            if err.reason == "EVENT_NOT_FOUND":
                return
            raise
        if position.state in _NO_PLACE:
            raise PermissionDenied(
                "join the event's queue first: the waiting list is open to fans with a place in it",
                reason="WAITLIST_QUEUE_REQUIRED",
                metadata={"event_id": str(event_id)},
            )

    async def get_waitlist_entry(self, ctx: Ctx) -> Response:
        session = await self._callers.fan(ctx)
        if ctx.request.query_params:
            raise unknown_query(set(ctx.request.query_params))
        request = booking_pb.GetWaitlistEntryRequest(event_id=event_id_of(ctx))
        reply = await self._d.mesh.call(BOOKING, "GetWaitlistEntry", request, call_context(ctx, session.customer_id))
        return json_response(self._shown(ctx, session, reply))

    async def leave_waitlist(self, ctx: Ctx) -> Response:
        session = await self._callers.fan(ctx)
        event_id = event_id_of(ctx)
        request = booking_pb.LeaveWaitlistRequest()
        await read_message(ctx, request, max_bytes=self._d.config.max_body_bytes)
        request.event_id = event_id
        reply = await self._d.mesh.call(BOOKING, "LeaveWaitlist", request, call_context(ctx, session.customer_id))
        return json_response(self._shown(ctx, session, reply))

    def _shown(self, ctx: Ctx, session: Session, reply: _Answer) -> bytes:
        """The answer for the fan: an open offer's access token as the
        HttpOnly cookie (until the offer lapses), and in the body for an app
        only, never for a browser's scripts (as an admitted fan's position)."""
        entry = reply.entry
        if entry.access_token:
            remaining = max(1, entry.offer.expires_at.seconds - int(self._d.clock.now()))
            ctx.cookies_out.append(Cookie(ACCESS_COOKIE, entry.access_token, remaining))
            if session.via == "cookie":
                shown = type(reply)()
                shown.CopyFrom(reply)
                shown.entry.access_token = ""
                return to_json(shown)
        return to_json(reply)
