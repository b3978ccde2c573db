"""What the mailer sends: a booking's tickets, or word that they are void."""

from __future__ import annotations

import enum
from dataclasses import dataclass
from datetime import datetime

# The languages a fan may be written to in (one template set each).
LANGUAGES = ("en", "vi", "pt-BR")
DEFAULT_LANGUAGE = "en"


class Kind(enum.StrEnum):
    """A message kind: one e-mail of each per booking, at most."""

    TICKETS = "tickets"
    VOID = "void"
    # A ticket transfer's claim link, to the friend (one per transfer: the
    # delivery's hold_id is the transfer's id).
    TRANSFER = "transfer"


class DeliveryState(enum.StrEnum):
    PENDING = "PENDING"
    SENT = "SENT"
    FAILED = "FAILED"
    NO_ADDRESS = "NO_ADDRESS"


@dataclass(frozen=True, slots=True)
class Delivery:
    """A booking's delivery record of one kind."""

    hold_id: str
    kind: Kind
    event_id: int
    message_id: str
    state: DeliveryState
    attempts: int
    last_error: str
    # When the relay took it (None until then), and when the record last changed.
    sent_at: datetime | None = None
    updated_at: datetime | None = None


@dataclass(frozen=True, slots=True)
class Recipient:
    email: str
    language: str


@dataclass(frozen=True, slots=True)
class TicketLine:
    unit: int
    code: str
    section_id: str
    seat_label: str


@dataclass(frozen=True, slots=True)
class EventInfo:
    event_id: int
    name: str
    kind: str
    starts_at: datetime
    time_zone: str
    venue: str
    route: str


@dataclass(frozen=True, slots=True)
class BookingMail:
    """Everything one message says about one booking."""

    hold_id: str
    event: EventInfo
    tickets: tuple[TicketLine, ...]
    amount_minor: int
    currency: str


@dataclass(frozen=True, slots=True)
class TransferMail:
    """Everything a transfer's message says: the ticket offered, where the
    link goes and its secret."""

    transfer_id: str
    event: EventInfo
    section_id: str
    seat_label: str
    email: str
    language: str
    secret: str
    # False once claimed or cancelled: its link claims nothing any more.
    pending: bool
