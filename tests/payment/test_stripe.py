"""The Stripe provider through PaymentService, against a local server that
speaks Stripe's API (:mod:`tests.payment.stripe_fake`) over HTTP: charges
created, confirmed and captured with the payment's key, declines, refunds in
part and in full, the library's retries within our deadline, replays and
keys in use, and Stripe's signed webhooks (with a secret rotation), refunds
made at Stripe and disputes included."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import pytest

from boxoffice import deadline
from boxoffice.config import ConfigError, Env
from boxoffice.errors import from_rpc_error
from gen.boxoffice.payment.v1 import payment_service_pb2 as pb
from payment_svc.adapters.stripe_provider import StripeProvider, retries_within
from payment_svc.config import PaymentConfig, StripeConfig
from payment_svc.ports import ChargeRequest, ChargeStatus, ProviderError, ProviderPending
from tests.payment.harness import FakeBooking, PaymentStack, fake_booking, new_event_id, payment_stack
from tests.payment.stripe_fake import PM_DECLINED, PM_VISA, SECRET_KEY, StripeFake, stripe_fake
from tests.support import Stores

OLD_SECRET = "whsec_stripe_tests_old_0123456789"
NEW_SECRET = "whsec_stripe_tests_new_0123456789"


@dataclass
class World:
    fake: StripeFake
    stack: PaymentStack
    booking: FakeBooking

    async def start(self, customer: str = "alice", method: str = PM_VISA, amount: int = 5000) -> tuple[str, Any]:
        event_id = new_event_id()
        hold_id = self.booking.add_hold(event_id=event_id, customer_id=customer, amount_minor=amount, seats=[1, 2])
        token, _ = self.stack.tokens.issue(event_id=event_id, customer_id=customer, ttl_seconds=600)
        reply = await self.stack.stub.StartPayment(
            pb.StartPaymentRequest(access_token=token, hold_id=hold_id, payment_method=method)
        )
        return hold_id, reply.payment

    async def confirm(self, payment_id: str) -> Any:
        reply = await self.stack.stub.ConfirmPayment(
            pb.ConfirmPaymentRequest(payment_id=payment_id, idempotency_key=f"c-{payment_id}")
        )
        return reply.payment

    async def get(self, payment_id: str) -> Any:
        return (await self.stack.stub.GetPayment(pb.GetPaymentRequest(payment_id=payment_id))).payment

    async def deliver(self, event: dict[str, Any], secret: str = NEW_SECRET, *, timestamp: int | None = None) -> Any:
        signature, body = self.fake.signed(event, secret, timestamp=timestamp)
        return await self.stack.stub.HandleProviderWebhook(
            pb.HandleProviderWebhookRequest(signature=signature, body=body)
        )


@pytest.fixture
async def world(stores: Stores, tmp_path: Path) -> AsyncIterator[World]:
    key_file = tmp_path / "stripe-key"
    key_file.write_text(SECRET_KEY + "\n")
    made: list[FakeBooking] = []

    def booking(rt: Any) -> FakeBooking:
        made.append(fake_booking(rt))
        return made[0]

    async with stripe_fake() as fake:
        environ = {
            "BOXOFFICE_PAYMENT_PROVIDER": "stripe",
            "BOXOFFICE_STRIPE_SECRET_KEY_FILE": str(key_file),
            "BOXOFFICE_STRIPE_API_BASE": fake.url,
            "BOXOFFICE_WEBHOOK_SECRETS": f"{NEW_SECRET},{OLD_SECRET}",
            "BOXOFFICE_PROVIDER_TIMEOUT_SECONDS": "5",
        }
        async with payment_stack(stores, booking=booking, environ=environ) as stack:
            yield World(fake, stack, made[0])


async def test_a_charge_is_created_confirmed_and_captured_with_the_payments_key(world: World) -> None:
    hold_id, payment = await world.start()
    assert payment.state == pb.PAYMENT_STATE_CAPTURED
    (create,) = world.fake.of("POST", "/v1/payment_intents")[:1]
    assert create.idempotency_key == f"hold_{hold_id}_attempt_1" and create.status == 200
    (capture,) = world.fake.of("POST", f"/v1/payment_intents/{payment.provider_payment_id}/capture")
    assert capture.idempotency_key == f"hold_{hold_id}_attempt_1-capture"
    intent = world.fake.intents[payment.provider_payment_id]
    assert intent["status"] == "succeeded" and intent["amount_received"] == 5000 and intent["currency"] == "eur"
    assert intent["capture_method"] == "manual" and intent["metadata"]["payment_id"] == payment.payment_id
    assert (await world.confirm(payment.payment_id)).state == pb.PAYMENT_STATE_SUCCEEDED


async def test_a_declined_card_is_a_declined_payment(world: World) -> None:
    _, payment = await world.start(method=PM_DECLINED)
    assert payment.state == pb.PAYMENT_STATE_DECLINED and payment.failure_reason == "generic_decline"
    (create,) = world.fake.of("POST", "/v1/payment_intents")
    assert create.status == 402
    assert len(world.fake.intents) == 1 and not world.fake.of("POST", "/v1/refunds")


async def test_refunds_in_part_then_in_full(world: World) -> None:
    _, payment = await world.start(amount=9000)
    await world.confirm(payment.payment_id)
    first = await world.stack.stub.RefundPayment(
        pb.RefundPaymentRequest(
            payment_id=payment.payment_id,
            request_id="part",
            amount=pb.Money(currency_code="EUR", amount_minor=3000),
        )
    )
    assert first.payment.state == pb.PAYMENT_STATE_PARTIALLY_REFUNDED
    second = await world.stack.stub.RefundPayment(
        pb.RefundPaymentRequest(payment_id=payment.payment_id, request_id="rest")
    )
    assert second.payment.state == pb.PAYMENT_STATE_REFUNDED and second.payment.refunded.amount_minor == 9000
    refunds = [r for r in world.fake.refunds.values() if r["payment_intent"] == payment.provider_payment_id]
    assert sorted(r["amount"] for r in refunds) == [3000, 6000]
    assert all(r["metadata"]["refund_key"].startswith("refund_") for r in refunds)
    # Asking again changes nothing at Stripe.
    again = await world.stack.stub.RefundPayment(
        pb.RefundPaymentRequest(payment_id=payment.payment_id, request_id="rest")
    )
    assert again.payment.state == pb.PAYMENT_STATE_REFUNDED and len(world.fake.refunds) == 2


@pytest.mark.parametrize(("status", "should_retry"), [(500, None), (503, None), (429, True)])
async def test_the_librarys_retries_carry_a_charge_through_failures(
    world: World, status: int, should_retry: bool | None
) -> None:
    world.fake.fail_next(status, 2, should_retry=should_retry)
    _, payment = await world.start()
    assert payment.state == pb.PAYMENT_STATE_CAPTURED
    creates = world.fake.of("POST", "/v1/payment_intents")[:3]
    assert [r.status for r in creates] == [status, status, 200]
    assert len({r.idempotency_key for r in creates}) == 1 and len(world.fake.intents) == 1


async def test_a_429_without_leave_to_retry_is_not_retried_and_the_payment_waits(world: World) -> None:
    world.fake.fail_next(429, 1)
    _, payment = await world.start()
    assert payment.state == pb.PAYMENT_STATE_PENDING
    assert [r.status for r in world.fake.of("POST", "/v1/payment_intents")] == [429]
    # Asked again later, the same key charges once.
    assert (await world.confirm(payment.payment_id)).state == pb.PAYMENT_STATE_SUCCEEDED
    assert len(world.fake.intents) == 1


async def test_a_charge_whose_answer_was_lost_is_found_and_captured_once(world: World) -> None:
    world.fake.hold_answers = asyncio.Event()
    _, payment = await world.start()
    assert payment.state == pb.PAYMENT_STATE_PENDING  # our deadline passed; Stripe has the charge
    world.fake.hold_answers.set()
    world.fake.hold_answers = None
    confirmed = await world.confirm(payment.payment_id)
    assert confirmed.state == pb.PAYMENT_STATE_SUCCEEDED
    (intent,) = world.fake.intents.values()
    assert intent["status"] == "succeeded" and confirmed.provider_payment_id == intent["id"]
    assert world.fake.of("GET", "/v1/payment_intents/search")


async def test_replays_reused_keys_and_keys_in_use(world: World) -> None:
    provider = world.stack.parts.provider
    assert isinstance(provider, StripeProvider)
    request = ChargeRequest("key-replay-1", 700, "EUR", PM_VISA, {"payment_id": "p"})
    first = await provider.charge(request)
    again = await provider.charge(request)
    assert first.charge_id == again.charge_id and again.status == ChargeStatus.CAPTURED
    assert [r.replayed for r in world.fake.of("POST", "/v1/payment_intents")] == [False, True]
    with pytest.raises(ProviderError) as reused:
        await provider.charge(ChargeRequest("key-replay-1", 800, "EUR", PM_VISA, {"payment_id": "p"}))
    assert reused.value.code == "idempotency_key_reused"
    # A key in use: the second request meets a 409 while the first runs.
    world.fake.processing_gate = asyncio.Event()
    running = asyncio.create_task(provider.charge(ChargeRequest("key-busy", 700, "EUR", PM_VISA)))
    await world.fake.at_gate.wait()
    before = len(world.fake.requests)
    busy = asyncio.create_task(provider.charge(ChargeRequest("key-busy", 700, "EUR", PM_VISA)))
    await world.fake.conflicted.wait()
    world.fake.processing_gate.set()
    world.fake.processing_gate = None
    first_answer = await running
    second_answer = await busy  # retried by the library after the 409, then replayed
    assert first_answer.charge_id == second_answer.charge_id
    statuses = [(r.status, r.replayed) for r in world.fake.requests[before:] if r.path == "/v1/payment_intents"]
    assert (409, False) in statuses and (200, True) in statuses


async def test_retries_stop_within_the_calls_deadline(world: World) -> None:
    assert retries_within(0.5, 5) == 0
    assert retries_within(3.0, 5) == 2  # 0.5 + 1 s of back-off
    assert retries_within(60.0, 2) == 2
    provider = world.stack.parts.provider
    assert isinstance(provider, StripeProvider)
    world.fake.fail_next(500, 10)
    with pytest.raises(ProviderPending):
        await provider.charge(ChargeRequest("key-down", 700, "EUR", PM_VISA))
    # Within the 5 s call budget: 1 + retries_within(5, 2) = 3 tries.
    assert len(world.fake.of("POST", "/v1/payment_intents")) == 3


async def test_webhooks_verified_with_any_current_secret_settle_the_payment(world: World) -> None:
    world.fake.hold_answers = asyncio.Event()
    _, payment = await world.start()
    assert payment.state == pb.PAYMENT_STATE_PENDING
    world.fake.hold_answers.set()
    world.fake.hold_answers = None
    intent = next(iter(world.fake.intents.values()))
    # Stripe captured it (from its dashboard, say) and says so.
    world.fake.capture_in_dashboard(intent["id"])
    (succeeded,) = world.fake.events_of("payment_intent.succeeded")
    reply = await world.deliver(succeeded, OLD_SECRET)  # the secret being rotated out still verifies
    assert not reply.duplicate and reply.payment.state == pb.PAYMENT_STATE_SUCCEEDED
    assert (await world.deliver(succeeded, NEW_SECRET)).duplicate
    # Events about nothing of ours are accepted and change nothing.
    other = {
        "id": "evt_customer_1",
        "object": "event",
        "type": "customer.created",
        "created": int(time.time()),
        "data": {"object": {"id": "cus_1", "object": "customer", "metadata": {}}},
    }
    assert not (await world.deliver(other)).HasField("payment")


@pytest.mark.parametrize(
    ("secret", "age_seconds", "reason"),
    [
        ("whsec_someone_else_0123456789", 0, "WEBHOOK_SIGNATURE_INVALID"),
        (NEW_SECRET, 301, "WEBHOOK_STALE"),
        (NEW_SECRET, -301, "WEBHOOK_STALE"),
    ],
)
async def test_webhooks_refused(world: World, secret: str, age_seconds: int, reason: str) -> None:
    _, payment = await world.start()
    (event,) = world.fake.events_of("payment_intent.succeeded")
    with pytest.raises(grpc.RpcError) as caught:
        await world.deliver(event, secret, timestamp=int(time.time()) - age_seconds)
    assert caught.value.code() == grpc.StatusCode.UNAUTHENTICATED
    assert from_rpc_error(caught.value).reason == reason
    assert (await world.get(payment.payment_id)).state == pb.PAYMENT_STATE_CAPTURED


async def test_a_refund_made_at_stripe_and_a_dispute_cancel_their_bookings(world: World) -> None:
    hold_id, payment = await world.start()
    await world.confirm(payment.payment_id)
    refund = world.fake.refund_in_dashboard(payment.provider_payment_id, 2000)
    for kind in ("refund.created", "charge.refunded"):
        for event in world.fake.events_of(kind):
            await world.deliver(event)
    after = await world.get(payment.payment_id)
    assert after.state == pb.PAYMENT_STATE_PARTIALLY_REFUNDED and after.refunded.amount_minor == 2000
    assert world.booking.holds[hold_id].view.state.value == "CANCELLED"
    rows = await _refunds(world, payment.payment_id)
    assert rows == [("PROVIDER", "SUCCEEDED", 2000, refund["id"])]

    other_hold, other = await world.start(customer="bob")
    await world.confirm(other.payment_id)
    dispute = world.fake.dispute(other.provider_payment_id)
    (event,) = world.fake.events_of("charge.dispute.created")
    await world.deliver(event)
    disputed = await world.get(other.payment_id)
    assert disputed.state == pb.PAYMENT_STATE_REFUNDED
    assert await _refunds(world, other.payment_id) == [("PROVIDER", "SUCCEEDED", 5000, dispute["id"])]
    assert world.booking.holds[other_hold].view.state.value == "CANCELLED"


async def test_our_own_refund_announced_by_stripe_is_not_counted_twice(world: World) -> None:
    _, payment = await world.start()
    await world.confirm(payment.payment_id)
    await world.stack.stub.RefundPayment(pb.RefundPaymentRequest(payment_id=payment.payment_id, request_id="r"))
    for kind in ("refund.created", "charge.refunded"):
        for event in world.fake.events_of(kind):
            await world.deliver(event)
    assert [(r[0], r[1]) for r in await _refunds(world, payment.payment_id)] == [("BOOKING_CANCELLED", "SUCCEEDED")]


async def _refunds(world: World, payment_id: str) -> list[tuple[Any, ...]]:
    async with world.stack.pool.connection() as conn:
        cur = await conn.execute(
            "SELECT source, state, amount_minor, provider_refund_id FROM refunds WHERE payment_id = %s "
            "ORDER BY created_at",
            (payment_id,),
        )
        return list(await cur.fetchall())


def test_the_stripe_settings() -> None:
    with pytest.raises(ConfigError, match="BOXOFFICE_STRIPE_SECRET_KEY"):
        PaymentConfig.from_env(Env({"BOXOFFICE_PAYMENT_PROVIDER": "stripe"}))
    with pytest.raises(ConfigError, match="starts with sk_"):
        StripeConfig.from_env(Env({"BOXOFFICE_STRIPE_SECRET_KEY": "pk_test_publishable_key_0123"}))
    with pytest.raises(ConfigError, match="BOXOFFICE_PAYMENT_PROVIDER"):
        PaymentConfig.from_env(Env({"BOXOFFICE_PAYMENT_PROVIDER": "paypal"}))
    with pytest.raises(ConfigError, match=r"BOXOFFICE_STRIPE_API_BASE='api\.stripe\.com' is not an http"):
        StripeConfig.from_env(
            Env({"BOXOFFICE_STRIPE_SECRET_KEY": SECRET_KEY, "BOXOFFICE_STRIPE_API_BASE": "api.stripe.com"})
        )
    with pytest.raises(ConfigError, match="BOXOFFICE_STRIPE_SECRET_KEY_FILE='/nonexistent/key' cannot be read"):
        StripeConfig.from_env(Env({"BOXOFFICE_STRIPE_SECRET_KEY_FILE": "/nonexistent/key"}))
    with pytest.raises(ConfigError, match="BOXOFFICE_STRIPE_MAX_NETWORK_RETRIES"):
        StripeConfig.from_env(
            Env({"BOXOFFICE_STRIPE_SECRET_KEY": SECRET_KEY, "BOXOFFICE_STRIPE_MAX_NETWORK_RETRIES": "-1"})
        )
    config = StripeConfig.from_env(Env({"BOXOFFICE_STRIPE_SECRET_KEY": SECRET_KEY}))
    assert config.api_base == "https://api.stripe.com" and config.max_network_retries == 2


async def test_an_authorisation_announced_by_webhook_is_captured_at_once(world: World) -> None:
    world.fake.hold_answers = asyncio.Event()
    _, payment = await world.start()
    assert payment.state == pb.PAYMENT_STATE_PENDING
    world.fake.hold_answers.set()
    world.fake.hold_answers = None
    (authorised,) = world.fake.events_of("payment_intent.amount_capturable_updated")
    reply = await world.deliver(authorised)
    assert reply.payment.state == pb.PAYMENT_STATE_SUCCEEDED
    (intent,) = world.fake.intents.values()
    assert intent["status"] == "succeeded"
    assert len(world.fake.of("POST", f"/v1/payment_intents/{intent['id']}/capture")) == 1


@pytest.mark.parametrize(
    ("header", "reason"),
    [
        ("", "WEBHOOK_SIGNATURE_MISSING"),
        ("t=soon,v1=00", "WEBHOOK_SIGNATURE_MALFORMED"),
        ("v1=00", "WEBHOOK_SIGNATURE_MALFORMED"),
        (f"t={10**13},v0=00", "WEBHOOK_SIGNATURE_MALFORMED"),
        ("t=1," + "v1=00," * 400, "WEBHOOK_SIGNATURE_MALFORMED"),
    ],
)
async def test_malformed_signature_headers_are_refused(world: World, header: str, reason: str) -> None:
    _, payment = await world.start()
    (event,) = world.fake.events_of("payment_intent.succeeded")
    _, body = world.fake.signed(event, NEW_SECRET)
    with pytest.raises(grpc.RpcError) as caught:
        await world.stack.stub.HandleProviderWebhook(pb.HandleProviderWebhookRequest(signature=header, body=body))
    assert caught.value.code() == grpc.StatusCode.UNAUTHENTICATED
    assert from_rpc_error(caught.value).reason == reason
    assert (await world.get(payment.payment_id)).state == pb.PAYMENT_STATE_CAPTURED


async def test_a_genuine_event_with_other_money_than_the_payments_is_refused(world: World) -> None:
    world.fake.hold_answers = asyncio.Event()
    _, payment = await world.start()
    world.fake.hold_answers.set()
    world.fake.hold_answers = None
    (intent,) = world.fake.intents.values()
    world.fake.capture_in_dashboard(intent["id"])
    (succeeded,) = world.fake.events_of("payment_intent.succeeded")
    succeeded["data"]["object"]["amount_received"] = 1
    with pytest.raises(grpc.RpcError) as caught:
        await world.deliver(succeeded)
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert from_rpc_error(caught.value).reason == "WEBHOOK_AMOUNT_MISMATCH"
    assert (await world.get(payment.payment_id)).state == pb.PAYMENT_STATE_PENDING


async def test_a_request_waits_no_longer_than_the_calls_deadline(world: World) -> None:
    """The request's own timeout follows the deadline: Stripe not answering
    within it is an outcome not known yet, not a wait for the 10 s timeout."""
    provider = world.stack.parts.provider
    assert isinstance(provider, StripeProvider)
    world.fake.hold_answers = asyncio.Event()
    with deadline.scope(0.5), pytest.raises(ProviderPending):
        # The outer bound only catches a request that ignored the deadline.
        async with asyncio.timeout(5):
            await provider.charge(ChargeRequest("key-slow", 700, "EUR", PM_VISA))
    assert len(world.fake.of("POST", "/v1/payment_intents")) == 0  # no answer was sent
    assert len(world.fake.intents) == 1  # Stripe has it; the same key finds it later
