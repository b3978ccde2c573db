"""Waiting lists as the edge's HTTP tests set them up: a sold-out event,
fans with a place in its queue, their entries. Shared by the waiting list's
tests and the authorization matrix."""

from __future__ import annotations

from typing import Any

import httpx

from tests.edge.fans import admit, buy, signed_in
from tests.edge.harness import EdgeStack


def waitlist(event_id: int, action: str = "") -> str:
    """The path of the event's waiting list (``action``: ":join", ":leave")."""
    return f"/v1/events/{event_id}/waitlist{action}"


async def sold_out(stack: EdgeStack, *, seats: int = 1) -> tuple[int, list[str]]:
    """A new event (refunds in full) whose ``seats`` seats are each bought
    by a fan of their own, who then leaves the queue; its id and the
    bookings' ids."""
    event_id = await stack.event(seats=seats, max_active=seats + 10, refund_percent=100)
    bookings = []
    for _ in range(seats):
        async with signed_in(stack) as buyer:
            await admit(buyer, event_id)
            bookings.append(await buy(buyer, event_id, 1))
            assert (await buyer.post(f"/v1/events/{event_id}/queue:leave", json={})).status_code == 200
    return event_id, bookings


async def queued(client: httpx.AsyncClient, event_id: int) -> None:
    """The fan takes a place in the event's queue."""
    joined = await client.post(f"/v1/events/{event_id}/queue:join", json={})
    assert joined.status_code == 200, joined.text


async def on_the_list(client: httpx.AsyncClient, event_id: int, section_id: str = "A", quantity: int = 1) -> None:
    """The fan takes a place in the event's queue, then on its list."""
    await queued(client, event_id)
    body: dict[str, Any] = {"sectionId": section_id, "quantity": quantity}
    joined = await client.post(waitlist(event_id, ":join"), json=body)
    assert joined.status_code == 200, joined.text


async def entry_of(client: httpx.AsyncClient, event_id: int) -> dict[str, Any]:
    """The fan's entry, as GET waitlist answers it (private)."""
    reply = await client.get(waitlist(event_id))
    assert reply.status_code == 200, reply.text
    assert reply.headers["cache-control"] == "private, no-store"
    found: dict[str, Any] = reply.json()["entry"]
    return found


async def still_waiting(client: httpx.AsyncClient, event_id: int) -> None:
    assert (await entry_of(client, event_id))["state"] == "WAITLIST_STATE_WAITING"


async def waiter(stack: EdgeStack) -> tuple[int, str, str]:
    """A sold-out event and a new fan on its waiting list: the event's id,
    the fan's name and session cookie."""
    event_id, _ = await sold_out(stack)
    async with signed_in(stack) as client:
        await on_the_list(client, event_id)
        name: str = (await client.get("/v1/session")).json()["customerId"]
        return event_id, name, client.cookies["bo_session"]
