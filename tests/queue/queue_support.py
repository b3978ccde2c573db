"""Helpers for the queue's tests: event configurations, a QueueService on
a real loopback server, a leadership double, Redis inspection."""

from __future__ import annotations

import contextlib
import secrets
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, replace
from typing import Any, cast

import grpc
import redis.asyncio as aioredis

from boxoffice.errors import BoxofficeError, from_rpc_error
from boxoffice.redis import ScriptBatcher
from boxoffice.runtime import Runtime
from gen.boxoffice.queue.v1 import queue_service_pb2 as pb
from gen.boxoffice.queue.v1 import queue_service_pb2_grpc as pb_grpc
from queue_svc import app
from queue_svc.config import QueueSettings
from queue_svc.model import EventQueueConfig
from queue_svc.service import QueueHandler
from queue_svc.store import EventKeys, RedisQueueStore
from tests.support import ManualClock, Stores, make_runtime, running

MINUTE_MS = 60_000


def new_event_id() -> int:
    """A random event id, so that tests never see each other's keys."""
    return 1_000_000 + secrets.randbelow(2**40)


def event_config(event_id: int, *, opens_at_ms: int, **changes: Any) -> EventQueueConfig:
    base = EventQueueConfig(
        event_id=event_id,
        opens_at_ms=opens_at_ms,
        pre_queue_window_ms=30 * MINUTE_MS,
        admission_rate_per_second=100,
        max_active_shoppers=1000,
        session_length_ms=10 * MINUTE_MS,
        token_ttl_ms=5 * MINUTE_MS,
        claim_grace_ms=MINUTE_MS,
        paused=False,
        version=1,
    )
    return replace(base, **changes)


def redis_store(client: aioredis.Redis) -> tuple[RedisQueueStore, ScriptBatcher]:
    batcher = ScriptBatcher(client)
    return RedisQueueStore(batcher), batcher


async def event_keys_dump(client: aioredis.Redis, event_id: int) -> dict[bytes, Any]:
    """Every key of an event with its type and content (to prove that a
    rejected call changed nothing)."""
    dump: dict[bytes, Any] = {}
    async for key in client.scan_iter(match=f"{{ev:{event_id}}}:*", count=1000):
        kind = await client.type(key)
        if kind == b"zset":
            dump[key] = await client.zrange(key, 0, -1, withscores=True)
        elif kind == b"hash":
            dump[key] = await client.hgetall(key)
        else:
            dump[key] = await client.get(key)
    return dump


class AlwaysLeader:
    """A Leadership double: leads at once with a fixed epoch."""

    def __init__(self, epoch: int) -> None:
        self.epoch = epoch

    async def run(self, lead: Callable[[int], Awaitable[None]]) -> None:
        await lead(self.epoch)


@dataclass
class QueueUnderTest:
    rt: Runtime
    handler: QueueHandler
    address: str
    channel: grpc.aio.Channel
    stub: Any  # QueueServiceAsyncStub
    redis: aioredis.Redis
    clock: ManualClock | None

    async def create_event(self, event_id: int, *, opens_at_ms: int, **fields: Any) -> pb.EventQueueConfig:
        config = pb.EventQueueConfig(event_id=event_id, **fields)
        config.opens_at.FromMilliseconds(opens_at_ms)
        reply = await self.stub.CreateEventQueue(pb.CreateEventQueueRequest(config=config))
        assert isinstance(reply, pb.CreateEventQueueResponse)
        return reply.config


@contextlib.asynccontextmanager
async def queue_service(
    stores: Stores, *, clock: ManualClock | None = None, environ: dict[str, str] | None = None
) -> AsyncIterator[QueueUnderTest]:
    """QueueService (server role) on a loopback port against the test stores."""
    rt = make_runtime(stores, environ=environ, clock=clock)
    settings = QueueSettings.from_env(rt.env)
    components, handler = app.build_server(rt, settings)
    server = components[-1]
    async with running([*rt.infrastructure(), *components]):
        address = getattr(server, "address")  # noqa: B009
        channel = grpc.aio.insecure_channel(address)
        try:
            yield QueueUnderTest(
                rt=rt,
                handler=handler,
                address=address,
                channel=channel,
                stub=pb_grpc.QueueServiceStub(channel),
                redis=rt.redis(),
                clock=clock,
            )
        finally:
            await channel.close()


async def rpc_error(call: Awaitable[object]) -> BoxofficeError:
    """The domain error a call fails with (fails the test if it succeeds)."""
    try:
        await call
    except grpc.aio.AioRpcError as err:
        return from_rpc_error(err)
    raise AssertionError("the call succeeded")


async def members(client: aioredis.Redis, key: str, start: int = 0, end: int = -1) -> list[str]:
    """The members of a sorted set, lowest score first."""
    found = await client.zrange(key, start, end)
    return [cast(bytes, member).decode() for member in found]


def keys_of(event_id: int) -> EventKeys:
    return EventKeys.of(event_id)
