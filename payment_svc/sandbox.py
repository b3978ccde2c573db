"""A sandbox payment provider that behaves like a real one.

Charges and refunds are keyed by idempotency key: a repeat returns the first
result and never moves money twice; the same key with other parameters is
refused. Answers come after a configurable delay. The payment method says
what happens, as with a real provider's test cards:

- ``pm_card_ok``: captured;
- ``pm_card_declined``: declined (``card_declined``);
- ``pm_card_fail``: failed (``processing_error``);
- ``pm_card_timeout``: the call hangs (the caller times out), the charge is
  captured at the provider a little later and announced by webhook;
- anything else: failed (``payment_method_unknown``).

Every outcome is also announced by a signed webhook. Webhooks leave late
(a random delay), sometimes twice, sometimes never, and so out of order; a
delivery the service refuses is retried with backoff. In ``manual`` mode
nothing is delivered and tests take the events from :attr:`events`.
"""

from __future__ import annotations

import asyncio
import logging
import random
import secrets
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from boxoffice.clock import Clock
from payment_svc.config import SandboxConfig
from payment_svc.provider import (
    ChargeRequest,
    ChargeResult,
    ChargeStatus,
    PaymentProvider,
    ProviderError,
    RefundRequest,
    RefundResult,
    RefundStatus,
)
from payment_svc.webhooks import WebhookEvent, signature_header

_log = logging.getLogger("payment_svc.sandbox")

PM_OK = "pm_card_ok"
PM_DECLINED = "pm_card_declined"
PM_FAIL = "pm_card_fail"
PM_TIMEOUT = "pm_card_timeout"

_DELIVERY_ATTEMPTS = 6


class WebhookSink(Protocol):
    """Where the sandbox sends its webhooks (PaymentService's endpoint)."""

    async def deliver(self, signature: str, body: bytes) -> None:
        """Deliver one signed body; raise when the receiver refuses it."""


@dataclass
class _Charge:
    request: ChargeRequest
    result: ChargeResult
    refunded_minor: int = 0


@dataclass
class _Refund:
    request: RefundRequest
    result: RefundResult


class SandboxProvider:
    """The provider, in process. Its records live as long as the process."""

    def __init__(self, config: SandboxConfig, clock: Clock, *, rng: random.Random | None = None) -> None:
        self.config = config
        self._clock = clock
        self._rng = rng or random.Random()
        self._charges: dict[str, _Charge] = {}
        self._refunds: dict[str, _Refund] = {}
        self._outgoing: asyncio.Queue[WebhookEvent] = asyncio.Queue()
        self._timers: set[asyncio.TimerHandle] = set()
        # Every event emitted, in order (tests read it).
        self.events: list[WebhookEvent] = []
        # Money movements actually made: one per distinct key.
        self.captures = 0
        self.refunds_made = 0
        self.charge_calls = 0
        # Test control: called (and awaited) inside every charge call.
        self.on_charge: Callable[[ChargeRequest], Any] | None = None

    # -- the provider API

    async def charge(self, request: ChargeRequest) -> ChargeResult:
        self.charge_calls += 1
        if self.on_charge is not None:
            outcome = self.on_charge(request)
            if asyncio.iscoroutine(outcome):
                await outcome
        existing = self._charges.get(request.idempotency_key)
        if existing is not None:
            if existing.request != request:
                raise ProviderError("idempotency_key_reused", "the key was used with other parameters")
            await self._sleep(self.config.delay_seconds)
            return existing.result
        if request.amount_minor <= 0:
            raise ProviderError("amount_invalid", "amount must be positive")
        charge_id = "ch_" + secrets.token_hex(12)
        method = request.payment_method
        if method == PM_OK:
            status, failure = ChargeStatus.CAPTURED, ""
        elif method == PM_DECLINED:
            status, failure = ChargeStatus.DECLINED, "card_declined"
        elif method == PM_FAIL:
            status, failure = ChargeStatus.FAILED, "processing_error"
        elif method == PM_TIMEOUT:
            status, failure = ChargeStatus.PROCESSING, ""
        else:
            status, failure = ChargeStatus.FAILED, "payment_method_unknown"
        result = ChargeResult(charge_id, status, request.amount_minor, request.currency, failure)
        # Recorded before answering: a caller that gives up still has charged.
        self._charges[request.idempotency_key] = _Charge(request, result)
        if status == ChargeStatus.CAPTURED:
            self.captures += 1
        if status != ChargeStatus.PROCESSING:
            self._emit_charge(request.idempotency_key)
        else:
            self._later(self.config.timeout_settle_seconds, lambda: self._settle(request.idempotency_key))
            await self._sleep(self.config.hang_seconds)
            return self._charges[request.idempotency_key].result
        await self._sleep(self.config.delay_seconds)
        return result

    async def retrieve_charge(self, idempotency_key: str) -> ChargeResult | None:
        await self._sleep(self.config.delay_seconds)
        found = self._charges.get(idempotency_key)
        return None if found is None else found.result

    async def refund(self, request: RefundRequest) -> RefundResult:
        existing = self._refunds.get(request.idempotency_key)
        if existing is not None:
            if existing.request != request:
                raise ProviderError("idempotency_key_reused", "the key was used with other parameters")
            await self._sleep(self.config.delay_seconds)
            return existing.result
        charge = next((c for c in self._charges.values() if c.result.charge_id == request.charge_id), None)
        if charge is None or charge.result.status != ChargeStatus.CAPTURED:
            raise ProviderError("charge_not_refundable", "no captured charge with this id")
        refund_id = "re_" + secrets.token_hex(12)
        if request.amount_minor <= 0 or request.amount_minor > charge.result.amount_minor - charge.refunded_minor:
            result = RefundResult(refund_id, RefundStatus.FAILED, request.amount_minor, "amount_too_large")
        else:
            charge.refunded_minor += request.amount_minor
            self.refunds_made += 1
            result = RefundResult(refund_id, RefundStatus.SUCCEEDED, request.amount_minor)
        self._refunds[request.idempotency_key] = _Refund(request, result)
        self._emit(
            "charge.refunded" if result.status == RefundStatus.SUCCEEDED else "refund.failed",
            {
                **self._charge_data(charge),
                "refund": {
                    "id": refund_id,
                    "idempotency_key": request.idempotency_key,
                    "amount": request.amount_minor,
                    "status": result.status.value.lower(),
                },
            },
        )
        await self._sleep(self.config.delay_seconds)
        return result

    # -- what tests look at

    def charged_minor(self, idempotency_key: str) -> int:
        """Money taken with this key and not given back."""
        found = self._charges.get(idempotency_key)
        if found is None or found.result.status != ChargeStatus.CAPTURED:
            return 0
        return found.result.amount_minor - found.refunded_minor

    def sign(self, body: bytes, *, timestamp: int | None = None) -> str:
        when = int(self._clock.now()) if timestamp is None else timestamp
        return signature_header([self.config.signing_secret], when, body)

    async def next_event(self) -> WebhookEvent:
        """The next event to deliver (the delivery loop's feed)."""
        return await self._outgoing.get()

    def close(self) -> None:
        for timer in self._timers:
            timer.cancel()
        self._timers.clear()

    # -- internals

    def _settle(self, key: str) -> None:
        charge = self._charges[key]
        if charge.result.status != ChargeStatus.PROCESSING:
            return
        res = charge.result
        charge.result = ChargeResult(res.charge_id, ChargeStatus.CAPTURED, res.amount_minor, res.currency)
        self.captures += 1
        self._emit_charge(key)

    def _emit_charge(self, key: str) -> None:
        charge = self._charges[key]
        kind = "charge.succeeded" if charge.result.status == ChargeStatus.CAPTURED else "charge.failed"
        self._emit(kind, self._charge_data(charge))

    def _charge_data(self, charge: _Charge) -> dict[str, Any]:
        return {
            "object": "charge",
            "id": charge.result.charge_id,
            "idempotency_key": charge.request.idempotency_key,
            "amount": charge.result.amount_minor,
            "currency": charge.result.currency,
            "status": charge.result.status.value.lower(),
            "failure_code": charge.result.failure_code,
            "amount_refunded": charge.refunded_minor,
            "metadata": dict(charge.request.metadata),
        }

    def _emit(self, kind: str, data: dict[str, Any]) -> None:
        event = WebhookEvent("evt_" + secrets.token_hex(12), kind, int(self._clock.now()), data)
        self.events.append(event)
        if self.config.webhook_mode == "auto":
            self._outgoing.put_nowait(event)

    def _later(self, seconds: float, callback: Callable[[], None]) -> None:
        loop = asyncio.get_running_loop()
        handle: asyncio.TimerHandle

        def fire() -> None:
            self._timers.discard(handle)
            callback()

        handle = loop.call_later(seconds, fire)
        self._timers.add(handle)

    @staticmethod
    async def _sleep(seconds: float) -> None:
        if seconds > 0:
            await asyncio.sleep(seconds)


class WebhookDelivery:
    """Delivers the sandbox's webhooks as a real provider does: each late by
    a random delay (so they overtake each other), some twice, some never,
    each attempt freshly signed, refused ones retried with backoff."""

    def __init__(self, provider: SandboxProvider, sink: WebhookSink, *, rng: random.Random | None = None) -> None:
        self._provider = provider
        self._sink = sink
        self._rng = rng or random.Random()
        self.delivered = 0
        self.refused = 0

    async def run(self) -> None:
        config = self._provider.config
        try:
            async with asyncio.TaskGroup() as tasks:
                while True:
                    event = await self._provider.next_event()
                    if self._rng.random() < config.webhook_drop_probability:
                        _log.info("sandbox dropped a webhook", extra={"provider_event_id": event.event_id})
                        continue
                    copies = 2 if self._rng.random() < config.webhook_duplicate_probability else 1
                    for _ in range(copies):
                        tasks.create_task(self._deliver(event, self._rng.uniform(0, config.webhook_delay_seconds)))
        finally:
            self._provider.close()

    async def _deliver(self, event: WebhookEvent, delay_seconds: float) -> None:
        await asyncio.sleep(delay_seconds)
        body = event.to_body()
        backoff = 0.2
        for attempt in range(_DELIVERY_ATTEMPTS):
            try:
                await self._sink.deliver(self._provider.sign(body), body)
                self.delivered += 1
                return
            except Exception as err:  # the receiver refused or was unreachable: retry later
                self.refused += 1
                if attempt == _DELIVERY_ATTEMPTS - 1:
                    _log.warning(
                        "sandbox gave up delivering a webhook",
                        extra={"provider_event_id": event.event_id, "error": repr(err)},
                    )
                    return
            await asyncio.sleep(backoff * (1 + self._rng.random()))
            backoff = min(backoff * 2, 5.0)


def _compliance(provider: SandboxProvider) -> PaymentProvider:
    return provider
