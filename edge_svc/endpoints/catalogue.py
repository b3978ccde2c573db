"""The catalogue: an event and its seat map, public documents answered
once per max age from the edge's cache, the same for everyone."""

from __future__ import annotations

from collections.abc import Mapping

from starlette.responses import Response

from edge_svc.endpoints.common import EdgeDeps, call_context, event_id_of, to_json, unknown_query
from edge_svc.http import Ctx, Handler
from edge_svc.mesh import BOOKING
from gen.boxoffice.booking.v1 import booking_service_pb2 as booking_pb


class Catalogue:
    def __init__(self, deps: EdgeDeps) -> None:
        self._d = deps

    def endpoints(self) -> Mapping[str, Handler]:
        return {
            "GetEvent": self.get_event,
            "GetSeatMap": self.get_seat_map,
        }

    async def get_event(self, ctx: Ctx) -> Response:
        event_id = event_id_of(ctx)

        async def load() -> bytes:
            reply = await self._d.mesh.call(
                BOOKING, "GetEvent", booking_pb.GetEventRequest(event_id=event_id), call_context(ctx, None)
            )
            return to_json(reply)

        return await self._d.events.answer(ctx, (event_id,), load)

    async def get_seat_map(self, ctx: Ctx) -> Response:
        event_id = event_id_of(ctx)
        section = ctx.request.query_params.get("sectionId", "")
        unknown = set(ctx.request.query_params) - {"sectionId"}
        if unknown:
            raise unknown_query(unknown)

        async def load() -> bytes:
            reply = await self._d.mesh.call(
                BOOKING,
                "GetSeatMap",
                booking_pb.GetSeatMapRequest(event_id=event_id, section_id=section),
                call_context(ctx, None),
            )
            return to_json(reply)

        return await self._d.seatmaps.answer(ctx, (event_id, section), load)
