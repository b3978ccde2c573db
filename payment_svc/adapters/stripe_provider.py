"""Stripe as the payment provider, through the official ``stripe`` library's
async client (:class:`stripe.StripeClient` over httpx).

- A charge is a PaymentIntent created and confirmed in one request with the
  payment's provider key as Stripe's ``Idempotency-Key`` (a repeat replays
  the first answer, so money moves once), authorised with
  ``capture_method=manual`` and then captured (key ``<key>-capture``). The
  key is also in the PaymentIntent's metadata, so that a charge whose answer
  was lost is found again by search (:meth:`StripeProvider.retrieve_charge`).
- A declined card is Stripe's 402 ``card_error``: the charge is DECLINED
  with the decline code.
- A refund (full or partial) is a Refund of the PaymentIntent, keyed by the
  refund's provider key (also in its metadata).
- Stripe's own retries (``max_network_retries``: connection errors, 409
  ``idempotency_key_in_use``, 5xx, and what ``Stripe-Should-Retry`` asks
  for) are bounded by the call's remaining deadline: no more retries than
  their back-off leaves time for. A call that ends without an answer raises
  :class:`~payment_svc.ports.ProviderPending`; the same key is asked again later.
- Webhooks: ``Stripe-Signature`` verified by the library against every
  configured secret (rotation), their age against our clock, then the
  event read into the service's event shape (see :mod:`payment_svc.webhooks`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any

import stripe

from boxoffice import deadline
from boxoffice.clock import Clock
from boxoffice.errors import InvalidArgument, Unauthenticated
from payment_svc.config import StripeConfig
from payment_svc.ports import (
    ChargeRequest,
    ChargeResult,
    ChargeStatus,
    PaymentProvider,
    ProviderError,
    ProviderPending,
    RefundRequest,
    RefundResult,
    RefundStatus,
    WebhookReader,
)
from payment_svc.webhooks import WebhookEvent, parse_event

_log = logging.getLogger("payment_svc.stripe")

_MAX_SIGNATURE_HEADER = 2048
# Stripe's back-off between retries: 0.5 s doubling, at most 5 s (jitter halves it at best).
_FIRST_RETRY_DELAY_SECONDS = 0.5
_MAX_RETRY_DELAY_SECONDS = 5.0


def retries_within(budget_seconds: float, configured: int) -> int:
    """How many of Stripe's retries fit in ``budget_seconds``: their
    back-off, at its longest, must leave half the budget for the requests."""
    retries, slept = 0, 0.0
    while retries < configured:
        delay = min(_FIRST_RETRY_DELAY_SECONDS * 2**retries, _MAX_RETRY_DELAY_SECONDS)
        if slept + delay > budget_seconds / 2:
            break
        slept += delay
        retries += 1
    return retries


def _charge_result(intent: dict[str, Any], fallback_amount: int, fallback_currency: str) -> ChargeResult:
    status = str(intent.get("status") or "")
    amount = int(intent.get("amount_received") or intent.get("amount") or fallback_amount)
    currency = str(intent.get("currency") or fallback_currency).upper()
    intent_id = str(intent.get("id") or "")
    if status == "succeeded":
        return ChargeResult(intent_id, ChargeStatus.CAPTURED, amount, currency)
    if status == "canceled":
        return ChargeResult(intent_id, ChargeStatus.FAILED, amount, currency, "canceled")
    if status == "requires_payment_method":
        error = intent.get("last_payment_error") or {}
        code = str(error.get("decline_code") or error.get("code") or "payment_failed")
        declined = error.get("type") == "card_error"
        return ChargeResult(
            intent_id, ChargeStatus.DECLINED if declined else ChargeStatus.FAILED, amount, currency, code
        )
    # processing, requires_action, requires_confirmation, requires_capture:
    # the outcome comes later (a webhook, a later look-up).
    return ChargeResult(intent_id, ChargeStatus.PROCESSING, amount, currency)


class _DeadlineHTTPXClient(stripe.HTTPXClient):
    """The library's httpx client, each request's timeout no longer than
    the current call's remaining deadline (nor the configured timeout)."""

    def _get_request_args_kwargs(self, method: str, url: str, headers: Any, post_data: Any) -> Any:
        args, kwargs = super()._get_request_args_kwargs(method, url, headers, post_data)
        configured = kwargs.get("timeout")
        limit = deadline.remaining()
        kwargs["timeout"] = limit if not isinstance(configured, (int, float)) else max(min(configured, limit), 0.01)
        return [args, kwargs]


class StripeProvider:
    """The :class:`~payment_svc.ports.PaymentProvider` on Stripe's API."""

    def __init__(
        self, config: StripeConfig, *, call_timeout_seconds: float, http_client: stripe.HTTPClient | None = None
    ) -> None:
        self._config = config
        # The longest one call may take (the service's provider timeout).
        self._call_timeout = call_timeout_seconds
        self._http = http_client or _DeadlineHTTPXClient(timeout=config.request_timeout_seconds)
        self._client = stripe.StripeClient(
            config.secret_key_source.get(),
            base_addresses={"api": config.api_base},
            http_client=self._http,
            max_network_retries=config.max_network_retries,
        )
        self._key = config.secret_key_source.get()

    def _stripe(self) -> stripe.StripeClient:
        """The client, rebuilt when the secret key's file changed."""
        key = self._config.secret_key_source.get()
        if key != self._key:
            self._client = stripe.StripeClient(
                key,
                base_addresses={"api": self._config.api_base},
                http_client=self._http,
                max_network_retries=self._config.max_network_retries,
            )
            self._key = key
        return self._client

    def _options(self, idempotency_key: str | None = None) -> dict[str, Any]:
        budget = min(self._call_timeout, deadline.remaining())
        options: dict[str, Any] = {"max_network_retries": retries_within(budget, self._config.max_network_retries)}
        if idempotency_key is not None:
            options["idempotency_key"] = idempotency_key
        return options

    async def close(self) -> None:
        await self._http.close_async()  # type: ignore[no-untyped-call]

    # -- the provider API

    async def charge(self, request: ChargeRequest) -> ChargeResult:
        params: dict[str, Any] = {
            "amount": request.amount_minor,
            "currency": request.currency.lower(),
            "payment_method": request.payment_method,
            "payment_method_types": ["card"],
            "capture_method": "manual",
            "confirm": True,
            "metadata": {**request.metadata, "idempotency_key": request.idempotency_key},
        }
        try:
            intent = await self._stripe().v1.payment_intents.create_async(
                params,  # type: ignore[arg-type]
                self._options(request.idempotency_key),  # type: ignore[arg-type]
            )
        except stripe.CardError as err:
            # 402: the card was declined; the PaymentIntent is in the error.
            body: dict[str, Any] = err.json_body if isinstance(err.json_body, dict) else {}
            error: dict[str, Any] = body["error"] if isinstance(body.get("error"), dict) else {}
            intent_data: dict[str, Any] = (
                error["payment_intent"] if isinstance(error.get("payment_intent"), dict) else {}
            )
            code = str(error.get("decline_code") or err.code or "card_declined")
            intent_id = str(intent_data.get("id") or "")
            return ChargeResult(intent_id, ChargeStatus.DECLINED, request.amount_minor, request.currency, code)
        except stripe.StripeError as err:
            raise _provider_error(err, "charge") from None
        return await self._captured(intent.to_dict(), request.idempotency_key, request.amount_minor, request.currency)

    async def retrieve_charge(self, idempotency_key: str) -> ChargeResult | None:
        if "'" in idempotency_key or "\\" in idempotency_key:
            raise ProviderError("idempotency_key_invalid", "the key cannot be searched for")
        try:
            found = await self._stripe().v1.payment_intents.search_async(
                {"query": f"metadata['idempotency_key']:'{idempotency_key}'", "limit": 1},
                self._options(),  # type: ignore[arg-type]
            )
        except stripe.StripeError as err:
            raise _provider_error(err, "search") from None
        if not found.data:
            return None
        intent = found.data[0].to_dict()
        return await self._captured(
            intent, idempotency_key, int(intent.get("amount") or 0), str(intent.get("currency") or "")
        )

    async def refund(self, request: RefundRequest) -> RefundResult:
        params: dict[str, Any] = {
            "payment_intent": request.charge_id,
            "amount": request.amount_minor,
            "metadata": {"refund_key": request.idempotency_key},
        }
        try:
            created = await self._stripe().v1.refunds.create_async(
                params,  # type: ignore[arg-type]
                self._options(request.idempotency_key),  # type: ignore[arg-type]
            )
            refund = created.to_dict()
            if refund.get("status") in ("pending", "requires_action"):
                # The replayed answer stays "pending": ask for the refund itself.
                current = await self._stripe().v1.refunds.retrieve_async(
                    str(refund.get("id")),
                    None,
                    self._options(),  # type: ignore[arg-type]
                )
                refund = current.to_dict()
        except stripe.StripeError as err:
            raise _provider_error(err, "refund") from None
        refund_id, status, amount = str(refund.get("id") or ""), str(refund.get("status") or ""), refund.get("amount")
        if status == "succeeded":
            return RefundResult(refund_id, RefundStatus.SUCCEEDED, int(amount or request.amount_minor))
        if status in ("failed", "canceled"):
            reason = str(refund.get("failure_reason") or status)
            return RefundResult(refund_id, RefundStatus.FAILED, int(amount or request.amount_minor), reason)
        raise ProviderPending(f"the refund is {status or 'unknown'} at Stripe")

    async def _captured(self, intent: dict[str, Any], key: str, amount: int, currency: str) -> ChargeResult:
        """The charge's outcome, capturing an authorised PaymentIntent first."""
        if intent.get("status") == "requires_capture":
            try:
                captured = await self._stripe().v1.payment_intents.capture_async(
                    str(intent.get("id")),
                    {},
                    self._options(f"{key}-capture"),  # type: ignore[arg-type]
                )
            except stripe.StripeError as err:
                raise _provider_error(err, "capture") from None
            intent = captured.to_dict()
        return _charge_result(intent, amount, currency)


def _provider_error(err: stripe.StripeError, call: str) -> Exception:
    """A refusal (a bad request, a key reused with other parameters) is final
    (:class:`ProviderError`); anything else leaves the outcome unknown."""
    if isinstance(err, stripe.IdempotencyError):
        return ProviderError("idempotency_key_reused", str(err.user_message or "the key was used otherwise"))
    if isinstance(err, (stripe.InvalidRequestError, stripe.CardError)):
        return ProviderError(str(err.code or "invalid_request"), str(err.user_message or call))
    _log.warning(
        "stripe call without an answer",
        extra={"call": call, "http_status": err.http_status, "code": err.code or type(err).__name__},
    )
    return ProviderPending(f"stripe {call}: {type(err).__name__} {err.http_status or ''}".strip())


# -- webhooks


class StripeWebhooks:
    """Stripe's deliveries (the :class:`~payment_svc.ports.WebhookReader`)."""

    def __init__(self, secrets: Callable[[], Sequence[str]], clock: Clock, tolerance_seconds: int = 300) -> None:
        self._secrets = secrets
        self._clock = clock
        self._tolerance = tolerance_seconds

    def read(self, signature: str, body: bytes) -> WebhookEvent:
        self._verify(signature, body)
        return stripe_event(body)

    def _verify(self, header: str, body: bytes) -> None:
        if not header:
            raise Unauthenticated("the webhook carries no signature", reason="WEBHOOK_SIGNATURE_MISSING")
        if len(header) > _MAX_SIGNATURE_HEADER:
            raise Unauthenticated("the webhook signature header is too long", reason="WEBHOOK_SIGNATURE_MALFORMED")
        try:
            payload = body.decode("utf-8")
        except UnicodeDecodeError:
            raise InvalidArgument("the webhook body is not UTF-8", reason="WEBHOOK_MALFORMED") from None
        timestamp = _timestamp(header)
        genuine = False
        for secret in self._secrets():
            try:
                # Age is checked below against our clock, both ways.
                stripe.WebhookSignature.verify_header(payload, header, secret, tolerance=None)
                genuine = True
            except stripe.SignatureVerificationError as err:
                if "expected scheme" in str(err) or "Unable to extract" in str(err):
                    raise Unauthenticated(
                        "the webhook signature header lacks t= or v1=", reason="WEBHOOK_SIGNATURE_MALFORMED"
                    ) from None
        if not genuine:
            raise Unauthenticated("the webhook signature does not verify", reason="WEBHOOK_SIGNATURE_INVALID")
        if abs(self._clock.now() - timestamp) > self._tolerance:
            raise Unauthenticated(
                "the webhook timestamp is outside the tolerance",
                reason="WEBHOOK_STALE",
                metadata={"timestamp": str(timestamp), "tolerance_seconds": str(self._tolerance)},
            )


def _timestamp(header: str) -> int:
    found: int | None = None
    for part in header.split(","):
        name, _, value = part.strip().partition("=")
        if name == "t":
            if found is not None or not value.isdigit() or len(value) > 12:
                break
            found = int(value)
    else:
        if found is not None:
            return found
    raise Unauthenticated("the webhook timestamp is malformed", reason="WEBHOOK_SIGNATURE_MALFORMED")


def stripe_event(body: bytes) -> WebhookEvent:
    """A verified Stripe event in the service's event shape; events of other
    types keep their type and carry no payment (they change nothing)."""
    event = parse_event(body)
    raw = event.data.get("object")
    if not isinstance(raw, dict):
        raise InvalidArgument("the webhook has no data.object", reason="WEBHOOK_MALFORMED")
    kind, data = _translate(event.type, raw)
    return WebhookEvent(event_id=event.event_id, type=kind, created=event.created, data=data)


def _metadata(raw: dict[str, Any]) -> dict[str, Any]:
    metadata = raw.get("metadata")
    return dict(metadata) if isinstance(metadata, dict) else {}


def _translate(kind: str, raw: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    currency = str(raw.get("currency") or "").upper()
    if kind in ("payment_intent.succeeded", "payment_intent.payment_failed", "payment_intent.canceled"):
        result = _charge_result(raw, 0, currency)
        metadata = _metadata(raw)
        status = {ChargeStatus.CAPTURED: "captured", ChargeStatus.DECLINED: "declined"}.get(result.status, "failed")
        return ("charge.succeeded" if result.status == ChargeStatus.CAPTURED else "charge.failed"), {
            "id": result.charge_id,
            "idempotency_key": metadata.get("idempotency_key", ""),
            "status": status,
            "amount": result.amount_minor,
            "currency": currency,
            "failure_code": result.failure_code,
            "metadata": metadata,
            "provider_payment_id": result.charge_id,
        }
    if kind in ("payment_intent.amount_capturable_updated", "payment_intent.processing"):
        metadata = _metadata(raw)
        return "charge.pending", {
            "id": raw.get("id"),
            "idempotency_key": metadata.get("idempotency_key", ""),
            "metadata": metadata,
            "provider_payment_id": raw.get("id") or "",
        }
    if kind in ("refund.created", "refund.updated", "refund.failed", "charge.refund.updated"):
        status = str(raw.get("status") or "")
        refund = {
            "id": raw.get("id"),
            "idempotency_key": _metadata(raw).get("refund_key", ""),
            "amount": raw.get("amount"),
            "status": status,
        }
        data = {"currency": currency, "refund": refund, "provider_payment_id": raw.get("payment_intent") or ""}
        if status == "succeeded":
            return "charge.refunded", data
        if status in ("failed", "canceled"):
            return "refund.failed", data
        return f"stripe.{kind}.{status or 'unknown'}", data
    if kind == "charge.refunded":
        # The charge, with its newest refund first when Stripe lists them.
        refunds = raw.get("refunds")
        listed = refunds.get("data") if isinstance(refunds, dict) else None
        if isinstance(listed, list) and listed and isinstance(listed[0], dict):
            newest = listed[0]
            refund = {
                "id": newest.get("id"),
                "idempotency_key": _metadata(newest).get("refund_key", ""),
                "amount": newest.get("amount"),
                "status": newest.get("status"),
            }
            data = {"currency": currency, "refund": refund, "provider_payment_id": raw.get("payment_intent") or ""}
            return "charge.refunded", data
        # Without the refund itself the refund.* events tell it.
        return "stripe.charge.refunded", {"provider_payment_id": raw.get("payment_intent") or ""}
    if kind == "charge.dispute.created":
        return "charge.dispute.created", {
            "id": raw.get("id"),
            "amount": raw.get("amount"),
            "currency": currency,
            "reason": raw.get("reason"),
            "provider_payment_id": raw.get("payment_intent") or "",
        }
    return f"stripe.{kind}", {}


def _compliance(provider: StripeProvider, webhooks: StripeWebhooks) -> tuple[PaymentProvider, WebhookReader]:
    return provider, webhooks
