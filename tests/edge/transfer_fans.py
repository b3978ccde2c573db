"""Fans who buy, transfer and claim tickets through the edge, for the
transfer tests."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator
from typing import Any

import httpx
import psycopg

from tests.edge.fans import admit, hold
from tests.edge.harness import EdgeStack, sign_in
from tests.support import Stores

FRIEND_EMAIL = "friend@example.org"


@contextlib.asynccontextmanager
async def signed_in(stack: EdgeStack, *names: str) -> AsyncIterator[list[httpx.AsyncClient]]:
    """A signed-in client for each (new) fan."""
    async with contextlib.AsyncExitStack() as exits:
        clients = []
        for name in names:
            client = await exits.enter_async_context(stack.client())
            await sign_in(client, f"{name}-{uuid.uuid4().hex[:8]}")
            clients.append(client)
        yield clients


async def tickets_of(client: httpx.AsyncClient, event_id: int, count: int | None = None) -> list[dict[str, Any]]:
    """The fan's tickets of the event (once the issuer has issued ``count``)."""
    for _ in range(200):
        reply = await client.get(f"/v1/events/{event_id}/tickets")
        assert reply.status_code == 200, reply.text
        tickets: list[dict[str, Any]] = reply.json().get("tickets", [])
        if count is None or len(tickets) >= count:
            return tickets
        await asyncio.sleep(0.05)
    raise AssertionError(f"no {count} tickets issued")


async def buy_tickets(client: httpx.AsyncClient, event_id: int, quantity: int) -> list[dict[str, Any]]:
    """Admitted, held, paid and ticketed: the fan's tickets."""
    await admit(client, event_id)
    held = await hold(client, event_id, quantity=quantity)
    started = await client.post(f"/v1/holds/{held['holdId']}/payment", json={"paymentMethod": "pm_card_ok"})
    assert started.status_code == 200, started.text
    payment_id = started.json()["payment"]["paymentId"]
    confirmed = await client.post(f"/v1/payments/{payment_id}:confirm", headers={"Idempotency-Key": payment_id})
    assert confirmed.json()["payment"]["state"] == "PAYMENT_STATE_SUCCEEDED", confirmed.text
    return await tickets_of(client, event_id, quantity)


async def offer(client: httpx.AsyncClient, ticket_id: str, email: str = FRIEND_EMAIL) -> dict[str, Any]:
    reply = await client.post(f"/v1/tickets/{ticket_id}:transfer", json={"email": email})
    assert reply.status_code == 200, reply.text
    transfer: dict[str, Any] = reply.json()["transfer"]
    return transfer


async def claim_secret(stores: Stores, transfer_id: str) -> str:
    """The link's secret, as the mailer reads it to write the link."""
    async with await psycopg.AsyncConnection.connect(stores.database_url) as conn:
        cur = await conn.execute("SELECT claim_secret FROM ticket_transfers WHERE transfer_id = %s", (transfer_id,))
        row = await cur.fetchone()
    assert row is not None
    return str(row[0])


async def stored_rows(stores: Stores, event_id: int) -> tuple[list[Any], list[Any]]:
    """The event's tickets and transfers as stored."""
    async with await psycopg.AsyncConnection.connect(stores.database_url) as conn:
        cur = await conn.execute(
            "SELECT ticket_id, customer_id, code, voided_at, transferred_at FROM tickets WHERE event_id = %s "
            "ORDER BY ticket_id",
            (event_id,),
        )
        tickets = await cur.fetchall()
        cur = await conn.execute(
            "SELECT transfer_id, state, receiver_id, new_ticket_id FROM ticket_transfers WHERE event_id = %s "
            "ORDER BY transfer_id",
            (event_id,),
        )
        return tickets, await cur.fetchall()


def claim(client: httpx.AsyncClient, transfer_id: str, secret: str) -> Any:
    return client.post(f"/v1/transfers/{transfer_id}:claim", json={"claimSecret": secret})
