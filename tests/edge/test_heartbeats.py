"""SSE heartbeats come from one timer per event, whatever the number of its
streams: every stream of the event gets its keep-alive, and the timer
stops when the event's last stream closes."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from tests.e2e.harness import eventually
from tests.edge.harness import EdgeStack, edge_stack, sign_in
from tests.support import Stores


@pytest.fixture
async def stack(stores: Stores) -> AsyncIterator[EdgeStack]:
    async with edge_stack(stores, prefix="edge-beats", settings={"sse_heartbeat_seconds": 0.2}) as stack:
        yield stack


async def _keep_alives(lines: AsyncIterator[str], count: int) -> list[str]:
    seen: list[str] = []
    async for line in lines:
        seen.append(line)
        if sum(1 for s in seen if s == ": keep-alive") >= count:
            break
    return seen


async def test_one_heartbeat_timer_per_event_beats_every_stream(stack: EdgeStack) -> None:
    event_id = await stack.event(max_active=1, paused=True)
    other_event = await stack.event(max_active=1, paused=True)
    hub = stack.edge.hub
    async with stack.client() as one, stack.client() as two, stack.client() as three:
        for fan, name, event in ((one, "beat-1", event_id), (two, "beat-2", event_id), (three, "beat-3", other_event)):
            await sign_in(fan, name)
            assert (await fan.post(f"/v1/events/{event}/queue:join", json={})).status_code == 200
        path = f"/v1/events/{event_id}/queue/position:watch"
        async with (
            one.stream("GET", path) as first,
            two.stream("GET", path) as second,
            three.stream("GET", f"/v1/events/{other_event}/queue/position:watch") as third,
        ):
            # Each stream's lines are read from one iterator kept open (a
            # dropped iterator closes its response).
            readers = [reply.aiter_lines() for reply in (first, second, third)]
            lines = [await _keep_alives(reader, 2) for reader in readers]
            for seen in lines:
                assert seen[0].startswith("retry: ")
                assert "event: position" in seen
                assert seen.count(": keep-alive") == 2
            # Three streams, two events: two timers.
            assert hub.heartbeat_timers() == 2

        async def stopped() -> bool | None:
            return True if hub.heartbeat_timers() == 0 else None

        await eventually(stopped, "the timers stopped", seconds=10.0)
