"""The check-in contract's messages to and from the door's model, and the
checks of what a request carries (INVALID_ARGUMENT with the field's path)."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

from google.protobuf import timestamp_pb2

from boxoffice import validate
from boxoffice.ticketcodes import MAX_CODE_LENGTH
from checkin_svc.devices import GateDevice
from checkin_svc.handler import NAME
from checkin_svc.model import CheckIn, Direction, DoorEntry, ScanOutcome, ScanResult, TicketAtDoor
from gen.boxoffice.checkin.v1 import checkin_service_pb2 as pb

# A device's clock may run ahead of the service's a little; a scan time
# further ahead is a bad clock, refused rather than recorded.
MAX_CLOCK_AHEAD = timedelta(minutes=10)
# The earliest scan time taken (a device whose clock was never set sends 1970).
_EARLIEST = datetime(2000, 1, 1, tzinfo=UTC)
# Longest cursor text (an RFC 3339 time with microseconds is 32 characters).
_MAX_CURSOR = 64

_RESULTS = {result: pb.ScanResult.Value(f"SCAN_RESULT_{result.value}") for result in ScanResult}


def result_pb(result: ScanResult) -> pb.ScanResult.ValueType:
    return _RESULTS[result]


def timestamp(value: datetime) -> timestamp_pb2.Timestamp:
    stamp = timestamp_pb2.Timestamp()
    stamp.FromDatetime(value)
    return stamp


def ticket_pb(ticket: TicketAtDoor) -> pb.TicketAtDoor:
    return pb.TicketAtDoor(
        ticket_id=ticket.ticket_id, event_id=ticket.event_id, section_id=ticket.section_id, seat_label=ticket.seat_label
    )


def checkin_pb(checkin: CheckIn) -> pb.CheckIn:
    return pb.CheckIn(
        gate_id=checkin.gate_id, device_id=checkin.device_id, checked_in_at=timestamp(checkin.checked_in_at)
    )


def outcome_pb(outcome: ScanOutcome) -> pb.ScanResponse:
    response = pb.ScanResponse(result=result_pb(outcome.result))
    if outcome.ticket is not None:
        response.ticket.CopyFrom(ticket_pb(outcome.ticket))
    if outcome.first_checkin is not None:
        response.first_checkin.CopyFrom(checkin_pb(outcome.first_checkin))
    return response


def entry_pb(entry: DoorEntry) -> pb.CheckInListEntry:
    message = pb.CheckInListEntry(
        ticket=ticket_pb(entry.ticket), void=entry.void, inside=entry.inside, rotation_secret=entry.secret or b""
    )
    if entry.first_checkin is not None:
        message.first_checkin.CopyFrom(checkin_pb(entry.first_checkin))
    return message


def device_pb(device: GateDevice) -> pb.GateDevice:
    message = pb.GateDevice(
        device_id=device.device_id, event_id=device.event_id, name=device.name, created_at=timestamp(device.created_at)
    )
    if device.revoked_at is not None:
        message.revoked_at.CopyFrom(timestamp(device.revoked_at))
    return message


def parse_uuid(field: str, value: str) -> str:
    """A canonical UUID; INVALID_ARGUMENT otherwise."""
    if not value:
        raise validate.required(field)
    try:
        return str(uuid.UUID(value))
    except ValueError:
        raise validate.invalid(field, "must be a UUID") from None


def parse_code(field: str, value: str) -> str:
    """The scanned text: required and at most MAX_CODE_LENGTH characters;
    whatever else it is, the door judges it (a misread is INVALID there)."""
    if not value:
        raise validate.required(field)
    if len(value) > MAX_CODE_LENGTH:
        raise validate.invalid(field, f"must be at most {MAX_CODE_LENGTH} characters, got {len(value)}")
    return value


def parse_gate(field: str, value: str) -> str:
    if not value:
        raise validate.required(field)
    if not NAME.match(value):
        raise validate.invalid(field, "must be 1 to 64 letters, digits or . _ : -")
    return value


def parse_direction(field: str, value: int) -> Direction:
    if value in (pb.DIRECTION_UNSPECIFIED, pb.DIRECTION_IN):
        return Direction.IN
    if value == pb.DIRECTION_OUT:
        return Direction.OUT
    raise validate.invalid(field, f"unknown direction {value}")


def parse_scanned_at(field: str, stamp: timestamp_pb2.Timestamp, now: datetime) -> datetime:
    """A scan time no earlier than 2000 and no later than a little after now."""
    if not 0 <= stamp.seconds <= 253402300799 or not 0 <= stamp.nanos < 1_000_000_000:
        raise validate.invalid(field, "is not a valid time")
    when = stamp.ToDatetime(tzinfo=UTC)
    if when < _EARLIEST or when > now + MAX_CLOCK_AHEAD:
        raise validate.invalid(field, f"must be after 2000 and at most {MAX_CLOCK_AHEAD} ahead of the service's clock")
    return when


def parse_cursor(field: str, value: str) -> datetime | None:
    """An export's cursor (empty: the whole list)."""
    if not value:
        return None
    if len(value) > _MAX_CURSOR:
        raise validate.invalid(field, "is not a cursor of this service")
    try:
        when = datetime.fromisoformat(value)
    except ValueError:
        raise validate.invalid(field, "is not a cursor of this service") from None
    if when.tzinfo is None:
        raise validate.invalid(field, "is not a cursor of this service")
    return when


def cursor_text(when: datetime) -> str:
    return when.astimezone(UTC).isoformat(timespec="microseconds").replace("+00:00", "Z")
