"""Events over a Redis Cluster's shards: every key the queue writes for an
event carries its hash tag, so all of them sit in the event's one slot on
the primary that serves it; the events spread over all the primaries; and
the batcher still gathers concurrent calls into few pipelines, each to one
node."""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from boxoffice.redis import event_key, slot_of
from queue_svc.app import QueueApp
from tests.cluster.nodes import LocalCluster
from tests.queue.harness import NO_LIMITS, AlwaysLeader, new_event_id, room_config, started
from tests.support import ManualClock, Stores, make_runtime

_TAG = re.compile(rb"^\{ev:(\d+)\}")


pytestmark = pytest.mark.apart(reason="a Redis Cluster on the fixed ports 7110-7115")


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[LocalCluster]:
    nodes = LocalCluster(tmp_path / "redis-cluster", range(7110, 7116))
    try:
        nodes.start()
        yield nodes
    finally:
        nodes.stop()


async def test_each_event_lives_in_one_slot_and_the_events_spread_over_the_primaries(
    stores: Stores, cluster: LocalCluster
) -> None:
    clock = ManualClock()
    on = dataclasses.replace(stores, redis_url=cluster.url, redis_cluster=True)
    queue = QueueApp(make_runtime(on, clock=clock), leadership=AlwaysLeader(1))
    events = [new_event_id() for _ in range(30)]
    async with started(queue):
        store, batcher = queue.store, queue.batcher
        now_ms = int(clock.now() * 1000)
        await asyncio.gather(
            *(store.put_config(room_config(e, opens_at_ms=now_ms - 1000, admission_rate_per_second=5)) for e in events)
        )
        # The first fans load the join script on every primary (NOSCRIPT, once).
        await asyncio.gather(
            *(store.join(e, "fan-first", "", now_ms=now_ms, random_score=0, limits=NO_LIMITS) for e in events)
        )
        sent_before = batcher.pipelines_sent, batcher.calls_sent
        await asyncio.gather(
            *(
                store.join(e, f"fan-{i}", "", now_ms=now_ms, random_score=0, limits=NO_LIMITS)
                for e in events
                for i in range(40)
            )
        )
        pipelines = batcher.pipelines_sent - sent_before[0]
        calls = batcher.calls_sent - sent_before[1]
        assert calls == 30 * 40
        # Gathered per primary: far fewer pipelines than calls.
        assert pipelines * 20 <= calls, (pipelines, calls)
        for _ in range(2):
            clock.advance(1.0)
            ticked = await asyncio.gather(*(queue.admitter.tick_event(e, 1) for e in events))
            assert all(result is not None for result in ticked)

        placed: dict[int, set[int]] = collections.defaultdict(set)
        for primary in cluster.primaries():
            for key in primary.client().scan_iter(count=1000):
                tagged = _TAG.match(key)
                assert tagged is not None, key  # every key of the queue carries an event's tag
                event_id = int(tagged.group(1))
                assert slot_of(key) == slot_of(event_key(event_id))
                placed[event_id].add(primary.port)
        assert set(placed) == set(events)
        assert all(len(ports) == 1 for ports in placed.values())  # one shard per event
        assert {port for ports in placed.values() for port in ports} == {p.port for p in cluster.primaries()}
