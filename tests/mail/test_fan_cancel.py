"""A fan who cancels their own booking through the edge (the quote, then the
cancel) gets the mailer's "tickets void" message for it, at their address
and in their language, after the tickets' own message: from the real mesh
(edge, queue, booking, payment, relay, issuer) and a real relay, once."""

from __future__ import annotations

import redis.asyncio as aioredis

from tests.edge.harness import EdgeStack
from tests.mail.mesh import buy, mesh_mailer
from tests.mail.relay import RelayState
from tests.support import Stores


async def test_a_fans_cancel_sends_the_tickets_void_message(
    stores: Stores,
    mesh: EdgeStack,
    prefix: str,
    redis: aioredis.Redis,
    relay: tuple[int, RelayState],
    environ: dict[str, str],
) -> None:
    _, state = relay
    event_id = await mesh.event(seats=8, max_active=5, refund_percent=100)
    async with mesh.client() as fan:
        hold_id = await buy(mesh, fan, event_id, "fan-cancel-mail", "fan.cancel@example.test")
        codes = [t["code"] for t in (await fan.get(f"/v1/events/{event_id}/tickets")).json()["tickets"]]
        quote = (await fan.get(f"/v1/bookings/{hold_id}/cancellation")).json()
        cancelled = await fan.post(
            f"/v1/bookings/{hold_id}:cancel",
            json={"quotedRefund": quote["refund"]},
            headers={"Idempotency-Key": "cancel-mail"},
        )
        assert cancelled.status_code == 200, cancelled.text
    async with mesh_mailer(stores, redis, prefix, environ):
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
