"""A booking's cancellation under its event's refund policy: the quote a fan
reads (GetCancellationQuote) and the check a cancel that carries that quote
makes under the booking's row lock (CancelBooking with quoted_refund), from
one function, so that the two agree: a cancel never grants more than the
quote, and a refund window that closed between them refuses the cancel
(REFUND_WINDOW_CLOSED) instead of granting less."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

from booking_svc.model import Hold, HoldState, Money, RefundPolicy
from boxoffice import validate
from boxoffice.errors import FailedPrecondition

# The reasons a quote names when cancelling is not allowed (published
# ErrorReason names of boxoffice.booking.v1).
WINDOW_CLOSED = "REFUND_WINDOW_CLOSED"
NOT_ALLOWED = "REFUND_NOT_ALLOWED"
NOT_CONFIRMED = "BOOKING_NOT_CONFIRMED"
TRANSFERRED = "TICKETS_TRANSFERRED"


@dataclass(frozen=True, slots=True)
class CancellationQuote:
    """What cancelling a booking at ``at`` would do."""

    allowed: bool
    # What it refunds, in the booking's currency (0 when not allowed).
    refund_minor: int
    # The end of the refund window (None: the policy has none).
    until: datetime | None
    # Why not, when not allowed (one of the names above); "" when allowed.
    reason: str
    at: datetime
    # The policy's percent.
    percent: int


def quote(hold: Hold, policy: RefundPolicy, at: datetime, *, transferred_away: int = 0) -> CancellationQuote:
    """The quote for cancelling ``hold`` at ``at``: allowed only for a
    confirmed booking while the policy grants a refund for it and none of
    its tickets is held by a friend who claimed it (``transferred_away``)."""
    until = policy.refundable_until
    if hold.state is not HoldState.CONFIRMED:
        return CancellationQuote(False, 0, until, NOT_CONFIRMED, at, policy.refund_percent)
    if transferred_away > 0:
        return CancellationQuote(False, 0, until, TRANSFERRED, at, policy.refund_percent)
    if until is None or policy.refund_for(hold.amount.amount_minor, until) <= 0:
        return CancellationQuote(False, 0, until, NOT_ALLOWED, at, policy.refund_percent)
    if at > until:
        return CancellationQuote(False, 0, until, WINDOW_CLOSED, at, policy.refund_percent)
    refund = policy.refund_for(hold.amount.amount_minor, at)
    return CancellationQuote(True, refund, until, "", at, policy.refund_percent)


def rfc3339(value: datetime | None) -> str:
    return "" if value is None else value.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def granted_for_quote(hold: Hold, policy: RefundPolicy, now: datetime, quoted: Money) -> int:
    """What cancelling the confirmed ``hold`` now grants when the customer
    was quoted ``quoted``: at most that. Refuses (changing nothing) when the
    policy now grants less than the quote: FAILED_PRECONDITION
    REFUND_WINDOW_CLOSED once the window has closed, REFUND_NOT_ALLOWED when
    it grants nothing at all; INVALID_ARGUMENT for a quote in another
    currency or of more than the policy ever granted this booking."""
    if quoted.currency != hold.amount.currency:
        raise validate.invalid("quoted_refund.currency_code", f"must be the booking's currency, {hold.amount.currency}")
    now_quote = quote(hold, policy, now)
    if now_quote.reason == NOT_ALLOWED:
        raise FailedPrecondition(
            "the event's refund policy grants nothing for cancelling this booking",
            reason="REFUND_NOT_ALLOWED",
            metadata={"hold_id": str(hold.hold_id)},
        )
    until = policy.refundable_until
    best = 0 if until is None else policy.refund_for(hold.amount.amount_minor, until)
    if quoted.amount_minor > best:
        raise validate.invalid("quoted_refund.amount_minor", "is more than this booking's refund policy grants")
    if not now_quote.allowed or now_quote.refund_minor < quoted.amount_minor:
        raise FailedPrecondition(
            "the refund window closed after the quote; ask for a new quote",
            reason="REFUND_WINDOW_CLOSED",
            metadata={"hold_id": str(hold.hold_id), "until": rfc3339(until)},
        )
    return min(now_quote.refund_minor, quoted.amount_minor)
