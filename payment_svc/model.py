"""Payments, refunds and tickets as values, and the payment state machine."""

from __future__ import annotations

import enum
from dataclasses import dataclass
from datetime import datetime


class PaymentState(enum.StrEnum):
    PENDING = "PENDING"
    CAPTURED = "CAPTURED"
    SUCCEEDED = "SUCCEEDED"
    DECLINED = "DECLINED"
    FAILED = "FAILED"
    REFUND_REQUIRED = "REFUND_REQUIRED"
    REFUNDED = "REFUNDED"
    PARTIALLY_REFUNDED = "PARTIALLY_REFUNDED"


# The moves a payment may make; every change of state is a conditional
# UPDATE from one of these sources, so concurrent settlers converge.
TRANSITIONS: dict[PaymentState, frozenset[PaymentState]] = {
    PaymentState.PENDING: frozenset(
        {PaymentState.CAPTURED, PaymentState.DECLINED, PaymentState.FAILED, PaymentState.REFUND_REQUIRED}
    ),
    PaymentState.CAPTURED: frozenset({PaymentState.SUCCEEDED, PaymentState.REFUND_REQUIRED}),
    PaymentState.SUCCEEDED: frozenset({PaymentState.PARTIALLY_REFUNDED, PaymentState.REFUNDED}),
    PaymentState.PARTIALLY_REFUNDED: frozenset({PaymentState.PARTIALLY_REFUNDED, PaymentState.REFUNDED}),
    # Money captured after the payment was given up (a late capture) must go back.
    PaymentState.DECLINED: frozenset({PaymentState.REFUND_REQUIRED}),
    PaymentState.FAILED: frozenset({PaymentState.REFUND_REQUIRED}),
    PaymentState.REFUND_REQUIRED: frozenset({PaymentState.REFUNDED}),
    PaymentState.REFUNDED: frozenset(),
}


@dataclass(frozen=True, slots=True)
class Payment:
    payment_id: str
    hold_id: str
    attempt: int
    event_id: int
    customer_id: str
    amount_minor: int
    currency: str
    payment_method: str
    state: PaymentState
    provider_idempotency_key: str
    provider_payment_id: str
    failure_reason: str
    refunded_minor: int
    created_at: datetime
    updated_at: datetime
    # The traceparent of the call that started it ("" when none).
    traceparent: str = ""
    # The hold's own expiry before StartPayment extended it (None: unknown).
    hold_expires_at: datetime | None = None
    # The provider that took (or takes) the money: "sandbox" or "stripe".
    provider: str = "sandbox"


class RefundState(enum.StrEnum):
    PENDING = "PENDING"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"


class RefundSource(enum.StrEnum):
    REQUEST = "REQUEST"
    AUTOMATIC = "AUTOMATIC"
    BOOKING_CANCELLED = "BOOKING_CANCELLED"
    # Money given back at the provider without us: a refund made there, a dispute.
    PROVIDER = "PROVIDER"


@dataclass(frozen=True, slots=True)
class RefundOrder:
    """A request to give (part of) a payment back, honoured once per key."""

    payment_id: str
    request_key: str
    # None: all that is left to refund.
    amount_minor: int | None
    # None: the payment's currency.
    currency: str | None
    reason: str
    source: RefundSource
    # For a BOOKING_CANCELLED order, when the booking already has its
    # cancellation refund: True, that refund is this order's answer (the
    # BookingCancelled event after a RefundPayment); False, this order is
    # refunded as a plain REQUEST one (a RefundPayment that lost the race to
    # cancel).
    adopts_cancellation_refund: bool = True


@dataclass(frozen=True, slots=True)
class Refund:
    refund_id: str
    payment_id: str
    request_key: str
    amount_minor: int
    currency: str
    reason: str
    source: RefundSource
    state: RefundState
    provider_refund_id: str
    failure_reason: str


@dataclass(frozen=True, slots=True)
class Ticket:
    ticket_id: str
    event_id: int
    hold_id: str
    unit: int
    customer_id: str
    section_id: str
    seat_id: int | None
    seat_label: str
    payment_id: str
    code: str
    issued_at: datetime
    voided_at: datetime | None
    # Paid in the sandbox, which takes no money (a laptop or a staging mesh).
    sandbox: bool = False
    # The ticket's pending transfer to a friend, when its holder offers it.
    pending_transfer: Transfer | None = None


class TransferState(enum.StrEnum):
    PENDING = "PENDING"
    CLAIMED = "CLAIMED"
    CANCELLED = "CANCELLED"


@dataclass(frozen=True, slots=True)
class Transfer:
    """The offer of one ticket to a friend (see :mod:`payment_svc.transfers`)."""

    transfer_id: str
    ticket_id: str
    event_id: int
    sender_id: str
    email: str
    state: TransferState
    created_at: datetime
    ended_at: datetime | None
    new_ticket_id: str | None


@dataclass(frozen=True, slots=True)
class ClaimedTransfer:
    """A claimed transfer as BookingService is told of it: the ticket of
    booking ``hold_id`` (its ``unit``; ``generation``, the re-issued
    ticket's) passed from ``sender_id`` to ``receiver_id``."""

    transfer_id: str
    event_id: int
    hold_id: str
    unit: int
    generation: int
    sender_id: str
    receiver_id: str
    claimed_at: datetime


def provider_key(hold_id: str, attempt: int) -> str:
    """The provider idempotency key of a hold's n-th payment attempt."""
    return f"hold_{hold_id}_attempt_{attempt}"


def confirm_key(payment_id: str) -> str:
    """The key BookingService.ConfirmHold deduplicates this payment's confirm by."""
    return f"payment:{payment_id}"


def refund_provider_key(refund_id: str) -> str:
    """The provider idempotency key of a refund."""
    return f"refund_{refund_id}"
