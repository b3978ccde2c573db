"""The payment service's boundaries: what the use cases need from storage,
from BookingService and from the payment provider, as Protocols, with the
values that cross each boundary. The adapters in :mod:`payment_svc.adapters`
implement them; tests substitute stand-ins through :mod:`payment_svc.app`."""

from __future__ import annotations

import enum
from collections.abc import Collection, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from datetime import datetime
from typing import Protocol

from boxoffice.errors import Aborted, BoxofficeError
from payment_svc.model import ClaimedTransfer, Payment, PaymentState, Refund, RefundOrder, Ticket, Transfer
from payment_svc.webhooks import WebhookEvent

# -- payments and refunds


class PaymentStore(Protocol):
    async def create(
        self,
        *,
        hold_id: str,
        event_id: int,
        customer_id: str,
        amount_minor: int,
        currency: str,
        payment_method: str,
        traceparent: str = "",
        hold_expires_at: datetime | None = None,
        provider: str = "sandbox",
        notify_email: str | None = None,
        notify_language: str | None = None,
    ) -> tuple[Payment, bool]:
        """A new PENDING payment for the hold, or (the live one, False) when
        another is live (the caller has looked; a concurrent start loses on
        the unique index and answers with the winner's). ``traceparent``:
        the starting call's, kept with the payment; ``notify_email`` and
        ``notify_language``: where and how its tickets are e-mailed (the fan's
        verified address, as the edge asserts it); ``hold_expires_at``: the
        hold's expiry before the payment extended it; ``provider``: who takes
        the money ("sandbox" or "stripe")."""

    async def get(self, payment_id: str) -> Payment | None: ...

    async def live_for_hold(self, hold_id: str) -> Payment | None: ...

    async def paid_for_hold(self, hold_id: str) -> Payment | None:
        """The payment that bought the hold (confirmed it), refunded since or
        not; None when no payment did."""

    async def transition(
        self,
        payment_id: str,
        sources: Collection[PaymentState],
        target: PaymentState,
        *,
        provider_payment_id: str | None = None,
        failure_reason: str | None = None,
    ) -> Payment | None:
        """Move from one of ``sources`` to ``target``; None if it was not in one."""

    async def unsettled(self, older_than_seconds: float, limit: int) -> list[str]: ...

    async def count_by_state(self) -> dict[str, int]: ...

    async def reserve_refund(self, order: RefundOrder) -> Refund:
        """A PENDING refund for the order's key (the existing one on a repeat)."""

    async def finish_refund(
        self, refund_id: str, *, succeeded: bool, provider_refund_id: str, failure_reason: str = ""
    ) -> Payment: ...

    async def refund_by_provider_key(self, request_key: str) -> Refund | None: ...

    async def by_provider_payment_id(self, provider_payment_id: str) -> Payment | None:
        """The payment whose charge has this provider id."""

    async def cancellation_refund(self, payment_id: str) -> Refund | None:
        """The refund of the payment's cancelled booking (source
        BOOKING_CANCELLED, not failed), if there is one: at most one per payment."""

    async def pending_refunds(self, older_than_seconds: float, limit: int) -> list[Refund]: ...


# -- idempotency keys


@dataclass(frozen=True, slots=True)
class Claimed:
    """This request owns the key and must complete or release it."""

    token: str


@dataclass(frozen=True, slots=True)
class Stored:
    """The key's first answer: a response, or the error it ended with."""

    response: bytes = b""
    error: BoxofficeError | None = None


class IdempotencyStore(Protocol):
    async def claim(self, scope: str, key: str, fingerprint: bytes) -> Claimed | Stored:
        """Own the key, or its stored answer; INVALID_ARGUMENT on another
        fingerprint, ABORTED while another request holds it."""

    async def complete(self, scope: str, key: str, token: str, outcome: bytes | BoxofficeError) -> None:
        """Store the key's answer (a response, or a final error)."""

    async def renew(self, scope: str, key: str, token: str) -> bool:
        """Extend the holder's lease on the key; False once it is not the
        holder's any more."""

    async def release(self, scope: str, key: str, token: str) -> None: ...

    async def purge_expired(self, limit: int) -> int: ...


# -- provider webhooks


class ClaimState(enum.Enum):
    OWNED = "owned"
    APPLIED = "applied"
    IN_FLIGHT = "in_flight"


@dataclass(frozen=True, slots=True)
class WebhookClaim:
    state: ClaimState
    token: str = ""


class WebhookStore(Protocol):
    async def claim(
        self, event_id: str, event_type: str, payment_id: str | None, body_sha256: bytes, body: bytes
    ) -> WebhookClaim:
        """Own the event's application, or learn it is applied or in flight."""

    async def applied(self, event_id: str, token: str) -> None: ...

    async def renew(self, event_id: str, token: str) -> bool:
        """Extend the owner's lease; False once the claim is not ``token``'s."""

    async def release(self, event_id: str, token: str) -> None: ...


# -- tickets


@dataclass(frozen=True, slots=True)
class TicketUnit:
    """One ticket of a booking: a seat, or a place in a general-admission section."""

    unit: int
    seat_id: int | None
    seat_label: str


@dataclass(frozen=True, slots=True)
class ConfirmedBooking:
    """A confirmed booking as its outbox event tells it."""

    source_event_id: str
    event_id: int
    hold_id: str
    customer_id: str
    section_id: str
    payment_id: str
    units: tuple[TicketUnit, ...]


class TicketConflict(Aborted):
    """A seat of the booking already has a valid ticket (reason
    TICKET_CONFLICT): retried, since the cancellation that frees the seat
    may not have been handled yet."""


class TicketStore(Protocol):
    async def issue(self, consumer: str, booking: ConfirmedBooking) -> int:
        """Tickets for the booking, once per source event (void if the booking
        is already cancelled); the number written, 0 for an event handled
        before. :class:`TicketConflict` when a seat already has a valid ticket."""

    async def void(self, consumer: str, source_event_id: str, hold_id: str) -> None:
        """Record the booking as cancelled and void its tickets, once."""

    async def mark_processed(self, consumer: str, source_event_id: str) -> None:
        """Record an event as processed without acting on it."""

    async def list_for_customer(
        self, *, event_id: int, customer_id: str, hold_id: str | None, page_size: int, page_token: str
    ) -> tuple[list[Ticket], str]: ...


class TransferStore(Protocol):
    """Ticket transfers (see :mod:`payment_svc.adapters.transfers`)."""

    async def create(
        self, *, ticket_id: str, sender_id: str, email: str, language: str, secret: str, now: datetime
    ) -> Transfer:
        """A pending transfer of the sender's valid ticket."""

    async def claim(self, *, transfer_id: str, secret: str, receiver_id: str, now: datetime) -> tuple[Transfer, Ticket]:
        """Re-issue the transfer's ticket to the receiver, once."""

    async def cancel(self, *, transfer_id: str, sender_id: str, now: datetime) -> Transfer:
        """Withdraw the sender's pending transfer."""

    async def untold(self, limit: int, transfer_id: str | None = None) -> list[ClaimedTransfer]:
        """Claimed transfers BookingService has not acknowledged yet, oldest
        first (``transfer_id``: that one, if it is)."""

    async def mark_told(self, transfer_ids: Sequence[str]) -> None:
        """BookingService recorded these transfers."""

    def cancelling_booking(self, hold_id: str) -> AbstractAsyncContextManager[list[ClaimedTransfer]]:
        """For a fan's cancel of the booking: while open, no transfer of its
        tickets is claimed (the booking's lock); gives its claimed transfers
        BookingService has not acknowledged yet. When the block (the cancel)
        ends without an error, marks them told and withdraws the booking's
        pending transfers."""


# -- BookingService


class HoldState(enum.StrEnum):
    HELD = "HELD"
    CONFIRMED = "CONFIRMED"
    EXPIRED = "EXPIRED"
    RELEASED = "RELEASED"
    CANCELLED = "CANCELLED"
    UNKNOWN = "UNKNOWN"


@dataclass(frozen=True, slots=True)
class HoldView:
    """What the payment service needs to know of a hold."""

    hold_id: str
    event_id: int
    customer_id: str
    state: HoldState
    amount_minor: int
    currency: str
    payment_id: str
    # When it expires (None: unknown).
    expires_at: datetime | None = None


@dataclass(frozen=True, slots=True)
class CancelledBooking:
    """A booking BookingService cancelled, and what its refund policy grants."""

    hold: HoldView
    refund_minor: int


class BookingClient(Protocol):
    async def get_hold(self, access_token: str, hold_id: str) -> HoldView:
        """The hold, if the token's customer owns it."""

    async def extend_hold(self, hold_id: str, customer_id: str, extend_by_seconds: int) -> HoldView:
        """Push the hold's expiry to at least now + extend_by_seconds."""

    async def restore_hold_expiry(self, hold_id: str, customer_id: str, expires_at: datetime) -> HoldView:
        """Give a held hold back the earlier expiry ``expires_at`` (undo an
        extension a failed charge no longer needs); never later than it is."""

    async def confirm_hold(
        self, hold_id: str, idempotency_key: str, payment_id: str, amount_minor: int, currency: str
    ) -> HoldView:
        """Turn the hold into a booking; FAILED_PRECONDITION when it is gone."""

    async def record_ticket_transfer(self, transfer: ClaimedTransfer) -> None:
        """Tell booking of a claimed transfer (idempotent by its id)."""

    async def cancel_booking(
        self,
        hold_id: str,
        customer_id: str,
        reason: str,
        *,
        refunded_at_provider: bool = False,
        quoted_refund: tuple[int, str] | None = None,
    ) -> CancelledBooking:
        """Cancel the confirmed booking to refund it (seats returned, tickets
        voided from the BookingCancelled event); the same answer for one
        already cancelled. FAILED_PRECONDITION REFUND_NOT_ALLOWED, changing
        nothing, when the event's policy grants no refund now.
        ``refunded_at_provider``: the money went back at the provider (a
        refund made there, a dispute): cancelled whatever the policy, and
        granting nothing more. ``quoted_refund`` (amount in minor units,
        currency): the refund the customer was quoted; the cancel grants at
        most it, and FAILED_PRECONDITION REFUND_WINDOW_CLOSED, changing
        nothing, when the policy now grants less."""


# -- the payment provider


class ChargeStatus(enum.StrEnum):
    CAPTURED = "CAPTURED"
    DECLINED = "DECLINED"
    FAILED = "FAILED"
    # Accepted, outcome not known yet (it comes by webhook or a later look-up).
    PROCESSING = "PROCESSING"


@dataclass(frozen=True, slots=True)
class ChargeRequest:
    idempotency_key: str
    amount_minor: int
    currency: str
    payment_method: str
    metadata: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class ChargeResult:
    charge_id: str
    status: ChargeStatus
    amount_minor: int
    currency: str
    failure_code: str = ""


class RefundStatus(enum.StrEnum):
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"


@dataclass(frozen=True, slots=True)
class RefundRequest:
    idempotency_key: str
    charge_id: str
    amount_minor: int
    currency: str


@dataclass(frozen=True, slots=True)
class RefundResult:
    refund_id: str
    status: RefundStatus
    amount_minor: int
    failure_code: str = ""


class ProviderError(Exception):
    """The provider refused the request itself (not a decline): a bad
    parameter, a reused key. Retrying the same request does not help."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


class ProviderPending(TimeoutError):
    """The provider has no final answer yet (it is still processing, it
    asked us to come back later, or it could not be reached): the caller
    asks again later with the same key, as after a timeout."""


class PaymentProvider(Protocol):
    """A card processor, keyed by idempotency keys so that a repeated call
    never moves money twice. Calls may hang: callers bound them with a
    timeout and retry with the same key, which returns the first result."""

    async def charge(self, request: ChargeRequest) -> ChargeResult:
        """Charge once per key; a repeat returns the first result."""

    async def retrieve_charge(self, idempotency_key: str) -> ChargeResult | None:
        """The charge made with this key, or None if none reached the provider."""

    async def refund(self, request: RefundRequest) -> RefundResult:
        """Refund once per key; a repeat returns the first result."""


class WebhookReader(Protocol):
    """The provider's webhook deliveries: verified, then read as one of
    :data:`payment_svc.webhooks.EVENT_TYPES` (data in the sandbox's shape)."""

    def read(self, signature: str, body: bytes) -> WebhookEvent:
        """The delivery's event; UNAUTHENTICATED when the signature does not
        verify or is stale, INVALID_ARGUMENT when the body cannot be read."""


class WebhookSink(Protocol):
    """Where the sandbox provider sends its webhooks (PaymentService's endpoint)."""

    async def deliver(self, signature: str, body: bytes) -> None:
        """Deliver one signed body; raise when the receiver refuses it."""
