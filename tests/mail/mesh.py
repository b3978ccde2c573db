"""The mailer's tests through the whole mesh (edge, queue, booking,
payment, relay, issuer): a fan's purchase through the edge, and the mailer
of the mesh's ticket stream against the test's relay."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

import httpx
import redis.asyncio as aioredis

from mail_svc import app as mail_app
from tests.e2e.harness import eventually
from tests.edge.harness import EdgeStack
from tests.edge.test_flow import sse_events
from tests.mail.harness import mailer_of
from tests.support import Stores


async def buy(stack: EdgeStack, fan: httpx.AsyncClient, event_id: int, name: str, email: str | None) -> str:
    """``fan`` signs in as ``name`` (with ``email`` if given), joins the
    queue, holds section A's two best places and pays for them from a
    browser in Vietnamese; the hold's id, once both tickets are issued."""
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


@contextlib.asynccontextmanager
async def mesh_mailer(
    stores: Stores, redis: aioredis.Redis, prefix: str, environ: dict[str, str]
) -> AsyncIterator[mail_app.MailerRole]:
    """The mailer of the mesh's ticket stream (its one stream under
    ``prefix``) with the relay's ``environ``, once it has sent all that
    is due."""
    streams = [key async for key in redis.scan_iter(match=f"ticket-issued-{prefix}-*")]
    assert len(streams) == 1
    async with mailer_of(stores, {**environ, "BOXOFFICE_TICKET_STREAM": streams[0].decode()}) as role:
        while await role.consumer.read_once(block_ms=100):
            pass
        yield role
