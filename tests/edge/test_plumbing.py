"""The request plumbing's remembered answers: a path's route is remembered
per method (a 405 or 404 is never remembered as a match), and the gauge of
requests in flight counts an open stream until it closes."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from tests.e2e.harness import eventually
from tests.edge.harness import EdgeStack, edge_stack, error_of, sign_in
from tests.edge.test_streams import metric
from tests.support import Stores


@pytest.fixture
async def stack(stores: Stores) -> AsyncIterator[EdgeStack]:
    async with edge_stack(stores, prefix="edge-plumbing", settings={"sse_heartbeat_seconds": 0.2}) as stack:
        yield stack


async def test_a_path_answers_by_method_however_often_it_is_asked(stack: EdgeStack) -> None:
    event_id = await stack.event()
    path = f"/v1/events/{event_id}/queue/progress"
    async with stack.client() as anyone:
        for _ in range(3):
            assert (await anyone.get(path)).status_code == 200
            refused = await anyone.delete(path)
            assert refused.status_code == 405 and refused.headers["allow"] == "GET, HEAD"
            assert (await anyone.head(path)).status_code == 200
            missing = await anyone.get(path + "/nothing")
            assert error_of(missing) == (404, "NOT_FOUND", "ROUTE_NOT_FOUND")
        # The same template with another event is another path, parsed anew.
        bad = await anyone.get("/v1/events/0/queue/progress")
        assert error_of(bad) == (400, "INVALID_ARGUMENT", "INVALID_FIELD")


async def test_requests_in_flight_count_an_open_stream_until_it_closes(stack: EdgeStack) -> None:
    event_id = await stack.event(max_active=1, paused=True)
    async with stack.client() as fan, stack.client() as ops:

        async def in_flight() -> float:
            return metric((await ops.get("/metrics")).text, "boxoffice_edge_http_requests_in_flight")

        # The scrape itself is in flight.
        assert await in_flight() == 1
        await sign_in(fan, "in-flight")
        assert (await fan.post(f"/v1/events/{event_id}/queue:join", json={})).status_code == 200
        async with fan.stream("GET", f"/v1/events/{event_id}/queue/position:watch") as reply:
            lines = reply.aiter_lines()
            async for line in lines:
                if line.startswith("data: "):
                    break
            assert await in_flight() == 2

        async def closed() -> bool | None:
            return True if await in_flight() == 1 else None

        await eventually(closed, "the stream no longer in flight", seconds=10.0)
