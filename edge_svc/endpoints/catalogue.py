"""The catalogue: the events' listing (``GET /v1/events``), an event and its
seat map, public documents answered once per max age from the edge's cache,
the same for everyone.

The listing's query is checked first (:mod:`edge_svc.endpoints.catalogue_query`):
a bad parameter is 400 naming it, and the checked query is the cache key, so
that spellings of one search share one load; each distinct query is loaded
from BookingService.ListEvents once per max age whatever the number of
callers (``boxoffice_edge_catalogue_loads`` counts the loads)."""

from __future__ import annotations

from collections.abc import Mapping

from starlette.responses import Response

from boxoffice.errors import InvalidArgument
from edge_svc.endpoints.catalogue_query import parse_events_query
from edge_svc.endpoints.common import EdgeDeps, call_context, event_id_of, to_json, unknown_query
from edge_svc.http import Ctx, Handler
from edge_svc.mesh import BOOKING
from gen.boxoffice.booking.v1 import booking_service_pb2 as booking_pb


class Catalogue:
    def __init__(self, deps: EdgeDeps) -> None:
        self._d = deps

    def endpoints(self) -> Mapping[str, Handler]:
        return {
            "ListEvents": self.list_events,
            "GetEvent": self.get_event,
            "GetSeatMap": self.get_seat_map,
        }

    async def list_events(self, ctx: Ctx) -> Response:
        key, request = parse_events_query(ctx.request.query_params)

        async def load() -> bytes:
            self._d.metrics.catalogue_loads.inc()
            reply = await self._d.mesh.call(BOOKING, "ListEvents", request, call_context(ctx, None))
            return to_json(reply)

        try:
            return await self._d.catalogue.answer(ctx, key, load)
        except InvalidArgument as err:
            if err.reason != "PAGE_TOKEN_INVALID":
                raise
            # The parameter's HTTP name, as every other 400 of the route.
            raise InvalidArgument(err.message, reason=err.reason, metadata={"field": "pageToken"}) from None

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
