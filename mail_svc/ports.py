"""The mailer's boundaries: its store and its relay."""

from __future__ import annotations

from email.message import Message
from typing import Protocol

from mail_svc.model import BookingMail, Delivery, Kind, OfferMail, Recipient, TransferMail


class RelayRefused(Exception):
    """The relay refused the message for good (a 5xx, a refused address):
    sending it again as it is would not help."""


class RelayBusy(ConnectionError):
    """The relay said "try later" (a 4xx) or could not be reached: the
    stream entry stays pending (an OSError to the consumer) and is tried again."""


class DeliveryStore(Protocol):
    async def open_delivery(self, hold_id: str, kind: Kind, event_id: int, message_id: str) -> Delivery:
        """The booking's delivery of this kind, written now (PENDING, with
        ``message_id``) unless it exists, in which case it is returned as it is."""

    async def recipient(self, hold_id: str) -> Recipient | None:
        """Where the booking's e-mail goes (None: no verified address)."""

    async def booking(self, hold_id: str) -> BookingMail | None:
        """The booking as its message tells it (None: no tickets issued yet)."""

    async def transfer(self, transfer_id: str) -> TransferMail | None:
        """A ticket transfer as its message tells it (None: no such transfer)."""

    async def offer(self, hold_id: str) -> OfferMail | None:
        """A waiting-list offer (by its hold) as its message tells it (None: no such offer)."""

    async def fan_recipient(self, customer_id: str) -> Recipient | None:
        """Where a fan's e-mail goes when no payment of theirs names it for
        the message: the verified address (and language) of the fan's latest
        payment that had one (None: none)."""

    async def mark(self, hold_id: str, kind: Kind, state: str, *, error: str = "") -> None:
        """Record an attempt's outcome (SENT, FAILED, NO_ADDRESS, or PENDING
        with the relay's answer for a retry)."""

    async def reopen(self, hold_id: str) -> list[Delivery]:
        """Make the booking's failed deliveries PENDING again (a resend); those reopened."""

    async def not_delivered(self, event_id: int) -> list[Delivery]:
        """The event's deliveries that failed or had no address."""


class TransferMails(Protocol):
    async def unsent_transfers(self, limit: int) -> list[tuple[str, int]]:
        """Pending transfers that have no delivery yet (id, event), oldest first."""


class OfferMails(Protocol):
    async def unsent_offers(self, limit: int) -> list[tuple[str, int]]:
        """Open waiting-list offers that have no delivery yet (hold id, event), oldest first."""

    async def new_delivery(self, hold_id: str, kind: Kind, event_id: int, message_id: str) -> Delivery | None:
        """The delivery, written now (PENDING, with ``message_id``); None when
        it exists already (another sweep wrote it: that one sends it)."""


class PendingDeliveries(Protocol):
    async def pending(self, limit: int, *, older_than_seconds: float) -> list[Delivery]:
        """Deliveries PENDING and untouched for ``older_than_seconds``, oldest first."""


class Relay(Protocol):
    name: str

    async def send(self, message: Message, recipient: str) -> None:
        """Hand the message over; RelayBusy to try later, RelayRefused for never."""

    async def close(self) -> None:
        """Let go of connections."""
