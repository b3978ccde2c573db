"""What the mailer sends: a booking's tickets, or word that they are void; a
transfer's claim link; a waiting-list offer."""

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
    # A waiting-list offer, to the fan it is made to (one per offer: the
    # delivery's hold_id is the offer's hold).
    OFFER = "offer"


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


@dataclass(frozen=True, slots=True)
class OfferMail:
    """Everything a waiting-list offer's message says: the seats held for
    the fan (the offer's hold), their price and until when they are held."""

    hold_id: str
    event: EventInfo
    customer_id: str
    section_id: str
    quantity: int
    # The held seats' labels (none for standing sections).
    seat_labels: tuple[str, ...]
    amount_minor: int
    currency: str
    expires_at: datetime
    # False once taken, declined or lapsed: the offer can no longer be taken.
    open: bool
    # The address and language the fan joined the list with, if the edge
    # asserted one.
    email: str | None = None
    language: str | None = None
