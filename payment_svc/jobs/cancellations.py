"""Refunds for cancelled bookings (in the payment server's process), a
consumer group on booking's outbox stream (``ticket-issued``).

Each BookingCancelled event refunds what the event's refund policy granted,
once: the refund's key is derived from the outbox event id, so a redelivered
event finds its refund and sends nothing new.
"""

from __future__ import annotations

import logging
import uuid

from boxoffice.errors import FailedPrecondition, InvalidArgument, NotFound
from boxoffice.streams import StreamEntry
from payment_svc.handler import PaymentHandler
from payment_svc.model import RefundOrder, RefundSource

_log = logging.getLogger("payment_svc.cancellations")

CANCELLATION_GROUP = "payment-refunds"


class CancellationRefunds:
    def __init__(self, payments: PaymentHandler) -> None:
        self._payments = payments

    async def handle(self, entry: StreamEntry) -> None:
        if entry.type != "BookingCancelled":
            return
        payload = entry.payload
        amount = int(payload.get("refund_amount_minor") or 0)
        raw_payment_id = str(payload.get("payment_id") or "")
        if amount <= 0 or not raw_payment_id:
            return  # the policy grants nothing
        try:
            payment_id = str(uuid.UUID(raw_payment_id))
        except ValueError:
            _log.error("cancelled booking names no valid payment", extra={"event_id": entry.event_id})
            return
        try:
            await self._payments.refund(
                RefundOrder(
                    payment_id,
                    request_key=f"booking-cancelled:{entry.event_id}",
                    amount_minor=amount,
                    currency=str(payload.get("currency") or "") or None,
                    reason=str(payload.get("reason") or "booking cancelled")[:500],
                    source=RefundSource.BOOKING_CANCELLED,
                )
            )
        except (NotFound, FailedPrecondition, InvalidArgument) as err:
            # Final: nothing left to refund, not refundable. Recorded in the log;
            # retrying would not change the answer.
            _log.error(
                "cancelled booking's refund refused",
                extra={"event_id": entry.event_id, "payment_id": payment_id, "reason": err.reason},
            )
