"""boxoffice.booking.v1.BookingAdminService on gRPC, and the audited face
of BookingService's deprecated admin RPCs.

:class:`BookingAdmin` holds the events' administration on the handler's
use cases, each change run through the :class:`boxoffice.audit.Auditor`
(the one place an admin action is recorded); both servicers below parse
their requests and call it. Its handler's store is built on the
auditor's pool, so that a change joins the action's transaction and
commits with its audit row.

The admin contract's messages mirror BookingService's field for field
(same numbers and types), so a request is parsed by BookingService's
converters after a round trip through the wire format.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import grpc
from google.protobuf.message import Message

from booking_svc.converters import event_pb, parse_event_spec, parse_rows
from booking_svc.handler import BookingHandler
from booking_svc.model import Event, EventSpec, RowSpec
from booking_svc.servicer import BookingServicer
from booking_svc.waitlist import Waitlist
from booking_svc.waitlist_model import WaitlistStats
from boxoffice import validate
from boxoffice.audit import Auditor, Json, message_json
from boxoffice.server import Registration
from gen.boxoffice.booking.v1 import booking_admin_service_pb2 as apb
from gen.boxoffice.booking.v1 import booking_admin_service_pb2_grpc as apb_grpc
from gen.boxoffice.booking.v1 import booking_service_pb2 as pb

ADMIN_SERVICE_NAME = apb.DESCRIPTOR.services_by_name["BookingAdminService"].full_name
_BOOKING_SERVICE_NAME = pb.DESCRIPTOR.services_by_name["BookingService"].full_name

Context = grpc.aio.ServicerContext[Any, Any]


def _method(service: str, name: str) -> str:
    return f"/{service}/{name}"


def managed_event_pb(event: Event) -> apb.ManagedEvent:
    return apb.ManagedEvent.FromString(event_pb(event).SerializeToString())


def _event_json(event: Event) -> Json:
    return message_json(event_pb(event))


def stats_pb(event: Event, waitlist: WaitlistStats) -> apb.GetEventStatsResponse:
    """The event with its totals over all sections, and its waiting list."""
    sections = event.sections
    return apb.GetEventStatsResponse(
        event=managed_event_pb(event),
        capacity=sum(s.capacity for s in sections),
        sold=sum(s.sold for s in sections),
        held=sum(s.held for s in sections),
        available=sum(max(0, s.capacity + s.overbook_limit - s.sold - s.held) for s in sections),
        waitlist_waiting=waitlist.waiting,
        waitlist_offered=waitlist.offered,
        waitlist_taken=waitlist.taken,
        waitlist_lapsed=waitlist.lapsed,
    )


class BookingAdmin:
    """The events' administration, every change audited."""

    def __init__(self, *, handler: BookingHandler, auditor: Auditor, waitlist: Waitlist) -> None:
        self._handler = handler
        self._audit = auditor
        self.waitlist = waitlist

    async def _change(
        self, method: str, request: Message, event_id: int, change: Callable[[], Awaitable[Event]]
    ) -> Event:
        async def before() -> Json | None:
            return _event_json(await self._handler.get_event(event_id))

        event: Event = await self._audit.run(method, request, before=before, action=change, after=_event_json)
        return event

    async def create_event(self, method: str, request: Message, spec: EventSpec) -> Event:
        return await self._change(method, request, spec.event_id, lambda: self._handler.create_event(spec))

    async def load_inventory(
        self, method: str, request: Message, event_id: int, rows: Sequence[RowSpec]
    ) -> tuple[int, Event]:
        loaded = 0

        async def load() -> Event:
            nonlocal loaded
            loaded, event = await self._handler.load_inventory(event_id, rows)
            return event

        event = await self._change(method, request, event_id, load)
        return loaded, event

    async def get_event(self, event_id: int) -> Event:
        return await self._handler.get_event(event_id)


class BookingAdminServicer(apb_grpc.BookingAdminServiceServicer):
    """The gRPC face of BookingAdmin."""

    def __init__(self, admin: BookingAdmin) -> None:
        self._admin = admin

    def registration(self) -> Registration:
        add: Callable[[Any, grpc.aio.Server], None] = apb_grpc.add_BookingAdminServiceServicer_to_server
        return Registration(ADMIN_SERVICE_NAME, lambda server: add(self, server))

    async def CreateEvent(
        self, request: apb.BookingAdminServiceCreateEventRequest, context: Context
    ) -> apb.BookingAdminServiceCreateEventResponse:
        spec = parse_event_spec(pb.CreateEventRequest.FromString(request.SerializeToString()))
        event = await self._admin.create_event(_method(ADMIN_SERVICE_NAME, "CreateEvent"), request, spec)
        return apb.BookingAdminServiceCreateEventResponse(event=managed_event_pb(event))

    async def LoadInventory(
        self, request: apb.BookingAdminServiceLoadInventoryRequest, context: Context
    ) -> apb.BookingAdminServiceLoadInventoryResponse:
        event_id = validate.positive_id("event_id", request.event_id)
        rows = parse_rows(pb.LoadInventoryRequest.FromString(request.SerializeToString()))
        loaded, event = await self._admin.load_inventory(
            _method(ADMIN_SERVICE_NAME, "LoadInventory"), request, event_id, rows
        )
        return apb.BookingAdminServiceLoadInventoryResponse(seats_loaded=loaded, event=managed_event_pb(event))

    async def GetEventStats(self, request: apb.GetEventStatsRequest, context: Context) -> apb.GetEventStatsResponse:
        event_id = validate.positive_id("event_id", request.event_id)
        event = await self._admin.get_event(event_id)
        return stats_pb(event, await self._admin.waitlist.stats(event_id))


class AuditedBookingServicer(BookingServicer):
    """BookingService with its deprecated admin RPCs, each the
    BookingAdminService RPC's use case (:class:`BookingAdmin`, audited) under
    the old message (everything else is BookingServicer's own)."""

    def __init__(self, handler: BookingHandler, admin: BookingAdmin) -> None:
        super().__init__(handler, waitlist=admin.waitlist)
        self._admin = admin

    async def CreateEvent(self, request: pb.CreateEventRequest, context: Context) -> pb.CreateEventResponse:
        spec = parse_event_spec(request)
        event = await self._admin.create_event(_method(_BOOKING_SERVICE_NAME, "CreateEvent"), request, spec)
        return pb.CreateEventResponse(event=event_pb(event))

    async def LoadInventory(self, request: pb.LoadInventoryRequest, context: Context) -> pb.LoadInventoryResponse:
        event_id = validate.positive_id("event_id", request.event_id)
        loaded, event = await self._admin.load_inventory(
            _method(_BOOKING_SERVICE_NAME, "LoadInventory"), request, event_id, parse_rows(request)
        )
        return pb.LoadInventoryResponse(seats_loaded=loaded, event=event_pb(event))
