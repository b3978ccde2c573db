"""The admin event file's catalogue fields: the issue's two examples work as
written (only their event ids changed, so the suite can run them again),
their events are listed by ListEvents, and a file with an unknown time
zone, a malformed IATA code or a flight without departs_at is refused with
its line and field named, and nothing is created."""

from __future__ import annotations

import random
from datetime import UTC, datetime
from typing import Any

import pytest

from boxoffice import access
from boxoffice_cli.admin_files import BadFile, parse_event_file
from gen.boxoffice.booking.v1 import booking_service_pb2 as pb
from gen.boxoffice.booking.v1 import booking_service_pb2_grpc as pb_grpc
from tests.e2e.admin_mesh import Mesh, mesh  # noqa: F401 (the fixture)
from tests.edge.asserting import edge_mesh_client

FLIGHT = """\
event: {id: 7001, name: Hanoi morning flight, kind: flight, starts_at: "2026-12-20T08:00:00+07:00",
        time_zone: Asia/Ho_Chi_Minh,
        flight: {code: VN213, origin: SGN, destination: HAN,
                 departs_at: "2026-12-20T08:00:00+07:00", arrives_at: "2026-12-20T10:10:00+07:00"}}
sections:
  - {id: Y, name: Economy, kind: seated, overbook: 3, price: {currency: VND, amount_minor: 1500000}}
  - {id: J, name: Business, kind: seated, price: {currency: VND, amount_minor: 5200000}}
waiting_room: {opens_at: "2026-12-01T09:00:00+07:00", admission_rate_per_second: 50, max_active_shoppers: 1000}
"""

CONCERT = """\
event: {id: 7002, name: Mùa hè rực rỡ, kind: concert, starts_at: "2026-12-31T20:00:00+07:00",
        time_zone: Asia/Ho_Chi_Minh, description: "New Year's Eve live",
        venue: {name: Sân vận động Mỹ Đình, city: Hà Nội, country_code: VN}}
sections:
  - {id: FLOOR, kind: general_admission, capacity: 500, price: {currency: VND, amount_minor: 900000}}
waiting_room: {opens_at: "2026-12-01T10:00:00+07:00", admission_rate_per_second: 50, max_active_shoppers: 1000}
"""


def _with_id(text: str, old: int) -> tuple[int, str]:
    new = random.randint(10**9, 10**15)
    return new, text.replace(f"id: {old},", f"id: {new},", 1)


def test_the_examples_become_the_requests() -> None:
    flight = parse_event_file("flight.yaml", FLIGHT)
    event = flight.event
    assert (event.time_zone, event.flight.flight_code, event.flight.origin, event.flight.destination) == (
        "Asia/Ho_Chi_Minh",
        "VN213",
        "SGN",
        "HAN",
    )
    assert event.flight.departs_at == event.starts_at
    assert event.sale_opens_at.ToDatetime(tzinfo=UTC) == datetime(2026, 12, 1, 2, tzinfo=UTC)
    assert not event.HasField("published")  # listed from its creation
    assert flight.notes == (
        "flight.yaml:6: note: sections[0].overbook is not taken: a seated section sells each seat once "
        "(a fare class that overbooks is a general_admission section with a capacity)",
    )
    assert [s.overbook_limit for s in event.sections] == [0, 0]
    concert = parse_event_file("concert.yaml", CONCERT).event
    assert (concert.venue.display_name, concert.venue.city, concert.venue.country_code) == (
        "Sân vận động Mỹ Đình",
        "Hà Nội",
        "VN",
    )
    assert concert.description == "New Year's Eve live"
    hidden = parse_event_file("c.yaml", CONCERT.replace("time_zone:", "published: false, time_zone:")).event
    assert hidden.HasField("published") and not hidden.published
    # Ticket transfers: allowed unless the file says otherwise.
    assert not concert.HasField("transfers")
    closed = parse_event_file("c.yaml", CONCERT.replace("time_zone:", "transfers: false, time_zone:")).event
    assert closed.HasField("transfers") and not closed.transfers


@pytest.mark.parametrize(
    ("old", "new", "problem"),
    [
        (
            "time_zone: Asia/Ho_Chi_Minh",
            "time_zone: Asia/Saigonn",
            "f.yaml:2: event.time_zone 'Asia/Saigonn' is not an IANA time zone",
        ),
        ("origin: SGN", "origin: SG", "f.yaml:3: event.flight.origin 'SG' must be an IATA airport code"),
        ("destination: HAN", "destination: han", "f.yaml:3: event.flight.destination 'han' must be an IATA"),
        ("code: VN213", "code: V-213", "f.yaml:3: event.flight.code 'V-213' must be a flight number"),
        (
            'departs_at: "2026-12-20T08:00:00+07:00", ',
            "",
            "f.yaml:3: event.flight: 'departs_at' is required",
        ),
    ],
)
def test_a_bad_catalogue_field_names_its_line(old: str, new: str, problem: str) -> None:
    assert old in FLIGHT
    with pytest.raises(BadFile) as bad:
        parse_event_file("f.yaml", FLIGHT.replace(old, new))
    assert any(p.startswith(problem) for p in bad.value.problems), bad.value.problems


async def test_the_examples_create_listed_events(mesh: Mesh) -> None:  # noqa: F811
    flight_id, flight = _with_id(FLIGHT, 7001)
    concert_id, concert = _with_id(CONCERT, 7002)
    for name, text in (("flight.yaml", flight), ("concert.yaml", concert)):
        created = await mesh.admin("event", "create", mesh.file(name, text))
        assert created.code == 0, created.err
    window: dict[str, Any] = {
        "starts_after": _ts(datetime(2026, 12, 20, tzinfo=UTC)),
        "starts_before": _ts(datetime(2027, 1, 1, tzinfo=UTC)),
    }
    async with edge_mesh_client(mesh.stores, mesh.booking_addr) as client:
        stub = client.stub(pb_grpc.BookingServiceStub, role=access.EDGE)
        found = await stub.ListEvents(
            pb.ListEventsRequest(query="VN213", origin="SGN", local_date="2026-12-20", **window)
        )
        assert flight_id in [e.event_id for e in found.events]
        found = await stub.ListEvents(pb.ListEventsRequest(query="my dinh", local_date="2026-12-31", **window))
        listed = {e.event_id: e for e in found.events}
        assert listed[concert_id].venue.city == "Hà Nội"
        assert listed[concert_id].lowest_price.amount_minor == 900000


def test_the_help_names_the_catalogue_fields() -> None:
    from boxoffice_cli.admin_files import EVENT_FILE_HELP

    for key in ("time_zone", "description", "published", "venue", "flight", "departs_at"):
        assert key in EVENT_FILE_HELP, key


def _ts(value: datetime) -> object:
    from google.protobuf import timestamp_pb2

    out = timestamp_pb2.Timestamp()
    out.FromDatetime(value)
    return out
