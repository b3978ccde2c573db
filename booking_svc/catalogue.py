"""ListEvents: the request's filters parsed into a
:class:`booking_svc.model.CatalogueQuery` (INVALID_ARGUMENT naming the
field), the page token, and the listing built into the response.

A page token is sealed with the service's token keys
(:meth:`boxoffice.tokens.TokenSigner.seal`): it carries the last event's
(starts_at, event_id) and a digest of the filters, so a forged token, or one
reused with other filters, is refused (PAGE_TOKEN_INVALID). Paging by that
cursor is stable under inserts: an event added before the cursor is not
seen, one added after it is, and none is listed twice.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from datetime import date, datetime

from booking_svc.listing import IATA, flight_pb, venue_pb
from booking_svc.model import Availability, CatalogueEntry, CatalogueQuery, EventKind
from booking_svc.times import timestamp, ts
from boxoffice import validate
from boxoffice.errors import InvalidArgument
from boxoffice.tokens import TokenSigner
from gen.boxoffice.booking.v1 import booking_service_pb2 as pb

DEFAULT_PAGE_SIZE = 20
MAX_PAGE_SIZE = 100
MAX_QUERY = 200
_DATE = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}")
_KINDS = {pb.EVENT_KIND_CONCERT: EventKind.CONCERT, pb.EVENT_KIND_FLIGHT: EventKind.FLIGHT}
_KIND_PB = {EventKind.CONCERT: pb.EVENT_KIND_CONCERT, EventKind.FLIGHT: pb.EVENT_KIND_FLIGHT}
_AVAILABILITY_PB = {
    Availability.ON_SALE: pb.EVENT_AVAILABILITY_ON_SALE,
    Availability.FEW_LEFT: pb.EVENT_AVAILABILITY_FEW_LEFT,
    Availability.SOLD_OUT: pb.EVENT_AVAILABILITY_SOLD_OUT,
    Availability.NOT_YET_ON_SALE: pb.EVENT_AVAILABILITY_NOT_YET_ON_SALE,
}
_TOKEN_KIND = "events"


@dataclass(frozen=True, slots=True)
class CatalogueRequest:
    query: CatalogueQuery
    page_size: int
    page_token: str | None


def parse_list_events(request: pb.ListEventsRequest) -> CatalogueRequest:
    page_size = request.page_size or DEFAULT_PAGE_SIZE
    validate.int_range("page_size", page_size, minimum=1, maximum=MAX_PAGE_SIZE)
    words = validate.text("query", request.query, max_length=MAX_QUERY, min_length=0).strip()
    if request.kind and request.kind not in _KINDS:
        raise validate.invalid("kind", "must be EVENT_KIND_CONCERT or EVENT_KIND_FLIGHT")
    origin = validate.text("origin", request.origin, max_length=3, pattern=IATA) if request.origin else None
    destination = (
        validate.text("destination", request.destination, max_length=3, pattern=IATA) if request.destination else None
    )
    local_date = None
    if request.local_date:
        try:
            if not _DATE.fullmatch(request.local_date):
                raise ValueError
            local_date = date.fromisoformat(request.local_date)
        except ValueError:
            raise validate.invalid("local_date", "must be a date as YYYY-MM-DD") from None
    after = timestamp("starts_after", request.starts_after) if request.HasField("starts_after") else None
    before = timestamp("starts_before", request.starts_before) if request.HasField("starts_before") else None
    if after is not None and before is not None and before <= after:
        raise validate.invalid("starts_before", "must be after starts_after")
    query = CatalogueQuery(
        # A query without a word (only punctuation) filters nothing.
        words=words if re.search(r"\w", words) else "",
        kind=_KINDS.get(request.kind),
        origin=origin,
        destination=destination,
        local_date=local_date,
        starts_after=after,
        starts_before=before,
    )
    return CatalogueRequest(query, page_size, request.page_token or None)


def _filters_digest(query: CatalogueQuery) -> str:
    """The filters as the caller gave them (a default start is not one)."""
    text = "\x00".join(
        "" if v is None else (v.isoformat() if isinstance(v, (date, datetime)) else str(v))
        for v in (
            query.words.casefold(),
            query.kind,
            query.origin,
            query.destination,
            query.local_date,
            query.starts_after,
            query.starts_before,
        )
    )
    return hashlib.sha256(text.encode()).hexdigest()[:24]


def page_token(signer: TokenSigner, query: CatalogueQuery, last: CatalogueEntry) -> str:
    return signer.seal(_TOKEN_KIND, {"s": last.starts_at.isoformat(), "e": last.event_id, "f": _filters_digest(query)})


def open_page_token(signer: TokenSigner, query: CatalogueQuery, token: str) -> tuple[datetime, int]:
    """The cursor of a token this listing handed out for these filters."""
    bad = InvalidArgument(
        "page_token is not a token this listing handed out for these filters",
        reason="PAGE_TOKEN_INVALID",
        metadata={"field": "page_token"},
    )
    body = signer.open(_TOKEN_KIND, token)
    if body is None or body.get("f") != _filters_digest(query):
        raise bad
    try:
        starts_at = datetime.fromisoformat(str(body["s"]))
        event_id = body["e"]
    except (KeyError, ValueError):
        raise bad from None
    if starts_at.tzinfo is None or not isinstance(event_id, int):
        raise bad
    return starts_at, event_id


def entry_pb(entry: CatalogueEntry) -> pb.EventListing:
    listing = entry.listing
    message = pb.EventListing(
        event_id=entry.event_id,
        display_name=entry.display_name,
        kind=_KIND_PB[entry.kind],
        starts_at=ts(entry.starts_at),
        time_zone=listing.time_zone,
        description=listing.description,
        availability=_AVAILABILITY_PB[entry.availability],
    )
    if listing.venue is not None:
        message.venue.CopyFrom(venue_pb(listing.venue))
    if listing.flight is not None:
        message.flight.CopyFrom(flight_pb(listing.flight))
    if entry.lowest_price is not None:
        message.lowest_price.currency_code = entry.lowest_price.currency
        message.lowest_price.amount_minor = entry.lowest_price.amount_minor
    if listing.sale_opens_at is not None:
        message.sale_opens_at.CopyFrom(ts(listing.sale_opens_at))
    return message
