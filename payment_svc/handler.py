"""The payment use cases: start, settle, refund and list tickets (the
provider's webhooks are :mod:`payment_svc.provider_webhooks`).

Money moves only through the provider, with keys derived from the order, so
any step may be repeated: a charge per (hold, attempt), a confirm per
payment, a refund per refund row. The payment row is the recovery point
between those calls: whatever stopped half way, the next settle (a
ConfirmPayment, a webhook, the reconciler) picks up from its state.

Money and tickets agree: a refund of a booking that is still confirmed
goes through the booking's cancellation (see :meth:`PaymentHandler.request_refund`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from typing import TypeVar

from boxoffice import caller, deadline
from boxoffice.errors import (
    BoxofficeError,
    FailedPrecondition,
    InvalidArgument,
    NotFound,
    PermissionDenied,
    Unavailable,
)
from boxoffice.tokens import TokenSigner, asserted_customer, token_customer
from boxoffice.tracing import current_traceparent
from payment_svc.config import PaymentConfig
from payment_svc.idempotency import key_scope
from payment_svc.inflight import ChargesInFlight
from payment_svc.metrics import ServerMetrics, state_label
from payment_svc.model import (
    Payment,
    PaymentState,
    Refund,
    RefundOrder,
    RefundSource,
    RefundState,
    Ticket,
    confirm_key,
    refund_provider_key,
)
from payment_svc.ports import (
    BookingClient,
    ChargeRequest,
    ChargeResult,
    ChargeStatus,
    HoldState,
    PaymentProvider,
    PaymentStore,
    ProviderError,
    RefundRequest,
    RefundStatus,
    TicketStore,
)

_log = logging.getLogger("payment_svc.handler")

T = TypeVar("T")

# Time kept back from a call's deadline to record a provider's answer.
_RECORD_MARGIN_SECONDS = 0.25
_MAX_SETTLE_STEPS = 8
AUTOMATIC_REFUND_KEY = "automatic"

# A payment that ends here gave up its charge: its hold gets its own expiry back.
_GAVE_UP = (PaymentState.DECLINED, PaymentState.FAILED)

_CHARGE_STATES = {
    ChargeStatus.CAPTURED: PaymentState.CAPTURED,
    ChargeStatus.DECLINED: PaymentState.DECLINED,
    ChargeStatus.FAILED: PaymentState.FAILED,
}


@dataclass
class PaymentHooks:
    """Test hooks that hold a race window open; no-ops in production."""

    before_settle_step: Callable[[Payment], Awaitable[None]] | None = None
    before_confirm_hold: Callable[[Payment], Awaitable[None]] | None = None


class PaymentHandler:
    """The payment use cases, over the stores, BookingService and a provider."""

    def __init__(
        self,
        *,
        store: PaymentStore,
        tickets: TicketStore,
        booking: BookingClient,
        provider: PaymentProvider,
        tokens: TokenSigner,
        config: PaymentConfig,
        metrics: ServerMetrics,
        in_flight: ChargesInFlight,
        hooks: PaymentHooks | None = None,
    ) -> None:
        self._store = store
        self._tickets = tickets
        self._booking = booking
        self._provider = provider
        self._tokens = tokens
        self._config = config
        self._metrics = metrics
        self._in_flight = in_flight
        self._hooks = hooks or PaymentHooks()

    # -- queries

    async def get(self, payment_id: str) -> Payment:
        payment = await self._store.get(payment_id)
        if payment is None:
            raise NotFound("no such payment", reason="PAYMENT_NOT_FOUND", metadata={"payment_id": payment_id})
        return payment

    async def visible(self, payment_id: str) -> Payment:
        """The payment, if the caller may see it: through the edge, only a
        payment of the asserted fan; another's answers exactly as a payment
        that does not exist (NOT_FOUND), so that payment ids reveal nothing.
        Other callers the table lets in (operators) see any."""
        if not caller.current().is_edge:
            return await self.get(payment_id)
        customer_id = asserted_customer()
        payment = await self._store.get(payment_id)
        if payment is None or payment.customer_id != customer_id:
            raise NotFound("no such payment", reason="PAYMENT_NOT_FOUND", metadata={"payment_id": payment_id})
        return payment

    async def key_scope(self, method: str, payment_id: str) -> str:
        """Where ``method``'s idempotency keys for ``payment_id`` live (see
        :func:`payment_svc.idempotency.key_scope`)."""
        payment = await self._store.get(payment_id)
        return key_scope(method, payment_id, None if payment is None else payment.customer_id)

    async def list_tickets(
        self, access_token: str, *, event_id: int, hold_id: str | None, page_size: int, page_token: str
    ) -> tuple[list[Ticket], str]:
        """A page of the customer's tickets for the event: the token's, or,
        through the edge without a token, the asserted fan's."""
        if not access_token and caller.current().is_edge:
            customer_id = asserted_customer()
        else:
            customer_id = token_customer(self._tokens.verify(access_token, event_id=event_id))
        return await self._tickets.list_for_customer(
            event_id=event_id,
            customer_id=customer_id,
            hold_id=hold_id,
            page_size=page_size,
            page_token=page_token,
        )

    # -- StartPayment

    async def start(self, access_token: str, hold_id: str, payment_method: str) -> Payment:
        """Charge the hold of the token's customer (one live payment per hold)."""
        hold = await self._booking.get_hold(access_token, hold_id)
        if token_customer(self._tokens.verify(access_token, event_id=hold.event_id)) != hold.customer_id:
            raise PermissionDenied("the hold belongs to another customer", reason="HOLD_NOT_OWNED")
        existing = await self._store.live_for_hold(hold.hold_id)
        if existing is not None:
            return existing
        if hold.state != HoldState.HELD:
            raise FailedPrecondition(
                f"the hold is {hold.state.value.lower()}, not held",
                reason="HOLD_NOT_HELD",
                metadata={"hold_id": hold.hold_id, "state": hold.state.value},
            )
        if hold.amount_minor <= 0:
            raise FailedPrecondition("the hold has nothing to pay", reason="NOTHING_TO_PAY")
        # The hold must outlive the charge: a charge in flight cannot race expiry.
        await self._booking.extend_hold(hold.hold_id, hold.customer_id, self._config.hold_extension_seconds)
        # The fan's verified address and language, for the tickets' e-mail
        # (asserted by the edge only; None from anyone else).
        fan = caller.current()
        payment, created = await self._store.create(
            hold_id=hold.hold_id,
            event_id=hold.event_id,
            customer_id=hold.customer_id,
            amount_minor=hold.amount_minor,
            currency=hold.currency,
            payment_method=payment_method,
            traceparent=current_traceparent() or "",
            hold_expires_at=hold.expires_at,
            provider=self._config.provider,
            notify_email=fan.email,
            notify_language=(fan.language or "en") if fan.email else None,
        )
        if not created:
            return payment
        self._metrics.payments_entered.labels(state_label(PaymentState.PENDING)).inc()
        try:
            result = await self._bounded(lambda: self._provider.charge(self._charge_request(payment)))
        except TimeoutError:
            # The outcome is unknown: the reconciler asks at once (and a
            # webhook or a ConfirmPayment may learn it first), same key.
            self._in_flight.note(payment.payment_id)
            return payment
        except ProviderError as err:
            return await self._move(payment, PaymentState.FAILED, failure_reason=err.code) or await self.get(
                payment.payment_id
            )
        return await self.apply_charge(payment, result)

    # -- provider facts

    async def apply_charge(self, payment: Payment, result: ChargeResult) -> Payment:
        """Record what the provider says of the payment's charge (``payment``
        as last read; a stale read only costs a re-read)."""
        payment_id = payment.payment_id
        target = _CHARGE_STATES.get(result.status)
        if target is None:
            return payment  # still processing
        if payment.state == PaymentState.PENDING:
            moved = await self._move(
                payment, target, provider_payment_id=result.charge_id, failure_reason=result.failure_code or None
            )
            if moved is not None:
                return moved
            payment = await self.get(payment_id)
        if target == PaymentState.CAPTURED and payment.state in (PaymentState.DECLINED, PaymentState.FAILED):
            # Captured after the payment was given up: the money goes back.
            moved = await self._move(
                payment,
                PaymentState.REFUND_REQUIRED,
                provider_payment_id=result.charge_id,
                failure_reason="LATE_CAPTURE",
            )
            if moved is not None:
                return moved
            payment = await self.get(payment_id)
        return payment

    # -- settling (ConfirmPayment, webhooks, the reconciler)

    async def settle(self, payment_id: str, *, submit_missing: bool = True) -> Payment:
        """Drive the payment to a final state: learn the charge's outcome,
        confirm the hold, or refund money that can no longer buy it.

        ``submit_missing``: a charge the provider never received is sent now
        (same key, so never twice); without it, such a payment fails.
        UNAVAILABLE while the outcome cannot be known yet.
        """
        payment = await self.get(payment_id)
        for _ in range(_MAX_SETTLE_STEPS):
            if self._hooks.before_settle_step is not None:
                await self._hooks.before_settle_step(payment)
            if payment.state == PaymentState.PENDING:
                payment = await self._settle_pending(payment, submit_missing=submit_missing)
                if payment.state == PaymentState.PENDING:
                    raise self._processing(payment_id)
            elif payment.state == PaymentState.CAPTURED:
                payment = await self._confirm(payment)
            elif payment.state == PaymentState.REFUND_REQUIRED:
                before = payment
                payment = await self.refund(
                    RefundOrder(
                        payment_id,
                        request_key=AUTOMATIC_REFUND_KEY,
                        amount_minor=None,
                        currency=None,
                        reason=payment.failure_reason or "automatic refund",
                        source=RefundSource.AUTOMATIC,
                    )
                )
                if payment.state == before.state:
                    return payment  # the refund failed; the reconciler retries
            else:
                return payment
        return payment

    async def _settle_pending(self, payment: Payment, *, submit_missing: bool) -> Payment:
        try:
            result = await self._bounded(lambda: self._provider.retrieve_charge(payment.provider_idempotency_key))
            if result is None:
                if not submit_missing:
                    moved = await self._move(payment, PaymentState.FAILED, failure_reason="CHARGE_NOT_SUBMITTED")
                    return moved or await self.get(payment.payment_id)
                result = await self._bounded(lambda: self._provider.charge(self._charge_request(payment)))
        except TimeoutError:
            # Money may be on its way: the fan is told it is processing.
            raise self._processing(payment.payment_id) from None
        except ProviderError as err:
            moved = await self._move(payment, PaymentState.FAILED, failure_reason=err.code)
            return moved or await self.get(payment.payment_id)
        return await self.apply_charge(payment, result)

    def _processing(self, payment_id: str) -> Unavailable:
        """The charge's outcome is not known yet (the provider is slow or
        still processing it): the reconciler asks at once and the fan is told
        the payment is processing and will settle by itself."""
        self._in_flight.note(payment_id)
        return Unavailable(
            "the payment is processing and will settle by itself; ask again later",
            reason="PAYMENT_PROCESSING",
            metadata={"payment_id": payment_id},
        )

    async def _confirm(self, payment: Payment) -> Payment:
        if self._hooks.before_confirm_hold is not None:
            await self._hooks.before_confirm_hold(payment)
        try:
            await self._booking.confirm_hold(
                payment.hold_id,
                confirm_key(payment.payment_id),
                payment.payment_id,
                payment.amount_minor,
                payment.currency,
            )
        except (FailedPrecondition, NotFound, InvalidArgument, PermissionDenied) as err:
            # The hold cannot be bought any more (expired and resold,
            # released, another amount): the seat stays with whoever has it
            # and the money goes back.
            _log.info(
                "captured payment cannot confirm its hold; refunding",
                extra={"payment_id": payment.payment_id, "reason": err.reason},
            )
            moved = await self._move(payment, PaymentState.REFUND_REQUIRED, failure_reason=err.reason)
            return moved or await self.get(payment.payment_id)
        moved = await self._move(payment, PaymentState.SUCCEEDED)
        return moved or await self.get(payment.payment_id)

    # -- refunds

    async def request_refund(self, order: RefundOrder) -> Payment:
        """RefundPayment: money and tickets stay in agreement. A payment whose
        booking is still confirmed is refunded only by cancelling the booking
        through BookingService (its seats go back, its tickets are voided from
        the BookingCancelled event), for what the event's refund policy grants
        (at most the order's amount); a policy that grants nothing refuses the
        refund and the booking stays. Once the booking is cancelled, further
        refunds are plain ones."""
        payment = await self.get(order.payment_id)
        if payment.state not in (PaymentState.SUCCEEDED, PaymentState.PARTIALLY_REFUNDED):
            return await self.refund(order)
        if await self._store.cancellation_refund(payment.payment_id) is not None:
            return await self.refund(order)
        # Refuse what the refund itself would refuse before cancelling anything.
        if order.currency is not None and order.currency != payment.currency:
            raise InvalidArgument(
                "the refund's currency is not the payment's",
                reason="CURRENCY_MISMATCH",
                metadata={"currency": order.currency, "payment_currency": payment.currency},
            )
        left = payment.amount_minor - payment.refunded_minor
        if order.amount_minor is not None and order.amount_minor > left:
            raise FailedPrecondition(
                "the refund exceeds what is left to refund",
                reason="REFUND_EXCEEDS_PAYMENT",
                metadata={
                    "payment_id": payment.payment_id,
                    "left_minor": str(left),
                    "amount_minor": str(order.amount_minor),
                },
            )
        try:
            cancelled = await self._booking.cancel_booking(
                payment.hold_id, payment.customer_id, order.reason or "refunded"
            )
        except FailedPrecondition as err:
            if err.reason != "REFUND_NOT_ALLOWED":
                raise
            raise FailedPrecondition(
                "the event's refund policy grants nothing for cancelling this booking now",
                reason="REFUND_NOT_ALLOWED",
                metadata={"payment_id": payment.payment_id, "hold_id": payment.hold_id},
            ) from None
        if cancelled.refund_minor <= 0:
            # Cancelled earlier, by its customer, for nothing: what is
            # refunded now is the operator's own decision.
            return await self.refund(order)
        granted = min(cancelled.refund_minor, left)
        amount = granted if order.amount_minor is None else min(order.amount_minor, granted)
        return await self.refund(
            replace(order, amount_minor=amount, source=RefundSource.BOOKING_CANCELLED, adopts_cancellation_refund=False)
        )

    async def refund(self, order: RefundOrder) -> Payment:
        """Refund (part of) a captured payment once per key."""
        refund = await self._store.reserve_refund(order)
        source = order.source
        payment = await self.get(order.payment_id)
        if refund.state != RefundState.PENDING:
            return payment
        request = RefundRequest(
            refund_provider_key(refund.refund_id), payment.provider_payment_id, refund.amount_minor, refund.currency
        )
        try:
            result = await self._bounded(lambda: self._provider.refund(request))
        except TimeoutError:
            raise Unavailable("the refund is pending with the provider; retry", reason="REFUND_PENDING") from None
        except ProviderError as err:
            await self._store.finish_refund(
                refund.refund_id, succeeded=False, provider_refund_id="", failure_reason=err.code
            )
            self._metrics.refunds.labels(source.value, "failed").inc()
            raise FailedPrecondition(
                "the provider refused the refund", reason="REFUND_FAILED", metadata={"provider_code": err.code}
            ) from None
        succeeded = result.status == RefundStatus.SUCCEEDED
        updated = await self._store.finish_refund(
            refund.refund_id,
            succeeded=succeeded,
            provider_refund_id=result.refund_id,
            failure_reason=result.failure_code,
        )
        self._metrics.refunds.labels(source.value, "succeeded" if succeeded else "failed").inc()
        if updated.state != payment.state:
            self._metrics.payments_entered.labels(state_label(updated.state)).inc()
        return updated

    async def retry_refund(self, refund: Refund) -> Payment:
        """Send a pending refund again (same key: at most one refund)."""
        return await self.refund(
            RefundOrder(refund.payment_id, refund.request_key, None, None, reason="", source=refund.source)
        )

    # -- helpers

    def _charge_request(self, payment: Payment) -> ChargeRequest:
        return ChargeRequest(
            idempotency_key=payment.provider_idempotency_key,
            amount_minor=payment.amount_minor,
            currency=payment.currency,
            payment_method=payment.payment_method,
            metadata={"payment_id": payment.payment_id, "hold_id": payment.hold_id},
        )

    async def _bounded(self, call: Callable[[], Awaitable[T]]) -> T:
        """A provider call bounded by the provider timeout and the current
        deadline less a margin to record the answer; TimeoutError past it."""
        budget = min(self._config.provider_timeout_seconds, deadline.remaining() - _RECORD_MARGIN_SECONDS)
        async with asyncio.timeout(max(budget, 0.01)):
            return await call()

    async def _move(
        self,
        payment: Payment,
        target: PaymentState,
        *,
        provider_payment_id: str | None = None,
        failure_reason: str | None = None,
    ) -> Payment | None:
        if target in _GAVE_UP and payment.state == PaymentState.PENDING:
            # Before the payment stops being live: once it is, the fan may
            # start another, whose extension this must not undo.
            await self._give_hold_back(payment)
        moved = await self._store.transition(
            payment.payment_id,
            [payment.state],
            target,
            provider_payment_id=provider_payment_id,
            failure_reason=failure_reason,
        )
        if moved is not None:
            self._metrics.payments_entered.labels(state_label(target)).inc()
            _log.info(
                "payment moved",
                extra={"payment_id": payment.payment_id, "from": payment.state.value, "to": target.value},
            )
        return moved

    async def _give_hold_back(self, payment: Payment) -> None:
        """A charge that did not go through no longer needs the time
        StartPayment added to the hold: the hold gets its own expiry back,
        so a declined card cannot keep seats. The fan may pay again until
        then. A hold that is no longer held is left as it is."""
        if payment.hold_expires_at is None:
            return
        try:
            await self._booking.restore_hold_expiry(payment.hold_id, payment.customer_id, payment.hold_expires_at)
        except BoxofficeError as err:
            # Booking down or the hold gone: the extension stays (it is bounded).
            _log.info(
                "hold not given its expiry back",
                extra={"payment_id": payment.payment_id, "hold_id": payment.hold_id, "reason": err.reason},
            )
