"""Requests made to hurt, answered 4xx and counted: JSON bodies nested
thousands deep (development sign-in, a route's body, a webhook) are 400s,
never 500s; a webhook is forwarded to PaymentService only when it is signed,
readable and within its sender's limit; every error answer spends its
address's limit (a flood of unreadable requests ends in 429s); and the fan
draw's registration asks the join's challenge."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator

import pytest

from edge_svc.challenge import solve
from edge_svc.config import ChallengeConfig
from tests.edge.fans import expect
from tests.edge.harness import EdgeStack, edge_stack, loopback_address, sign_in
from tests.edge.test_matrix import _with_a_fan_draw
from tests.support import Stores

_DEEP = b"[" * 2500 + b"]" * 2500


@pytest.fixture(scope="module")
async def stack(stores: Stores) -> AsyncIterator[EdgeStack]:
    async with edge_stack(stores, prefix="edge-hostile") as stack:
        yield stack


@pytest.mark.parametrize("levels", [20, 2000])
async def test_a_deeply_nested_sign_in_body_is_a_400(stack: EdgeStack, levels: int) -> None:
    body = b'{"name": "deep", "x": ' + b"[" * levels + b"]" * levels + b"}"
    async with stack.client() as client:
        reply = await client.post("/v1/session", content=body, headers={"content-type": "application/json"})
        expect(reply, 400, "INVALID_ARGUMENT", "MALFORMED_JSON")
        assert not client.cookies


@pytest.mark.parametrize("levels", [20, 2500])
async def test_a_deeply_nested_route_body_is_a_400(stack: EdgeStack, levels: int) -> None:
    event_id = await stack.event()
    async with stack.client() as fan:
        await sign_in(fan, "deep-body")
        body = b'{"lane": ' + b"[" * levels + b"]" * levels + b"}"
        reply = await fan.post(
            f"/v1/events/{event_id}/queue:join", content=body, headers={"content-type": "application/json"}
        )
        expect(reply, 400, "INVALID_ARGUMENT", "MALFORMED_JSON")
        position = await fan.get(f"/v1/events/{event_id}/queue/position")
        assert position.json()["position"]["state"] == "QUEUE_STATE_NOT_IN_QUEUE"


async def test_a_webhook_that_cannot_be_one_is_refused_at_the_edge(stack: EdgeStack) -> None:
    """Refused before PaymentService is asked: a forwarded webhook with a
    bad signature would be WEBHOOK_SIGNATURE_INVALID (PaymentService checks
    the signature first), so MALFORMED here is the edge's own answer."""
    header = stack.edge.config.webhook_signature_header
    forged = {header: f"t={int(time.time())},v1={'0' * 64}", "content-type": "application/json"}
    async with stack.client() as provider:
        path = "/v1/webhooks/payment-provider"
        for body in (_DEEP, b'{"id": ' + _DEEP + b"}", b"[1, 2]", b'"text"', b"\xff\xfe", b'{"id": "evt_1"'):
            expect(
                await provider.post(path, content=body, headers=forged), 400, "INVALID_ARGUMENT", "WEBHOOK_MALFORMED"
            )
        # Unsigned: refused before its 60 KB body is read.
        unsigned = await provider.post(path, content=b'{"id": "' + b"x" * 60_000 + b'"}')
        expect(unsigned, 401, "UNAUTHENTICATED", "WEBHOOK_SIGNATURE_MISSING")
        # The control: a readable, signed-looking body is forwarded, and
        # PaymentService refuses its signature.
        readable = b'{"id": "evt_1", "type": "charge.succeeded", "created": 1, "data": {}}'
        forwarded = await provider.post(path, content=readable, headers=forged)
        expect(forwarded, 401, "UNAUTHENTICATED", "WEBHOOK_SIGNATURE_INVALID")


# -- limits -----------------------------------------------------------------------

_STRICT: dict[str, object] = {
    "trusted_proxies": (),
    "ip_rate_per_second": 0.01,
    "ip_burst": 3,
    "webhook_rate_per_second": 0.01,
    "webhook_burst": 3,
    "rate_limit_timeout_seconds": 10.0,
}


@pytest.fixture(scope="module")
async def strict(stores: Stores) -> AsyncIterator[EdgeStack]:
    async with edge_stack(stores, settings=_STRICT, prefix="edge-hostile-limits") as stack:
        yield stack


@pytest.mark.parametrize(
    ("method", "path", "status"),
    [
        ("GET", "/v1/nothing-here", 404),
        ("GET", "/v1/events/0", 400),
        ("DELETE", "/v1/events/1/queue/progress", 405),
        ("GET", "/v1/events/1/queue/proof?pageSize=abc", 400),
    ],
)
async def test_every_error_answer_spends_the_address_limit(
    strict: EdgeStack, method: str, path: str, status: int
) -> None:
    async with strict.client_from(loopback_address()) as client:
        statuses = [(await client.request(method, path)).status_code for _ in range(5)]
    assert statuses == [status] * 3 + [429] * 2, statuses


async def test_webhooks_are_limited_per_sending_address(strict: EdgeStack) -> None:
    header = strict.edge.config.webhook_signature_header
    signed = {header: f"t={int(time.time())},v1={'0' * 64}"}
    body = b'{"id": "evt_limit", "type": "charge.succeeded", "created": 1, "data": {}}'
    async with strict.client_from(loopback_address()) as provider:
        for _ in range(3):
            reply = await provider.post("/v1/webhooks/payment-provider", content=body, headers=signed)
            expect(reply, 401, "UNAUTHENTICATED", "WEBHOOK_SIGNATURE_INVALID")
        refused = await provider.post("/v1/webhooks/payment-provider", content=body, headers=signed)
        assert expect(refused, 429, "RESOURCE_EXHAUSTED", "TOO_MANY_REQUESTS").metadata["scope"] == "webhook"
    # Another sender is not limited by this one.
    async with strict.client_from(loopback_address()) as other:
        reply = await other.post("/v1/webhooks/payment-provider", content=body, headers=signed)
        expect(reply, 401, "UNAUTHENTICATED", "WEBHOOK_SIGNATURE_INVALID")


# -- the fan draw's challenge ---------------------------------------------------------


async def test_the_fan_draw_registration_asks_the_joins_challenge(stores: Stores) -> None:
    settings = {"challenge": ChallengeConfig("proof-of-work", pow_bits=8)}
    async with edge_stack(stores, prefix="edge-draw-pow", settings=settings) as stack:
        event_id = await stack.event()
        await _with_a_fan_draw(stack, event_id)
        register = f"/v1/events/{event_id}/fan-draw:register"
        async with stack.client() as fan, stack.client() as bot:
            await sign_in(fan, "draw-fan")
            await sign_in(bot, "draw-bot")
            expect(await bot.post(register, json={}), 403, "PERMISSION_DENIED", "PROOF_REQUIRED")
            issued = (await fan.get(f"/v1/events/{event_id}/queue/challenge")).json()
            proof = solve(issued["challenge"], issued["difficultyBits"])
            stolen = await bot.post(register, json={}, headers={"Boxoffice-Proof": proof})
            expect(stolen, 403, "PERMISSION_DENIED", "PROOF_INVALID")
            registered = await fan.post(register, json={}, headers={"Boxoffice-Proof": proof})
            assert registered.status_code == 200, registered.text
            # A proof is spent once.
            again = await fan.post(register, json={}, headers={"Boxoffice-Proof": proof})
            expect(again, 403, "PERMISSION_DENIED", "PROOF_REUSED")
            # The fan is registered (a pseudonym in the draw); the bot is not.
            mine = (await fan.get(f"/v1/events/{event_id}/fan-draw")).json()
            theirs = (await bot.get(f"/v1/events/{event_id}/fan-draw")).json()
            assert mine["pseudonym"] and not theirs["pseudonym"], (mine, theirs)
