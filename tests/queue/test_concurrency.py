"""Concurrency: 5,000 simultaneous joins over gRPC, and I3 (never more
than max_active shoppers) with two admitters racing, plus the control that
shows the race is real when the cap check is not atomic with the pop."""

from __future__ import annotations

import asyncio
import contextlib
import random
from typing import cast

from gen.boxoffice.queue.v1 import queue_service_pb2 as pb
from queue_svc.ports import QueueStore
from tests.queue.harness import (
    NO_LIMITS,
    Race,
    active_count,
    build_app,
    keys_of,
    new_event_id,
    queue_app,
    queue_service,
    race_room,
    room_config,
    started,
)
from tests.support import ManualClock, Stores

JOINS = 5000
MAX_ACTIVE = 40


async def test_5000_concurrent_joins_get_5000_distinct_places_and_keep_them(stores: Stores) -> None:
    clock = ManualClock()
    event_id = new_event_id()
    async with queue_service(stores, clock=clock) as q:
        await q.create_event(event_id, opens_at_ms=int(clock.now() * 1000) - 1000)
        requests = [pb.JoinQueueRequest(event_id=event_id, customer_id=f"fan-{i}") for i in range(JOINS)]
        first = await asyncio.gather(*(q.stub.JoinQueue(r) for r in requests))
        assert all(reply.newly_joined for reply in first)
        scores = {reply.position.customer_id: reply.position.score for reply in first}
        assert len(set(scores.values())) == JOINS
        assert sorted(reply.position.ahead for reply in first) == list(range(JOINS))

        random.shuffle(requests)
        again = await asyncio.gather(*(q.stub.JoinQueue(r) for r in requests))
        assert not any(reply.newly_joined for reply in again)
        assert {reply.position.customer_id: reply.position.score for reply in again} == scores
        assert await q.redis.zcard(keys_of(event_id).queue) == JOINS
        stats = await q.stub.GetQueueStats(pb.GetQueueStatsRequest(event_id=event_id))
        assert stats.joined_total == JOINS and stats.progress.queue_length == JOINS


async def _queue_fans(store: QueueStore, event_id: int, now_ms: int, count: int) -> None:
    await asyncio.gather(
        *(store.join(event_id, f"fan-{i}", "", now_ms=now_ms, random_score=0, limits=NO_LIMITS) for i in range(count))
    )


async def test_two_admitters_racing_never_exceed_maxactive_count(stores: Stores) -> None:
    clock = ManualClock()
    event_id = new_event_id()
    first, second = (build_app(stores, clock=clock) for _ in range(2))
    async with started(first), started(second):
        store = first.store
        config = race_room(event_id, clock, MAX_ACTIVE)
        opens_ms = config.opens_at_ms
        await store.put_config(config)
        await _queue_fans(store, event_id, opens_ms, 3000)

        async def tick_with(index: int) -> int:
            admitter = (first, second)[index].admitter
            result = await admitter.tick_event(event_id, epoch=1)  # both believe they lead
            assert result is not None and not result.stale_epoch
            assert result.active_shoppers <= MAX_ACTIVE
            return result.admitted

        race = Race(second.rt.redis(), store, event_id, clock)
        admitted = await race.run([lambda: tick_with(0), lambda: tick_with(1)], ticks=300)
    assert admitted > 3 * MAX_ACTIVE  # slots were freed and refilled many times
    assert race.most_seen == MAX_ACTIVE  # full, and never more


async def test_control_a_cap_check_outside_the_pop_is_exceeded(stores: Stores) -> None:
    """The same race against an admitter that reads the free slots in one
    call and pops in another: with the window between them held open (both
    admitters read before either writes), the monitor catches the cap being
    exceeded. This is what the single admit script rules out."""
    clock = ManualClock()
    event_id = new_event_id()
    async with queue_app(stores, clock=clock) as queue:
        store, redis_client = queue.store, queue.rt.redis()
        opens_ms = int(clock.now() * 1000) - 1000
        await store.put_config(
            room_config(event_id, opens_at_ms=opens_ms, max_active_shoppers=MAX_ACTIVE, claim_grace_ms=5_000)
        )
        await _queue_fans(store, event_id, opens_ms, 3000)
        keys = keys_of(event_id)
        window = asyncio.Barrier(2)

        async def naive_tick() -> int:
            free = MAX_ACTIVE - await active_count(redis_client, event_id)
            with contextlib.suppress(asyncio.BrokenBarrierError):
                await asyncio.wait_for(window.wait(), 0.5)  # the test-only hook: hold the window open
            if free <= 0:
                return 0
            popped = cast(list[tuple[bytes, float]], await redis_client.zpopmin(keys.queue, free))
            if popped:
                claim_by = int(clock.now() * 1000) + 5_000
                await redis_client.zadd(keys.admitted, {member: claim_by for member, _ in popped})
            return len(popped)

        race = Race(redis_client, store, event_id, clock)
        await race.run([naive_tick, naive_tick], ticks=20)
        assert race.most_seen > MAX_ACTIVE
