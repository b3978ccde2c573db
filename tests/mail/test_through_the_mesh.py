"""The fan's address and language travel from the edge to the mailer: a
fan signed in with an e-mail address who pays with their browser in
Vietnamese gets one message in Vietnamese at that address, from the real
mesh (edge, queue, booking, payment, relay, issuer) and a real relay; a fan
without an address gets none, and the booking says so."""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import httpx
import pytest
import redis.asyncio as aioredis

from boxoffice.runtime import Pool
from mail_svc.model import DeliveryState
from tests.e2e.harness import eventually
from tests.edge.harness import EdgeStack, edge_stack
from tests.edge.test_flow import sse_events
from tests.mail.harness import mailer_of, relay_environ
from tests.mail.relay import PASSWORD, RelayState, smtp_relay
from tests.payment.harness import open_pool, open_redis
from tests.support import Stores

_PREFIX = f"mail-mesh-{secrets.token_hex(3)}"


@pytest.fixture
async def stack(stores: Stores) -> AsyncIterator[EdgeStack]:
    async with edge_stack(stores, prefix=_PREFIX) as opened:
        yield opened


@pytest.fixture
async def pool(stores: Stores) -> AsyncIterator[Pool]:
    async with open_pool(stores) as opened:
        yield opened


@pytest.fixture
async def redis(stores: Stores) -> AsyncIterator[aioredis.Redis]:
    async with open_redis(stores) as opened:
        yield opened


@pytest.fixture
def relay(stores: Stores) -> Iterator[tuple[int, RelayState]]:
    identity = stores.pki.issue(f"smtp-{secrets.token_hex(3)}", "spiffe://test/smtp")
    with smtp_relay(identity) as started:
        yield started


async def _buy(stack: EdgeStack, fan: httpx.AsyncClient, event_id: int, name: str, email: str | None) -> str:
    body: dict[str, str] = {"name": name}
    if email is not None:
        body["email"] = email
    signed_in = await fan.post("/v1/session", json=body)
    assert signed_in.status_code == 200, signed_in.text
    joined = await fan.post(f"/v1/events/{event_id}/queue:join", json={})
    assert joined.status_code == 200, joined.text
    await sse_events(fan, f"/v1/events/{event_id}/queue/position:watch")
    await fan.get(f"/v1/events/{event_id}/queue/position")
    held = await fan.post(f"/v1/events/{event_id}/holds", json={"bestAvailable": {"sectionId": "A", "quantity": 2}})
    assert held.status_code == 200, held.text
    hold_id: str = held.json()["hold"]["holdId"]
    started = await fan.post(
        f"/v1/holds/{hold_id}/payment",
        json={"paymentMethod": "pm_card_ok"},
        headers={"Accept-Language": "vi-VN,vi;q=0.9,en;q=0.5"},
    )
    assert started.status_code == 200, started.text
    payment_id = started.json()["payment"]["paymentId"]
    confirm = await fan.post(f"/v1/payments/{payment_id}:confirm", headers={"Idempotency-Key": f"k-{name}"})
    assert confirm.status_code == 200, confirm.text

    async def tickets() -> list[dict[str, object]] | None:
        found: list[dict[str, object]] = (await fan.get(f"/v1/events/{event_id}/tickets")).json()["tickets"]
        return found if len(found) == 2 else None

    await eventually(tickets, "two tickets")
    return hold_id


async def test_the_fans_address_and_language_reach_the_mailer(
    stores: Stores,
    stack: EdgeStack,
    pool: Pool,
    redis: aioredis.Redis,
    relay: tuple[int, RelayState],
    tmp_path: Path,
) -> None:
    port, state = relay
    event_id = await stack.event(seats=8, max_active=5)
    async with stack.client() as fan, stack.client() as anonymous:
        hold_id = await _buy(stack, fan, event_id, "fan-mail", "fan.mail@example.test")
        codes = [t["code"] for t in (await fan.get(f"/v1/events/{event_id}/tickets")).json()["tickets"]]
        quiet_hold = await _buy(stack, anonymous, event_id, "fan-quiet", None)
    streams = [key async for key in redis.scan_iter(match=f"ticket-issued-{_PREFIX}-*")]
    assert len(streams) == 1
    password = tmp_path / "password"
    password.write_text(PASSWORD)
    environ = relay_environ(stores, port, streams[0].decode(), str(password))
    async with mailer_of(stores, environ) as role:
        while await role.consumer.read_once(block_ms=100):
            pass
        not_delivered = await role.store.not_delivered(event_id)
    messages = state.messages()
    assert len(messages) == 1
    (message,) = messages
    assert message["To"] == "fan.mail@example.test"
    assert message["Content-Language"] == "vi"
    body = message.get_body(preferencelist=("plain",))
    assert body is not None
    assert "Vé của bạn đã sẵn sàng." in body.get_content()
    for code in codes:
        assert code in body.get_content()
    assert hold_id in body.get_content()
    assert [(d.hold_id, d.state) for d in not_delivered] == [(quiet_hold, DeliveryState.NO_ADDRESS)]


async def test_a_sign_in_with_a_malformed_address_is_refused(stack: EdgeStack) -> None:
    async with stack.client() as fan:
        reply = await fan.post("/v1/session", json={"name": "fan-x", "email": "not an address"})
        assert reply.status_code == 400
        assert reply.json()["error"]["details"][0]["metadata"] == {"field": "email"}
        assert not fan.cookies.get("bo_session")
