"""BookingAdminService over gRPC on loopback, against the test Postgres: an
operator creates an event, loads its inventory in chunks and follows its
figures; every change, refused ones included, leaves its audit row, and so
do BookingService's deprecated admin RPCs."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import grpc
import pytest

from booking_svc import app
from boxoffice import access, audit
from boxoffice.runtime import Runtime
from gen.boxoffice.booking.v1 import booking_admin_service_pb2 as apb
from gen.boxoffice.booking.v1 import booking_admin_service_pb2_grpc as apb_grpc
from gen.boxoffice.booking.v1 import booking_service_pb2 as pb
from tests.booking.harness import booking_server, call, create_event, general, new_event_id, seated, ts
from tests.support import NAMESPACE, TRUST_DOMAIN, ManualClock, Stores, make_runtime, mesh_client, running

ADMIN = "boxoffice.booking.v1.BookingAdminService"


@dataclass
class Admin:
    stub: Any
    rt: Runtime
    clock: ManualClock


@contextlib.asynccontextmanager
async def admin_server(stores: Stores) -> AsyncIterator[Admin]:
    """The booking server role as the app builds it, with BookingAdminService
    called as an operator."""
    clock = ManualClock()
    rt = make_runtime(stores, clock=clock)
    server = app.build_server(rt)
    async with running([*rt.infrastructure(), *server.components]), mesh_client(stores, server.grpc.address) as client:
        yield Admin(client.stub(apb_grpc.BookingAdminServiceStub, role=access.OPERATOR), rt, clock)


def _create_request(
    admin: Admin, event_id: int, *sections: apb.SectionDraft
) -> apb.BookingAdminServiceCreateEventRequest:
    now = datetime.fromtimestamp(admin.clock.now(), UTC)
    return apb.BookingAdminServiceCreateEventRequest(
        event_id=event_id,
        display_name="Admin test event",
        kind=apb.MANAGED_EVENT_KIND_CONCERT,
        starts_at=ts(now + timedelta(days=30)),
        sections=list(sections),
    )


def _seated(section_id: str) -> apb.SectionDraft:
    return apb.SectionDraft(
        section_id=section_id,
        kind=apb.MANAGED_SECTION_KIND_SEATED,
        price=apb.SectionPrice(currency_code="EUR", amount_minor=4500),
    )


def _floor(capacity: int) -> apb.SectionDraft:
    return apb.SectionDraft(
        section_id="FLOOR",
        kind=apb.MANAGED_SECTION_KIND_GENERAL_ADMISSION,
        capacity=capacity,
        price=apb.SectionPrice(currency_code="EUR", amount_minor=3000),
    )


def _rows(section: str, *labels: str, seats: int = 10) -> list[apb.InventoryRow]:
    return [apb.InventoryRow(section_id=section, row_label=r, first_seat_number=1, seat_count=seats) for r in labels]


async def _audit_of(rt: Runtime, event_id: int) -> list[audit.AuditEntry]:
    """The event's audit rows, oldest first."""
    rows = await audit.entries(rt.pool(), limit=1000)
    return [r for r in reversed(rows) if r.request.get("event_id") == str(event_id)]


def _capacities(event: dict[str, Any] | None) -> dict[str, int]:
    assert event is not None
    return {s["section_id"]: int(s.get("capacity", 0)) for s in event["sections"]}


async def test_an_operator_creates_an_event_loads_its_seats_in_chunks_and_reads_its_figures(stores: Stores) -> None:
    event_id = new_event_id()
    async with admin_server(stores) as admin:
        created = await admin.stub.CreateEvent(_create_request(admin, event_id, _seated("A"), _floor(100)))
        assert [s.section_id for s in created.event.sections] == ["A", "FLOOR"]
        first = await admin.stub.LoadInventory(
            apb.BookingAdminServiceLoadInventoryRequest(event_id=event_id, rows=_rows("A", "1", "2"))
        )
        second = await admin.stub.LoadInventory(
            apb.BookingAdminServiceLoadInventoryRequest(event_id=event_id, rows=_rows("A", "3", seats=5))
        )
        assert (first.seats_loaded, second.seats_loaded) == (20, 5)
        stats = await admin.stub.GetEventStats(apb.GetEventStatsRequest(event_id=event_id))
        assert (stats.capacity, stats.sold, stats.held, stats.available) == (125, 0, 0, 125)
        assert {s.section_id: s.capacity for s in stats.event.sections} == {"A": 25, "FLOOR": 100}

        rows = await _audit_of(admin.rt, event_id)
        assert [(r.service, r.method, r.outcome) for r in rows] == [
            (ADMIN, "CreateEvent", "OK"),
            (ADMIN, "LoadInventory", "OK"),
            (ADMIN, "LoadInventory", "OK"),
        ]
        create, load1, load2 = rows
        assert create.before is None and _capacities(create.after) == {"A": 0, "FLOOR": 100}
        assert create.request["sections"][1]["capacity"] == 100
        assert load1.before == create.after and _capacities(load1.after) == {"A": 20, "FLOOR": 100}
        assert load2.before == load1.after and _capacities(load2.after) == {"A": 25, "FLOOR": 100}
        assert len(load1.request["rows"]) == 2
        operator = access.spiffe_id(TRUST_DOMAIN, NAMESPACE, access.OPERATOR)
        assert {(r.caller_identity, r.caller_role) for r in rows} == {(operator, access.OPERATOR)}


async def test_a_refused_change_is_audited_with_its_code_and_changes_nothing(stores: Stores) -> None:
    event_id = new_event_id()
    async with admin_server(stores) as admin:
        await admin.stub.CreateEvent(_create_request(admin, event_id, _seated("A")))
        await admin.stub.LoadInventory(
            apb.BookingAdminServiceLoadInventoryRequest(event_id=event_id, rows=_rows("A", "1"))
        )
        _, taken = await call(admin.stub.CreateEvent(_create_request(admin, event_id, _floor(5))))
        assert taken is not None and (taken.code, taken.reason) == (grpc.StatusCode.ALREADY_EXISTS, "EVENT_EXISTS")
        # The second row names a section the event lacks: the first is not loaded either.
        bad_rows = [*_rows("A", "2"), *_rows("Z", "1")]
        _, unknown = await call(
            admin.stub.LoadInventory(apb.BookingAdminServiceLoadInventoryRequest(event_id=event_id, rows=bad_rows))
        )
        assert unknown is not None and unknown.reason == "UNKNOWN_SECTION"
        assert unknown.metadata["field"] == "rows[1].section_id"
        _, again = await call(
            admin.stub.LoadInventory(
                apb.BookingAdminServiceLoadInventoryRequest(event_id=event_id, rows=_rows("A", "1"))
            )
        )
        assert again is not None and (again.code, again.reason) == (grpc.StatusCode.ALREADY_EXISTS, "ROW_EXISTS")

        stats = await admin.stub.GetEventStats(apb.GetEventStatsRequest(event_id=event_id))
        assert stats.capacity == 10 and [s.section_id for s in stats.event.sections] == ["A"]
        rows = await _audit_of(admin.rt, event_id)
        assert [(r.method, r.outcome, r.reason) for r in rows] == [
            ("CreateEvent", "OK", None),
            ("LoadInventory", "OK", None),
            ("CreateEvent", "ALREADY_EXISTS", "EVENT_EXISTS"),
            ("LoadInventory", "INVALID_ARGUMENT", "UNKNOWN_SECTION"),
            ("LoadInventory", "ALREADY_EXISTS", "ROW_EXISTS"),
        ]
        for refused in rows[2:]:
            assert refused.before == refused.after == rows[1].after
            assert refused.message


@pytest.mark.parametrize(
    ("call_name", "request_", "field"),
    [
        ("CreateEvent", apb.BookingAdminServiceCreateEventRequest(), "event_id"),
        ("CreateEvent", apb.BookingAdminServiceCreateEventRequest(event_id=7, display_name="x"), "kind"),
        ("LoadInventory", apb.BookingAdminServiceLoadInventoryRequest(event_id=7), "rows"),
        ("LoadInventory", apb.BookingAdminServiceLoadInventoryRequest(event_id=0, rows=_rows("A", "1")), "event_id"),
        ("GetEventStats", apb.GetEventStatsRequest(event_id=-1), "event_id"),
    ],
)
async def test_bad_input_is_invalid_argument_naming_the_field_and_records_nothing(
    stores: Stores, call_name: str, request_: Any, field: str
) -> None:
    async with admin_server(stores) as admin:
        before = await audit.entries(admin.rt.pool(), limit=1)
        _, err = await call(getattr(admin.stub, call_name)(request_))
        assert err is not None and err.code == grpc.StatusCode.INVALID_ARGUMENT
        assert err.metadata.get("field") == field, err
        assert await audit.entries(admin.rt.pool(), limit=1) == before


async def test_an_operator_sets_the_ticket_limit_and_a_negative_one_creates_nothing(stores: Stores) -> None:
    async with admin_server(stores) as admin:
        event_id = new_event_id()
        request = _create_request(admin, event_id, _floor(50))
        request.max_seats_per_customer = 2
        request.max_tickets_per_customer = 6
        created = await admin.stub.CreateEvent(request)
        assert (created.event.max_seats_per_customer, created.event.max_tickets_per_customer) == (2, 6)
        stats = await admin.stub.GetEventStats(apb.GetEventStatsRequest(event_id=event_id))
        assert stats.event.max_tickets_per_customer == 6
        # Left out: the event's max_seats_per_customer.
        default = await admin.stub.CreateEvent(_create_request(admin, new_event_id(), _floor(50)))
        assert (default.event.max_seats_per_customer, default.event.max_tickets_per_customer) == (4, 4)

        bad_id = new_event_id()
        bad = _create_request(admin, bad_id, _floor(50))
        bad.max_tickets_per_customer = -3
        before = await audit.entries(admin.rt.pool(), limit=1)
        _, err = await call(admin.stub.CreateEvent(bad))
        assert err is not None and (err.code, err.reason) == (grpc.StatusCode.INVALID_ARGUMENT, "INVALID_FIELD")
        assert err.metadata == {"field": "max_tickets_per_customer"}
        _, missing = await call(admin.stub.GetEventStats(apb.GetEventStatsRequest(event_id=bad_id)))
        assert missing is not None and missing.reason == "EVENT_NOT_FOUND"
        assert await audit.entries(admin.rt.pool(), limit=1) == before


async def test_stats_of_an_unknown_event_are_not_found(stores: Stores) -> None:
    async with admin_server(stores) as admin:
        _, err = await call(admin.stub.GetEventStats(apb.GetEventStatsRequest(event_id=new_event_id())))
        assert err is not None and (err.code, err.reason) == (grpc.StatusCode.NOT_FOUND, "EVENT_NOT_FOUND")


async def test_the_deprecated_admin_rpcs_still_work_and_are_audited_as_booking_service(stores: Stores) -> None:
    async with booking_server(stores) as booking:
        event = await create_event(booking, [seated("A"), general("GA", 50)], rows=[("A", "1", 8)])
        assert {s.section_id: s.capacity for s in event.sections} == {"A": 8, "GA": 50}
        rows = await _audit_of(booking.rt, event.event_id)
        assert [(r.service, r.method, r.outcome) for r in rows] == [
            ("boxoffice.booking.v1.BookingService", "CreateEvent", "OK"),
            ("boxoffice.booking.v1.BookingService", "LoadInventory", "OK"),
        ]
        assert _capacities(rows[1].after) == {"A": 8, "GA": 50}


@pytest.mark.parametrize(
    ("ours", "theirs"),
    [
        (apb.BookingAdminServiceCreateEventRequest, pb.CreateEventRequest),
        (apb.BookingAdminServiceLoadInventoryRequest, pb.LoadInventoryRequest),
        (apb.SectionDraft, pb.SectionSpec),
        (apb.InventoryRow, pb.SeatRowSpec),
        (apb.ManagedEvent, pb.Event),
        (apb.ManagedSection, pb.Section),
        (apb.ManagedRefundPolicy, pb.RefundPolicy),
        (apb.ManagedCheckInSettings, pb.CheckInSettings),
        (apb.ManagedWaitlistSettings, pb.WaitlistSettings),
        (apb.SectionPrice, pb.Money),
    ],
)
def test_the_admin_messages_mirror_booking_service_field_for_field(ours: Any, theirs: Any) -> None:
    def shape(message: Any) -> dict[int, tuple[str, int, int]]:
        return {n: (f.name, f.type, int(f.is_repeated)) for n, f in message.DESCRIPTOR.fields_by_number.items()}

    assert shape(ours) == shape(theirs)
    for name, enum_ours, enum_theirs in (
        ("kind", apb.ManagedEventKind, pb.EventKind),
        ("section kind", apb.ManagedSectionKind, pb.SectionKind),
    ):
        assert [v.number for v in enum_ours.DESCRIPTOR.values] == [v.number for v in enum_theirs.DESCRIPTOR.values], (
            name
        )
