"""HandleProviderWebhook: the provider's notifications, applied once.

A delivery is verified and read by the provider's :class:`~payment_svc.ports.WebhookReader`
(the sandbox's or Stripe's), which turns it into one of the events below, then
deduplicated by the provider's event id: it is recorded (with a lease its
applier renews, as an idempotency key's holder does) before it is applied
and marked applied after; a later delivery of an applied event changes
nothing, one that arrives while it is being applied is ABORTED (the
provider retries), and one whose first application failed, or whose
applier died, applies it again (the latter once the lease lapsed).
An event about the payment's charge or refund whose amount or currency is not
the payment's is refused before it is recorded: a valid signature does not
make foreign money the payment's.

The events (:data:`payment_svc.webhooks.EVENT_TYPES`):

- ``charge.succeeded`` / ``charge.failed``: the outcome of the payment's charge;
- ``charge.refunded`` / ``refund.failed``: a refund's outcome. A refund that
  is not one of ours (made at the provider: no key of ours) is recorded as a
  PROVIDER refund, and the booking it paid for is cancelled and its tickets
  voided, as our own refunds do (money and tickets agree);
- ``charge.dispute.created``: the fan's bank took the money back; recorded
  and answered the same way;
- ``charge.pending``: the charge was authorised or is processing (Stripe's
  ``payment_intent.amount_capturable_updated``, ``.processing``): the payment
  is settled now if it can be (an authorised charge is captured).
"""

from __future__ import annotations

import functools
import hashlib
import logging
import uuid
from dataclasses import dataclass
from typing import Any

from boxoffice.errors import Aborted, FailedPrecondition, InvalidArgument, NotFound, Unauthenticated, Unavailable
from boxoffice.tracing import Tracing
from payment_svc.handler import PaymentHandler
from payment_svc.idempotency import detached, leased
from payment_svc.metrics import ServerMetrics
from payment_svc.model import Payment, PaymentState, RefundOrder, RefundSource, RefundState
from payment_svc.ports import (
    BookingClient,
    ChargeResult,
    ChargeStatus,
    ClaimState,
    PaymentStore,
    WebhookReader,
    WebhookStore,
)
from payment_svc.webhooks import MAX_BODY_BYTES, WebhookEvent

_log = logging.getLogger("payment_svc.provider_webhooks")

_CHARGE_EVENTS = ("charge.succeeded", "charge.failed")
_REFUND_EVENTS = ("charge.refunded", "refund.failed")
DISPUTE_EVENT = "charge.dispute.created"
# The charge was authorised or is processing, its outcome not known yet:
# settled now if it can be (an authorised charge is captured), else later.
PENDING_EVENT = "charge.pending"
# Payments whose booking was confirmed: a refund or dispute at the provider cancels it.
_BOOKED = (PaymentState.SUCCEEDED, PaymentState.PARTIALLY_REFUNDED, PaymentState.REFUNDED)


@dataclass(frozen=True, slots=True)
class WebhookOutcome:
    provider_event_id: str
    duplicate: bool
    payment: Payment | None


class ProviderWebhooks:
    """Applies the provider's webhooks to payments (see the module docstring)."""

    def __init__(
        self,
        *,
        payments: PaymentHandler,
        store: PaymentStore,
        webhook_events: WebhookStore,
        booking: BookingClient,
        reader: WebhookReader,
        metrics: ServerMetrics,
        lease_seconds: float,
        tracing: Tracing | None = None,
    ) -> None:
        self._renew_every = lease_seconds / 3
        self._payments = payments
        self._store = store
        self._webhook_events = webhook_events
        self._booking = booking
        self._reader = reader
        self._metrics = metrics
        self._tracing = tracing or Tracing.off()

    async def handle(self, signature: str, body: bytes) -> WebhookOutcome:
        """Verify a delivery, then apply its event once."""
        if len(body) > MAX_BODY_BYTES:
            raise InvalidArgument("the webhook body is larger than 64 KiB", reason="WEBHOOK_TOO_LARGE")
        try:
            event = self._reader.read(signature, body)
        except Unauthenticated as err:
            self._metrics.webhook_verification_failures.labels(err.reason).inc()
            raise
        payment = await self._webhook_payment(event)
        if payment is not None:
            await self._refuse_foreign_money(event, payment)
        payment_id = None if payment is None else payment.payment_id
        claim = await self._webhook_events.claim(
            event.event_id, event.type, payment_id, hashlib.sha256(body).digest(), body
        )
        if claim.state == ClaimState.APPLIED:
            self._metrics.webhooks.labels(event.type, "duplicate").inc()
            latest = None if payment_id is None else await self._store.get(payment_id)
            return WebhookOutcome(event.event_id, True, latest)
        if claim.state == ClaimState.IN_FLIGHT:
            raise Aborted(
                "this event is being applied; retry later",
                reason="WEBHOOK_IN_FLIGHT",
                metadata={"provider_event_id": event.event_id},
            )
        token = claim.token
        try:
            applied = None
            if payment is not None:
                # The webhook arrives in a trace of its own: what it does is
                # linked to the call that started the payment.
                attributes = {
                    "boxoffice.provider_event_id": event.event_id,
                    "boxoffice.payment_id": payment.payment_id,
                }
                with self._tracing.linked(f"apply {event.type}", payment.traceparent, attributes):
                    renew = functools.partial(self._webhook_events.renew, event.event_id, token)
                    async with leased(renew, every_seconds=self._renew_every):
                        applied = await self._apply_to(payment, event)
        except BaseException:
            await detached(self._webhook_events.release(event.event_id, claim.token))
            raise
        await detached(self._webhook_events.applied(event.event_id, claim.token))
        self._metrics.webhooks.labels(event.type, "applied").inc()
        return WebhookOutcome(event.event_id, False, applied)

    async def _apply_to(self, payment: Payment, event: WebhookEvent) -> Payment:
        """Apply one provider event; facts only move a payment forward, so
        events arriving twice or out of order change nothing more."""
        data = event.data
        if event.type in _CHARGE_EVENTS:
            if data.get("idempotency_key") != payment.provider_idempotency_key:
                _log.warning("webhook charge does not match its payment", extra={"provider_event_id": event.event_id})
                return payment
            status = {"captured": ChargeStatus.CAPTURED, "declined": ChargeStatus.DECLINED}.get(
                str(data.get("status")), ChargeStatus.FAILED
            )
            result = ChargeResult(
                charge_id=str(data.get("id", "")),
                status=status,
                amount_minor=int(data.get("amount", 0)),
                currency=str(data.get("currency", "")),
                failure_code=str(data.get("failure_code", "")),
            )
            payment = await self._payments.apply_charge(payment, result)
            if payment.state in (PaymentState.CAPTURED, PaymentState.REFUND_REQUIRED):
                payment = await self._payments.settle(payment.payment_id)
            return payment
        if event.type in _REFUND_EVENTS:
            refund_data = data.get("refund")
            if not isinstance(refund_data, dict):
                return payment
            key = str(refund_data.get("idempotency_key") or "")
            if not key:
                if event.type == "charge.refunded":
                    return await self._returned_at_provider(payment, event, refund_data, "provider-refund")
                return payment
            refund = await self._store.refund_by_provider_key(key)
            if refund is not None and refund.payment_id == payment.payment_id and refund.state == RefundState.PENDING:
                succeeded = event.type == "charge.refunded"
                payment = await self._store.finish_refund(
                    refund.refund_id,
                    succeeded=succeeded,
                    provider_refund_id=str(refund_data.get("id", "")),
                    failure_reason="" if succeeded else "refund_failed",
                )
                self._metrics.refunds.labels(refund.source.value, "succeeded" if succeeded else "failed").inc()
            return payment
        if event.type == DISPUTE_EVENT:
            return await self._returned_at_provider(payment, event, data, "dispute")
        if event.type == PENDING_EVENT and payment.state == PaymentState.PENDING:
            try:
                return await self._payments.settle(payment.payment_id)
            except Unavailable:
                return payment  # still processing: its outcome comes by webhook or the reconciler
        return payment

    async def _returned_at_provider(
        self, payment: Payment, event: WebhookEvent, money: dict[str, Any], kind: str
    ) -> Payment:
        """Money the provider gave back without us (a refund made there, a
        dispute): recorded as a PROVIDER refund, once per its provider id,
        and the booking it bought cancelled (its tickets voided)."""
        provider_id = str(money.get("id") or "")
        amount = money.get("amount")
        if not provider_id or type(amount) is not int or amount <= 0:
            _log.warning("provider-side refund without an id or amount", extra={"provider_event_id": event.event_id})
            return payment
        booked = payment.state in _BOOKED
        left = payment.amount_minor - payment.refunded_minor
        if amount > left:
            # Ours may be recorded already (its answer came back before this
            # event); whatever it is, no more than what is left.
            amount = left
        if amount > 0:
            reason = f"{kind} at the provider"
            if kind == "dispute":
                reason = f"dispute at the provider: {str(money.get('reason') or 'unknown')[:100]}"
            try:
                refund = await self._store.reserve_refund(
                    RefundOrder(
                        payment.payment_id,
                        request_key=f"{kind}:{provider_id}",
                        amount_minor=amount,
                        currency=payment.currency,
                        reason=reason,
                        source=RefundSource.PROVIDER,
                    )
                )
            except (FailedPrecondition, InvalidArgument, NotFound) as err:
                _log.error(
                    "money returned at the provider cannot be recorded",
                    extra={"payment_id": payment.payment_id, "reason": err.reason, "provider_id": provider_id},
                )
            else:
                if refund.state == RefundState.PENDING:
                    payment = await self._store.finish_refund(
                        refund.refund_id, succeeded=True, provider_refund_id=provider_id
                    )
                    self._metrics.refunds.labels(RefundSource.PROVIDER.value, "succeeded").inc()
        if booked:
            try:
                await self._booking.cancel_booking(
                    payment.hold_id, payment.customer_id, f"{kind} at the provider", refunded_at_provider=True
                )
            except FailedPrecondition as err:
                if err.reason != "BOOKING_NOT_CONFIRMED":
                    raise
        return await self._payments.get(payment.payment_id)

    async def _refuse_foreign_money(self, event: WebhookEvent, payment: Payment) -> None:
        """Refuse, before it is recorded, an event about this service's charge
        (its key) or refund whose money is not the payment's or the refund's:
        a genuine provider never sends one, so it is a forgery or a bug, and it
        changes nothing."""
        data = event.data
        if event.type in _CHARGE_EVENTS:
            if data.get("idempotency_key") == payment.provider_idempotency_key:
                self._check_money(event, payment, data.get("amount"), data.get("currency"), payment.amount_minor)
        elif event.type in _REFUND_EVENTS:
            refund_data = data.get("refund")
            if isinstance(refund_data, dict):
                key = str(refund_data.get("idempotency_key") or "")
                if not key:
                    self._check_within(event, payment, refund_data.get("amount"), data.get("currency"))
                    return
                refund = await self._store.refund_by_provider_key(key)
                if refund is not None and refund.payment_id == payment.payment_id:
                    self._check_money(
                        event, payment, refund_data.get("amount"), data.get("currency"), refund.amount_minor
                    )
        elif event.type == DISPUTE_EVENT:
            self._check_within(event, payment, data.get("amount"), data.get("currency"))

    def _check_within(self, event: WebhookEvent, payment: Payment, amount: object, currency: object) -> None:
        """Money given back at the provider: some of the payment, in its currency."""
        expected = amount if isinstance(amount, int) and 0 < amount <= payment.amount_minor else -1
        self._check_money(event, payment, amount, currency, expected)

    def _check_money(
        self, event: WebhookEvent, payment: Payment, amount: object, currency: object, expected_minor: int
    ) -> None:
        if type(amount) is int and amount == expected_minor and currency == payment.currency:
            return
        self._metrics.webhooks_refused.labels(event.type, "WEBHOOK_AMOUNT_MISMATCH").inc()
        _log.warning(
            "webhook refused: its amount or currency is not the payment's",
            extra={"provider_event_id": event.event_id, "payment_id": payment.payment_id},
        )
        raise InvalidArgument(
            "the webhook's amount or currency differs from the payment's",
            reason="WEBHOOK_AMOUNT_MISMATCH",
            metadata={
                "provider_event_id": event.event_id,
                "payment_id": payment.payment_id,
                "amount_minor": str(amount)[:32],
                "currency": str(currency)[:8],
                "expected_amount_minor": str(expected_minor),
                "expected_currency": payment.currency,
            },
        )

    async def _webhook_payment(self, event: WebhookEvent) -> Payment | None:
        """The payment the event is about: by our id in its metadata, else by
        the provider's id of the charge (a dispute carries no metadata of ours)."""
        payment_id = _uuid_or_none(event.payment_id)
        if payment_id is not None:
            return await self._store.get(payment_id)
        provider_payment_id = event.data.get("provider_payment_id")
        if isinstance(provider_payment_id, str) and 0 < len(provider_payment_id) <= 255:
            return await self._store.by_provider_payment_id(provider_payment_id)
        return None


def _uuid_or_none(value: str) -> str | None:
    try:
        return str(uuid.UUID(value))
    except ValueError:
        return None
