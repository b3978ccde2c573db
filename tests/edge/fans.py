"""Fans as the edge's HTTP tests play them: signed in, queued, admitted,
holding seats; and what an error answer says (status, ErrorInfo reason and
metadata). Shared by the error, identity, matrix and fuzzing tests."""

from __future__ import annotations

import contextlib
import json
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import httpx

from tests.e2e.harness import eventually
from tests.edge.harness import EdgeStack, sign_in

ADMITTED = "QUEUE_STATE_ADMITTED"
NOT_IN_QUEUE = "QUEUE_STATE_NOT_IN_QUEUE"
ACCESS_HEADER = "Boxoffice-Access-Token"


@dataclass(frozen=True)
class Problem:
    """What an error answer says."""

    status: int
    code: str
    reason: str
    metadata: dict[str, str]
    message: str


def problem(reply: httpx.Response) -> Problem:
    """The Google JSON error of ``reply``, checked for shape."""
    assert reply.headers["content-type"].startswith("application/json"), reply.headers
    assert reply.headers["cache-control"] == "private, no-store"
    body = json.loads(reply.text)
    assert set(body) == {"error"}, body
    error = body["error"]
    assert error["code"] == reply.status_code, body
    (info,) = error["details"]
    assert info["@type"] == "type.googleapis.com/google.rpc.ErrorInfo" and info["domain"] == "boxoffice", info
    assert isinstance(error["message"], str) and error["message"], body
    return Problem(reply.status_code, error["status"], info["reason"], info["metadata"], error["message"])


def expect(reply: httpx.Response, status: int, code: str, reason: str) -> Problem:
    """The error of ``reply``, which must be (status, code, reason)."""
    found = problem(reply)
    assert (found.status, found.code, found.reason) == (status, code, reason), (found, reply.request.url)
    return found


async def state_of(client: httpx.AsyncClient, event_id: int, **kwargs: Any) -> str:
    """The fan's queue state as the edge answers it."""
    reply = await client.get(f"/v1/events/{event_id}/queue/position", **kwargs)
    assert reply.status_code == 200, reply.text
    state: str = reply.json()["position"]["state"]
    return state


async def admit(client: httpx.AsyncClient, event_id: int, **kwargs: Any) -> str:
    """Joins the fan to the event's queue and polls until admitted; the
    access token (the cookie for a browser, the body's for a bearer client)."""
    joined = await client.post(f"/v1/events/{event_id}/queue:join", json={}, **kwargs)
    assert joined.status_code == 200, joined.text

    async def probe() -> str | None:
        reply = await client.get(f"/v1/events/{event_id}/queue/position", **kwargs)
        assert reply.status_code == 200, reply.text
        position = reply.json()["position"]
        if position["state"] != ADMITTED:
            return None
        token = position["accessToken"] or client.cookies.get("bo_access")
        assert token, reply.headers
        return str(token)

    return await eventually(probe, "the fan is admitted")


@contextlib.asynccontextmanager
async def signed_in(stack: EdgeStack, name: str | None = None) -> AsyncIterator[httpx.AsyncClient]:
    """A client with a session for a fan (a new one unless named)."""
    async with stack.client() as client:
        await sign_in(client, name or f"fan-{uuid.uuid4().hex[:12]}")
        yield client


async def hold(client: httpx.AsyncClient, event_id: int, quantity: int = 1, **kwargs: Any) -> dict[str, Any]:
    """A best-available hold in section A; the hold."""
    reply = await client.post(
        f"/v1/events/{event_id}/holds", json={"bestAvailable": {"sectionId": "A", "quantity": quantity}}, **kwargs
    )
    assert reply.status_code == 200, reply.text
    found: dict[str, Any] = reply.json()["hold"]
    return found


async def buy(client: httpx.AsyncClient, event_id: int, quantity: int) -> str:
    """Hold, pay and confirm; the booking's id (its hold id)."""
    held = await hold(client, event_id, quantity)
    started = await client.post(f"/v1/holds/{held['holdId']}/payment", json={"paymentMethod": "pm_card_ok"})
    assert started.status_code == 200, started.text
    payment_id = started.json()["payment"]["paymentId"]
    confirm = await client.post(f"/v1/payments/{payment_id}:confirm", headers={"Idempotency-Key": uuid.uuid4().hex})
    assert confirm.status_code == 200, confirm.text
    assert confirm.json()["payment"]["state"] == "PAYMENT_STATE_SUCCEEDED", confirm.text
    return str(held["holdId"])


async def buy_tickets(client: httpx.AsyncClient, event_id: int, quantity: int = 1) -> list[dict[str, Any]]:
    """Admits the fan and buys ``quantity`` seats (:func:`buy`); their
    tickets as the tickets route lists them, once issued."""
    await admit(client, event_id)
    hold_id = await buy(client, event_id, quantity)

    async def issued() -> list[dict[str, Any]] | None:
        reply = await client.get(f"/v1/events/{event_id}/tickets", params={"holdId": hold_id})
        assert reply.status_code == 200, reply.text
        tickets: list[dict[str, Any]] = reply.json()["tickets"]
        return tickets if len(tickets) == quantity else None

    return await eventually(issued, "the tickets are issued")
