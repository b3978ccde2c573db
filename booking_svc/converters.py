"""BookingService's wire <-> model converters: requests parsed and validated
into the model (bad input is INVALID_ARGUMENT before anything is read or
written), and the model built into responses."""

from __future__ import annotations

import re
import uuid
from datetime import datetime

from google.protobuf import duration_pb2

from booking_svc.cancellation import CancellationQuote
from booking_svc.listing import listing_fields, parse_listing
from booking_svc.model import (
    DEFAULT_HOLD_TTL_SECONDS,
    DEFAULT_MAX_SEATS_PER_CUSTOMER,
    DEFAULT_WAITLIST_OFFER_MINUTES,
    MAX_SEATS_PER_HOLD,
    MAX_TICKETS_PER_CUSTOMER,
    MAX_WAITLIST_OFFER_MINUTES,
    CheckInRules,
    Event,
    EventKind,
    EventSpec,
    Hold,
    Money,
    QuantitySelection,
    RefundPolicy,
    RowSpec,
    SeatMap,
    SeatSelection,
    Section,
    SectionKind,
    SectionSpec,
    Selection,
    WaitlistRules,
)
from booking_svc.times import timestamp, ts
from boxoffice import validate
from gen.boxoffice.booking.v1 import booking_service_pb2 as pb

SERVICE_NAME = "boxoffice.booking.v1.BookingService"

SECTION_ID = re.compile(r"[A-Za-z0-9_-]{1,32}")
_ROW_LABEL = re.compile(r"[A-Za-z0-9]{1,8}")
_CURRENCY = re.compile(r"[A-Z]{3}")
_MAX_SECTIONS = 100
_MAX_ROWS = 10_000
_MAX_SEATS_PER_LOAD = 200_000
_MAX_AMOUNT_MINOR = 10**12

_EVENT_KINDS = {pb.EVENT_KIND_CONCERT: EventKind.CONCERT, pb.EVENT_KIND_FLIGHT: EventKind.FLIGHT}
_SECTION_KINDS = {
    pb.SECTION_KIND_SEATED: SectionKind.SEATED,
    pb.SECTION_KIND_GENERAL_ADMISSION: SectionKind.GENERAL_ADMISSION,
}
_HOLD_STATES = {
    "HELD": pb.HOLD_STATE_HELD,
    "CONFIRMED": pb.HOLD_STATE_CONFIRMED,
    "EXPIRED": pb.HOLD_STATE_EXPIRED,
    "RELEASED": pb.HOLD_STATE_RELEASED,
    "CANCELLED": pb.HOLD_STATE_CANCELLED,
}


# -- parsing -----------------------------------------------------------------


def parse_seconds(field: str, value: duration_pb2.Duration, *, minimum: float, maximum: float) -> float:
    seconds = value.seconds + value.nanos / 1e9
    if not minimum <= seconds <= maximum:
        raise validate.invalid(field, f"must be between {minimum:g} s and {maximum:g} s, got {seconds:g} s")
    return seconds


def parse_hold_id(field: str, value: str) -> uuid.UUID:
    if not value:
        raise validate.required(field)
    try:
        return uuid.UUID(value)
    except ValueError:
        raise validate.invalid(field, "must be a UUID") from None


def parse_money(field: str, value: pb.Money) -> Money:
    validate.text(f"{field}.currency_code", value.currency_code, max_length=3, pattern=_CURRENCY)
    validate.int_range(f"{field}.amount_minor", value.amount_minor, minimum=0, maximum=_MAX_AMOUNT_MINOR)
    return Money(value.currency_code, value.amount_minor)


def parse_event_spec(request: pb.CreateEventRequest) -> EventSpec:
    event_id = validate.positive_id("event_id", request.event_id)
    display_name = validate.text("display_name", request.display_name, max_length=200)
    kind = _EVENT_KINDS.get(request.kind)
    if kind is None:
        raise validate.required("kind", "kind is required (CONCERT or FLIGHT)")
    if not request.HasField("starts_at"):
        raise validate.required("starts_at")
    starts_at = timestamp("starts_at", request.starts_at)
    ttl = DEFAULT_HOLD_TTL_SECONDS[kind]
    if request.HasField("hold_ttl"):
        ttl = round(parse_seconds("hold_ttl", request.hold_ttl, minimum=1, maximum=3600))
        if ttl < 1:
            raise validate.invalid("hold_ttl", "must be at least 1 s")
    max_seats = request.max_seats_per_customer or DEFAULT_MAX_SEATS_PER_CUSTOMER
    validate.int_range("max_seats_per_customer", max_seats, minimum=1, maximum=100)
    listing = parse_listing(request, kind, starts_at)
    max_tickets = request.max_tickets_per_customer or max_seats
    validate.int_range("max_tickets_per_customer", max_tickets, minimum=1, maximum=MAX_TICKETS_PER_CUSTOMER)
    offer_minutes = request.waitlist.offer_minutes or DEFAULT_WAITLIST_OFFER_MINUTES
    validate.int_range("waitlist.offer_minutes", offer_minutes, minimum=1, maximum=MAX_WAITLIST_OFFER_MINUTES)
    policy = request.refund_policy
    validate.int_range("refund_policy.refund_percent", policy.refund_percent, minimum=0, maximum=100)
    refundable_until = (
        timestamp("refund_policy.refundable_until", policy.refundable_until)
        if policy.HasField("refundable_until")
        else None
    )
    if not request.sections:
        raise validate.required("sections", "at least one section is required")
    if len(request.sections) > _MAX_SECTIONS:
        raise validate.invalid("sections", f"at most {_MAX_SECTIONS} sections")
    sections: list[SectionSpec] = []
    seen: set[str] = set()
    for index, spec in enumerate(request.sections):
        field = f"sections[{index}]"
        section_id = validate.text(f"{field}.section_id", spec.section_id, max_length=32, pattern=SECTION_ID)
        if section_id in seen:
            raise validate.invalid(f"{field}.section_id", f"section {section_id!r} appears twice")
        seen.add(section_id)
        name = validate.text(f"{field}.display_name", spec.display_name, max_length=200, min_length=0) or section_id
        section_kind = _SECTION_KINDS.get(spec.kind)
        if section_kind is None:
            raise validate.required(f"{field}.kind", f"{field}.kind is required (SEATED or GENERAL_ADMISSION)")
        if section_kind is SectionKind.SEATED:
            if spec.capacity != 0:
                raise validate.invalid(f"{field}.capacity", "a seated section takes its capacity from LoadInventory")
            if spec.overbook_limit != 0:
                raise validate.invalid(
                    f"{field}.overbook_limit", "only general-admission sections (fare classes) may overbook"
                )
        else:
            validate.int_range(f"{field}.capacity", spec.capacity, minimum=1, maximum=1_000_000)
        validate.int_range(f"{field}.overbook_limit", spec.overbook_limit, minimum=0, maximum=100_000)
        if not spec.HasField("price"):
            raise validate.required(f"{field}.price")
        sections.append(
            SectionSpec(
                section_id=section_id,
                display_name=name,
                kind=section_kind,
                capacity=spec.capacity,
                overbook_limit=spec.overbook_limit,
                price=parse_money(f"{field}.price", spec.price),
            )
        )
    return EventSpec(
        event_id=event_id,
        display_name=display_name,
        kind=kind,
        starts_at=starts_at,
        hold_ttl_seconds=ttl,
        max_seats_per_customer=max_seats,
        refund_policy=RefundPolicy(refundable_until, policy.refund_percent),
        sections=tuple(sections),
        max_tickets_per_customer=max_tickets,
        listing=listing,
        transfers=request.transfers if request.HasField("transfers") else True,
        checkin=CheckInRules(
            static_codes=request.checkin.static_codes if request.checkin.HasField("static_codes") else None,
            reentry=request.checkin.reentry,
        ),
        waitlist=WaitlistRules(offer_minutes=offer_minutes),
    )


def parse_rows(request: pb.LoadInventoryRequest) -> list[RowSpec]:
    if not request.rows:
        raise validate.required("rows", "at least one row is required")
    if len(request.rows) > _MAX_ROWS:
        raise validate.invalid("rows", f"at most {_MAX_ROWS} rows per load, got {len(request.rows)}")
    rows: list[RowSpec] = []
    seen: set[tuple[str, str]] = set()
    total = 0
    for index, row in enumerate(request.rows):
        field = f"rows[{index}]"
        section_id = validate.text(f"{field}.section_id", row.section_id, max_length=32, pattern=SECTION_ID)
        label = validate.text(f"{field}.row_label", row.row_label, max_length=8, pattern=_ROW_LABEL)
        validate.int_range(f"{field}.first_seat_number", row.first_seat_number, minimum=1, maximum=100_000)
        validate.int_range(f"{field}.seat_count", row.seat_count, minimum=1, maximum=1000)
        if (section_id, label) in seen:
            raise validate.invalid(f"{field}.row_label", f"row {label!r} of section {section_id!r} appears twice")
        seen.add((section_id, label))
        total += row.seat_count
        rows.append(RowSpec(section_id, label, row.first_seat_number, row.seat_count))
    if total > _MAX_SEATS_PER_LOAD:
        raise validate.invalid("rows", f"at most {_MAX_SEATS_PER_LOAD} seats per load, got {total}")
    return rows


def parse_selection(request: pb.HoldSeatsRequest) -> Selection:
    which = request.WhichOneof("selection")
    if which == "seats":
        ids = list(request.seats.seat_ids)
        if not 1 <= len(ids) <= MAX_SEATS_PER_HOLD:
            raise validate.invalid("seats.seat_ids", f"must name 1 to {MAX_SEATS_PER_HOLD} seats, got {len(ids)}")
        for index, seat_id in enumerate(ids):
            validate.positive_id(f"seats.seat_ids[{index}]", seat_id)
        if len(set(ids)) != len(ids):
            raise validate.invalid("seats.seat_ids", "must not name a seat twice")
        return SeatSelection(tuple(sorted(ids)))
    if which == "best_available":
        best = request.best_available
        section_id = validate.text("best_available.section_id", best.section_id, max_length=32, pattern=SECTION_ID)
        validate.int_range("best_available.quantity", best.quantity, minimum=1, maximum=MAX_SEATS_PER_HOLD)
        return QuantitySelection(section_id, best.quantity)
    raise validate.required("selection", "seats or best_available is required")


# -- building ----------------------------------------------------------------


def _money_pb(value: Money) -> pb.Money:
    return pb.Money(currency_code=value.currency, amount_minor=value.amount_minor)


def section_pb(section: Section) -> pb.Section:
    return pb.Section(
        section_id=section.section_id,
        display_name=section.display_name,
        kind=pb.SECTION_KIND_SEATED if section.kind is SectionKind.SEATED else pb.SECTION_KIND_GENERAL_ADMISSION,
        capacity=section.capacity,
        overbook_limit=section.overbook_limit,
        price=_money_pb(section.price),
        sold=section.sold,
        held=section.held,
    )


def event_pb(event: Event) -> pb.Event:
    ttl = duration_pb2.Duration()
    ttl.FromSeconds(event.hold_ttl_seconds)
    policy = pb.RefundPolicy(refund_percent=event.refund_policy.refund_percent)
    if event.refund_policy.refundable_until is not None:
        policy.refundable_until.CopyFrom(ts(event.refund_policy.refundable_until))
    return pb.Event(
        event_id=event.event_id,
        display_name=event.display_name,
        kind=pb.EVENT_KIND_CONCERT if event.kind is EventKind.CONCERT else pb.EVENT_KIND_FLIGHT,
        starts_at=ts(event.starts_at),
        hold_ttl=ttl,
        max_seats_per_customer=event.max_seats_per_customer,
        max_tickets_per_customer=event.max_tickets_per_customer,
        refund_policy=policy,
        sections=[section_pb(s) for s in event.sections],
        transfers=event.transfers,
        checkin=pb.CheckInSettings(
            static_codes=event.checkin.static_codes_in_force(event.kind), reentry=event.checkin.reentry
        ),
        waitlist=pb.WaitlistSettings(offer_minutes=event.waitlist.offer_minutes),
        **listing_fields(event.listing),
    )


def hold_pb(hold: Hold, now: datetime) -> pb.Hold:
    message = pb.Hold(
        hold_id=str(hold.hold_id),
        event_id=hold.event_id,
        customer_id=hold.customer_id,
        section_id=hold.section_id,
        seats=[
            pb.Seat(
                seat_id=s.seat_id,
                section_id=hold.section_id,
                row_label=s.row_label,
                seat_number=s.seat_number,
                label=s.label,
            )
            for s in hold.seats
        ],
        quantity=hold.quantity,
        state=_HOLD_STATES[hold.state_at(now).value],
        expires_at=ts(hold.expires_at),
        amount=_money_pb(hold.amount),
        create_time=ts(hold.created_at),
        payment_id=hold.payment_id or "",
    )
    if hold.confirmed_at is not None:
        message.confirm_time.CopyFrom(ts(hold.confirmed_at))
    return message


def seat_map_pb(seat_map: SeatMap) -> pb.GetSeatMapResponse:
    return pb.GetSeatMapResponse(
        event_id=seat_map.event_id,
        sections=[
            pb.SectionSeatMap(
                section=section_pb(s.section),
                rows=[
                    pb.SeatMapRow(
                        row_label=r.row_label,
                        first_seat_id=r.first_seat_id,
                        first_seat_number=r.first_seat_number,
                        seat_count=r.seat_count,
                    )
                    for r in s.rows
                ],
                available_bitmap=s.available_bitmap,
                available=s.available,
            )
            for s in seat_map.sections
        ],
        snapshot_time=ts(seat_map.snapshot_time),
    )


def quote_pb(hold: Hold, quote: CancellationQuote) -> pb.GetCancellationQuoteResponse:
    message = pb.GetCancellationQuoteResponse(
        allowed=quote.allowed,
        refund=pb.Money(currency_code=hold.amount.currency, amount_minor=quote.refund_minor),
        reason=quote.reason,
        price=_money_pb(hold.amount),
        refund_percent=quote.percent,
        state=_HOLD_STATES[hold.state_at(quote.at).value],
        quote_time=ts(quote.at),
        event_id=hold.event_id,
    )
    if quote.until is not None:
        message.until.CopyFrom(ts(quote.until))
    return message
