"""The script batcher and its pipelined connection against a real Redis:
concurrent calls share pipelines, a lost script cache is reloaded, a lost
or stalled connection fails its calls quickly and is replaced."""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import redis.asyncio as aioredis

from boxoffice import deadline
from boxoffice.embedded import EmbeddedRedis
from boxoffice.errors import DeadlineExceeded, Unavailable
from boxoffice.redis import Script, ScriptBatcher, load_script, pack
from tests.support import Stores


def _script(source: str) -> Script:
    import hashlib

    return Script(name="test", source=source, sha=hashlib.sha1(source.encode()).hexdigest())


@pytest.fixture
async def private_redis(stores: Stores, tmp_path: Path) -> AsyncIterator[tuple[aioredis.Redis, int]]:
    """An embedded Redis of this test alone (it is stopped and flushed)."""
    server = EmbeddedRedis(tmp_path / "redis")
    url = server.start()
    client = aioredis.Redis.from_url(url, socket_timeout=0.5)
    try:
        assert server.pid is not None
        yield client, server.pid
    finally:
        await client.aclose()
        server.stop()


def test_pack_is_resp() -> None:
    assert (
        pack([["SET", "k", 5], [b"GET", "k"]])
        == b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$1\r\n5\r\n*2\r\n$3\r\nGET\r\n$1\r\nk\r\n"
    )


async def test_concurrent_calls_share_pipelines(redis_client: aioredis.Redis) -> None:
    batcher = ScriptBatcher(redis_client)
    echo = _script("return ARGV[1]")
    try:
        replies = await asyncio.gather(*(batcher.call(echo, (), (f"v{i}",)) for i in range(2000)))
        assert replies == [f"v{i}".encode() for i in range(2000)]
        assert batcher.calls_sent >= 2000
        assert batcher.pipelines_sent <= 20  # 2,000 calls, a handful of round trips
    finally:
        await batcher.stop(1)


async def test_a_lost_script_cache_is_reloaded(private_redis: tuple[aioredis.Redis, int]) -> None:
    client, _ = private_redis
    batcher = ScriptBatcher(client)
    script = load_script("queue_svc", "progress")
    try:
        assert await batcher.call(script, ("a", "b", "c", "d", "e", "f"), ()) == [0]
        await client.script_flush()
        replies = await asyncio.gather(*(batcher.call(script, ("a", "b", "c", "d", "e", "f"), ()) for _ in range(10)))
        assert replies == [[0]] * 10
    finally:
        await batcher.stop(1)


async def test_a_script_error_is_internal_for_that_call_only(redis_client: aioredis.Redis) -> None:
    batcher = ScriptBatcher(redis_client)
    bad = _script("return redis.call('INCR', KEYS[1])")
    good = _script("return 1")
    await redis_client.set("{ev:0}:not-a-number", "x")
    try:
        results = await asyncio.gather(
            batcher.call(bad, ("{ev:0}:not-a-number",), ()), batcher.call(good, (), ()), return_exceptions=True
        )
        assert results[1] == 1
        assert getattr(results[0], "reason", None) == "REDIS_ERROR"
    finally:
        await redis_client.delete("{ev:0}:not-a-number")
        await batcher.stop(1)


async def test_a_stalled_redis_fails_calls_and_the_connection_recovers(
    private_redis: tuple[aioredis.Redis, int],
) -> None:
    client, pid = private_redis
    batcher = ScriptBatcher(client)
    one = _script("return 1")
    try:
        assert await batcher.call(one, (), ()) == 1
        os.kill(pid, signal.SIGSTOP)
        try:
            with deadline.scope(0.1):
                with pytest.raises(DeadlineExceeded):
                    await batcher.call(one, (), ())
            # Past the connection's timeout (0.5 s) the pipeline is abandoned.
            with pytest.raises(Unavailable):
                await batcher.call(one, (), ())
        finally:
            os.kill(pid, signal.SIGCONT)
        assert await batcher.call(one, (), ()) == 1
    finally:
        await batcher.stop(1)


async def test_a_dropped_connection_is_replaced(private_redis: tuple[aioredis.Redis, int]) -> None:
    client, _ = private_redis
    batcher = ScriptBatcher(client)
    one = _script("return 1")
    try:
        assert await batcher.call(one, (), ()) == 1
        killed = await client.client_kill_filter(_type="normal", skipme=True)
        assert killed == 1  # the batcher's connection
        replies = []
        for _ in range(50):  # the first calls may still meet the closing connection
            try:
                replies.append(await batcher.call(one, (), ()))
                break
            except Unavailable:
                await asyncio.sleep(0.01)
        assert replies == [1]
    finally:
        await batcher.stop(1)
