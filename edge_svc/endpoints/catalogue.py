"""The catalogue: the events' listing (``GET /v1/events``), an event and its
seat map, public documents answered once per max age from the edge's cache,
the same for everyone.

The listing's query is checked first (:mod:`edge_svc.endpoints.catalogue_query`):
a bad parameter is 400 naming it, and the checked query is the cache key, so
that spellings of one search share one load; each distinct query is loaded
from BookingService.ListEvents once per max age whatever the number of
callers (``boxoffice_edge_catalogue_loads`` counts the loads)."""

from __future__ import annotations

import json
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Hashable, Mapping

from starlette.responses import Response

from boxoffice.errors import InvalidArgument
from edge_svc import errors
from edge_svc.endpoints.catalogue_query import parse_events_query
from edge_svc.endpoints.common import EdgeDeps, call_context, event_id_of, to_json, unknown_query
from edge_svc.http import Ctx, Handler
from edge_svc.mesh import BOOKING
from gen.boxoffice.booking.v1 import booking_service_pb2 as booking_pb

# Events whose section ids are kept (each with the document they were read from).
_SECTION_IDS_KEPT = 10_000
# Query strings whose parsed request the listing remembers (a crowd asks the
# same few again and again).
_PARSED_QUERIES = 10_000


class Catalogue:
    def __init__(self, deps: EdgeDeps) -> None:
        self._d = deps
        self._section_ids: dict[int, tuple[bytes, frozenset[str]]] = {}
        # Raw query string -> (cache key, request); good ones only.
        self._parsed: OrderedDict[str, tuple[Hashable, booking_pb.ListEventsRequest]] = OrderedDict()

    def endpoints(self) -> Mapping[str, Handler]:
        return {
            "ListEvents": self.list_events,
            "GetEvent": self.get_event,
            "GetSeatMap": self.get_seat_map,
        }

    def _query(self, ctx: Ctx) -> tuple[Hashable, booking_pb.ListEventsRequest]:
        raw = ctx.request.url.query
        parsed = self._parsed.get(raw)
        if parsed is None:
            parsed = self._parsed[raw] = parse_events_query(ctx.request.query_params)
            while len(self._parsed) > _PARSED_QUERIES:
                self._parsed.popitem(last=False)
        return parsed

    async def list_events(self, ctx: Ctx) -> Response:
        key, request = self._query(ctx)

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

    def _event_loader(self, ctx: Ctx, event_id: int) -> Callable[[], Awaitable[bytes]]:
        async def load() -> bytes:
            reply = await self._d.mesh.call(
                BOOKING, "GetEvent", booking_pb.GetEventRequest(event_id=event_id), call_context(ctx, None)
            )
            if not reply.event.published:
                # Invisible to fans (and so its seat map): answered as one that does not exist.
                raise errors.not_found("event")
            return to_json(reply)

        return load

    async def get_event(self, ctx: Ctx) -> Response:
        event_id = event_id_of(ctx)
        return await self._d.events.answer(ctx, (event_id,), self._event_loader(ctx, event_id))

    async def get_seat_map(self, ctx: Ctx) -> Response:
        """The seat map, of one section or all; a section is looked up in
        the event's cached document first, so that made-up sections are
        404s that cost the backend nothing and fill no cache."""
        event_id = event_id_of(ctx)
        section = ctx.request.query_params.get("sectionId", "")
        unknown = set(ctx.request.query_params) - {"sectionId"}
        if unknown:
            raise unknown_query(unknown)
        # The event's cached document first: an unpublished or unknown event
        # and a made-up section cost the backend nothing more.
        sections = await self._sections(ctx, event_id)
        if section and section not in sections:
            raise errors.not_found("section")

        async def load() -> bytes:
            reply = await self._d.mesh.call(
                BOOKING,
                "GetSeatMap",
                booking_pb.GetSeatMapRequest(event_id=event_id, section_id=section),
                call_context(ctx, None),
            )
            return to_json(reply)

        return await self._d.seatmaps.answer(ctx, (event_id, section), load)

    async def _sections(self, ctx: Ctx, event_id: int) -> frozenset[str]:
        """The event's section ids, read from its cached document (once per
        version of it)."""
        body = await self._d.events.document((event_id,), self._event_loader(ctx, event_id))
        known = self._section_ids.get(event_id)
        if known is None or known[0] is not body:
            event = json.loads(body).get("event", {})
            ids = frozenset(str(s.get("sectionId", "")) for s in event.get("sections", ()) if isinstance(s, dict))
            known = self._section_ids[event_id] = (body, ids)
            while len(self._section_ids) > _SECTION_IDS_KEPT:
                self._section_ids.pop(next(iter(self._section_ids)))
        return known[1]
