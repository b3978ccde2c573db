"""The booking domain as plain values: events, sections, seats, holds."""

from __future__ import annotations

import enum
from dataclasses import dataclass
from datetime import UTC, date, datetime
from typing import Any
from uuid import UUID


class EventKind(enum.StrEnum):
    CONCERT = "CONCERT"
    FLIGHT = "FLIGHT"


class SectionKind(enum.StrEnum):
    SEATED = "SEATED"
    GENERAL_ADMISSION = "GENERAL_ADMISSION"


class HoldState(enum.StrEnum):
    HELD = "HELD"
    CONFIRMED = "CONFIRMED"
    EXPIRED = "EXPIRED"
    RELEASED = "RELEASED"
    CANCELLED = "CANCELLED"


# Hold time-to-live when the event names none (DESIGN flow 5).
DEFAULT_HOLD_TTL_SECONDS = {EventKind.CONCERT: 300, EventKind.FLIGHT: 600}
DEFAULT_MAX_SEATS_PER_CUSTOMER = 4
# The most an operator may set as an event's ticket limit (an event without
# one takes its max_seats_per_customer).
MAX_TICKETS_PER_CUSTOMER = 10_000
MAX_SEATS_PER_HOLD = 4


def utc(seconds: float) -> datetime:
    """A clock reading as an aware UTC datetime."""
    return datetime.fromtimestamp(seconds, UTC)


@dataclass(frozen=True, slots=True)
class Money:
    currency: str
    amount_minor: int


@dataclass(frozen=True, slots=True)
class RefundPolicy:
    refundable_until: datetime | None
    refund_percent: int

    def refund_for(self, amount_minor: int, at: datetime) -> int:
        """What cancelling at ``at`` gives back of ``amount_minor``."""
        if self.refundable_until is None or at > self.refundable_until:
            return 0
        return amount_minor * self.refund_percent // 100


@dataclass(frozen=True, slots=True)
class SectionSpec:
    section_id: str
    display_name: str
    kind: SectionKind
    capacity: int
    overbook_limit: int
    price: Money


@dataclass(frozen=True, slots=True)
class Venue:
    name: str
    city: str
    country_code: str


@dataclass(frozen=True, slots=True)
class Flight:
    code: str
    origin: str
    destination: str
    departs_at: datetime
    arrives_at: datetime | None


@dataclass(frozen=True, slots=True)
class Listing:
    """What the catalogue shows and searches of an event."""

    # The IANA zone its times are shown in (and its local date is taken in).
    time_zone: str = "UTC"
    description: str = ""
    # An unpublished event is never listed.
    published: bool = True
    venue: Venue | None = None
    flight: Flight | None = None
    # When the waiting room opens; None: on sale from creation.
    sale_opens_at: datetime | None = None


class Availability(enum.StrEnum):
    ON_SALE = "ON_SALE"
    FEW_LEFT = "FEW_LEFT"
    SOLD_OUT = "SOLD_OUT"
    NOT_YET_ON_SALE = "NOT_YET_ON_SALE"


@dataclass(frozen=True, slots=True)
class CatalogueQuery:
    """ListEvents' filters (all optional, ANDed); ``words`` are folded by
    the store as it folds the events'."""

    words: str = ""
    kind: EventKind | None = None
    origin: str | None = None
    destination: str | None = None
    local_date: date | None = None
    starts_after: datetime | None = None
    starts_before: datetime | None = None


@dataclass(frozen=True, slots=True)
class CatalogueEntry:
    event_id: int
    display_name: str
    kind: EventKind
    starts_at: datetime
    listing: Listing
    lowest_price: Money | None
    availability: Availability


@dataclass(frozen=True, slots=True)
class CheckInRules:
    """An event's rules at the door (``events.checkin_static_codes``,
    ``events.checkin_reentry``), which the check-in service applies."""

    # Whether a static (non-rotating) code admits; None: the kind's default.
    static_codes: bool | None = None
    # Whether a ticket that left may come back in.
    reentry: bool = False

    def static_codes_in_force(self, kind: EventKind) -> bool:
        """Static codes as set, else the kind's default: a flight's
        boarding pass is printed, a concert takes rotating codes only."""
        return kind is EventKind.FLIGHT if self.static_codes is None else self.static_codes


# How long a waiting-list offer lasts when the event does not say, and the
# bounds it may be set within (``events.waitlist_offer_minutes``).
DEFAULT_WAITLIST_OFFER_MINUTES = 15
MAX_WAITLIST_OFFER_MINUTES = 1440


@dataclass(frozen=True, slots=True)
class WaitlistRules:
    """An event's waiting-list settings (``events.waitlist_offer_minutes``),
    which the offer pass applies."""

    # How long an offer holds its seats for the fan.
    offer_minutes: int = DEFAULT_WAITLIST_OFFER_MINUTES


@dataclass(frozen=True, slots=True)
class EventSpec:
    event_id: int
    display_name: str
    kind: EventKind
    starts_at: datetime
    hold_ttl_seconds: int
    max_seats_per_customer: int
    refund_policy: RefundPolicy
    sections: tuple[SectionSpec, ...]
    # The ticket limit: the most tickets one customer may have in the event,
    # bought and held together; None takes max_seats_per_customer.
    max_tickets_per_customer: int | None = None
    listing: Listing = Listing()
    # Whether fans may transfer their tickets until the event starts.
    transfers: bool = True
    # The door's rules.
    checkin: CheckInRules = CheckInRules()
    # The waiting list's settings.
    waitlist: WaitlistRules = WaitlistRules()

    @property
    def ticket_limit(self) -> int:
        return self.max_tickets_per_customer or self.max_seats_per_customer


@dataclass(frozen=True, slots=True)
class Section:
    section_id: str
    display_name: str
    kind: SectionKind
    capacity: int
    overbook_limit: int
    price: Money
    sold: int
    held: int

    @property
    def available(self) -> int:
        return max(0, self.capacity + self.overbook_limit - self.sold - self.held)


@dataclass(frozen=True, slots=True)
class Event:
    event_id: int
    display_name: str
    kind: EventKind
    starts_at: datetime
    hold_ttl_seconds: int
    max_seats_per_customer: int
    # The most tickets one customer may have, bought and held together.
    max_tickets_per_customer: int
    refund_policy: RefundPolicy
    sections: tuple[Section, ...]
    listing: Listing = Listing()
    # Whether fans may transfer their tickets until the event starts.
    transfers: bool = True
    # The door's rules.
    checkin: CheckInRules = CheckInRules()
    # The waiting list's settings.
    waitlist: WaitlistRules = WaitlistRules()


@dataclass(frozen=True, slots=True)
class RowSpec:
    section_id: str
    row_label: str
    first_seat_number: int
    seat_count: int


@dataclass(frozen=True, slots=True)
class SeatRef:
    seat_id: int
    row_label: str
    seat_number: int
    label: str


@dataclass(frozen=True, slots=True)
class Hold:
    hold_id: UUID
    event_id: int
    customer_id: str
    section_id: str
    quantity: int
    state: HoldState
    amount: Money
    expires_at: datetime
    created_at: datetime
    confirmed_at: datetime | None
    payment_id: str | None
    refund_amount_minor: int | None
    seats: tuple[SeatRef, ...]

    def state_at(self, now: datetime) -> HoldState:
        """The state a client sees: a HELD hold past its expiry is EXPIRED
        whether or not the sweeper has visited it yet."""
        if self.state is HoldState.HELD and self.expires_at <= now:
            return HoldState.EXPIRED
        return self.state

    def to_json(self) -> dict[str, Any]:
        return {
            "hold_id": str(self.hold_id),
            "event_id": self.event_id,
            "customer_id": self.customer_id,
            "section_id": self.section_id,
            "quantity": self.quantity,
            "state": self.state.value,
            "currency": self.amount.currency,
            "amount_minor": self.amount.amount_minor,
            "expires_at": self.expires_at.isoformat(),
            "created_at": self.created_at.isoformat(),
            "confirmed_at": None if self.confirmed_at is None else self.confirmed_at.isoformat(),
            "payment_id": self.payment_id,
            "refund_amount_minor": self.refund_amount_minor,
            "seats": [[s.seat_id, s.row_label, s.seat_number, s.label] for s in self.seats],
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Hold:
        confirmed = data.get("confirmed_at")
        return cls(
            hold_id=UUID(data["hold_id"]),
            event_id=int(data["event_id"]),
            customer_id=str(data["customer_id"]),
            section_id=str(data["section_id"]),
            quantity=int(data["quantity"]),
            state=HoldState(data["state"]),
            amount=Money(str(data["currency"]), int(data["amount_minor"])),
            expires_at=datetime.fromisoformat(data["expires_at"]),
            created_at=datetime.fromisoformat(data["created_at"]),
            confirmed_at=None if confirmed is None else datetime.fromisoformat(confirmed),
            payment_id=data.get("payment_id"),
            refund_amount_minor=data.get("refund_amount_minor"),
            seats=tuple(SeatRef(int(s[0]), str(s[1]), int(s[2]), str(s[3])) for s in data.get("seats", [])),
        )


@dataclass(frozen=True, slots=True)
class SeatSelection:
    """Explicit seats (sorted, distinct)."""

    seat_ids: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class QuantitySelection:
    """Best available seats of a seated section, or places of a
    general-admission section."""

    section_id: str
    quantity: int


Selection = SeatSelection | QuantitySelection


@dataclass(frozen=True, slots=True)
class SeatRow:
    row_label: str
    first_seat_id: int
    first_seat_number: int
    seat_count: int


@dataclass(frozen=True, slots=True)
class SectionSeatMap:
    section: Section
    rows: tuple[SeatRow, ...]
    available_bitmap: bytes
    available: int


@dataclass(frozen=True, slots=True)
class SeatMap:
    event_id: int
    sections: tuple[SectionSeatMap, ...]
    snapshot_time: datetime


@dataclass(frozen=True, slots=True)
class SectionCounters:
    event_id: int
    section_id: str
    capacity: int
    overbook_limit: int
    sold: int
    held: int


@dataclass(frozen=True, slots=True)
class SectionCounterPage:
    """The counters of the soonest sections of events not yet started, and
    how many such sections there are (those left out included)."""

    counters: list[SectionCounters]
    total: int


@dataclass(frozen=True, slots=True)
class SweepResult:
    holds: int
    seats: int


@dataclass(frozen=True, slots=True)
class ClaimedTransfer:
    """A ticket transfer a claim committed in PaymentService: the ticket of
    booking ``hold_id`` (its ``unit``; ``generation``, the re-issued
    ticket's) passed from ``sender_id`` to ``receiver_id``."""

    transfer_id: UUID
    event_id: int
    hold_id: UUID
    unit: int
    generation: int
    sender_id: str
    receiver_id: str
    claimed_at: datetime
