"""Provider webhooks: signatures, tolerance, rotation, deduplication, and
deliveries late, twice, twenty times or out of order."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import grpc
import pytest

from boxoffice.errors import Unauthenticated, from_rpc_error
from gen.boxoffice.payment.v1 import payment_service_pb2 as pb
from payment_svc.adapters.sandbox import PM_OK, PM_TIMEOUT
from payment_svc.model import PaymentState
from payment_svc.webhooks import WebhookEvent, WebhookVerifier, sign, signature_header
from tests.payment.harness import WEBHOOK_SECRET, FakeBooking, PaymentStack, new_event_id, snapshot
from tests.support import ManualClock

BODY = b'{"id":"evt_1","type":"charge.succeeded","created":1,"data":{}}'


def test_verifier_accepts_a_fresh_genuine_signature_with_any_configured_secret() -> None:
    clock = ManualClock()
    now = int(clock.now())
    verifier = WebhookVerifier(["whsec_new_secret_0123456789", "whsec_old_secret_0123456789"], clock)
    verifier.verify(signature_header(["whsec_old_secret_0123456789"], now, BODY), BODY)
    verifier.verify(signature_header(["whsec_new_secret_0123456789"], now, BODY), BODY)
    # The provider signing with both during its own rotation.
    verifier.verify(signature_header(["whsec_unknown_0123456789", "whsec_new_secret_0123456789"], now, BODY), BODY)
    verifier.verify(signature_header(["whsec_new_secret_0123456789"], now - 299, BODY), BODY)


@pytest.mark.parametrize(
    ("header", "body", "reason"),
    [
        ("", BODY, "WEBHOOK_SIGNATURE_MISSING"),
        ("garbage", BODY, "WEBHOOK_SIGNATURE_MALFORMED"),
        ("t=abc,v1=00", BODY, "WEBHOOK_SIGNATURE_MALFORMED"),
        ("t={now}", BODY, "WEBHOOK_SIGNATURE_MALFORMED"),
        ("t={now},v1={good}", BODY + b" ", "WEBHOOK_SIGNATURE_INVALID"),
        ("t={now},v1={other}", BODY, "WEBHOOK_SIGNATURE_INVALID"),
        ("t={stale},v1={good_stale}", BODY, "WEBHOOK_STALE"),
        ("t={future},v1={good_future}", BODY, "WEBHOOK_STALE"),
        ("t={later},v1={good}", BODY, "WEBHOOK_SIGNATURE_INVALID"),
    ],
)
def test_verifier_refuses(header: str, body: bytes, reason: str) -> None:
    clock = ManualClock()
    now = int(clock.now())
    values = {
        "now": now,
        "later": now + 1,
        "stale": now - 301,
        "future": now + 301,
        "good": sign(WEBHOOK_SECRET, now, BODY),
        "other": sign("whsec_someone_else_0123456789", now, BODY),
        "good_stale": sign(WEBHOOK_SECRET, now - 301, BODY),
        "good_future": sign(WEBHOOK_SECRET, now + 301, BODY),
    }
    verifier = WebhookVerifier([WEBHOOK_SECRET], clock)
    with pytest.raises(Unauthenticated) as caught:
        verifier.verify(header.format(**values), body)
    assert caught.value.reason == reason


async def _events(stack: PaymentStack, kind: str, payment_id: str) -> list[WebhookEvent]:
    return [e for e in await stack.provider.events(payment_id) if e.type == kind]


async def _deliver(stack: PaymentStack, event: WebhookEvent, *, signature: str | None = None) -> Any:
    body = event.to_body()
    return await stack.stub.HandleProviderWebhook(
        pb.HandleProviderWebhookRequest(signature=signature or stack.provider.sign(body), body=body)
    )


async def _captured(stack: PaymentStack, booking: FakeBooking, method: str = PM_OK) -> tuple[str, pb.Payment]:
    event_id = new_event_id()
    hold_id = booking.add_hold(event_id=event_id, customer_id="bob")
    token = stack.tokens.issue(event_id=event_id, customer_id="bob", ttl_seconds=600)[0]
    reply = await stack.stub.StartPayment(
        pb.StartPaymentRequest(access_token=token, hold_id=hold_id, payment_method=method)
    )
    return hold_id, reply.payment


async def test_a_webhook_delivered_twenty_times_sells_once(stack: PaymentStack, booking: FakeBooking) -> None:
    hold_id, payment = await _captured(stack, booking)
    (event,) = await _events(stack, "charge.succeeded", payment.payment_id)
    results = await asyncio.gather(*(_deliver(stack, event) for _ in range(20)), return_exceptions=True)
    answers = [r for r in results if not isinstance(r, BaseException)]
    refused = [from_rpc_error(r) for r in results if isinstance(r, grpc.aio.AioRpcError)]
    assert {(e.code, e.reason) for e in refused} <= {(grpc.StatusCode.ABORTED, "WEBHOOK_IN_FLIGHT")}
    assert sum(not a.duplicate for a in answers) == 1
    # The provider retries what was refused; every retry is a duplicate now.
    for _ in refused:
        again = await _deliver(stack, event)
        assert again.duplicate and again.payment.state == pb.PAYMENT_STATE_SUCCEEDED
    assert booking.confirm_calls == 1
    rows = await snapshot(stack.pool, [hold_id])
    assert len(rows["outbox"]) == 1 and len(rows["payments"]) == 1 and len(rows["webhooks"]) == 1


async def test_rejected_webhooks_change_nothing(stack: PaymentStack, booking: FakeBooking) -> None:
    hold_id, payment = await _captured(stack, booking)
    (event,) = await _events(stack, "charge.succeeded", payment.payment_id)
    body = event.to_body()
    now = int(stack.provider.sign(b"").split(",")[0][2:])
    before = await snapshot(stack.pool, [hold_id])
    tampered = body.replace(b'"amount":5000', b'"amount":1')
    attempts = {
        "unsigned": ("", body),
        "tampered": (stack.provider.sign(body), tampered),
        "stale": (signature_header([WEBHOOK_SECRET], now - 301, body), body),
        "wrong secret": (signature_header(["whsec_attacker_0123456789"], now, body), body),
    }
    for name, (signature, sent) in attempts.items():
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await stack.stub.HandleProviderWebhook(pb.HandleProviderWebhookRequest(signature=signature, body=sent))
        assert caught.value.code() == grpc.StatusCode.UNAUTHENTICATED, name
    assert await snapshot(stack.pool, [hold_id]) == before
    failures = sum(
        stack.registry.get_sample_value("boxoffice_webhook_verification_failures_total", {"reason": r}) or 0
        for r in ("WEBHOOK_SIGNATURE_MISSING", "WEBHOOK_SIGNATURE_INVALID", "WEBHOOK_STALE")
    )
    assert failures == 4
    # A genuine delivery applies; the very same delivery replayed changes nothing.
    signature = stack.provider.sign(body)
    first = await stack.stub.HandleProviderWebhook(pb.HandleProviderWebhookRequest(signature=signature, body=body))
    assert not first.duplicate and first.payment.state == pb.PAYMENT_STATE_SUCCEEDED
    applied = await snapshot(stack.pool, [hold_id])
    replay = await stack.stub.HandleProviderWebhook(pb.HandleProviderWebhookRequest(signature=signature, body=body))
    assert replay.duplicate
    assert await snapshot(stack.pool, [hold_id]) == applied


async def test_oversized_and_malformed_bodies_are_invalid(stack: PaymentStack) -> None:
    big = b"{" + b" " * (64 * 1024) + b"}"
    err = await _error(stack, big)
    assert err.code == grpc.StatusCode.INVALID_ARGUMENT
    err = await _error(stack, b"not json")
    assert err.code == grpc.StatusCode.INVALID_ARGUMENT and err.reason == "WEBHOOK_MALFORMED"


async def _error(stack: PaymentStack, body: bytes) -> Any:
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await stack.stub.HandleProviderWebhook(
            pb.HandleProviderWebhookRequest(signature=stack.provider.sign(body), body=body)
        )
    return from_rpc_error(caught.value)


async def test_out_of_order_webhooks_never_move_a_payment_back(stack: PaymentStack, booking: FakeBooking) -> None:
    _, payment = await _captured(stack, booking)
    await stack.stub.ConfirmPayment(
        pb.ConfirmPaymentRequest(payment_id=payment.payment_id, idempotency_key=f"c-{payment.payment_id}")
    )
    await stack.stub.RefundPayment(
        pb.RefundPaymentRequest(payment_id=payment.payment_id, request_id=f"all-{payment.payment_id}")
    )
    (succeeded,) = await _events(stack, "charge.succeeded", payment.payment_id)
    (refunded,) = await _events(stack, "charge.refunded", payment.payment_id)
    # The refund's event first, then the (older) capture: still refunded.
    assert (await _deliver(stack, refunded)).payment.state == pb.PAYMENT_STATE_REFUNDED
    late = await _deliver(stack, succeeded)
    assert late.payment.state == pb.PAYMENT_STATE_REFUNDED and not late.duplicate
    assert booking.confirm_calls == 1


async def test_a_capture_after_the_payment_was_given_up_is_refunded(stack: PaymentStack, booking: FakeBooking) -> None:
    _, payment = await _captured(stack, booking, PM_TIMEOUT)
    assert payment.state == pb.PAYMENT_STATE_PENDING
    # Given up on (as the reconciler does when the provider knows no charge) ...
    assert await stack.store.transition(payment.payment_id, [PaymentState.PENDING], PaymentState.FAILED) is not None
    # ... and then the provider settles it and says so.
    for _ in range(100):
        await stack.provider.settle_due()
        if await _events(stack, "charge.succeeded", payment.payment_id):
            break
        await asyncio.sleep(0.02)
    (event,) = await _events(stack, "charge.succeeded", payment.payment_id)
    reply = await _deliver(stack, event)
    assert reply.payment.state == pb.PAYMENT_STATE_REFUNDED
    assert reply.payment.failure_reason == "LATE_CAPTURE"
    assert await stack.provider.charged_minor(json.loads(event.to_body())["data"]["idempotency_key"]) == 0
    assert booking.confirm_calls == 0
