"""An event's catalogue fields on the wire: the time zone, description,
publication, venue, flight and on-sale time of CreateEventRequest parsed
into a :class:`booking_svc.model.Listing` (INVALID_ARGUMENT naming the
field), and built back into an Event's fields."""

from __future__ import annotations

import re
import zoneinfo
from datetime import datetime
from typing import Any

from booking_svc.model import EventKind, Flight, Listing, Venue
from booking_svc.times import timestamp, ts
from boxoffice import validate
from gen.boxoffice.booking.v1 import booking_service_pb2 as pb

IATA = re.compile(r"[A-Z]{3}")
_COUNTRY = re.compile(r"[A-Z]{2}")
# An airline's two-character code, then 1 to 4 digits and an optional suffix letter.
_FLIGHT_CODE = re.compile(r"[A-Z0-9]{2}[0-9]{1,4}[A-Z]?")
# Area/Location names of the IANA database (and bare names such as UTC).
_ZONE_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_+-]*(/[A-Za-z0-9_+-]+){0,2}")
MAX_DESCRIPTION = 2000


def time_zone(field: str, name: str) -> str:
    """``name`` when the IANA database knows it."""
    if not _ZONE_NAME.fullmatch(name) or len(name) > 64:
        raise validate.invalid(field, f"{name!r} is not an IANA time zone name such as Asia/Ho_Chi_Minh")
    try:
        zoneinfo.ZoneInfo(name)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError):
        raise validate.invalid(field, f"{name!r} is not a time zone the IANA database knows") from None
    return name


def parse_listing(request: pb.CreateEventRequest, kind: EventKind, starts_at: datetime) -> Listing:
    zone = time_zone("time_zone", request.time_zone) if request.time_zone else "UTC"
    description = validate.text("description", request.description, max_length=MAX_DESCRIPTION, min_length=0)
    venue = None
    if request.HasField("venue"):
        if kind is not EventKind.CONCERT:
            raise validate.invalid("venue", "a flight has no venue: its places are its airports")
        v = request.venue
        venue = Venue(
            validate.text("venue.display_name", v.display_name, max_length=200),
            validate.text("venue.city", v.city, max_length=100),
            validate.text("venue.country_code", v.country_code, max_length=2, pattern=_COUNTRY),
        )
    flight = None
    if request.HasField("flight"):
        if kind is not EventKind.FLIGHT:
            raise validate.invalid("flight", "only a flight has a flight")
        flight = _flight(request.flight, starts_at)
    sale_opens_at = timestamp("sale_opens_at", request.sale_opens_at) if request.HasField("sale_opens_at") else None
    return Listing(
        time_zone=zone,
        description=description,
        published=request.published if request.HasField("published") else True,
        venue=venue,
        flight=flight,
        sale_opens_at=sale_opens_at,
    )


def _flight(f: pb.Flight, starts_at: datetime) -> Flight:
    code = validate.text("flight.flight_code", f.flight_code, max_length=7, pattern=_FLIGHT_CODE)
    origin = validate.text("flight.origin", f.origin, max_length=3, pattern=IATA)
    destination = validate.text("flight.destination", f.destination, max_length=3, pattern=IATA)
    if origin == destination:
        raise validate.invalid("flight.destination", "must differ from the origin")
    if not f.HasField("departs_at"):
        raise validate.required("flight.departs_at")
    departs_at = timestamp("flight.departs_at", f.departs_at)
    if departs_at != starts_at:
        raise validate.invalid("flight.departs_at", "must equal the event's starts_at (a flight starts as it departs)")
    arrives_at = None
    if f.HasField("arrives_at"):
        arrives_at = timestamp("flight.arrives_at", f.arrives_at)
        if arrives_at <= departs_at:
            raise validate.invalid("flight.arrives_at", "must be after departs_at")
    return Flight(code, origin, destination, departs_at, arrives_at)


def venue_pb(venue: Venue) -> pb.Venue:
    return pb.Venue(display_name=venue.name, city=venue.city, country_code=venue.country_code)


def flight_pb(flight: Flight) -> pb.Flight:
    message = pb.Flight(
        flight_code=flight.code,
        origin=flight.origin,
        destination=flight.destination,
        departs_at=ts(flight.departs_at),
    )
    if flight.arrives_at is not None:
        message.arrives_at.CopyFrom(ts(flight.arrives_at))
    return message


def listing_fields(listing: Listing) -> dict[str, Any]:
    """The Event message's catalogue fields (keyword arguments)."""
    fields: dict[str, Any] = {
        "time_zone": listing.time_zone,
        "description": listing.description,
        "published": listing.published,
    }
    if listing.venue is not None:
        fields["venue"] = venue_pb(listing.venue)
    if listing.flight is not None:
        fields["flight"] = flight_pb(listing.flight)
    if listing.sale_opens_at is not None:
        fields["sale_opens_at"] = ts(listing.sale_opens_at)
    return fields
