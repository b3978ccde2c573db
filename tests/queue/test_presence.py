"""Dead waiters leave: a waiting fan not seen for the room's presence grace
drops out at the next admit tick (and is never admitted), a fan seen since
(joined again, read their place, reported by RecordPresence, or followed by
a position watch) stays; the work of a tick is in proportion to the fans it
drops, not to the fans who wait."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any, cast

import grpc
import pytest
import redis.asyncio as aioredis

from boxoffice import access
from gen.boxoffice.queue.v1 import queue_service_pb2 as pb
from queue_svc.app import QueueApp
from queue_svc.model import PRE_QUEUE_BAND, QueueState
from queue_svc.ports import FanOp, JoinStatus, QueueStore
from tests.queue.harness import (
    MINUTE_MS,
    NO_LIMITS,
    keys_of,
    members,
    new_event_id,
    queue_app,
    queue_service,
    room_config,
    rpc_error,
)
from tests.support import ManualClock, Stores

NOW = 1_900_000_000_000  # a fixed clock (ms): every script takes the time as an argument
GRACE_MS = 5 * MINUTE_MS


@pytest.fixture
async def queue(stores: Stores) -> AsyncIterator[QueueApp]:
    async with queue_app(stores) as queue:
        yield queue


async def _room(store: QueueStore, *, opens_at_ms: int = NOW - MINUTE_MS, **changes: Any) -> int:
    event_id = new_event_id()
    await store.put_config(room_config(event_id, opens_at_ms=opens_at_ms, presence_grace_ms=GRACE_MS, **changes))
    return event_id


async def _join(store: QueueStore, event_id: int, customer: str, now: int, score: int = 7) -> int:
    reply = await store.join(event_id, customer, "", now_ms=now, random_score=score, limits=NO_LIMITS)
    assert reply.status is JoinStatus.WAITING, reply
    return reply.score


async def _state(store: QueueStore, event_id: int, customer: str, now: int) -> QueueState:
    place = await store.fan(event_id, customer, now_ms=now, op=FanOp.LOOK)
    assert place is not None
    return place.state


async def test_a_dead_waiter_is_dropped_after_the_grace_and_never_admitted(queue: QueueApp) -> None:
    store = queue.store
    event_id = await _room(store, paused=True, admission_rate_per_second=10)
    for name in ("ann", "bob", "cid"):
        await _join(store, event_id, name, NOW)
    # bob is reported present by the edge; cid joins again (is seen): ann is silent.
    assert await store.record_presence(event_id, ["bob", "nobody", "bob"], now_ms=NOW + 4 * MINUTE_MS) == 2
    await store.join(event_id, "cid", "", now_ms=NOW + 4 * MINUTE_MS, random_score=0, limits=NO_LIMITS)

    early = await store.admit(event_id, now_ms=NOW + GRACE_MS, epoch=1)  # exactly the grace: still in
    assert early is not None and early.dropped == 0 and early.queue_length == 3
    tick = await store.admit(event_id, now_ms=NOW + GRACE_MS + 1, epoch=1)
    assert tick is not None and tick.dropped == 1 and tick.queue_length == 2
    assert await _state(store, event_id, "ann", NOW + GRACE_MS + 2) is QueueState.DROPPED
    assert await members(queue.rt.redis(), keys_of(event_id).seen) == ["bob", "cid"]

    # Admission resumes: bob and cid are admitted, ann never.
    await store.put_config(
        room_config(
            event_id, opens_at_ms=NOW - MINUTE_MS, presence_grace_ms=GRACE_MS, admission_rate_per_second=10, version=2
        )
    )
    admitted = await store.admit(event_id, now_ms=NOW + GRACE_MS + 2000, epoch=1)
    assert admitted is not None and admitted.admitted == 2 and admitted.queue_length == 0
    assert sorted(await members(queue.rt.redis(), keys_of(event_id).admitted)) == ["bob", "cid"]
    assert await _state(store, event_id, "ann", NOW + GRACE_MS + 3000) is QueueState.DROPPED
    # The admitted left the seen set with the queue: a report cannot touch them.
    assert await queue.rt.redis().zcard(keys_of(event_id).seen) == 0
    assert await store.record_presence(event_id, ["bob", "cid"], now_ms=NOW + GRACE_MS + 4000) == 0
    assert await queue.rt.redis().zcard(keys_of(event_id).seen) == 0

    # ann may rejoin, at the back.
    dan = await _join(store, event_id, "dan", NOW + GRACE_MS + 5000)
    ann = await _join(store, event_id, "ann", NOW + GRACE_MS + 6000)
    assert ann > dan


async def test_reading_a_place_counts_as_seen_and_leaving_forgets_the_fan(queue: QueueApp) -> None:
    store = queue.store
    event_id = await _room(store, paused=True)
    await _join(store, event_id, "ann", NOW)
    await _join(store, event_id, "bob", NOW)
    await store.fan(event_id, "ann", now_ms=NOW + 3 * MINUTE_MS, op=FanOp.CLAIM)
    left = await store.fan(event_id, "bob", now_ms=NOW + MINUTE_MS, op=FanOp.LEAVE)
    assert left is not None and left.state is QueueState.LEFT
    assert await members(queue.rt.redis(), keys_of(event_id).seen) == ["ann"]
    tick = await store.admit(event_id, now_ms=NOW + GRACE_MS + 1, epoch=1)
    assert tick is not None and tick.dropped == 0
    assert await _state(store, event_id, "bob", NOW + GRACE_MS + 2) is QueueState.LEFT


async def test_pre_queue_fans_are_dropped_too(queue: QueueApp) -> None:
    store = queue.store
    opens = NOW + 30 * MINUTE_MS
    event_id = await _room(store, opens_at_ms=opens)
    await _join(store, event_id, "early", NOW, score=PRE_QUEUE_BAND // 2)
    await _join(store, event_id, "keen", NOW, score=PRE_QUEUE_BAND // 3)
    await store.record_presence(event_id, ["keen"], now_ms=NOW + 4 * MINUTE_MS)
    tick = await store.admit(event_id, now_ms=NOW + GRACE_MS + 1, epoch=1)
    assert tick is not None and tick.dropped == 1 and tick.admitted == 0
    assert await _state(store, event_id, "early", NOW + GRACE_MS + 2) is QueueState.DROPPED
    assert await _state(store, event_id, "keen", NOW + GRACE_MS + 2) is QueueState.WAITING


async def test_drops_per_tick_are_bounded_and_the_rest_go_next_tick(queue: QueueApp) -> None:
    store = queue.store
    event_id = await _room(store, paused=True)
    client = queue.rt.redis()
    keys = keys_of(event_id)
    # 12,000 fans seen long ago (written directly: the join script is tested above).
    fans = {f"fan-{i}": PRE_QUEUE_BAND + i for i in range(12_000)}
    await client.zadd(keys.queue, fans)
    await client.zadd(keys.seen, dict.fromkeys(fans, NOW))
    first = await store.admit(event_id, now_ms=NOW + GRACE_MS + 1, epoch=1)
    second = await store.admit(event_id, now_ms=NOW + GRACE_MS + 2, epoch=1)
    assert first is not None and second is not None
    assert (first.dropped, second.dropped) == (10_000, 2_000)
    assert await client.zcard(keys.queue) == 0 and await client.hlen(keys.outcomes) == 12_000


async def _commands(client: aioredis.Redis) -> int:
    stats: dict[str, Any] = await client.info("commandstats")
    return sum(int(entry["calls"]) for entry in stats.values())


async def _tick_cost(queue: QueueApp, waiters: int, dead: int) -> tuple[int, float]:
    """(Redis commands, script seconds) of one admit tick that drops ``dead``
    of ``waiters`` waiting fans and admits 10, on a Redis of its own."""
    store, client = queue.store, queue.rt.redis()
    event_id = await _room(store, admission_rate_per_second=10)
    keys = keys_of(event_id)
    fans = {f"fan-{i:06d}": PRE_QUEUE_BAND + i for i in range(waiters)}
    await client.zadd(keys.queue, fans)
    # Every fan seen recently, but ``dead`` of them (spread through the queue) long ago.
    seen = dict.fromkeys(fans, NOW + GRACE_MS)
    for i in range(0, waiters, waiters // dead):
        seen[f"fan-{i:06d}"] = NOW
    await client.zadd(keys.seen, seen)
    await store.admit(event_id, now_ms=NOW + 1000, epoch=1)  # the first tick banks the allowance
    await client.config_resetstat()
    began = time.perf_counter()
    tick = await store.admit(event_id, now_ms=NOW + GRACE_MS + 1000, epoch=1)
    elapsed = time.perf_counter() - began
    commands = await _commands(client) - 1  # the INFO itself
    assert tick is not None and tick.dropped == dead and tick.admitted == 10
    await client.delete(*keys.common)
    return commands, elapsed


async def test_the_cost_of_a_tick_is_flat_in_the_number_of_waiters(stores: Stores, embedded_redis_url: str) -> None:
    """Redis commands of a tick that drops 10 dead waiters and admits 10:
    the same with 100 and with 10,000 waiting (counted on a private Redis,
    scripts' inner commands included)."""
    async with queue_app(stores, redis_url=embedded_redis_url) as queue:
        few, _ = await _tick_cost(queue, 100, 10)
        many, _ = await _tick_cost(queue, 10_000, 10)
    assert few == many, (few, many)


async def test_record_presence_over_grpc(stores: Stores) -> None:
    clock = ManualClock()
    event_id = new_event_id()
    async with queue_service(stores, clock=clock) as q:
        now_ms = int(clock.now() * 1000)
        await q.create_event(event_id, opens_at_ms=now_ms + 10 * MINUTE_MS)
        for name in ("ann", "bob"):
            await q.stub.JoinQueue(pb.JoinQueueRequest(event_id=event_id, customer_id=name))
        clock.advance(60)
        reply = await q.stub.RecordPresence(
            pb.RecordPresenceRequest(event_id=event_id, customer_ids=["ann", "ann", "zed"])
        )
        assert reply.waiting == 2
        seen = dict(
            cast(list[tuple[bytes, float]], await q.redis.zrange(keys_of(event_id).seen, 0, -1, withscores=True))
        )
        assert seen == {b"bob": now_ms, b"ann": now_ms + 60_000}

        empty = await q.stub.RecordPresence(pb.RecordPresenceRequest(event_id=event_id))
        assert empty.waiting == 0
        too_many = await rpc_error(
            q.stub.RecordPresence(
                pb.RecordPresenceRequest(event_id=event_id, customer_ids=[f"f{i}" for i in range(1001)])
            )
        )
        assert too_many.code is grpc.StatusCode.INVALID_ARGUMENT and too_many.metadata["field"] == "customer_ids"
        blank = await rpc_error(q.stub.RecordPresence(pb.RecordPresenceRequest(event_id=event_id, customer_ids=[""])))
        assert blank.code is grpc.StatusCode.INVALID_ARGUMENT
        unknown = await rpc_error(
            q.stub.RecordPresence(pb.RecordPresenceRequest(event_id=new_event_id(), customer_ids=["ann"]))
        )
        assert unknown.code is grpc.StatusCode.NOT_FOUND
    method = "/boxoffice.queue.v1.QueueService/RecordPresence"
    assert [role for role in access.ROLES if access.allowed(method, role)] == [access.EDGE]


async def _seen_at(client: aioredis.Redis, event_id: int, customer: str) -> float | None:
    score = await client.zscore(keys_of(event_id).seen, customer)
    return None if score is None else float(score)


async def test_a_fan_watching_their_position_is_kept(stores: Stores) -> None:
    """The queue service reports the fans its WatchQueuePosition streams
    follow as present: a watching fan outlives the grace, a silent one
    does not."""
    clock = ManualClock()
    event_id = new_event_id()
    environ = {"BOXOFFICE_QUEUE_PRESENCE_REPORT_SECONDS": "0.1", "BOXOFFICE_QUEUE_WATCH_INTERVAL_SECONDS": "0.05"}
    async with queue_service(stores, clock=clock, environ=environ) as q:
        now_ms = int(clock.now() * 1000)
        await q.create_event(event_id, opens_at_ms=now_ms - 1000, paused=True)
        for name in ("watcher", "silent"):
            await q.stub.JoinQueue(pb.JoinQueueRequest(event_id=event_id, customer_id=name))
        stream = q.stub.WatchQueuePosition(pb.WatchQueuePositionRequest(event_id=event_id, customer_id="watcher"))
        first = await stream.read()
        assert first.position.state == pb.QUEUE_STATE_WAITING
        clock.advance(4 * 60)
        later_ms = int(clock.now() * 1000)
        async with asyncio.timeout(20):  # a bound for a hung test, not a timing claim
            while True:
                if await _seen_at(q.redis, event_id, "watcher") == later_ms:
                    break
                await asyncio.sleep(0.05)
        clock.advance(2 * 60)
        tick = await q.app.admitter.tick_event(event_id, epoch=1)
        assert tick is not None and tick.dropped == 1
        stream.cancel()
        place = await q.app.store.fan(event_id, "watcher", now_ms=int(clock.now() * 1000), op=FanOp.LOOK)
        assert place is not None and place.state is QueueState.WAITING
        gone = await q.stub.GetQueuePosition(pb.GetQueuePositionRequest(event_id=event_id, customer_id="silent"))
        assert gone.position.state == pb.QUEUE_STATE_DROPPED
