"""A fan's whole night through the edge's HTTP API only: sign in, join,
watch the place over Server-Sent Events until admitted, hold, pay, and get
tickets; the provider's webhook over HTTP."""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator

import httpx
import pytest

from tests.e2e.harness import eventually
from tests.edge.harness import EdgeStack, edge_stack, error_of, sign_in
from tests.support import Stores


@pytest.fixture
async def stack(stores: Stores) -> AsyncIterator[EdgeStack]:
    async with edge_stack(stores, prefix="edge-flow") as stack:
        yield stack


async def sse_events(
    client: httpx.AsyncClient, path: str, **kwargs: object
) -> list[tuple[str, str, dict[str, object]]]:
    """The (event, id, data) of a Server-Sent Events stream until it ends."""
    events: list[tuple[str, str, dict[str, object]]] = []
    async with client.stream("GET", path, **kwargs) as reply:  # type: ignore[arg-type]
        assert reply.status_code == 200, await reply.aread()
        assert reply.headers["content-type"].startswith("text/event-stream")
        name, event_id, data = "message", "", ""
        async for line in reply.aiter_lines():
            if line == "":
                if data:
                    events.append((name, event_id, json.loads(data)))
                name, data = "message", ""
            elif line.startswith("event: "):
                name = line[7:]
            elif line.startswith("id: "):
                event_id = line[4:]
            elif line.startswith("data: "):
                data += line[6:]
    return events


async def test_sign_in_join_watch_hold_pay_ticket(stack: EdgeStack) -> None:
    event_id = await stack.event(seats=8, max_active=5)
    async with stack.client() as fan:
        await sign_in(fan, "fan-flow")
        event = await fan.get(f"/v1/events/{event_id}")
        assert event.status_code == 200
        assert event.headers["cache-control"].startswith("public")
        assert event.json()["event"]["sections"][0]["sectionId"] == "A"

        joined = await fan.post(f"/v1/events/{event_id}/queue:join", json={})
        assert joined.status_code == 200, joined.text
        position = joined.json()["position"]
        assert position["customerId"] == "fan-flow"
        assert position["state"] in ("QUEUE_STATE_WAITING", "QUEUE_STATE_ADMITTED")
        # Joining again is idempotent: the same place.
        again = await fan.post(f"/v1/events/{event_id}/queue:join", json={})
        assert again.json()["position"]["score"] == position["score"]

        events = await sse_events(fan, f"/v1/events/{event_id}/queue/position:watch")
        final = events[-1]
        assert final[0] == "final"
        assert final[2]["position"]["state"] == "QUEUE_STATE_ADMITTED"  # type: ignore[index]
        # A browser never sees the token in a body its scripts can read.
        assert final[2]["position"]["accessToken"] == ""  # type: ignore[index]

        position_reply = await fan.get(f"/v1/events/{event_id}/queue/position")
        assert position_reply.status_code == 200
        assert position_reply.headers["cache-control"] == "private, no-store"
        assert position_reply.json()["position"]["state"] == "QUEUE_STATE_ADMITTED"
        assert position_reply.json()["position"]["accessToken"] == ""
        assert fan.cookies.get("bo_access")

        held = await fan.post(f"/v1/events/{event_id}/holds", json={"bestAvailable": {"sectionId": "A", "quantity": 2}})
        assert held.status_code == 200, held.text
        hold = held.json()["hold"]
        assert hold["state"] == "HOLD_STATE_HELD" and hold["amount"]["amountMinor"] == "9000"

        got = await fan.get(f"/v1/holds/{hold['holdId']}")
        assert got.status_code == 200 and got.json()["hold"]["holdId"] == hold["holdId"]

        started = await fan.post(f"/v1/holds/{hold['holdId']}/payment", json={"paymentMethod": "pm_card_ok"})
        assert started.status_code == 200, started.text
        payment_id = started.json()["payment"]["paymentId"]

        confirm = await fan.post(f"/v1/payments/{payment_id}:confirm", headers={"Idempotency-Key": "k-1"})
        assert confirm.status_code == 200, confirm.text
        assert confirm.json()["payment"]["state"] == "PAYMENT_STATE_SUCCEEDED"
        replay = await fan.post(f"/v1/payments/{payment_id}:confirm", headers={"Idempotency-Key": "k-1"})
        assert replay.json() == confirm.json()

        payment = await fan.get(f"/v1/payments/{payment_id}")
        assert payment.status_code == 200 and payment.json()["payment"]["paymentId"] == payment_id

        async def tickets() -> list[dict[str, object]] | None:
            reply = await fan.get(f"/v1/events/{event_id}/tickets")
            assert reply.status_code == 200, reply.text
            found: list[dict[str, object]] = reply.json()["tickets"]
            return found if len(found) == 2 else None

        issued = await eventually(tickets, "two tickets")
        assert {t["holdId"] for t in issued} == {hold["holdId"]}

        # The fan leaves: the session ends; their tickets stay theirs.
        left = await fan.post(f"/v1/events/{event_id}/queue:leave", json={})
        assert left.status_code == 200, left.text
        assert not fan.cookies.get("bo_access")
        after = await fan.get(f"/v1/events/{event_id}/tickets")
        assert len(after.json()["tickets"]) == 2


async def test_another_fans_things_answer_404(stack: EdgeStack) -> None:
    event_id = await stack.event(seats=8, max_active=5)
    async with stack.client() as owner, stack.client() as other:
        await sign_in(owner, "owner")
        await sign_in(other, "other")
        for fan in (owner, other):
            await fan.post(f"/v1/events/{event_id}/queue:join", json={})
            await sse_events(fan, f"/v1/events/{event_id}/queue/position:watch")
            assert (await fan.get(f"/v1/events/{event_id}/queue/position")).status_code == 200
        held = await owner.post(
            f"/v1/events/{event_id}/holds", json={"bestAvailable": {"sectionId": "A", "quantity": 1}}
        )
        hold_id = held.json()["hold"]["holdId"]
        started = await owner.post(f"/v1/holds/{hold_id}/payment", json={"paymentMethod": "pm_card_ok"})
        payment_id = started.json()["payment"]["paymentId"]

        missing_hold = str(uuid.uuid4())
        for method, path in (
            ("GET", f"/v1/holds/{hold_id}"),
            ("DELETE", f"/v1/holds/{hold_id}"),
            ("POST", f"/v1/holds/{hold_id}/payment"),
        ):
            theirs = await other.request(
                method, path, json={"paymentMethod": "pm_card_ok"} if method == "POST" else None
            )
            nobody = await other.request(
                method,
                path.replace(hold_id, missing_hold),
                json={"paymentMethod": "pm_card_ok"} if method == "POST" else None,
            )
            assert error_of(theirs) == (404, "NOT_FOUND", "NOT_FOUND"), (method, path, theirs.text)
            assert error_of(nobody) == error_of(theirs)
        theirs = await other.get(f"/v1/payments/{payment_id}")
        nobody = await other.get(f"/v1/payments/{uuid.uuid4()}")
        assert error_of(theirs) == error_of(nobody) == (404, "NOT_FOUND", "PAYMENT_NOT_FOUND")
        confirm = await other.post(f"/v1/payments/{payment_id}:confirm", headers={"Idempotency-Key": "x"})
        assert error_of(confirm) == (404, "NOT_FOUND", "PAYMENT_NOT_FOUND")
        assert (await other.get(f"/v1/events/{event_id}/tickets")).json()["tickets"] == []
        # The owner's hold is untouched by all of that (the sandbox's webhook
        # may have confirmed it meanwhile; nobody released it).
        mine = await owner.get(f"/v1/holds/{hold_id}")
        assert mine.json()["hold"]["state"] in ("HOLD_STATE_HELD", "HOLD_STATE_CONFIRMED")
