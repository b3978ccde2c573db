"""The admitter as the process runs it: a Loop that ticks while leading,
re-mirrors configuration, refuses to act on a stale epoch, and hands over
between two processes with the Postgres leadership."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable

from prometheus_client import CollectorRegistry

from boxoffice.lifecycle import Loop
from gen.boxoffice.queue.v1 import queue_service_pb2 as pb
from queue_svc import app
from queue_svc.model import QueueState
from queue_svc.ports import FanOp
from tests.queue.harness import (
    NO_LIMITS,
    AlwaysLeader,
    QueueUnderTest,
    build_app,
    keys_of,
    new_event_id,
    queue_app,
    queue_service,
    room_config,
    started,
)
from tests.support import ManualClock, Stores, make_runtime, running

FAST_TICKS = {"BOXOFFICE_QUEUE_TICK_SECONDS": "0.05", "BOXOFFICE_QUEUE_EVENT_REFRESH_SECONDS": "0.2"}


async def _eventually(check: Callable[[], Awaitable[bool]], timeout_seconds: float = 20.0) -> None:
    """Wait for a condition (a bound for a hung test, not a timing claim)."""
    async with asyncio.timeout(timeout_seconds):
        while True:
            if await check():
                return
            await asyncio.sleep(0.05)


async def _admitted(q: QueueUnderTest, event_id: int) -> int:
    stats = await q.stub.GetQueueStats(pb.GetQueueStatsRequest(event_id=event_id))
    return int(stats.progress.admitted_total)


async def test_the_admitter_loop_admits_while_leading(stores: Stores) -> None:
    event_id = new_event_id()
    async with queue_service(stores) as q:
        opens_ms = int(q.rt.clock.now() * 1000) - 1000
        await q.create_event(event_id, opens_at_ms=opens_ms, admission_rate_per_second=100, max_active_shoppers=5)
        for i in range(8):
            await q.stub.JoinQueue(pb.JoinQueueRequest(event_id=event_id, customer_id=f"fan-{i}"))
        admitting = build_app(stores, environ=FAST_TICKS, leadership=AlwaysLeader(3))
        rt = admitting.rt
        components = admitting.components("admitter")
        async with running([*rt.infrastructure(), *components]):
            await _eventually(lambda: _admitted_is(q, event_id, 5))
            stats = await q.stub.GetQueueStats(pb.GetQueueStatsRequest(event_id=event_id))
            assert stats.progress.active_shoppers == 5 and stats.progress.queue_length == 3
            labels = {"event_id": str(event_id)}
            assert rt.registry.get_sample_value("boxoffice_queue_admitted_total", labels) == 5
            assert rt.registry.get_sample_value("boxoffice_queue_active_shoppers", labels) == 5
            assert rt.registry.get_sample_value("boxoffice_queue_length", labels) == 3
            assert (rt.registry.get_sample_value("boxoffice_queue_admit_tick_seconds_count") or 0) > 0


async def _admitted_is(q: QueueUnderTest, event_id: int, count: int) -> bool:
    return await _admitted(q, event_id) == count


async def test_refresh_re_mirrors_a_lost_configuration(stores: Stores) -> None:
    event_id = new_event_id()
    async with queue_service(stores) as q:
        await q.create_event(event_id, opens_at_ms=int(q.rt.clock.now() * 1000))
        await q.redis.delete(keys_of(event_id).config)
        await q.app.admitter.refresh()
        assert await q.redis.hget(keys_of(event_id).config, "ver") == b"1"


async def test_a_deposed_leader_changes_nothing(stores: Stores) -> None:
    clock = ManualClock()
    event_id = new_event_id()
    new_leader = build_app(stores, clock=clock, leadership=AlwaysLeader(8))
    old_leader = build_app(stores, clock=clock, leadership=AlwaysLeader(7))
    async with started(new_leader), started(old_leader):
        store = new_leader.store
        now_ms = int(clock.now() * 1000)
        await store.put_config(room_config(event_id, opens_at_ms=now_ms - 1000, admission_rate_per_second=10))
        for i in range(30):
            await store.join(event_id, f"fan-{i}", "", now_ms=now_ms, random_score=0, limits=NO_LIMITS)
        await new_leader.admitter.tick_event(event_id, 8)
        clock.advance(1.0)
        fresh = await new_leader.admitter.tick_event(event_id, 8)
        assert fresh is not None and fresh.admitted == 10
        clock.advance(1.0)
        stale = await old_leader.admitter.tick_event(event_id, 7)
        assert stale is not None and stale.stale_epoch and stale.admitted == 0 and stale.highest_epoch == 8
        assert old_leader.rt.registry.get_sample_value("boxoffice_queue_admit_stale_epoch_total") == 1
        progress = await store.progress(event_id, now_ms=int(clock.now() * 1000))
        assert progress is not None and progress.admitted_total == 10 and progress.queue_length == 20


class _LeadLoseLeadAgain:
    """A Leadership double: leads (epoch 4) until told to lose, campaigns
    without winning until told to win, then leads again (epoch 5)."""

    def __init__(self) -> None:
        self.lose = asyncio.Event()
        self.lost = asyncio.Event()
        self.win = asyncio.Event()

    async def run(self, lead: Callable[[int], Awaitable[None]]) -> None:
        task = asyncio.ensure_future(lead(4))
        await self.lose.wait()
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        self.lost.set()
        await self.win.wait()
        await lead(5)


# While nobody leads: as many ticks as would admit 20 fans at the event's
# rate (a bound on how long the test watches for a stray admission).
_LEADERLESS_TICKS = 20


async def test_losing_leadership_stops_the_ticks(stores: Stores) -> None:
    """Once the leadership is lost, not one fan is admitted (nor one tick
    made), though fans wait and slots are free; leading again, admission
    goes on from where it stopped."""
    event_id = new_event_id()
    async with queue_service(stores) as q:
        await q.create_event(
            event_id,
            opens_at_ms=int(q.rt.clock.now() * 1000) - 1000,
            admission_rate_per_second=20,
            max_active_shoppers=1000,
        )
        for i in range(300):
            await q.stub.JoinQueue(pb.JoinQueueRequest(event_id=event_id, customer_id=f"fan-{i}"))
        leadership = _LeadLoseLeadAgain()
        admitting = build_app(stores, environ=FAST_TICKS, leadership=leadership)
        rt = admitting.rt
        components = admitting.components("admitter")

        def ticks() -> float:
            return rt.registry.get_sample_value("boxoffice_queue_admit_tick_seconds_count") or 0.0

        async with running([*rt.infrastructure(), *components]):
            await _eventually(lambda: _admitted_more_than(q, event_id, 3))
            leadership.lose.set()
            await leadership.lost.wait()  # the lead work was cancelled and awaited
            admitted, ticked = await _admitted(q, event_id), ticks()
            # Watch for as long as a leader would have taken to admit 20 more.
            await asyncio.sleep(_LEADERLESS_TICKS * float(FAST_TICKS["BOXOFFICE_QUEUE_TICK_SECONDS"]))
            stats = await q.stub.GetQueueStats(pb.GetQueueStatsRequest(event_id=event_id))
            assert (stats.progress.admitted_total, ticks()) == (admitted, ticked)
            # Not for want of fans or room: the queue still had both.
            assert stats.progress.queue_length > 0 and stats.progress.active_shoppers < 1000
            loop = components[-1]
            assert isinstance(loop, Loop) and not loop.failed.is_set()
            # Leading again, the same loop admits again.
            leadership.win.set()
            await _eventually(lambda: _admitted_more_than(q, event_id, admitted))


async def _gauge_is(registry: CollectorRegistry, value: float) -> bool:
    return registry.get_sample_value("boxoffice_leader_is_leader", {"name": "admitter"}) == value


async def test_two_admitter_processes_hand_over_with_postgres_leadership(stores: Stores) -> None:
    """Both run; one leads and admits; when it stops, the other takes over
    and admission goes on."""
    environ = {
        **FAST_TICKS,
        "BOXOFFICE_LEADER_BACKEND": "postgres",
        "BOXOFFICE_LEADER_RETRY_SECONDS": "0.2",
        # Generous enough that a loaded machine does not depose a live leader.
        "BOXOFFICE_LEADER_RENEW_DEADLINE_SECONDS": "4",
        "BOXOFFICE_LEADER_LEASE_SECONDS": "6",
    }
    event_id = new_event_id()
    async with queue_service(stores) as q:
        await q.create_event(
            event_id,
            opens_at_ms=int(q.rt.clock.now() * 1000) - 1000,
            admission_rate_per_second=1,
            max_active_shoppers=100,
        )
        for i in range(40):
            await q.stub.JoinQueue(pb.JoinQueueRequest(event_id=event_id, customer_id=f"fan-{i}"))
        first = make_runtime(stores, environ={**environ, "POD_NAME": "admitter-a"})
        second = make_runtime(stores, environ={**environ, "POD_NAME": "admitter-b"})
        first_components = [*await app.build(first, "admitter")]
        second_components = [*await app.build(second, "admitter")]
        async with contextlib.AsyncExitStack() as both:
            leader = contextlib.AsyncExitStack()
            await leader.enter_async_context(running([*first.infrastructure(), *first_components]))
            await _eventually(lambda: _gauge_is(first.registry, 1))
            await both.enter_async_context(running([*second.infrastructure(), *second_components]))
            await _eventually(lambda: _admitted_more_than(q, event_id, 1))
            assert await _gauge_is(second.registry, 0)
            await leader.aclose()  # the leader stops (a rolling update, a lost node)
            before = await _admitted(q, event_id)
            await _eventually(lambda: _gauge_is(second.registry, 1))
            await _eventually(lambda: _admitted_more_than(q, event_id, before))


async def _admitted_more_than(q: QueueUnderTest, event_id: int, count: int) -> bool:
    return await _admitted(q, event_id) > count


async def test_seed_demo_creates_the_demo_waiting_room_once(stores: Stores) -> None:
    async with queue_app(stores) as queue:
        await app.seed_demo(queue.rt)
        assert await app.seed_demo(queue.rt) == []
        stored = await queue.rooms.get(app.DEMO_EVENT_ID)
        assert stored is not None and not stored.paused
        now_ms = int(queue.rt.clock.now() * 1000)
        place = await queue.store.fan(app.DEMO_EVENT_ID, "nobody", now_ms=now_ms, op=FanOp.LOOK)
        assert place is not None and place.state is QueueState.NOT_IN_QUEUE


async def test_the_server_role_builds_its_components(stores: Stores) -> None:
    rt = make_runtime(stores)
    components = await app.build(rt, "server")
    assert [c.name for c in components] == ["queue-redis-batcher", "queue-progress-hub", "queue"]
