"""The shadow lane: a customer an operator flags (RevokeCustomer, action
SHADOW) keeps a normal-looking wait and is never admitted, by a tick or by
the safety net, while the fans behind them go in; UNSHADOW puts them back
at their place."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import grpc
import pytest

from gen.boxoffice.queue.v1 import queue_admin_service_pb2 as apb
from gen.boxoffice.queue.v1 import queue_service_pb2 as pb
from queue_svc.app import QueueApp
from queue_svc.model import QueueState
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
from tests.queue.test_admin import _audit_of, admin_client
from tests.support import ManualClock, Stores

NOW = 1_900_000_000_000


@pytest.fixture
async def queue(stores: Stores) -> AsyncIterator[QueueApp]:
    async with queue_app(stores) as queue:
        yield queue


async def _room(store: QueueStore, **changes: Any) -> int:
    event_id = new_event_id()
    await store.put_config(room_config(event_id, opens_at_ms=NOW - MINUTE_MS, **changes))
    return event_id


async def _join(store: QueueStore, event_id: int, customer: str, now: int = NOW) -> JoinStatus:
    reply = await store.join(event_id, customer, "", now_ms=now, random_score=0, limits=NO_LIMITS)
    return reply.status


async def test_a_flagged_fan_waits_normally_and_is_never_admitted(queue: QueueApp) -> None:
    store, client = queue.store, queue.rt.redis()
    event_id = await _room(store, admission_rate_per_second=2)
    for name in ("ann", "bot", "cid", "dan", "eve"):
        assert await _join(store, event_id, name) is JoinStatus.WAITING
    assert await store.flag(event_id, "bot", flagged=True, now_ms=NOW) is True
    assert await store.flag(event_id, "bot", flagged=True, now_ms=NOW) is False
    await store.admit(event_id, now_ms=NOW, epoch=1)
    first = await store.admit(event_id, now_ms=NOW + 1000, epoch=1)
    # Two slots a second: ann, then bot is passed over for cid.
    assert first is not None and first.admitted == 2 and first.queue_length == 2
    assert sorted(await members(client, keys_of(event_id).admitted)) == ["ann", "cid"]
    bot = await store.fan(event_id, "bot", now_ms=NOW + 1001, op=FanOp.CLAIM)
    assert bot is not None and bot.state is QueueState.WAITING and bot.ahead == 0 and not bot.claimed_now
    rejoined = await store.join(event_id, "bot", "", now_ms=NOW + 1002, random_score=0, limits=NO_LIMITS)
    assert rejoined.status is JoinStatus.WAITING and not rejoined.newly_joined and rejoined.ahead == 0
    for second in range(2, 6):
        await store.admit(event_id, now_ms=NOW + second * 1000, epoch=1)
    assert sorted(await members(client, keys_of(event_id).admitted)) == ["ann", "cid", "dan", "eve"]
    bot = await store.fan(event_id, "bot", now_ms=NOW + 6000, op=FanOp.LOOK)
    assert bot is not None and bot.state is QueueState.WAITING

    # Taken out of the shadow lane: back at their place (the head), admitted next.
    assert await store.flag(event_id, "bot", flagged=False, now_ms=NOW + 6000) is True
    assert await members(client, keys_of(event_id).queue) == ["bot"]
    tick = await store.admit(event_id, now_ms=NOW + 7000, epoch=1)
    assert tick is not None and tick.admitted == 1
    assert "bot" in await members(client, keys_of(event_id).admitted)


async def test_a_head_full_of_flagged_fans_costs_a_bounded_tick(queue: QueueApp) -> None:
    """50 flagged fans at the head and a rate of 10: a tick pops at most
    four rounds of 10, so the fans behind go in over two ticks, and every
    flagged fan ends in the shadow queue, none admitted."""
    store, client = queue.store, queue.rt.redis()
    event_id = await _room(store, admission_rate_per_second=10)
    for i in range(50):
        await _join(store, event_id, f"bot-{i:02d}")
        await store.flag(event_id, f"bot-{i:02d}", flagged=True, now_ms=NOW)
    for i in range(10):
        await _join(store, event_id, f"fan-{i}")
    await store.admit(event_id, now_ms=NOW, epoch=1)
    first = await store.admit(event_id, now_ms=NOW + 1000, epoch=1)
    second = await store.admit(event_id, now_ms=NOW + 2000, epoch=1)
    assert first is not None and second is not None
    assert (first.admitted, second.admitted) == (0, 10)
    assert await client.zcard(keys_of(event_id).shadow_queue) == 50
    admitted = await members(client, keys_of(event_id).admitted)
    assert sorted(admitted) == [f"fan-{i}" for i in range(10)]


async def test_the_safety_net_never_admits_a_flagged_fan(queue: QueueApp) -> None:
    store = queue.store
    event_id = await _room(store, safety_net=True)
    await store.flag(event_id, "bot", flagged=True, now_ms=NOW)
    assert await _join(store, event_id, "bot") is JoinStatus.WAITING
    await store.admit(event_id, now_ms=NOW, epoch=1)
    tick = await store.admit(event_id, now_ms=NOW + 1000, epoch=1)  # bot moves to the shadow queue
    assert tick is not None and tick.admitted == 0 and tick.queue_length == 0
    # Nobody waits in the queue itself now: the next fan goes in at once.
    assert await _join(store, event_id, "ann", NOW + 1500) is JoinStatus.ADMITTED
    bot = await store.fan(event_id, "bot", now_ms=NOW + 1002, op=FanOp.LOOK)
    assert bot is not None and bot.state is QueueState.WAITING
    left = await store.fan(event_id, "bot", now_ms=NOW + 1003, op=FanOp.LEAVE)
    assert left is not None and left.state is QueueState.LEFT and left.changed


async def test_an_operator_shadows_and_unshadows_over_grpc(stores: Stores) -> None:
    clock = ManualClock()
    event_id = new_event_id()
    async with queue_service(stores, clock=clock) as q, admin_client(stores, q) as admin:
        await q.create_event(event_id, opens_at_ms=int(clock.now() * 1000) - 1000)
        await q.stub.JoinQueue(pb.JoinQueueRequest(event_id=event_id, customer_id="bot"))

        def revoke(action: apb.RevokeAction.ValueType) -> Any:
            return admin.RevokeCustomer(apb.RevokeCustomerRequest(event_id=event_id, customer_id="bot", action=action))

        shadowed = await revoke(apb.REVOKE_ACTION_SHADOW)
        assert shadowed.revoked and shadowed.shadowed and shadowed.state == apb.CUSTOMER_STATE_WAITING
        again = await revoke(apb.REVOKE_ACTION_SHADOW)
        assert not again.revoked and again.shadowed
        assert await q.redis.sismember(keys_of(event_id).shadow, "bot")
        back = await revoke(apb.REVOKE_ACTION_UNSHADOW)
        assert back.revoked and not back.shadowed and back.state == apb.CUSTOMER_STATE_WAITING
        bad = await rpc_error(revoke(apb.RevokeAction.ValueType(9)))
        assert bad.code is grpc.StatusCode.INVALID_ARGUMENT and bad.metadata["field"] == "action"
        rows = await _audit_of(q, event_id)
        flags = [r.after for r in rows if r.method == "RevokeCustomer"]
        assert [f["shadowed"] if f else None for f in flags] == [True, True, False]
        # The default action still ends the place.
        ended = await revoke(apb.REVOKE_ACTION_UNSPECIFIED)
        assert ended.revoked and ended.state == apb.CUSTOMER_STATE_LEFT and not ended.shadowed
