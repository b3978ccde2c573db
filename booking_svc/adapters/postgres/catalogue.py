"""The catalogue (ListEvents) on Postgres: a page of published events in
(starts_at, event_id) order, each filter one fixed SQL fragment, so that
every combination of filters is its own statement with its own plan (no
``param IS NULL OR ...`` that a generic plan cannot narrow by index). The
indexes are in migration 0016; the README states the plans."""

from __future__ import annotations

from collections import defaultdict
from datetime import datetime
from typing import Any

from booking_svc.adapters.postgres.base import PgBase
from booking_svc.adapters.postgres.listing import LISTING_COLUMNS, listing_of
from booking_svc.model import Availability, CatalogueEntry, CatalogueQuery, EventKind, Listing, Money
from boxoffice.db import transaction

# At most this many seats left, or a tenth of them, is FEW_LEFT.
FEW_LEFT_SEATS = 10

# The listed events' sections with their live counters (the stripes by
# primary key, a few per event).
SECTIONS_SQL = b"""
    SELECT sc.event_id, sc.price_minor, sc.currency, sc.capacity + sc.overbook_limit,
           COALESCE(sum(st.sold), 0)::integer + COALESCE(sum(st.held), 0)::integer
      FROM sections sc
      LEFT JOIN section_stripes st ON st.event_id = sc.event_id AND st.section_id = sc.section_id
     WHERE sc.event_id = ANY(%s)
     GROUP BY sc.event_id, sc.section_id
"""


def catalogue_sql(query: CatalogueQuery, *, after: bool, limit: int) -> tuple[str, dict[str, Any]]:
    """The page statement for ``query`` and its parameters (besides the
    cursor's ``after_start`` and ``after_id``)."""
    where = ["published", "starts_at >= %(starts_after)s"]
    params: dict[str, Any] = {"starts_after": query.starts_after, "limit": limit}
    if query.words:
        where.append("search_words @> booking_words(%(words)s)")
        params["words"] = query.words
    if query.kind is not None:
        where.append("kind = %(kind)s")
        params["kind"] = query.kind.value
    if query.origin is not None:
        where.append("flight_origin = %(origin)s")
        params["origin"] = query.origin
    if query.destination is not None:
        where.append("flight_destination = %(destination)s")
        params["destination"] = query.destination
    if query.local_date is not None:
        where.append("local_date = %(local_date)s")
        params["local_date"] = query.local_date
    if query.starts_before is not None:
        where.append("starts_at < %(starts_before)s")
        params["starts_before"] = query.starts_before
    if after:
        where.append("(starts_at, event_id) > (%(after_start)s, %(after_id)s)")
    sql = (
        f"SELECT event_id, display_name, kind, starts_at, {LISTING_COLUMNS} FROM events"
        f" WHERE {' AND '.join(where)} ORDER BY starts_at, event_id LIMIT %(limit)s"
    )
    return sql, params


def availability(listing: Listing, capacity: int, available: int, now: datetime) -> Availability:
    if (listing.sale_opens_at is not None and now < listing.sale_opens_at) or capacity == 0:
        return Availability.NOT_YET_ON_SALE
    if available == 0:
        return Availability.SOLD_OUT
    if available <= FEW_LEFT_SEATS or available * 10 <= capacity:
        return Availability.FEW_LEFT
    return Availability.ON_SALE


class PgCatalogue(PgBase):
    """ListEvents' reads."""

    async def list_events(
        self, query: CatalogueQuery, *, limit: int, after: tuple[datetime, int] | None, now: datetime
    ) -> list[CatalogueEntry]:
        sql, params = catalogue_sql(query, after=after is not None, limit=limit)
        if after is not None:
            params["after_start"], params["after_id"] = after
        # One transaction: the call's deadline is its statement_timeout.
        async with transaction(self._pool) as conn:
            cur = await conn.execute(sql.encode(), params)
            rows = await cur.fetchall()
            if not rows:
                return []
            # Each listed event's sections with their live counters (the
            # stripes by primary key, a few per event).
            cur = await conn.execute(SECTIONS_SQL, ([r[0] for r in rows],))
            sections = await cur.fetchall()
        by_event: dict[int, list[tuple[int, str, int, int]]] = defaultdict(list)
        for event_id, price, currency, places, taken in sections:
            by_event[event_id].append((price, currency, places, max(0, places - taken)))
        entries = []
        for row in rows:
            listing = listing_of(row[4:])
            mine = by_event.get(row[0], [])
            open_ = [s for s in mine if s[3] > 0] or mine
            cheapest = min(open_, default=None, key=lambda s: s[0])
            capacity = sum(s[2] for s in mine)
            available = sum(s[3] for s in mine)
            entries.append(
                CatalogueEntry(
                    event_id=row[0],
                    display_name=row[1],
                    kind=EventKind(row[2]),
                    starts_at=row[3],
                    listing=listing,
                    lowest_price=None if cheapest is None else Money(cheapest[1], cheapest[0]),
                    availability=availability(listing, capacity, available, now),
                )
            )
        return entries
