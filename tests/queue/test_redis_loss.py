"""Redis loses the waiting room's data (FLUSHALL on a Redis of the test's
own) while 100 fans wait behind a full room: the admitter rebuilds the room
from Postgres, every fan is admitted in their original order without ever
being told to join again, the cap holds throughout (sampled every 200 ms),
and the report's funnel counts every fan.

The first test runs ``boxoffice queue-svc`` and ``boxoffice admitter`` as
processes of their own (on a Redis server of the test's own, which it
flushes); the second runs them in the test's process. The fans call
QueueService as the edge."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import grpc
import pytest
import redis.asyncio as aioredis
from prometheus_client import CollectorRegistry

from boxoffice import db
from boxoffice.lifecycle import Loop
from boxoffice_cli.report import read_report
from gen.boxoffice.queue.v1 import queue_service_pb2 as pb
from gen.boxoffice.queue.v1 import queue_service_pb2_grpc as pb_grpc
from queue_svc.adapters.redis_queue_store import GENERATION_SPAN
from queue_svc.app import QueueApp
from queue_svc.jobs.admitter import Admitter
from queue_svc.metrics import AdmitterMetrics
from tests.edge.asserting import as_fan, edge_mesh_client
from tests.queue.harness import AlwaysLeader, active_count, build_app, keys_of, members, new_event_id
from tests.runtime.processes import free_port, role_processes
from tests.support import Stores, running

pytestmark = pytest.mark.slow

_CAP = 10
_FANS = 100
_SHOPPERS = _CAP
_SAMPLE_SECONDS = 0.2
_ENVIRON = {
    "BOXOFFICE_QUEUE_TICK_SECONDS": "0.05",
    "BOXOFFICE_QUEUE_EVENT_REFRESH_SECONDS": "0.5",
    "BOXOFFICE_QUEUE_LIFECYCLE_RECORD_SECONDS": "0.1",
}


@contextlib.asynccontextmanager
async def _mesh(stores: Stores, redis_url: str, *, recording: bool = True) -> AsyncIterator[tuple[QueueApp, Any]]:
    """The queue's server and its admitter (always leading, with the
    rebuilder) and lifecycle recorder, on ``redis_url``; a stub as the edge."""
    queue = build_app(stores, environ=_ENVIRON, redis_url=redis_url)
    admitter = Admitter(
        store=queue.store,
        rooms=queue.rooms,
        clock=queue.rt.clock,
        settings=queue.settings,
        metrics=AdmitterMetrics.create(CollectorRegistry()),
        leadership=AlwaysLeader(1),
        rebuilder=queue.rebuilder,
    )
    components = [
        *queue.components("server"),
        Loop("admitter", admitter.run),
        *([Loop("lifecycle-recorder", queue.lifecycle_recorder.run)] if recording else []),
    ]
    async with running([*queue.rt.infrastructure(), *components]):
        async with edge_mesh_client(stores, queue.server.address) as client:
            yield queue, client.stub(pb_grpc.QueueServiceStub)


async def _position(stub: Any, event_id: int, customer: str) -> pb.QueuePosition:
    reply = await stub.GetQueuePosition(
        pb.GetQueuePositionRequest(event_id=event_id, customer_id=customer), metadata=as_fan(customer), timeout=10
    )
    position: pb.QueuePosition = reply.position
    return position


async def _joined_rows(pool: Any, event_id: int) -> int:
    async with db.transaction(pool) as conn:
        cur = await conn.execute(
            "SELECT count(*) FROM queue_lifecycle WHERE event_id = %s AND kind = 'joined'", (event_id,)
        )
        row = await cur.fetchone()
    assert row is not None
    return int(row[0])


async def _rows(pool: Any, event_id: int) -> int:
    async with db.transaction(pool) as conn:
        cur = await conn.execute("SELECT count(*) FROM queue_lifecycle WHERE event_id = %s", (event_id,))
        row = await cur.fetchone()
    assert row is not None
    return int(row[0])


async def _admitted_after_loss(pool: Any, event_id: int) -> list[str]:
    async with db.transaction(pool) as conn:
        cur = await conn.execute(
            "SELECT customer_id FROM queue_lifecycle WHERE event_id = %s AND kind = 'admitted' AND idx >= %s"
            " ORDER BY idx",
            (event_id, GENERATION_SPAN),
        )
        return [str(r[0]) for r in await cur.fetchall()]


@contextlib.asynccontextmanager
async def _processes(stores: Stores, redis_url: str, log_dir: Path) -> AsyncIterator[tuple[Any, Any]]:
    """``boxoffice queue-svc`` and ``boxoffice admitter`` as processes on
    ``redis_url``; a stub of QueueService as the edge, and a pool of the
    test's own on the database."""
    port = free_port()
    on_redis = dataclasses.replace(stores, redis_url=redis_url, redis_cluster=False)
    fast = {
        **_ENVIRON,
        "BOXOFFICE_LEADER_RETRY_SECONDS": "0.2",
        "BOXOFFICE_LEADER_RENEW_DEADLINE_SECONDS": "1",
        "BOXOFFICE_LEADER_LEASE_SECONDS": "2",
    }
    commands = [("queue-svc", {**fast, "BOXOFFICE_GRPC_PORT": str(port)}), ("admitter", fast)]
    pool = db.create_pool(stores.database_url, min_size=1, max_size=2, name="redis-loss-test")
    await pool.open(wait=True)
    try:
        async with (
            role_processes(on_redis, commands, log_dir) as roles,
            edge_mesh_client(stores, f"127.0.0.1:{port}") as client,
        ):
            stub = client.stub(pb_grpc.QueueServiceStub)
            for _ in range(600):  # until the server answers (NOT_FOUND: no such room)
                try:
                    await _position(stub, 1, "probe")
                except grpc.aio.AioRpcError as err:
                    if err.code() != grpc.StatusCode.UNAVAILABLE:
                        break
                assert all(role.process.returncode is None for role in roles), roles[0].stderr()
                await asyncio.sleep(0.1)
            yield stub, pool
    finally:
        await pool.close()


async def test_a_flushed_room_is_rebuilt_in_order_within_the_cap(
    stores: Stores, embedded_redis_url: str, tmp_path: Path
) -> None:
    event_id = new_event_id()
    fans = [f"fan-{n:03d}" for n in range(_FANS)]
    shoppers = [f"shopper-{n}" for n in range(_SHOPPERS)]
    client = aioredis.Redis.from_url(embedded_redis_url)
    async with _processes(stores, embedded_redis_url, tmp_path) as (stub, pool):
        config = pb.EventQueueConfig(event_id=event_id, admission_rate_per_second=200, max_active_shoppers=_CAP)
        config.opens_at.FromMilliseconds(int(time.time() * 1000) - 1000)
        edge = as_fan  # every fan's call is asserted by the edge
        await stub.CreateEventQueue(pb.CreateEventQueueRequest(config=config), timeout=10)
        # The shoppers fill the room and claim their sessions; then the
        # fans queue behind them, in this order.
        for shopper in shoppers:
            await stub.JoinQueue(pb.JoinQueueRequest(event_id=event_id, customer_id=shopper), metadata=edge(shopper))
        for shopper in shoppers:
            for _ in range(200):
                if (await _position(stub, event_id, shopper)).state == pb.QUEUE_STATE_ADMITTED:
                    break
                await asyncio.sleep(0.05)
            else:
                raise AssertionError(f"{shopper} never admitted")
        for fan in fans:
            await stub.JoinQueue(pb.JoinQueueRequest(event_id=event_id, customer_id=fan), metadata=edge(fan))
        keys = keys_of(event_id)
        assert await members(client, keys.queue) == fans
        for _ in range(200):
            if await _joined_rows(pool, event_id) == _FANS + _SHOPPERS:
                break
            await asyncio.sleep(0.05)
        else:
            raise AssertionError("the lifecycle was never copied")

        most = 0
        sampling = True

        async def sample() -> None:
            nonlocal most
            while sampling:
                with contextlib.suppress(Exception):  # a flushed Redis answers no less
                    most = max(most, await active_count(client, event_id))
                await asyncio.sleep(_SAMPLE_SECONDS)

        sampler = asyncio.create_task(sample())
        try:
            await client.flushall()
            # Nobody is told to join again: each fan reads their wait (the
            # first reads wait for the rebuild) and, in turn, admission.
            first = await asyncio.gather(*(_position(stub, event_id, fan) for fan in fans))
            assert {p.state for p in first} == {pb.QUEUE_STATE_WAITING}
            assert await members(client, keys.queue) == fans
            assert sorted(await members(client, keys.active)) == sorted(shoppers)
            # The shoppers finish; the fans come in as slots free up.
            for shopper in shoppers:
                await stub.EndShoppingSession(
                    pb.EndShoppingSessionRequest(
                        event_id=event_id, customer_id=shopper, reason=pb.SESSION_END_REASON_COMPLETED
                    ),
                    metadata=edge(shopper),
                )
            pending = list(fans)
            for _ in range(600):
                if not pending:
                    break
                positions = await asyncio.gather(*(_position(stub, event_id, fan) for fan in pending))
                for fan, position in zip(list(pending), positions, strict=True):
                    assert position.state in (pb.QUEUE_STATE_WAITING, pb.QUEUE_STATE_ADMITTED), (fan, position)
                    if position.state == pb.QUEUE_STATE_ADMITTED:
                        pending.remove(fan)
                        await stub.EndShoppingSession(
                            pb.EndShoppingSessionRequest(
                                event_id=event_id, customer_id=fan, reason=pb.SESSION_END_REASON_COMPLETED
                            ),
                            metadata=edge(fan),
                        )
                await asyncio.sleep(0.05)
            assert not pending, f"{len(pending)} fans never admitted"
        finally:
            sampling = False
            await sampler
            await client.aclose()
        assert 0 < most <= _CAP
        # Admitted in their original order (the rebuilt generation's log).
        for _ in range(200):
            admitted = await _admitted_after_loss(pool, event_id)
            if len(admitted) == _FANS:
                break
            await asyncio.sleep(0.05)
        assert admitted == fans
    # The report's funnel counts every fan, before the loss and after.
    report = await asyncio.to_thread(read_report, stores.database_url, event_id)
    assert report["funnel"]["fans_joined"] == _FANS + _SHOPPERS
    assert report["funnel"]["fans_admitted"] == _FANS + _SHOPPERS


async def test_joins_during_the_rebuild_queue_behind_the_rebuilt_fans(stores: Stores, embedded_redis_url: str) -> None:
    event_id = new_event_id()
    client = aioredis.Redis.from_url(embedded_redis_url)
    try:
        async with _mesh(stores, embedded_redis_url) as (queue, stub):
            config = pb.EventQueueConfig(event_id=event_id, admission_rate_per_second=200, max_active_shoppers=1)
            config.opens_at.FromMilliseconds(int(queue.rt.clock.now() * 1000) - 1000)
            await stub.CreateEventQueue(pb.CreateEventQueueRequest(config=config), timeout=10)
            early = [f"early-{n}" for n in range(6)]
            for fan in early:
                await stub.JoinQueue(pb.JoinQueueRequest(event_id=event_id, customer_id=fan), metadata=as_fan(fan))
            for _ in range(200):
                if (await _position(stub, event_id, early[0])).state == pb.QUEUE_STATE_ADMITTED:
                    break
                await asyncio.sleep(0.05)
            # Copied: six joins, the first fan's admission and claim.
            for _ in range(200):
                if await _rows(queue.rt.pool(), event_id) == len(early) + 2:
                    break
                await asyncio.sleep(0.05)
            else:
                raise AssertionError("the lifecycle was never copied")
            now_ms = int(queue.rt.clock.now() * 1000)
            before = await queue.store.progress(event_id, now_ms=now_ms)
            assert before is not None and before.generation == 1
            await client.flushall()
            late = await stub.JoinQueue(
                pb.JoinQueueRequest(event_id=event_id, customer_id="late"), metadata=as_fan("late"), timeout=10
            )
            assert late.position.state == pb.QUEUE_STATE_WAITING
            # The first fan shops (the one slot); the rest wait in their
            # order, the late one behind them.
            assert await members(client, keys_of(event_id).queue) == [*early[1:], "late"]
            assert await members(client, keys_of(event_id).active) == early[:1]
            # The progress carries the new generation (the edge drops places
            # it saved under the old one).
            after = await queue.store.progress(event_id, now_ms=now_ms)
            assert after is not None and after.generation == 2
    finally:
        await client.aclose()


async def test_only_the_fans_not_copied_yet_are_told_to_join_again(stores: Stores, embedded_redis_url: str) -> None:
    event_id = new_event_id()
    client = aioredis.Redis.from_url(embedded_redis_url)
    try:
        # The lifecycle is copied only when the test says (one pass).
        async with _mesh(stores, embedded_redis_url, recording=False) as (queue, stub):
            config = pb.EventQueueConfig(event_id=event_id, admission_rate_per_second=200, max_active_shoppers=1)
            config.opens_at.FromMilliseconds(int(queue.rt.clock.now() * 1000) - 1000)
            await stub.CreateEventQueue(pb.CreateEventQueueRequest(config=config), timeout=10)
            copied = [f"copied-{n}" for n in range(4)]
            for fan in copied:
                await stub.JoinQueue(pb.JoinQueueRequest(event_id=event_id, customer_id=fan), metadata=as_fan(fan))
            await queue.lifecycle_recorder.pass_once()
            assert await _rows(queue.rt.pool(), event_id) >= len(copied)
            await stub.JoinQueue(pb.JoinQueueRequest(event_id=event_id, customer_id="late"), metadata=as_fan("late"))
            await client.flushall()
            for fan in copied:
                state = (await _position(stub, event_id, fan)).state
                assert state in (pb.QUEUE_STATE_WAITING, pb.QUEUE_STATE_ADMITTED), (fan, state)
            assert (await _position(stub, event_id, "late")).state == pb.QUEUE_STATE_NOT_IN_QUEUE
            # Joining again puts them behind everyone rebuilt.
            again = await stub.JoinQueue(
                pb.JoinQueueRequest(event_id=event_id, customer_id="late"), metadata=as_fan("late")
            )
            assert again.position.state == pb.QUEUE_STATE_WAITING
            assert (await members(client, keys_of(event_id).queue))[-1] == "late"
    finally:
        await client.aclose()
