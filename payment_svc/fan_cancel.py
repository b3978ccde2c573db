"""A fan cancels their own paid booking for the refund they were quoted
(PaymentService.CancelBooking).

The money side orchestrates: BookingService cancels the booking under its
row lock, checking the fan's quote against the event's policy at that
moment (it grants at most the quote, and refuses with REFUND_WINDOW_CLOSED,
changing nothing, when the window closed since); its BookingCancelled event
voids the tickets, tells the mailer and returns the seats. Then the refund
goes to the provider here, as the booking's one cancellation refund: the
same refund the BookingCancelled consumer (:mod:`payment_svc.jobs.cancellations`)
adopts when it comes second, or that this call adopts when the consumer came
first, so however many cancels race, the money goes back once.

A booking one of whose tickets a friend claimed by transfer is not the
fan's to cancel (it would void the friend's ticket): while booking's cancel
runs, the booking's lock keeps claims of its tickets out, and booking is
first told of any claimed transfer it has not acknowledged yet, so its
refusal (TICKETS_TRANSFERRED) never misses one.
"""

from __future__ import annotations

from dataclasses import dataclass

from boxoffice.errors import NotFound, PermissionDenied
from boxoffice.tokens import asserted_customer
from payment_svc.handler import PaymentHandler
from payment_svc.model import Payment, RefundOrder, RefundSource, RefundState
from payment_svc.ports import BookingClient, PaymentStore, TransferStore

# What a fan's cancel says to the booking and the refund.
FAN_CANCEL_REASON = "cancelled by the customer"


@dataclass(frozen=True, slots=True)
class Cancelled:
    """A fan's cancelled booking: its payment after the refund, and the refund."""

    payment: Payment
    refund_minor: int


def refund_key(hold_id: str) -> str:
    """The refund request key of a fan's cancel of a booking (one per booking)."""
    return f"fan-cancel:{hold_id}"


class FanCancellation:
    def __init__(
        self, *, payments: PaymentHandler, store: PaymentStore, booking: BookingClient, transfers: TransferStore
    ) -> None:
        self._payments = payments
        self._store = store
        self._booking = booking
        self._transfers = transfers

    async def paid_booking(self, booking_id: str) -> Payment:
        """The payment that bought the asserted fan's booking. Another fan's
        booking, one never paid and one that does not exist all answer
        NOT_FOUND HOLD_NOT_FOUND alike."""
        customer_id = asserted_customer()
        payment = await self._store.paid_for_hold(booking_id)
        if payment is None or payment.customer_id != customer_id:
            raise NotFound("no such booking", reason="HOLD_NOT_FOUND", metadata={"hold_id": booking_id})
        return payment

    async def cancel(self, payment: Payment, quoted_minor: int, quoted_currency: str) -> Cancelled:
        """Cancel the booking ``payment`` bought for at most the quoted
        refund, and refund what the cancellation granted."""
        hold_id = payment.hold_id
        try:
            # No claim of the booking's tickets commits meanwhile, and booking
            # knows every one that did: it refuses (TICKETS_TRANSFERRED) when
            # a friend holds one of them.
            async with self._transfers.cancelling_booking(hold_id) as untold:
                for transfer in untold:
                    await self._booking.record_ticket_transfer(transfer)
                cancelled = await self._booking.cancel_booking(
                    hold_id, payment.customer_id, FAN_CANCEL_REASON, quoted_refund=(quoted_minor, quoted_currency)
                )
        except (NotFound, PermissionDenied):
            raise NotFound("no such booking", reason="HOLD_NOT_FOUND", metadata={"hold_id": hold_id}) from None
        # BookingService's refusals (REFUND_WINDOW_CLOSED, REFUND_NOT_ALLOWED,
        # BOOKING_NOT_CONFIRMED, TICKETS_TRANSFERRED, a quote it cannot
        # take) pass on as raised.
        granted = min(cancelled.refund_minor, quoted_minor)
        existing = await self._store.cancellation_refund(payment.payment_id)
        if existing is None and granted <= 0:
            # Cancelled before for nothing (money given back at the provider).
            return Cancelled(await self._payments.get(payment.payment_id), 0)
        after = await self._payments.refund(
            RefundOrder(
                payment.payment_id,
                request_key=refund_key(hold_id),
                amount_minor=granted,
                currency=payment.currency,
                reason=FAN_CANCEL_REASON,
                source=RefundSource.BOOKING_CANCELLED,
            )
        )
        refund = await self._store.cancellation_refund(payment.payment_id)
        return Cancelled(after, granted if refund is None else refund.amount_minor)

    async def settled(self, booking_id: str) -> Cancelled | None:
        """The answer a cancel of the booking would store, when its refund
        is done already (for a request that finds its key in flight)."""
        payment = await self._store.paid_for_hold(booking_id)
        if payment is None:
            return None
        refund = await self._store.cancellation_refund(payment.payment_id)
        if refund is None or refund.state != RefundState.SUCCEEDED:
            return None
        return Cancelled(payment, refund.amount_minor)
