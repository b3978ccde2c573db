"""The waiting list on the wire: its requests parsed, its entries built."""

from __future__ import annotations

from datetime import datetime

from booking_svc.converters import SECTION_ID, hold_pb
from booking_svc.times import ts
from booking_svc.waitlist_model import WaitlistEntry
from boxoffice import validate
from gen.boxoffice.booking.v1 import booking_service_pb2 as pb


def parse_join(request: pb.JoinWaitlistRequest) -> tuple[int, str | None, int]:
    """The event, the section (None: any) and the quantity of a join; the
    quantity's upper bound is the event's limit, which the store checks."""
    event_id = validate.positive_id("event_id", request.event_id)
    section_id = (
        validate.text("section_id", request.section_id, max_length=32, pattern=SECTION_ID)
        if request.section_id
        else None
    )
    if request.quantity == 0:
        raise validate.required("quantity")
    validate.int_range("quantity", request.quantity, minimum=1, maximum=100)
    return event_id, section_id, request.quantity


def waitlist_entry_pb(entry: WaitlistEntry, token: str, now: datetime) -> pb.WaitlistEntry:
    message = pb.WaitlistEntry(
        event_id=entry.event_id,
        section_id=entry.section_id or "",
        quantity=entry.quantity,
        state=pb.WaitlistState.ValueType(entry.state.value),
        ahead=entry.ahead,
        join_time=ts(entry.joined_at),
        access_token=token,
    )
    if entry.offer is not None:
        message.offer.CopyFrom(hold_pb(entry.offer, now))
    return message
