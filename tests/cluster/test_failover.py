"""The queue on a real Redis Cluster when a primary dies: its events stop
and resume after its replica's promotion while every other shard's events
go on being admitted, and a failover that loses the newest leader's epoch
does not let a deposed admitter write again (the epoch is confirmed against
the election's table in Postgres, not only against Redis's copy).

Each test here runs on a cluster of its own (tests.cluster.nodes), since it
kills its nodes; about 15 seconds in all, most of it the cluster's failure
detection (a node timeout of two seconds)."""

from __future__ import annotations

import asyncio
import dataclasses
import os
import signal
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import TypeVar

import pytest

from boxoffice.errors import Unavailable
from boxoffice.leader import LeaderTimings, PostgresLock
from boxoffice.redis import event_key
from queue_svc import app
from queue_svc.app import QueueApp
from queue_svc.model import TickResult
from tests.cluster.nodes import LocalCluster, Node
from tests.queue.harness import NO_LIMITS, AlwaysLeader, new_event_id, room_config, started
from tests.support import ManualClock, Stores, make_runtime

T = TypeVar("T")

# A bound for a hung test (a failover that never completes), not a timing claim.
_GIVE_UP_SECONDS = 60.0


pytestmark = pytest.mark.apart(reason="a Redis Cluster on the fixed ports 7110-7115, whose nodes it stops and kills")


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[LocalCluster]:
    # Ports of their own (the test command's shared cluster is on 7100-7105).
    nodes = LocalCluster(tmp_path / "redis-cluster", range(7110, 7116))
    try:
        nodes.start()
        yield nodes
    finally:
        nodes.stop()


def _on(stores: Stores, cluster: LocalCluster) -> Stores:
    return dataclasses.replace(stores, redis_url=cluster.url, redis_cluster=True)


def _events_on(cluster: LocalCluster, primary: Node, count: int) -> list[int]:
    """``count`` new event ids whose keys live on ``primary``."""
    found: list[int] = []
    while len(found) < count:
        event_id = new_event_id()
        if cluster.primary_of(event_key(event_id)).port == primary.port:
            found.append(event_id)
    return found


async def _until(attempt: Callable[[], Awaitable[T | None]]) -> T:
    """The first answer of ``attempt`` that is neither None nor UNAVAILABLE
    (a shard that has just failed over answers once the slot map is read
    again)."""
    async with asyncio.timeout(_GIVE_UP_SECONDS):
        while True:
            try:
                answer = await attempt()
            except Unavailable:
                answer = None
            if answer is not None:
                return answer
            await asyncio.sleep(0.05)


async def test_a_dead_primary_holds_back_only_its_own_events_until_its_replica_is_promoted(
    stores: Stores, cluster: LocalCluster
) -> None:
    clock = ManualClock()
    queue = QueueApp(make_runtime(_on(stores, cluster), clock=clock), leadership=AlwaysLeader(1))
    victim, *others = cluster.primaries()
    doomed = _events_on(cluster, victim, 2)
    live = [event_id for primary in others for event_id in _events_on(cluster, primary, 2)]
    events = doomed + live
    async with started(queue):
        store, admitter = queue.store, queue.admitter
        now_ms = int(clock.now() * 1000)
        for event_id in events:
            # One fan a round at five a second and a round of 0.2 s.
            await store.put_config(room_config(event_id, opens_at_ms=now_ms - 1000, admission_rate_per_second=5))
        await asyncio.gather(
            *(
                store.join(event_id, f"fan-{i}", "", now_ms=now_ms, random_score=0, limits=NO_LIMITS)
                for event_id in events
                for i in range(400)
            )
        )

        async def round_() -> dict[int, TickResult | None]:
            clock.advance(0.2)
            results = await asyncio.gather(*(admitter.tick_event(event_id, 1) for event_id in events))
            return dict(zip(events, results, strict=True))

        await round_()  # the first tick of an event only starts its allowance
        before = await round_()
        assert all(result is not None and result.admitted == 1 for result in before.values()), before

        replica = cluster.replica_of(victim)
        victim.process.send_signal(signal.SIGKILL)
        victim.process.wait()

        failed_rounds = live_rounds = 0
        async with asyncio.timeout(_GIVE_UP_SECONDS):
            while True:
                results = await round_()
                # Every other shard's events go on, round after round.
                for event_id in live:
                    result = results[event_id]
                    assert result is not None and result.admitted == 1, (event_id, result)
                live_rounds += 1
                if all(results[event_id] is None for event_id in doomed):
                    failed_rounds += 1
                elif all((result := results[event_id]) is not None and result.admitted >= 1 for event_id in doomed):
                    break  # the failed shard's events resumed on the promoted replica
                await asyncio.sleep(0.1)  # a pace for the rounds, not a claim
        assert failed_rounds >= 1  # the dead primary's events did stop
        role = replica.client().info("replication")["role"]
        assert role == "master"
        # Nothing was admitted twice or lost: each event's total is what its
        # rounds admitted, on whichever node now serves it.
        for event_id in live:
            progress = await store.progress(event_id, now_ms=int(clock.now() * 1000))
            assert progress is not None and progress.admitted_total == 1 + live_rounds
        assert live_rounds > failed_rounds


async def test_a_failover_that_loses_the_newest_epoch_does_not_let_a_deposed_admitter_write(
    stores: Stores, cluster: LocalCluster
) -> None:
    clock = ManualClock()
    on = _on(stores, cluster)
    # Rooms are re-mirrored when a test says so (a refresh of every room of
    # the suite's database must not fall inside the moment the replica is
    # stopped, or the cluster would count the replica as failing too).
    postgres_election = {"BOXOFFICE_LEADER_BACKEND": "postgres", "BOXOFFICE_QUEUE_EVENT_REFRESH_SECONDS": "600"}
    deposed = QueueApp(make_runtime(on, environ=postgres_election, clock=clock))
    current = QueueApp(make_runtime(on, environ=postgres_election, clock=clock))
    # The control: an admitter that has only Redis's copy of the epoch.
    redis_only = QueueApp(make_runtime(on, clock=clock), leadership=AlwaysLeader(0))
    assert deposed.leader_epochs is not None and redis_only.leader_epochs is None
    primary = cluster.primaries()[0]
    replica = cluster.replica_of(primary)
    event_id, late_event_id = _events_on(cluster, primary, 2)
    timings = LeaderTimings(lease_seconds=6.0, renew_deadline_seconds=4.0, retry_seconds=1.0)

    def candidate(identity: str) -> PostgresLock:
        return PostgresLock(
            database_url=stores.database_url,
            name=app.LEADER_ROLE,
            identity=identity,
            timings=timings,
            session_bound_seconds=None,
        )

    first, second = candidate("admitter-a"), candidate("admitter-b")
    async with started(deposed), started(current), started(redis_only):
        progress_key = event_key(event_id, "prog")
        redis = current.rt.redis()
        now_ms = int(clock.now() * 1000)
        room = await deposed.rooms.create(room_config(event_id, opens_at_ms=now_ms - 1000, admission_rate_per_second=5))
        await deposed.store.put_config(room)
        for i in range(50):
            await deposed.store.join(event_id, f"fan-{i}", "", now_ms=now_ms, random_score=0, limits=NO_LIMITS)

        old_epoch = await first.try_acquire()
        assert old_epoch is not None, "another candidate holds the admitters' election"
        await deposed.admitter.tick(old_epoch)
        clock.advance(1.0)
        ticked = await deposed.admitter.tick(old_epoch)
        assert any(result.event_id == event_id and result.admitted == 5 for result in ticked), ticked
        await first.release()  # its lease is gone; it does not know yet
        new_epoch = await second.try_acquire()
        assert new_epoch is not None and new_epoch > old_epoch

        await current.admitter.refresh()
        # The replica stops receiving: what the primary writes from now on
        # is lost when it dies (asynchronous replication).
        cluster.wait_replicated(primary, replica)
        os.kill(replica.process.pid, signal.SIGSTOP)
        try:
            primary.client().client_kill_filter(_type="replica")
            clock.advance(1.0)
            ticked = await current.admitter.tick(new_epoch)
            assert any(result.event_id == event_id and result.admitted == 5 for result in ticked)
            assert int(await redis.hget(progress_key, "epoch") or 0) == new_epoch
            late = room_config(late_event_id, opens_at_ms=now_ms, admission_rate_per_second=5)
            await current.rooms.create(late)
            await current.store.put_config(late)
            primary.process.send_signal(signal.SIGKILL)
            primary.process.wait()
        finally:
            os.kill(replica.process.pid, signal.SIGCONT)
        await asyncio.to_thread(cluster.wait_promoted, replica)

        # What the failover lost: the newest epoch (Redis's copy is the
        # deposed leader's again) and the late event's configuration.
        lost = replica.client()
        assert int(lost.hget(progress_key, "epoch") or 0) == old_epoch
        assert not lost.exists(event_key(late_event_id, "cfg"))
        admitted = int(lost.hget(progress_key, "admitted") or 0)

        # The deposed admitter confirms its epoch in Postgres and writes
        # nothing (once its own client has found the promoted replica).
        await _until(lambda: deposed.store.progress(event_id, now_ms=int(clock.now() * 1000)))
        clock.advance(1.0)
        assert await deposed.admitter.tick(old_epoch) == []
        assert int(lost.hget(progress_key, "admitted") or 0) == admitted
        assert deposed.rt.registry.get_sample_value("boxoffice_queue_admit_stale_epoch_total") == 1

        # Without that check Redis alone would have let it in.
        unfenced = await _until(lambda: redis_only.admitter.tick_event(event_id, old_epoch))
        assert not unfenced.stale_epoch and unfenced.admitted > 0

        # Healed as the admitter heals a lost Redis: its next tick writes
        # the current epoch again, its refresh re-mirrors every room.
        clock.advance(1.0)
        healed = await _until(lambda: current.admitter.tick_event(event_id, new_epoch))
        assert not healed.stale_epoch and healed.highest_epoch == new_epoch
        assert int(lost.hget(progress_key, "epoch") or 0) == new_epoch
        await current.admitter.refresh()
        assert lost.exists(event_key(late_event_id, "cfg"))
        stale = await redis_only.admitter.tick_event(event_id, old_epoch)
        assert stale is not None and stale.stale_epoch
    await second.release()
    await first.close()
    await second.close()
