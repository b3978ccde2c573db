"""The queue's test harness: everything is built by ``queue_svc.app`` on a
test Runtime (``tests.support.make_runtime``), with a test's overrides.

- :func:`queue_app`: the app's parts on running stores, without a server
  (the Redis store and its scripts, admitters);
- :func:`queue_service`: QueueService (server role) on a loopback port,
  with a stub to call it;
- waiting-room configurations, a leadership double, Redis inspection;
- :class:`Race`: admitters racing while fans claim and end sessions.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import random
import secrets
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, replace
from typing import Any, cast

import grpc
import redis.asyncio as aioredis

from boxoffice import access
from boxoffice.errors import BoxofficeError, from_rpc_error
from boxoffice.runtime import Runtime
from gen.boxoffice.queue.v1 import queue_service_pb2 as pb
from gen.boxoffice.queue.v1 import queue_service_pb2_grpc as pb_grpc
from queue_svc.adapters import EventKeys
from queue_svc.app import QueueApp
from queue_svc.model import WaitingRoomConfig
from queue_svc.ports import FanOp, JoinLimits, Leadership, QueueStore
from tests.edge.asserting import edge_mesh_client
from tests.support import ManualClock, Stores, make_runtime, running

MINUTE_MS = 60_000
NO_LIMITS = JoinLimits(per_account=0, per_client=0, window_ms=10_000)


def new_event_id() -> int:
    """A random event id, so that tests never see each other's keys."""
    return 1_000_000 + secrets.randbelow(2**40)


def room_config(event_id: int, *, opens_at_ms: int, **changes: Any) -> WaitingRoomConfig:
    """A waiting room with room for everyone, changed by ``changes``."""
    base = WaitingRoomConfig(
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


def race_room(event_id: int, clock: ManualClock, cap: int, **changes: Any) -> WaitingRoomConfig:
    """A room for a race of admitters: open a second ago, admitting fast
    under ``cap``, with short claim windows and sessions so that slots free
    up and refill while the race runs."""
    settings: dict[str, Any] = {
        "opens_at_ms": int(clock.now() * 1000) - 1000,
        "admission_rate_per_second": 2000,
        "max_active_shoppers": cap,
        "claim_grace_ms": 500,
        "session_length_ms": 1_000,
        **changes,
    }
    return room_config(event_id, **settings)


class AlwaysLeader:
    """A Leadership double: leads at once with a fixed epoch."""

    def __init__(self, epoch: int) -> None:
        self.epoch = epoch

    async def run(self, lead: Callable[[int], Awaitable[None]]) -> None:
        await lead(self.epoch)


def build_app(
    stores: Stores,
    *,
    clock: ManualClock | None = None,
    environ: dict[str, str] | None = None,
    leadership: Leadership | None = None,
    redis_url: str | None = None,
) -> QueueApp:
    """The app on a fresh test Runtime (not started). The leadership is an
    ``AlwaysLeader(1)`` unless given; ``redis_url`` replaces the suite's
    Redis (e.g. the embedded Redis 6.2)."""
    if redis_url is not None:
        stores = dataclasses.replace(
            stores, redis_url=redis_url, redis_cluster=stores.redis_url == redis_url and stores.redis_cluster
        )
    rt = make_runtime(stores, environ=environ, clock=clock)
    return QueueApp(rt, leadership=leadership or AlwaysLeader(1))


@contextlib.asynccontextmanager
async def started(queue: QueueApp, *components: Any) -> AsyncIterator[QueueApp]:
    """The app's stores (and ``components``) started, stopped afterwards."""
    _ = queue.store, queue.rooms  # built now, so that the infrastructure has the client and the pool
    async with running([*queue.rt.infrastructure(), queue.batcher, *components]):
        yield queue


@contextlib.asynccontextmanager
async def queue_app(
    stores: Stores,
    *,
    clock: ManualClock | None = None,
    environ: dict[str, str] | None = None,
    leadership: Leadership | None = None,
    redis_url: str | None = None,
) -> AsyncIterator[QueueApp]:
    """:func:`build_app`, with its stores running."""
    queue = build_app(stores, clock=clock, environ=environ, leadership=leadership, redis_url=redis_url)
    async with started(queue):
        yield queue


@dataclass
class QueueUnderTest:
    app: QueueApp
    address: str
    channel: grpc.aio.Channel
    stub: Any  # QueueServiceAsyncStub
    clock: ManualClock | None

    @property
    def rt(self) -> Runtime:
        return self.app.rt

    @property
    def redis(self) -> aioredis.Redis:
        return self.app.rt.redis()

    async def create_event(self, event_id: int, *, opens_at_ms: int, **fields: Any) -> pb.EventQueueConfig:
        """CreateEventQueue: a waiting room for the event."""
        config = pb.EventQueueConfig(event_id=event_id, **fields)
        config.opens_at.FromMilliseconds(opens_at_ms)
        reply = await self.stub.CreateEventQueue(pb.CreateEventQueueRequest(config=config))
        assert isinstance(reply, pb.CreateEventQueueResponse)
        return reply.config


@contextlib.asynccontextmanager
async def queue_service(
    stores: Stores, *, clock: ManualClock | None = None, environ: dict[str, str] | None = None
) -> AsyncIterator[QueueUnderTest]:
    """QueueService (the app's server role) on a loopback port against the
    test stores; the app's admitter leads at once with epoch 1."""
    queue = build_app(stores, clock=clock, environ=environ)
    components = queue.components("server")
    async with running([*queue.rt.infrastructure(), *components]):
        address = queue.server.address
        async with edge_mesh_client(stores, address) as client:
            # Each call goes as a role the authorization table allows it;
            # ``channel`` is the edge's.
            yield QueueUnderTest(
                app=queue,
                address=address,
                channel=client.channel(access.EDGE),
                stub=client.stub(pb_grpc.QueueServiceStub),
                clock=clock,
            )


async def rpc_error(call: Awaitable[object]) -> BoxofficeError:
    """The domain error a call fails with (fails the test if it succeeds)."""
    try:
        await call
    except grpc.aio.AioRpcError as err:
        return from_rpc_error(err)
    raise AssertionError("the call succeeded")


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
        elif kind == b"list":
            dump[key] = await client.lrange(key, 0, -1)
        else:
            dump[key] = await client.get(key)
    return dump


async def members(client: aioredis.Redis, key: str, start: int = 0, end: int = -1) -> list[str]:
    """The members of a sorted set, lowest score first."""
    found = await client.zrange(key, start, end)
    return [cast(bytes, member).decode() for member in found]


def keys_of(event_id: int, lane: str = "") -> EventKeys:
    return EventKeys.of(event_id, lane)


async def active_count(client: aioredis.Redis, event_id: int) -> int:
    keys = keys_of(event_id)
    async with client.pipeline(transaction=True) as pipe:  # one atomic read of both sets
        pipe.zcard(keys.admitted)
        pipe.zcard(keys.active)
        unclaimed, claimed = await pipe.execute()
    return int(unclaimed) + int(claimed)


class Race:
    """Two admitters ticking one event while fans claim, end sessions and
    time moves (so slots free up and refill); a monitor records the most
    shoppers ever seen at once."""

    def __init__(self, client: aioredis.Redis, store: QueueStore, event_id: int, clock: ManualClock) -> None:
        self.client = client
        self.store = store
        self.event_id = event_id
        self.clock = clock
        self.most_seen = 0
        self.done = asyncio.Event()

    async def monitor(self) -> None:
        while not self.done.is_set():
            self.most_seen = max(self.most_seen, await active_count(self.client, self.event_id))
            await asyncio.sleep(0)

    async def churn(self) -> None:
        rng = random.Random(7)
        while not self.done.is_set():
            admitted = await members(self.client, keys_of(self.event_id).admitted, 0, 5)
            now_ms = int(self.clock.now() * 1000)
            for member in admitted:
                op = FanOp.CLAIM if rng.random() < 0.5 else FanOp.END
                await self.store.fan(self.event_id, member, now_ms=now_ms, op=op)
            await asyncio.sleep(0.001)

    async def drained(self, max_active: int) -> bool:
        """Waits until nobody is queued and a slot is free (the admitters
        emptied the queue and churn freed a slot); False if the race ended
        first."""
        keys = keys_of(self.event_id)
        while not self.done.is_set():
            if await self.client.zcard(keys.queue) == 0 and await active_count(self.client, self.event_id) < max_active:
                return True
            await asyncio.sleep(0)
        return False

    async def run(
        self,
        admitters: list[Callable[[], Awaitable[int]]],
        ticks: int,
        *,
        alongside: Awaitable[None] | None = None,
        until: Callable[[], bool] | None = None,
        most_ticks: int = 0,
    ) -> int:
        """Each admitter ticks ``ticks`` times (while ``alongside`` runs,
        awaited too), and then on until ``until()`` holds, ``most_ticks``
        in all at most; the fans admitted in all."""
        background = [asyncio.create_task(self.monitor()), asyncio.create_task(self.churn())]
        if alongside is not None:
            background.append(asyncio.ensure_future(alongside))
        admitted = 0

        def going(done: int) -> bool:
            if done < ticks:
                return True
            return until is not None and done < most_ticks and not until()

        async def drive(tick: Callable[[], Awaitable[int]]) -> None:
            nonlocal admitted
            done = 0
            while going(done):
                done += 1
                self.clock.advance(0.02)
                admitted += await tick()
                self.most_seen = max(self.most_seen, await active_count(self.client, self.event_id))

        try:
            await asyncio.gather(*(drive(tick) for tick in admitters))
        finally:
            self.done.set()
            await asyncio.gather(*background)
        return admitted
