"""An event's catalogue columns (:class:`booking_svc.model.Listing`) as
Postgres stores them: one list of columns, written and read in that order."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from booking_svc.model import Flight, Listing, Venue

LISTING_COLUMNS = (
    "time_zone, description, published, sale_opens_at, venue_name, venue_city, venue_country_code, "
    "flight_code, flight_origin, flight_destination, flight_departs_at, flight_arrives_at"
)


def listing_row(listing: Listing) -> tuple[Any, ...]:
    """The values of :data:`LISTING_COLUMNS` for ``listing``."""
    venue, flight = listing.venue, listing.flight
    return (
        listing.time_zone,
        listing.description,
        listing.published,
        listing.sale_opens_at,
        None if venue is None else venue.name,
        None if venue is None else venue.city,
        None if venue is None else venue.country_code,
        None if flight is None else flight.code,
        None if flight is None else flight.origin,
        None if flight is None else flight.destination,
        None if flight is None else flight.departs_at,
        None if flight is None else flight.arrives_at,
    )


def listing_of(row: Sequence[Any]) -> Listing:
    """The listing read from :data:`LISTING_COLUMNS`."""
    (time_zone, description, published, sale_opens_at, venue_name, venue_city, venue_country) = row[:7]
    (code, origin, destination, departs_at, arrives_at) = row[7:12]
    return Listing(
        time_zone=time_zone,
        description=description,
        published=published,
        sale_opens_at=sale_opens_at,
        venue=None if venue_name is None else Venue(venue_name, venue_city or "", venue_country or ""),
        flight=None if code is None else Flight(code, origin, destination, departs_at, arrives_at),
    )
