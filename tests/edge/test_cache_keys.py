"""Public documents whose URLs an attacker can vary without end cost the
backend one load per document, not per URL: a seat map's section is checked
against the event's cached document (a made-up one is a 404 that asks
nothing), and a proof's page size is one of a fixed set."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

import pytest

from edge_svc.endpoints.draws import PAGE_SIZES
from tests.e2e.harness import eventually
from tests.edge.fans import expect, signed_in
from tests.edge.harness import EdgeStack, edge_stack
from tests.support import Stores


@pytest.fixture(scope="module")
async def stack(stores: Stores) -> AsyncIterator[EdgeStack]:
    async with edge_stack(stores, prefix="edge-cache-keys") as stack:
        yield stack


async def test_an_unknown_section_is_a_404_from_the_events_document(stack: EdgeStack) -> None:
    event_id = await stack.event(standing=10)
    async with stack.client() as anyone:
        known = await anyone.get(f"/v1/events/{event_id}/seatmap", params={"sectionId": "A"})
        assert known.status_code == 200, known.text
        assert [s["section"]["sectionId"] for s in known.json()["sections"]] == ["A"]
        floor = await anyone.get(f"/v1/events/{event_id}/seatmap", params={"sectionId": "FLOOR"})
        assert floor.status_code == 200, floor.text
        # BookingService would answer 400 UNKNOWN_SECTION: the 404 is the edge's.
        for n in range(20):
            reply = await anyone.get(f"/v1/events/{event_id}/seatmap", params={"sectionId": f"Z{n}"})
            assert expect(reply, 404, "NOT_FOUND", "NOT_FOUND").metadata == {"resource": "section"}
        # An unknown event is the event's own 404.
        missing = await anyone.get(f"/v1/events/{event_id + 1}/seatmap", params={"sectionId": "A"})
        assert missing.status_code == 404
        # The whole map (no section) is answered as before.
        whole = await anyone.get(f"/v1/events/{event_id}/seatmap")
        assert whole.status_code == 200 and len(whole.json()["sections"]) == 2


async def test_a_proofs_page_size_is_rounded_down_to_a_fixed_size(stack: EdgeStack) -> None:
    event_id = await stack.event(opens_in_seconds=2.0)
    for n in range(3):
        async with signed_in(stack, f"pre-{n}-{uuid.uuid4().hex[:6]}") as fan:
            assert (await fan.post(f"/v1/events/{event_id}/queue:join", json={})).status_code == 200
    proof = f"/v1/events/{event_id}/queue/proof"
    async with stack.client() as anyone:

        async def revealed() -> bool | None:
            reply = await anyone.get(proof, params={"pageSize": "10"})
            return True if reply.json().get("revealed") and len(reply.json()["participants"]) == 3 else None

        await eventually(revealed, "the pre-queue shuffle revealed", seconds=20.0)
        # 2 and 9 are pages of 1; 10 to 99 pages of 10: one cached page each.
        for asked, count in (("2", 1), ("9", 1), ("10", 3), ("99", 3)):
            reply = await anyone.get(proof, params={"pageSize": asked})
            assert reply.status_code == 200 and len(reply.json()["participants"]) == count, (asked, reply.text)
        small = await anyone.get(proof, params={"pageSize": "2"})
        other = await anyone.get(proof, params={"pageSize": "7"})
        assert small.headers["etag"] == other.headers["etag"]
        # Past the largest size is still refused, as before.
        expect(
            await anyone.get(proof, params={"pageSize": str(PAGE_SIZES[-1] + 1)}),
            400,
            "INVALID_ARGUMENT",
            "INVALID_FIELD",
        )
