"""Safety-net mode: a join into an open room where nobody waits and a slot
is free is admitted by the join script itself, within the admission rate
and the cap on active shoppers; many concurrent joins and two admitters
racing never exceed the cap."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest

from gen.boxoffice.queue.v1 import queue_service_pb2 as pb
from queue_svc.app import QueueApp
from queue_svc.model import PRE_QUEUE_BAND, QueueState
from queue_svc.ports import FanOp, JoinReply, JoinStatus, QueueStore
from tests.queue.harness import (
    MINUTE_MS,
    NO_LIMITS,
    Race,
    build_app,
    keys_of,
    members,
    new_event_id,
    queue_app,
    queue_service,
    race_room,
    room_config,
    started,
)
from tests.support import ManualClock, Stores

NOW = 1_900_000_000_000
MAX_ACTIVE = 40


@pytest.fixture
async def queue(stores: Stores) -> AsyncIterator[QueueApp]:
    async with queue_app(stores) as queue:
        yield queue


async def _room(store: QueueStore, **changes: Any) -> int:
    event_id = new_event_id()
    settings: dict[str, Any] = {"opens_at_ms": NOW - MINUTE_MS, "safety_net": True, **changes}
    await store.put_config(room_config(event_id, **settings))
    return event_id


async def _join(store: QueueStore, event_id: int, customer: str, now: int = NOW) -> JoinReply:
    return await store.join(event_id, customer, "", now_ms=now, random_score=5, limits=NO_LIMITS)


async def test_a_join_into_an_empty_room_is_admitted_at_once(queue: QueueApp) -> None:
    store, client = queue.store, queue.rt.redis()
    event_id = await _room(store, claim_grace_ms=30_000)
    ann = await _join(store, event_id, "ann")
    assert ann.status is JoinStatus.ADMITTED and ann.newly_joined and ann.score > PRE_QUEUE_BAND
    assert await client.zscore(keys_of(event_id).admitted, "ann") == NOW + 30_000
    progress = await store.progress(event_id, now_ms=NOW)
    assert progress is not None
    assert (progress.admitted_total, progress.admitted_through_score, progress.joined_total) == (1, ann.score, 1)
    assert progress.queue_length == 0 and progress.active_shoppers == 1
    # Joining again answers the admission, without a second one.
    again = await _join(store, event_id, "ann", NOW + 1)
    assert again.status is JoinStatus.ADMITTED and not again.newly_joined
    # The admission is claimed like any other.
    place = await store.fan(event_id, "ann", now_ms=NOW + 2, op=FanOp.CLAIM)
    assert place is not None and place.state is QueueState.ADMITTED and place.claimed_now


@pytest.mark.parametrize(
    "case",
    ["off", "someone_waits", "full", "paused", "pre_queue"],
)
async def test_otherwise_a_join_waits(queue: QueueApp, case: str) -> None:
    store = queue.store
    cases: dict[str, dict[str, Any]] = {
        "off": {"safety_net": False},
        "someone_waits": {},
        "full": {"max_active_shoppers": 1},
        "paused": {"paused": True},
        "pre_queue": {"opens_at_ms": NOW + MINUTE_MS},
    }
    changes = cases[case]
    event_id = await _room(store, **changes)
    if case == "someone_waits":
        await queue.rt.redis().zadd(keys_of(event_id).queue, {"first": PRE_QUEUE_BAND})
    if case == "full":
        assert (await _join(store, event_id, "first")).status is JoinStatus.ADMITTED
    reply = await _join(store, event_id, "ann")
    assert reply.status is JoinStatus.WAITING and reply.newly_joined
    progress = await store.progress(event_id, now_ms=NOW)
    assert progress is not None and progress.admitted_total == (1 if case == "full" else 0)


async def test_the_safety_net_keeps_to_the_rate(queue: QueueApp) -> None:
    """With 5 admissions a second, 8 simultaneous arrivals: 5 at once, 3
    queued; the next tick does not hand out the allowance again, and what a
    tick leaves of it is what the next arrivals may take."""
    store = queue.store
    event_id = await _room(store, admission_rate_per_second=5)
    replies = [await _join(store, event_id, f"fan-{i}") for i in range(8)]
    assert [r.status for r in replies] == [JoinStatus.ADMITTED] * 5 + [JoinStatus.WAITING] * 3
    tick = await store.admit(event_id, now_ms=NOW + 100, epoch=1)
    assert tick is not None and tick.admitted == 0 and tick.queue_length == 3
    # A second on, the allowance is back: the three waiting fans go in.
    tick = await store.admit(event_id, now_ms=NOW + 1100, epoch=1)
    assert tick is not None and tick.admitted == 3 and tick.active_shoppers == 8
    # Nobody waits now: the second's two admissions left go to arrivals at
    # once, then the allowance is spent and the next arrival waits for a tick.
    late = [(await _join(store, event_id, f"late-{i}", NOW + 1100)).status for i in range(3)]
    assert late == [JoinStatus.ADMITTED, JoinStatus.ADMITTED, JoinStatus.WAITING]


async def test_over_grpc_the_join_answers_admitted_and_the_token_follows(stores: Stores) -> None:
    event_id = new_event_id()
    async with queue_service(stores) as q:
        await q.app.store.put_config(
            room_config(event_id, opens_at_ms=int(q.rt.clock.now() * 1000) - 1000, safety_net=True)
        )
        joined = await q.stub.JoinQueue(pb.JoinQueueRequest(event_id=event_id, customer_id="ann"))
        assert joined.newly_joined and joined.position.state == pb.QUEUE_STATE_ADMITTED
        place = await q.stub.GetQueuePosition(pb.GetQueuePositionRequest(event_id=event_id, customer_id="ann"))
        assert place.position.state == pb.QUEUE_STATE_ADMITTED and place.position.access_token
        assert q.rt.registry.get_sample_value("boxoffice_queue_joins_total", {"result": "safety_net"}) == 1


async def test_concurrent_joins_and_two_admitters_never_exceed_max_active(stores: Stores) -> None:
    """Waves of simultaneous joins (through two processes' stores) land in
    a room that the two racing admitters keep draining; every other wave
    waits until the queue is empty and a slot is free, so it meets the
    safety net while admitters pop and the other waves queue behind it;
    fans claim and end sessions meanwhile. The race goes on (bounded) until
    both ways in were taken, slots were refilled many times and the room
    was full. The monitor never sees more than max_active shoppers."""
    clock = ManualClock()
    event_id = new_event_id()
    first, second = (build_app(stores, clock=clock) for _ in range(2))
    async with started(first), started(second):
        config = race_room(event_id, clock, MAX_ACTIVE, safety_net=True)
        await first.store.put_config(config)
        at_once = 0
        admitted = 0
        race = Race(second.rt.redis(), first.store, event_id, clock)

        async def joins() -> None:
            nonlocal at_once
            wave = 0
            while not race.done.is_set():
                if wave % 2 == 1 and not await race.drained(MAX_ACTIVE):
                    return
                now_ms = int(clock.now() * 1000)
                replies = await asyncio.gather(
                    *(
                        (first, second)[i % 2].store.join(
                            event_id, f"w{wave}-{i}", "", now_ms=now_ms, random_score=0, limits=NO_LIMITS
                        )
                        for i in range(30)
                    )
                )
                at_once += sum(1 for r in replies if r.status is JoinStatus.ADMITTED and r.newly_joined)
                wave += 1
                await asyncio.sleep(0.002)

        async def tick_with(index: int) -> int:
            nonlocal admitted
            result = await (first, second)[index].admitter.tick_event(event_id, epoch=1)
            assert result is not None and not result.stale_epoch
            assert result.active_shoppers <= MAX_ACTIVE
            admitted += result.admitted
            return result.admitted

        def seen_enough() -> bool:
            return at_once > 0 and admitted > 0 and admitted + at_once > 3 * MAX_ACTIVE and race.most_seen >= MAX_ACTIVE

        await race.run(
            [lambda: tick_with(0), lambda: tick_with(1)],
            ticks=300,
            alongside=joins(),
            until=seen_enough,
            most_ticks=20_000,
        )
        queued = await members(second.rt.redis(), keys_of(event_id).queue)
    assert at_once > 0 and admitted > 0  # both ways in were taken
    assert admitted + at_once > 3 * MAX_ACTIVE  # slots were freed and refilled many times
    assert race.most_seen == MAX_ACTIVE, (race.most_seen, len(queued))  # full, and never more
