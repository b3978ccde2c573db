"""A fan who cancels their own booking through the edge (the quote, then the
cancel) gets the mailer's "tickets void" message for it, at their address
and in their language, after the tickets' own message: from the real mesh
(edge, queue, booking, payment, relay, issuer) and a real relay, once."""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
import redis.asyncio as aioredis

from tests.edge.harness import EdgeStack, edge_stack
from tests.mail.harness import mailer_of, relay_environ
from tests.mail.relay import PASSWORD, RelayState, smtp_relay
from tests.mail.test_through_the_mesh import _buy
from tests.payment.harness import open_redis
from tests.support import Stores

_PREFIX = f"mail-cancel-{secrets.token_hex(3)}"


@pytest.fixture
async def stack(stores: Stores) -> AsyncIterator[EdgeStack]:
    async with edge_stack(stores, prefix=_PREFIX) as opened:
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


async def test_a_fans_cancel_sends_the_tickets_void_message(
    stores: Stores, stack: EdgeStack, redis: aioredis.Redis, relay: tuple[int, RelayState], tmp_path: Path
) -> None:
    port, state = relay
    event_id = await stack.event(seats=8, max_active=5, refund_percent=100)
    async with stack.client() as fan:
        hold_id = await _buy(stack, fan, event_id, "fan-cancel-mail", "fan.cancel@example.test")
        codes = [t["code"] for t in (await fan.get(f"/v1/events/{event_id}/tickets")).json()["tickets"]]
        quote = (await fan.get(f"/v1/bookings/{hold_id}/cancellation")).json()
        cancelled = await fan.post(
            f"/v1/bookings/{hold_id}:cancel",
            json={"quotedRefund": quote["refund"]},
            headers={"Idempotency-Key": "cancel-mail"},
        )
        assert cancelled.status_code == 200, cancelled.text
    streams = [key async for key in redis.scan_iter(match=f"ticket-issued-{_PREFIX}-*")]
    assert len(streams) == 1
    password = tmp_path / "password"
    password.write_text(PASSWORD)
    environ = relay_environ(stores, port, streams[0].decode(), str(password))
    async with mailer_of(stores, environ) as role:
        while await role.consumer.read_once(block_ms=100):
            pass
    messages = state.messages()
    kinds = sorted(m["Message-ID"] for m in messages)
    assert len(messages) == 2, kinds
    (void,) = [m for m in messages if f"void.{hold_id}" in m["Message-ID"]]
    (tickets,) = [m for m in messages if f"tickets.{hold_id}" in m["Message-ID"]]
    assert void["To"] == tickets["To"] == "fan.cancel@example.test"
    # The language the fan paid in (Vietnamese), for the void message too.
    assert void["Content-Language"] == "vi"
    assert void["Subject"] != tickets["Subject"]
    body = void.get_body(preferencelist=("plain",))
    assert body is not None
    text = body.get_content()
    assert "không còn hiệu lực" in text and hold_id in text
    for code in codes:
        assert code in text
