"""The demo event of `boxoffice up`: a concert with three seated sections and
a general-admission floor."""

from __future__ import annotations

from datetime import timedelta

from booking_svc.model import (
    DEFAULT_HOLD_TTL_SECONDS,
    DEFAULT_MAX_SEATS_PER_CUSTOMER,
    EventKind,
    EventSpec,
    Listing,
    Money,
    RefundPolicy,
    RowSpec,
    SectionKind,
    SectionSpec,
    Venue,
    utc,
)
from booking_svc.ports import BookingStore
from boxoffice.clock import Clock
from boxoffice.errors import NotFound

DEMO_EVENT_ID = 1
_ROWS_PER_SECTION = 40
_SEATS_PER_ROW = 50
_FLOOR_CAPACITY = 3000


def _row_label(index: int) -> str:
    letters = "ABCDEFGHJKLMNPQRSTUVWXYZ"
    return letters[index % len(letters)] + ("" if index < len(letters) else str(index // len(letters)))


async def seed(store: BookingStore, clock: Clock) -> str:
    """Create the demo event unless it exists; one line saying what is there."""
    try:
        event = await store.get_event(DEMO_EVENT_ID)
        seats = sum(s.capacity for s in event.sections if s.kind is SectionKind.SEATED)
        return f"event {DEMO_EVENT_ID} {event.display_name!r} is there ({seats} seats)"
    except NotFound:
        pass
    starts = utc(clock.now()) + timedelta(days=30)
    seated = [("A", "Lower bowl A", 8900), ("B", "Lower bowl B", 6900), ("C", "Upper tier C", 4900)]
    spec = EventSpec(
        event_id=DEMO_EVENT_ID,
        display_name="Demo concert",
        kind=EventKind.CONCERT,
        starts_at=starts,
        hold_ttl_seconds=DEFAULT_HOLD_TTL_SECONDS[EventKind.CONCERT],
        max_seats_per_customer=DEFAULT_MAX_SEATS_PER_CUSTOMER,
        refund_policy=RefundPolicy(starts - timedelta(days=7), 80),
        sections=(
            *(SectionSpec(sid, name, SectionKind.SEATED, 0, 0, Money("EUR", price)) for sid, name, price in seated),
            SectionSpec(
                "FLOOR", "Standing floor", SectionKind.GENERAL_ADMISSION, _FLOOR_CAPACITY, 0, Money("EUR", 5900)
            ),
        ),
        # What the catalogue at / shows of it.
        listing=Listing(
            time_zone="Europe/Lisbon",
            description="The demo of boxoffice up: three seated sections and a standing floor.",
            venue=Venue("Demo Arena", "Lisboa", "PT"),
        ),
    )
    await store.create_event(spec)
    rows = [RowSpec(sid, _row_label(i), 1, _SEATS_PER_ROW) for sid, _, _ in seated for i in range(_ROWS_PER_SECTION)]
    loaded = await store.load_inventory(DEMO_EVENT_ID, rows)
    return (
        f"event {DEMO_EVENT_ID} 'Demo concert' created: sections A, B, C ({loaded} seats) "
        f"and a standing FLOOR ({_FLOOR_CAPACITY} places)"
    )
