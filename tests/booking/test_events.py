"""Events and inventory: validated, all or nothing, clear errors; the seat
map's compact encoding and its cache."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from boxoffice.errors import AlreadyExists, InvalidArgument, NotFound
from gen.boxoffice.booking.v1 import booking_service_pb2 as pb
from tests.booking.harness import (
    booking_server,
    call,
    create_event,
    general,
    hold_request,
    new_event_id,
    query,
    seat_ids,
    seated,
    ts,
    ttl,
)
from tests.support import Stores


def event_request(event_id: int, sections: list[pb.SectionSpec], **fields: object) -> pb.CreateEventRequest:
    request = pb.CreateEventRequest(
        event_id=event_id,
        display_name="Flight BX 101",
        kind=pb.EVENT_KIND_FLIGHT,
        starts_at=ts(datetime.now(UTC) + timedelta(days=3)),
        sections=sections,
    )
    for name, value in fields.items():
        setattr(request, name, value)
    return request


async def test_create_event_defaults_and_validation(stores: Stores) -> None:
    async with booking_server(stores) as booking:
        event_id = new_event_id()
        made = (
            await booking.stub.CreateEvent(event_request(event_id, [general("Y", 180, 3), seated("J", 90000)]))
        ).event
        assert made.hold_ttl.seconds == 600 and made.max_seats_per_customer == 4  # a flight's defaults
        assert [(s.section_id, s.capacity, s.overbook_limit) for s in made.sections] == [("J", 0, 0), ("Y", 180, 3)]
        _, err = await call(booking.stub.CreateEvent(event_request(event_id, [general("Y", 1)])))
        assert isinstance(err, AlreadyExists)
        fresh = new_event_id()
        bad_sections = [
            [],
            [general("Y", 0)],
            [general("Y", 5), general("Y", 5)],
            [general("bad id", 5)],
            [
                pb.SectionSpec(
                    section_id="S", kind=pb.SECTION_KIND_SEATED, capacity=10, price=pb.Money(currency_code="EUR")
                )
            ],
            [pb.SectionSpec(section_id="S", kind=pb.SECTION_KIND_GENERAL_ADMISSION, capacity=10)],
            [
                pb.SectionSpec(
                    section_id="S",
                    kind=pb.SECTION_KIND_GENERAL_ADMISSION,
                    capacity=10,
                    price=pb.Money(currency_code="eur"),
                )
            ],
            [pb.SectionSpec(section_id="S", capacity=10, price=pb.Money(currency_code="EUR"))],
            [
                pb.SectionSpec(
                    section_id="S", kind=pb.SECTION_KIND_SEATED, overbook_limit=2, price=pb.Money(currency_code="EUR")
                )
            ],
        ]
        for sections in bad_sections:
            _, err = await call(booking.stub.CreateEvent(event_request(fresh, sections)))
            assert isinstance(err, InvalidArgument), sections
        for fields in (
            {"display_name": ""},
            {"kind": pb.EVENT_KIND_UNSPECIFIED},
            {"max_seats_per_customer": 101},
        ):
            _, err = await call(booking.stub.CreateEvent(event_request(fresh, [general("Y", 5)], **fields)))
            assert isinstance(err, InvalidArgument), fields
        request = event_request(fresh, [general("Y", 5)])
        request.hold_ttl.CopyFrom(ttl(0.5))
        _, err = await call(booking.stub.CreateEvent(request))
        assert isinstance(err, InvalidArgument)
        _, err = await call(booking.stub.CreateEvent(event_request(-1, [general("Y", 5)])))
        assert isinstance(err, InvalidArgument)
        _, err = await call(booking.stub.GetEvent(pb.GetEventRequest(event_id=fresh)))
        assert isinstance(err, NotFound)


async def test_load_inventory_is_all_or_nothing(stores: Stores) -> None:
    async with booking_server(stores) as booking:
        event = await create_event(booking, [seated("A"), general("G", 10)], [("A", "A", 10)])
        before = await query(booking, "SELECT count(*) FROM seats WHERE event_id = %s", (event.event_id,))

        def row(section: str, label: str, count: int = 5) -> pb.SeatRowSpec:
            return pb.SeatRowSpec(section_id=section, row_label=label, first_seat_number=1, seat_count=count)

        cases = [
            ([row("A", "B"), row("Z", "C")], InvalidArgument, "UNKNOWN_SECTION"),
            ([row("A", "B"), row("G", "C")], InvalidArgument, "SECTION_NOT_SEATED"),
            ([row("A", "B"), row("A", "A")], AlreadyExists, "ROW_EXISTS"),
            ([row("A", "B"), row("A", "B")], InvalidArgument, "INVALID_FIELD"),
            ([row("A", "B", 0)], InvalidArgument, "INVALID_FIELD"),
            ([row("A", "B", 1001)], InvalidArgument, "INVALID_FIELD"),
            ([row("A", "toolongrow")], InvalidArgument, "INVALID_FIELD"),
            ([], InvalidArgument, "FIELD_REQUIRED"),
        ]
        for rows, kind, reason in cases:
            _, err = await call(booking.stub.LoadInventory(pb.LoadInventoryRequest(event_id=event.event_id, rows=rows)))
            assert isinstance(err, kind) and err.reason == reason, (rows, err)
        after = await query(booking, "SELECT count(*) FROM seats WHERE event_id = %s", (event.event_id,))
        assert after == before
        _, err = await call(
            booking.stub.LoadInventory(pb.LoadInventoryRequest(event_id=new_event_id(), rows=[row("A", "B")]))
        )
        assert isinstance(err, NotFound)
        loaded = await booking.stub.LoadInventory(
            pb.LoadInventoryRequest(event_id=event.event_id, rows=[row("A", "B", 1000), row("A", "C", 1000)])
        )
        assert loaded.seats_loaded == 2000
        assert {s.section_id: s.capacity for s in loaded.event.sections} == {"A": 2010, "G": 10}
        labels = await query(
            booking,
            "SELECT min(seat_id), max(seat_id), min(label) FILTER (WHERE seat_number = 7) FROM seats "
            "WHERE event_id = %s AND row_label = 'C'",
            (event.event_id,),
        )
        assert tuple(labels[0]) == (1011, 2010, "A-C-7")


async def test_seat_map_is_a_bitmap_per_section(stores: Stores) -> None:
    async with booking_server(stores) as booking:
        event = await create_event(booking, [seated("A"), general("G", 10)], [("A", "A", 6), ("A", "B", 5)])
        seats = await seat_ids(booking, event.event_id, "A")
        await booking.stub.HoldSeats(
            hold_request(booking.token("c", event.event_id), event.event_id, [seats[1], seats[8]])
        )
        await booking.stub.HoldSeats(
            hold_request(booking.token("d", event.event_id), event.event_id, section="G", quantity=3)
        )
        reply = await booking.stub.GetSeatMap(pb.GetSeatMapRequest(event_id=event.event_id))
        by_id = {s.section.section_id: s for s in reply.sections}
        a = by_id["A"]
        assert [(r.row_label, r.first_seat_id, r.seat_count) for r in a.rows] == [
            ("A", seats[0], 6),
            ("B", seats[6], 5),
        ]
        bits = int.from_bytes(a.available_bitmap, "little")
        assert [bool(bits >> i & 1) for i in range(11)] == [i not in (1, 8) for i in range(11)]
        assert a.available == 9 and len(a.available_bitmap) == 2
        assert by_id["G"].available == 7 and by_id["G"].available_bitmap == b""
        only = await booking.stub.GetSeatMap(pb.GetSeatMapRequest(event_id=event.event_id, section_id="G"))
        assert [s.section.section_id for s in only.sections] == ["G"]
        _, err = await call(booking.stub.GetSeatMap(pb.GetSeatMapRequest(event_id=event.event_id, section_id="Q")))
        assert isinstance(err, InvalidArgument)


async def test_seat_map_is_served_from_a_cache_but_holds_are_not(stores: Stores) -> None:
    async with booking_server(stores, environ={"BOXOFFICE_BOOKING_SEAT_MAP_MAX_AGE_SECONDS": "10"}) as booking:
        event = await create_event(booking, [seated("A")], [("A", "A", 4)])
        seats = await seat_ids(booking, event.event_id, "A")
        first = await booking.stub.GetSeatMap(pb.GetSeatMapRequest(event_id=event.event_id))
        await booking.stub.HoldSeats(hold_request(booking.token("c", event.event_id), event.event_id, seats[:1]))
        cached = await booking.stub.GetSeatMap(pb.GetSeatMapRequest(event_id=event.event_id))
        assert cached == first  # the same snapshot: seat 0 still shows free
        _, err = await call(
            booking.stub.HoldSeats(hold_request(booking.token("d", event.event_id), event.event_id, seats[:1]))
        )
        assert err is not None and err.reason == "SEAT_UNAVAILABLE"  # the hold went to Postgres


async def test_a_fifty_thousand_seat_map_is_small(stores: Stores) -> None:
    async with booking_server(stores) as booking:
        event = await create_event(booking, [seated("A")], [("A", f"R{r}", 1000) for r in range(50)])
        reply = await booking.stub.GetSeatMap(pb.GetSeatMapRequest(event_id=event.event_id))
        assert reply.sections[0].available == 50_000
        assert len(reply.SerializeToString()) < 10_000
