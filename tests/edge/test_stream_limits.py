"""Open Server-Sent Event streams are limited per address and per account
across every edge process (slots in Redis): past either limit a stream is a
429 naming which; a closed stream gives its slots back as soon as the edge
notices (at its next heartbeat at most)."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import AsyncIterator, Mapping
from typing import Any

import httpx
import pytest

from edge_svc import app as edge_app
from tests.e2e.harness import eventually
from tests.edge.fans import expect
from tests.edge.harness import EdgeStack, edge_stack, loopback_address, sign_in
from tests.support import Stores, make_runtime, running

_LIMITS: dict[str, object] = {
    "sse_per_address": 3,
    "sse_per_account": 2,
    "rate_limit_timeout_seconds": 10.0,
    # A client gone is noticed at the next heartbeat.
    "sse_heartbeat_seconds": 0.2,
}


@pytest.fixture(scope="module")
async def stack(stores: Stores) -> AsyncIterator[EdgeStack]:
    async with edge_stack(stores, settings=_LIMITS, prefix="edge-stream-limits") as stack:
        yield stack


@contextlib.asynccontextmanager
async def _stream(client: httpx.AsyncClient, event_id: int) -> AsyncIterator[httpx.Response]:
    """A watch of the fan's place, open (its first position read) while
    the block runs, or the error answer that refused it."""
    async with client.stream("GET", f"/v1/events/{event_id}/queue/position:watch") as reply:
        if reply.status_code == 200:
            # Held while the block runs: a line iterator let go closes the stream.
            lines = reply.aiter_lines()
            async for line in lines:
                if line.startswith("event: position"):
                    break
        else:
            await reply.aread()
        yield reply


async def _queued(stack: EdgeStack, address: str, event_id: int, name: str) -> httpx.AsyncClient:
    client = stack.client_from(address)
    await sign_in(client, name)
    assert (await client.post(f"/v1/events/{event_id}/queue:join", json={})).status_code == 200
    return client


async def test_an_account_holds_at_most_its_streams(stack: EdgeStack) -> None:
    event_id = await stack.event(max_active=1, paused=True)
    fan = await _queued(stack, loopback_address(), event_id, f"streamer-{uuid.uuid4().hex[:6]}")
    async with contextlib.aclosing(fan):
        async with _stream(fan, event_id) as first, _stream(fan, event_id) as second:
            assert first.status_code == second.status_code == 200
            async with _stream(fan, event_id) as third:
                found = expect(third, 429, "RESOURCE_EXHAUSTED", "TOO_MANY_REQUESTS")
                assert found.metadata["scope"] == "stream-account"
        # Closed streams give their slots back.
        async with _stream(fan, event_id) as again:

            async def reopened() -> bool | None:
                async with _stream(fan, event_id) as twice:
                    return True if twice.status_code == 200 else None

            assert again.status_code == 200 or await eventually(reopened, "a slot given back", seconds=10.0)
            assert await eventually(reopened, "the second slot given back", seconds=10.0)


async def test_an_address_holds_at_most_its_streams(stack: EdgeStack) -> None:
    event_id = await stack.event(max_active=1, paused=True)
    address = loopback_address()
    fans = [await _queued(stack, address, event_id, f"house-{n}-{uuid.uuid4().hex[:6]}") for n in range(4)]
    try:
        async with contextlib.AsyncExitStack() as streams:
            for fan in fans[:3]:
                assert (await streams.enter_async_context(_stream(fan, event_id))).status_code == 200
            async with _stream(fans[3], event_id) as refused:
                assert expect(refused, 429, "RESOURCE_EXHAUSTED", "TOO_MANY_REQUESTS").metadata["scope"] == "stream-ip"
            # Another address is not limited by this one.
            other = await _queued(stack, loopback_address(), event_id, f"elsewhere-{uuid.uuid4().hex[:6]}")
            async with contextlib.aclosing(other), _stream(other, event_id) as elsewhere:
                assert elsewhere.status_code == 200
    finally:
        for fan in fans:
            await fan.aclose()


@contextlib.asynccontextmanager
async def _second_edge(stores: Stores, stack: EdgeStack, settings: Mapping[str, Any]) -> AsyncIterator[str]:
    """Another edge process's worth of edge (its own composition, the same
    Redis and services); its URL."""
    rt = make_runtime(stores)
    edge = edge_app.compose(
        rt,
        edge_app.Overrides(
            settings={
                **{name: getattr(stack.edge.config, name) for name in ("queue_addr", "booking_addr", "payment_addr")},
                "host": "127.0.0.1",
                "port": 0,
                "dev_sign_in": True,
                "drain_seconds": 0.0,
                **settings,
            }
        ),
    )
    async with running([*rt.infrastructure(), *edge.components]):
        yield edge.server.url


async def test_the_limits_hold_across_edge_processes(stores: Stores, stack: EdgeStack) -> None:
    """Two edges, one Redis: an account's streams on both count together."""
    event_id = await stack.event(max_active=1, paused=True)
    address = loopback_address()
    fan = await _queued(stack, address, event_id, f"spread-{uuid.uuid4().hex[:6]}")
    async with (
        contextlib.aclosing(fan),
        _second_edge(stores, stack, {**_LIMITS, "ip_burst": 1000, "account_burst": 1000}) as url,
    ):
        transport = httpx.AsyncHTTPTransport(local_address=address)
        async with httpx.AsyncClient(base_url=url, cookies=fan.cookies, transport=transport, timeout=30.0) as there:
            async with _stream(fan, event_id) as here, _stream(there, event_id) as yonder:
                assert here.status_code == yonder.status_code == 200
                for client in (fan, there):
                    async with _stream(client, event_id) as refused:
                        found = expect(refused, 429, "RESOURCE_EXHAUSTED", "TOO_MANY_REQUESTS")
                        assert found.metadata["scope"] == "stream-account"
