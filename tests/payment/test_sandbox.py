"""The sandbox provider behaves like a real one: idempotent charges and
refunds, test cards, a charge that hangs and settles later, and webhooks
late, twice, never, out of order, and retried when refused."""

from __future__ import annotations

import asyncio
import random
import uuid
from dataclasses import dataclass, field

import pytest

from boxoffice.clock import SystemClock
from boxoffice.config import Env
from boxoffice.runtime import Pool
from payment_svc.adapters.sandbox import PM_DECLINED, PM_FAIL, PM_OK, PM_TIMEOUT, SandboxProvider
from payment_svc.config import PaymentConfig
from payment_svc.jobs.sandbox_webhooks import WebhookDelivery
from payment_svc.ports import ChargeRequest, ChargeStatus, ProviderError, RefundRequest, RefundStatus
from payment_svc.webhooks import WebhookVerifier, parse_event
from tests.payment.harness import PAYMENT_ENV, WEBHOOK_SECRET


def _provider(pool: Pool, **environ: str) -> SandboxProvider:
    config = PaymentConfig.from_env(Env({**PAYMENT_ENV, **environ}))
    return SandboxProvider(config.sandbox, SystemClock(), pool, rng=random.Random(11))


def _charge(method: str = PM_OK, amount: int = 700, key: str | None = None) -> ChargeRequest:
    payment_id = str(uuid.uuid4())
    return ChargeRequest(key or f"k-{payment_id}", amount, "EUR", method, {"payment_id": payment_id})


@dataclass
class RecordingSink:
    """A webhook receiver that checks signatures and refuses the first
    ``refuse`` deliveries."""

    refuse: int = 0
    bodies: list[bytes] = field(default_factory=list)
    verifier: WebhookVerifier = field(default_factory=lambda: WebhookVerifier([WEBHOOK_SECRET], SystemClock()))

    async def deliver(self, signature: str, body: bytes) -> None:
        self.verifier.verify(signature, body)
        if self.refuse > 0:
            self.refuse -= 1
            raise ConnectionError("refused")
        self.bodies.append(body)

    def payments(self, payment_ids: set[str]) -> list[str]:
        return [p for p in (parse_event(b).payment_id for b in self.bodies) if p in payment_ids]


async def test_a_repeated_charge_returns_the_first_result_and_charges_once(pool: Pool) -> None:
    provider = _provider(pool)
    request = _charge()
    first, again = await asyncio.gather(provider.charge(request), provider.charge(request))
    assert first == again and first.status == ChargeStatus.CAPTURED
    assert await provider.charged_minor(request.idempotency_key) == 700
    with pytest.raises(ProviderError) as caught:
        await provider.charge(ChargeRequest(request.idempotency_key, 701, "EUR", PM_OK, request.metadata))
    assert caught.value.code == "idempotency_key_reused"
    events = await provider.events(request.metadata["payment_id"])
    assert [e.type for e in events] == ["charge.succeeded"]


@pytest.mark.parametrize(
    ("method", "status", "code"),
    [
        (PM_DECLINED, ChargeStatus.DECLINED, "card_declined"),
        (PM_FAIL, ChargeStatus.FAILED, "processing_error"),
        ("pm_card_unheard_of", ChargeStatus.FAILED, "payment_method_unknown"),
    ],
)
async def test_test_cards(pool: Pool, method: str, status: ChargeStatus, code: str) -> None:
    provider = _provider(pool)
    request = _charge(method)
    result = await provider.charge(request)
    assert (result.status, result.failure_code) == (status, code)
    assert await provider.charged_minor(request.idempotency_key) == 0
    assert [e.type for e in await provider.events(request.metadata["payment_id"])] == ["charge.failed"]


async def test_a_timed_out_charge_settles_later(pool: Pool) -> None:
    provider = _provider(pool)
    request = _charge(PM_TIMEOUT)
    with pytest.raises(TimeoutError):
        async with asyncio.timeout(0.1):
            await provider.charge(request)
    processing = await provider.retrieve_charge(request.idempotency_key)
    assert processing is not None and processing.status == ChargeStatus.PROCESSING
    await asyncio.sleep(0.25)  # the settle time in the test configuration is 0.2 s
    settled = await provider.retrieve_charge(request.idempotency_key)
    assert settled is not None and settled.status == ChargeStatus.CAPTURED
    assert settled.charge_id == processing.charge_id
    assert (await provider.charge(request)).status == ChargeStatus.CAPTURED  # a retry: the same charge
    assert [e.type for e in await provider.events(request.metadata["payment_id"])] == ["charge.succeeded"]
    assert await provider.retrieve_charge("never-sent") is None


async def test_refunds_are_idempotent_and_bounded(pool: Pool) -> None:
    provider = _provider(pool)
    request = _charge(amount=1000)
    charge = await provider.charge(request)
    part = RefundRequest("r-" + charge.charge_id, charge.charge_id, 600, "EUR")
    first, again = await asyncio.gather(provider.refund(part), provider.refund(part))
    assert first == again and first.status == RefundStatus.SUCCEEDED
    too_much = await provider.refund(RefundRequest("r2-" + charge.charge_id, charge.charge_id, 401, "EUR"))
    assert too_much.status == RefundStatus.FAILED
    assert await provider.charged_minor(request.idempotency_key) == 400
    assert await provider.refunds_of(request.idempotency_key) == 1
    with pytest.raises(ProviderError):
        await provider.refund(RefundRequest("r3", "ch_unknown", 1, "EUR"))


async def test_webhooks_late_twice_out_of_order_and_retried(pool: Pool) -> None:
    provider = _provider(
        pool,
        BOXOFFICE_SANDBOX_WEBHOOK_MODE="auto",
        BOXOFFICE_SANDBOX_WEBHOOK_DELAY_SECONDS="0.5",
        BOXOFFICE_SANDBOX_WEBHOOK_DUPLICATE_PROBABILITY="0.5",
    )
    sink = RecordingSink(refuse=3)
    delivery = WebhookDelivery(provider, sink, pool, rng=random.Random(5))
    requests = [_charge() for _ in range(12)]
    for request in requests:
        await provider.charge(request)
    ours = {r.metadata["payment_id"] for r in requests}
    for _ in range(400):
        await delivery.deliver_due()
        if set(sink.payments(ours)) == ours and len(sink.payments(ours)) > len(ours):
            await asyncio.sleep(0.6)  # any second copy still due arrives too
            await delivery.deliver_due()
            break
        await asyncio.sleep(0.02)
    arrived = sink.payments(ours)
    assert set(arrived) == ours  # every one, despite the refusals (retried)
    assert len(arrived) > len(ours)  # some twice
    emitted = [r.metadata["payment_id"] for r in requests]
    first_arrivals = list(dict.fromkeys(arrived))
    assert first_arrivals != emitted  # late by random delays: out of order
    assert delivery.refused >= 3


async def test_dropped_webhooks_never_arrive(pool: Pool) -> None:
    provider = _provider(
        pool,
        BOXOFFICE_SANDBOX_WEBHOOK_MODE="auto",
        BOXOFFICE_SANDBOX_WEBHOOK_DELAY_SECONDS="0",
        BOXOFFICE_SANDBOX_WEBHOOK_DROP_PROBABILITY="1",
    )
    sink = RecordingSink()
    request = _charge()
    await provider.charge(request)
    await WebhookDelivery(provider, sink, pool).deliver_due()
    assert sink.payments({request.metadata["payment_id"]}) == []
    assert len(await provider.events(request.metadata["payment_id"])) == 1  # emitted, lost on the way
