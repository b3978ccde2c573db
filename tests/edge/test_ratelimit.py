"""The edge's limits in Redis: a check answers within its timeout or lets the
request in and counts it (a slow Redis must not turn fans away; the
services behind keep their own limits)."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator

import pytest
import redis.asyncio as aioredis

from boxoffice.clock import SystemClock
from boxoffice.errors import ResourceExhausted
from boxoffice.redis import ScriptBatcher
from edge_svc.ratelimit import Limit, RedisRateLimiter

# One request at once, then one per 100 s.
STRICT = Limit(rate_per_second=0.01, burst=1)


@pytest.fixture
async def silent_redis() -> AsyncIterator[aioredis.Redis]:
    """A client of a server that takes connections and reads what it is
    sent but never answers (a Redis stalled or cut off behind its socket)."""
    connections: list[asyncio.StreamWriter] = []

    async def hold(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        connections.append(writer)
        while await reader.read(65536):
            pass

    server = await asyncio.start_server(hold, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    client = aioredis.Redis(host="127.0.0.1", port=port)
    try:
        yield client
    finally:
        await client.aclose()
        for writer in connections:
            writer.close()
        server.close()
        await server.wait_closed()


async def test_a_check_redis_does_not_answer_in_time_lets_the_request_in_and_is_counted(
    silent_redis: aioredis.Redis,
) -> None:
    batcher = ScriptBatcher(silent_redis, name="test-edge-rate-limits")
    await batcher.start()
    unanswered: list[int] = []
    limiter = RedisRateLimiter(
        batcher, SystemClock(), timeout_seconds=0.05, on_unavailable=lambda: unanswered.append(1)
    )
    try:
        # Past the burst of one, yet let in: Redis never answered.
        for _ in range(3):
            await asyncio.wait_for(limiter.check("ip", "10.1.2.3", STRICT), 10)
        assert len(unanswered) == 3
    finally:
        await batcher.stop(0.1)


async def test_a_check_redis_answers_refuses_past_the_burst(redis_client: aioredis.Redis) -> None:
    batcher = ScriptBatcher(redis_client, name="test-edge-rate-limits")
    await batcher.start()
    unanswered: list[int] = []
    # The timeout of a busy test machine: long enough that Redis always answers.
    limiter = RedisRateLimiter(
        batcher, SystemClock(), timeout_seconds=10.0, on_unavailable=lambda: unanswered.append(1)
    )
    subject = f"10.9.{uuid.uuid4().int % 250}.1"
    try:
        await limiter.check("ip", subject, STRICT)
        with pytest.raises(ResourceExhausted) as refused:
            await limiter.check("ip", subject, STRICT)
        assert refused.value.reason == "TOO_MANY_REQUESTS" and refused.value.metadata["scope"] == "ip"
        # Another subject is not limited by this one.
        await limiter.check("ip", f"{subject}0", STRICT)
        assert unanswered == []
    finally:
        await batcher.stop(0.1)
