"""The edge reports the fans it serves as present, so that the waiting room
drops only those who left without a word: a fan with an open SSE stream or
who polls is named in a RecordPresence call; one who stopped is not."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
import redis.asyncio as aioredis

from boxoffice.redis import event_key
from tests.e2e.harness import eventually
from tests.edge.harness import EdgeStack, edge_stack, sign_in
from tests.support import Stores


@pytest.fixture
async def stack(stores: Stores) -> AsyncIterator[EdgeStack]:
    async with edge_stack(stores, prefix="edge-presence", settings={"presence_report_seconds": 0.2}) as stack:
        yield stack


async def test_watching_and_polling_fans_are_reported_present(stack: EdgeStack, stores: Stores) -> None:
    event_id = await stack.event(max_active=1, paused=True)
    client = aioredis.Redis.from_url(stores.redis_url)
    seen_key = event_key(event_id, "seen")
    try:
        async with stack.client() as watcher, stack.client() as poller, stack.client() as gone:
            for fan, name in ((watcher, "watcher"), (poller, "poller"), (gone, "gone")):
                await sign_in(fan, name)
                assert (await fan.post(f"/v1/events/{event_id}/queue:join", json={})).status_code == 200
            joined: dict[str, float] = {}
            for name in ("watcher", "poller", "gone"):
                score = await client.zscore(seen_key, name)
                assert score is not None
                joined[name] = score

            async with watcher.stream("GET", f"/v1/events/{event_id}/queue/position:watch") as stream:
                lines = stream.aiter_lines()
                async for line in lines:
                    if line.startswith("data: "):
                        break
                assert (await poller.get(f"/v1/events/{event_id}/queue/position")).status_code == 200

                async def reported() -> bool | None:
                    watcher_seen = await client.zscore(seen_key, "watcher")
                    poller_seen = await client.zscore(seen_key, "poller")
                    assert watcher_seen is not None and poller_seen is not None
                    if watcher_seen > joined["watcher"] and poller_seen > joined["poller"]:
                        return True
                    return None

                await eventually(reported, "the watcher and the poller reported present", seconds=10)
                # The watcher keeps being reported while the stream is open:
                # a later report names it again, with nothing else sent.
                before = await client.zscore(seen_key, "watcher") or 0

                async def reported_again() -> bool | None:
                    return True if (await client.zscore(seen_key, "watcher") or 0) > before else None

                await eventually(reported_again, "the watcher reported again while watching", seconds=10)
            # The fan who only joined was never reported again.
            assert await client.zscore(seen_key, "gone") == joined["gone"]
            assert stack.edge.deps.presence.calls > 0
    finally:
        await client.aclose()
