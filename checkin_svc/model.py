"""What a scan at the door decides."""

from __future__ import annotations

import enum
from dataclasses import dataclass
from datetime import datetime


class ScanResult(enum.Enum):
    """A scan's outcome (the contract's ``ScanResult`` without its prefix)."""

    ADMITTED = "ADMITTED"
    # Admitted before: the first check-in says when and where.
    ALREADY_CHECKED_IN = "ALREADY_CHECKED_IN"
    # Refunded or cancelled.
    VOID = "VOID"
    # A ticket of another event.
    WRONG_EVENT = "WRONG_EVENT"
    # A rotating code too old.
    EXPIRED_CODE = "EXPIRED_CODE"
    # A bad signature or shape: decided before any database read.
    INVALID = "INVALID"
    # Well formed, but no ticket has it.
    UNKNOWN = "UNKNOWN"
    # An exit scan: the holder left (and may come back where re-entry is on).
    LEFT = "LEFT"
    # An exit scan of a ticket whose holder is not inside.
    NOT_INSIDE = "NOT_INSIDE"


class Direction(enum.Enum):
    """Which way a scan lets its holder through."""

    IN = "IN"
    OUT = "OUT"


@dataclass(frozen=True, slots=True)
class Scan:
    """One scan of a code at a gate."""

    event_id: int
    code: str
    gate_id: str
    device_id: str
    scanned_at: datetime
    direction: Direction = Direction.IN


@dataclass(frozen=True, slots=True)
class TicketAtDoor:
    """What the staff at the gate are shown of a ticket."""

    ticket_id: str
    event_id: int
    section_id: str
    seat_label: str


@dataclass(frozen=True, slots=True)
class CheckIn:
    """A ticket's first admission."""

    gate_id: str
    device_id: str
    checked_in_at: datetime


@dataclass(frozen=True, slots=True)
class ScanOutcome:
    """A scan's answer: the result, the ticket when one was found, and its
    first check-in (the one this scan made, or the earlier one)."""

    result: ScanResult
    ticket: TicketAtDoor | None = None
    first_checkin: CheckIn | None = None


@dataclass(frozen=True, slots=True)
class Admission:
    """What the store did with an admission of one ticket."""

    # None: no such ticket.
    ticket: TicketAtDoor | None
    void: bool = False
    # True: this scan admitted it; False: it was admitted before.
    admitted: bool = False
    first_checkin: CheckIn | None = None


@dataclass(frozen=True, slots=True)
class UploadedScan:
    """One scan an offline device admitted on its own and uploads later."""

    outcome: ScanOutcome
    # True: another check-in came first; recorded as a conflict.
    conflict: bool


@dataclass(frozen=True, slots=True)
class DoorEntry:
    """A ticket as the check-in list gives it to an offline device."""

    ticket: TicketAtDoor
    void: bool
    first_checkin: CheckIn | None
    # Whether its holder is inside now (False before any check-in).
    inside: bool = False
    # The secret of its rotating code, when its fan has fetched one: an
    # offline device checks a rotating code's mac with it.
    secret: bytes | None = None


@dataclass(frozen=True, slots=True)
class DoorList:
    """Tickets changed since a cursor, and the cursor to ask from next."""

    entries: tuple[DoorEntry, ...]
    cursor: datetime


@dataclass(frozen=True, slots=True)
class DoorRules:
    """An event's rules at the door, as an offline device applies them."""

    # Whether a static code (no rotation) admits.
    static_codes: bool
    # Whether a ticket that left may come back in.
    reentry: bool


@dataclass(frozen=True, slots=True)
class HeldTicket:
    """A ticket with its holder and its stored code (a signed code, or a
    ``TKT-`` code of before signed codes)."""

    ticket: TicketAtDoor
    customer_id: str
    code: str
    issued_at: datetime
