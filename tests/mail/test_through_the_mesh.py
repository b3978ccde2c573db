"""The fan's address and language travel from the edge to the mailer: a
fan signed in with an e-mail address who pays with their browser in
Vietnamese gets one message in Vietnamese at that address, from the real
mesh (edge, queue, booking, payment, relay, issuer) and a real relay; a fan
without an address gets none, and the booking says so."""

from __future__ import annotations

import redis.asyncio as aioredis

from boxoffice.runtime import Pool
from mail_svc.model import DeliveryState
from tests.edge.harness import EdgeStack
from tests.mail.mesh import buy, mesh_mailer
from tests.mail.relay import RelayState
from tests.support import Stores


async def test_the_fans_address_and_language_reach_the_mailer(
    stores: Stores,
    mesh: EdgeStack,
    prefix: str,
    pool: Pool,
    redis: aioredis.Redis,
    relay: tuple[int, RelayState],
    environ: dict[str, str],
) -> None:
    _, state = relay
    event_id = await mesh.event(seats=8, max_active=5)
    async with mesh.client() as fan, mesh.client() as anonymous:
        hold_id = await buy(mesh, fan, event_id, "fan-mail", "fan.mail@example.test")
        codes = [t["code"] for t in (await fan.get(f"/v1/events/{event_id}/tickets")).json()["tickets"]]
        quiet_hold = await buy(mesh, anonymous, event_id, "fan-quiet", None)
    async with mesh_mailer(stores, redis, prefix, environ) as role:
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


async def test_a_sign_in_with_a_malformed_address_is_refused(mesh: EdgeStack) -> None:
    async with mesh.client() as fan:
        reply = await fan.post("/v1/session", json={"name": "fan-x", "email": "not an address"})
        assert reply.status_code == 400
        assert reply.json()["error"]["details"][0]["metadata"] == {"field": "email"}
        assert not fan.cookies.get("bo_session")
