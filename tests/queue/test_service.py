"""QueueService over gRPC on loopback, with Postgres and Redis: the fan's
journey, tokens, and the event administration."""

from __future__ import annotations

from typing import Any

import grpc
import pytest

from boxoffice.errors import AlreadyExists, FailedPrecondition, NotFound, ResourceExhausted
from gen.boxoffice.queue.v1 import queue_service_pb2 as pb
from queue_svc.model import DrawRecord, WaitingRoomConfig
from tests.queue.harness import keys_of, new_event_id, queue_service, rpc_error
from tests.support import ManualClock, Stores


def _ms(clock: ManualClock) -> int:
    return int(clock.now() * 1000)


async def test_a_fan_joins_waits_is_admitted_and_gets_a_token_that_verifies(stores: Stores) -> None:
    clock = ManualClock()
    event_id = new_event_id()
    async with queue_service(stores, clock=clock) as q:
        await q.create_event(event_id, opens_at_ms=_ms(clock) - 1000, admission_rate_per_second=2)
        joined = [
            await q.stub.JoinQueue(pb.JoinQueueRequest(event_id=event_id, customer_id=f"fan-{i}")) for i in range(4)
        ]
        assert [j.newly_joined for j in joined] == [True] * 4
        assert [j.position.ahead for j in joined] == [0, 1, 2, 3]
        assert all(j.position.state == pb.QUEUE_STATE_WAITING for j in joined)
        assert all(j.position.admission_state == pb.ADMISSION_STATE_OPEN for j in joined)
        assert all(5 <= j.position.poll_after.seconds <= 15 for j in joined)
        rejoin = await q.stub.JoinQueue(pb.JoinQueueRequest(event_id=event_id, customer_id="fan-2"))
        assert not rejoin.newly_joined and rejoin.position.score == joined[2].position.score

        rt = q.rt
        admitter = q.app.admitter
        await admitter.tick_event(event_id, 1)
        clock.advance(1.0)
        result = await admitter.tick_event(event_id, 1)
        assert result is not None and result.admitted == 2

        first = await q.stub.GetQueuePosition(pb.GetQueuePositionRequest(event_id=event_id, customer_id="fan-0"))
        position = first.position
        assert position.state == pb.QUEUE_STATE_ADMITTED and position.access_token
        claims = rt.token_signer.verify(position.access_token, event_id=event_id)
        assert claims.customer_id == "fan-0" and claims.event_id == event_id
        assert position.access_token_expires_at.seconds == claims.expires_at
        # Reading again gives a token again (a client that lost the answer loses nothing).
        second = await q.stub.GetQueuePosition(pb.GetQueuePositionRequest(event_id=event_id, customer_id="fan-0"))
        assert second.position.state == pb.QUEUE_STATE_ADMITTED and second.position.access_token

        waiting = await q.stub.GetQueuePosition(pb.GetQueuePositionRequest(event_id=event_id, customer_id="fan-3"))
        assert waiting.position.state == pb.QUEUE_STATE_WAITING and waiting.position.ahead == 1
        assert waiting.position.HasField("eta")  # the measured rate gives an ETA

        ended = await q.stub.EndShoppingSession(
            pb.EndShoppingSessionRequest(event_id=event_id, customer_id="fan-0", reason=pb.SESSION_END_REASON_COMPLETED)
        )
        assert ended.position.state == pb.QUEUE_STATE_COMPLETED
        not_admitted = await rpc_error(
            q.stub.EndShoppingSession(
                pb.EndShoppingSessionRequest(
                    event_id=event_id, customer_id="fan-3", reason=pb.SESSION_END_REASON_ABANDONED
                )
            )
        )
        assert isinstance(not_admitted, FailedPrecondition) and not_admitted.reason == "NOT_ADMITTED"
        assert not_admitted.metadata["state"] == "WAITING"

        left = await q.stub.LeaveQueue(pb.LeaveQueueRequest(event_id=event_id, customer_id="fan-3"))
        assert left.position.state == pb.QUEUE_STATE_LEFT
        nobody = await q.stub.GetQueuePosition(pb.GetQueuePositionRequest(event_id=event_id, customer_id="nobody"))
        assert nobody.position.state == pb.QUEUE_STATE_NOT_IN_QUEUE

        stats = await q.stub.GetQueueStats(pb.GetQueueStatsRequest(event_id=event_id))
        assert stats.joined_total == 4
        assert stats.progress.admitted_total == 2 and stats.progress.queue_length == 1  # fan-2
        assert stats.progress.active_shoppers == 1  # fan-1, admitted and not yet claimed


async def test_pre_queue_then_opening(stores: Stores) -> None:
    clock = ManualClock()
    event_id = new_event_id()
    async with queue_service(stores, clock=clock) as q:
        await q.create_event(event_id, opens_at_ms=_ms(clock) + 60_000)
        early = await q.stub.JoinQueue(pb.JoinQueueRequest(event_id=event_id, customer_id="early"))
        assert early.position.admission_state == pb.ADMISSION_STATE_PRE_QUEUE
        assert early.position.score < 2**50
        clock.advance(61)
        late = await q.stub.JoinQueue(pb.JoinQueueRequest(event_id=event_id, customer_id="late"))
        assert late.position.admission_state == pb.ADMISSION_STATE_OPEN
        assert late.position.score > early.position.score and late.position.ahead == 1


async def test_join_before_the_pre_queue_and_rate_limits(stores: Stores) -> None:
    clock = ManualClock()
    event_id = new_event_id()
    environ = {"BOXOFFICE_QUEUE_JOIN_LIMIT_PER_ACCOUNT": "2", "BOXOFFICE_QUEUE_JOIN_LIMIT_PER_CLIENT": "3"}
    async with queue_service(stores, clock=clock, environ=environ) as q:
        window = pb.EventQueueConfig(event_id=event_id)
        window.opens_at.FromMilliseconds(_ms(clock) + 3_600_000)
        window.pre_queue_window.FromSeconds(600)
        await q.stub.CreateEventQueue(pb.CreateEventQueueRequest(config=window))
        too_early = await rpc_error(q.stub.JoinQueue(pb.JoinQueueRequest(event_id=event_id, customer_id="a")))
        assert isinstance(too_early, FailedPrecondition) and too_early.reason == "QUEUE_NOT_OPEN"
        assert "opens_at" in too_early.metadata
        clock.advance(3_000)  # inside the pre-queue window
        for _ in range(2):
            await q.stub.JoinQueue(pb.JoinQueueRequest(event_id=event_id, customer_id="a"))
        limited = await rpc_error(q.stub.JoinQueue(pb.JoinQueueRequest(event_id=event_id, customer_id="a")))
        assert isinstance(limited, ResourceExhausted) and limited.reason == "RATE_LIMITED"
        assert limited.metadata["limit"] == "account"
        for i in range(3):
            await q.stub.JoinQueue(pb.JoinQueueRequest(event_id=event_id, customer_id=f"b{i}", client_id="1.2.3.4"))
        by_client = await rpc_error(
            q.stub.JoinQueue(pb.JoinQueueRequest(event_id=event_id, customer_id="b9", client_id="1.2.3.4"))
        )
        assert isinstance(by_client, ResourceExhausted) and by_client.metadata["limit"] == "client"


async def test_event_administration(stores: Stores) -> None:
    clock = ManualClock()
    event_id = new_event_id()
    async with queue_service(stores, clock=clock) as q:
        created = await q.create_event(event_id, opens_at_ms=_ms(clock) + 1_000, max_active_shoppers=77)
        assert created.max_active_shoppers == 77
        assert created.admission_rate_per_second == 50  # defaults applied
        assert created.session_length.seconds == 900 and created.claim_grace.seconds == 120
        duplicate = await rpc_error(q.create_event(event_id, opens_at_ms=_ms(clock)))
        assert isinstance(duplicate, AlreadyExists)

        fetched = await q.stub.GetEventQueue(pb.GetEventQueueRequest(event_id=event_id))
        assert fetched.config == created

        changed = pb.EventQueueConfig()
        changed.CopyFrom(created)
        changed.admission_rate_per_second = 500
        updated = await q.stub.UpdateEventQueue(pb.UpdateEventQueueRequest(config=changed))
        assert updated.config.admission_rate_per_second == 500
        assert await q.redis.hget(keys_of(event_id).config, "rate") == b"500"

        paused = await q.stub.PauseAdmission(pb.PauseAdmissionRequest(event_id=event_id))
        assert paused.config.paused
        stats = await q.stub.GetQueueStats(pb.GetQueueStatsRequest(event_id=event_id))
        assert stats.progress.admission_state == pb.ADMISSION_STATE_PAUSED
        resumed = await q.stub.ResumeAdmission(pb.ResumeAdmissionRequest(event_id=event_id))
        assert not resumed.config.paused

        missing = new_event_id()
        for call in (
            q.stub.GetEventQueue(pb.GetEventQueueRequest(event_id=missing)),
            q.stub.PauseAdmission(pb.PauseAdmissionRequest(event_id=missing)),
            q.stub.ResumeAdmission(pb.ResumeAdmissionRequest(event_id=missing)),
            q.stub.GetQueueStats(pb.GetQueueStatsRequest(event_id=missing)),
            q.stub.UpdateEventQueue(
                pb.UpdateEventQueueRequest(config=pb.EventQueueConfig(event_id=missing, opens_at=created.opens_at))
            ),
        ):
            err = await rpc_error(call)
            assert isinstance(err, NotFound) and err.reason == "EVENT_NOT_FOUND", err


async def test_calls_for_an_unknown_event_do_not_each_query_postgres(stores: Stores) -> None:
    async with queue_service(stores) as q:
        missing = new_event_id()
        queries = 0
        rooms = q.app.rooms  # the handler's repository
        get = rooms.get

        async def counting_get(event_id: int) -> WaitingRoomConfig | None:
            nonlocal queries
            queries += 1
            return await get(event_id)

        draws = q.app.draws  # the handler's draws (a join reads the event's draw first)
        get_draw = draws.get_or_create

        async def counting_get_draw(event_id: int) -> DrawRecord | None:
            nonlocal queries
            queries += 1
            return await get_draw(event_id)

        rooms.get = counting_get  # type: ignore[method-assign]
        draws.get_or_create = counting_get_draw  # type: ignore[method-assign]
        for _ in range(20):
            err = await rpc_error(q.stub.JoinQueue(pb.JoinQueueRequest(event_id=missing, customer_id="ann")))
            assert isinstance(err, NotFound)
        assert queries == 1
        # Creating the event makes it known at once.
        await q.create_event(missing, opens_at_ms=int(q.rt.clock.now() * 1000))
        joined = await q.stub.JoinQueue(pb.JoinQueueRequest(event_id=missing, customer_id="ann"))
        assert joined.newly_joined


async def test_a_lost_redis_mirror_is_rebuilt_from_postgres(stores: Stores) -> None:
    clock = ManualClock()
    event_id = new_event_id()
    async with queue_service(stores, clock=clock) as q:
        await q.create_event(event_id, opens_at_ms=_ms(clock) - 1000)
        await q.redis.delete(keys_of(event_id).config)  # as after a failover that lost it
        joined = await q.stub.JoinQueue(pb.JoinQueueRequest(event_id=event_id, customer_id="ann"))
        assert joined.newly_joined
        stored = await q.app.rooms.get(event_id)
        assert (
            stored is not None and await q.redis.hget(keys_of(event_id).config, "ver") == str(stored.version).encode()
        )


@pytest.mark.parametrize("method", ["JoinQueue", "GetQueuePosition", "LeaveQueue"])
async def test_unknown_event_is_not_found(stores: Stores, method: str) -> None:
    async with queue_service(stores) as q:
        request_type = getattr(pb, f"{method}Request")
        err = await rpc_error(getattr(q.stub, method)(request_type(event_id=new_event_id(), customer_id="ann")))
        assert isinstance(err, NotFound) and err.reason == "EVENT_NOT_FOUND"
        assert err.metadata["event_id"]


async def test_server_reflection_lists_the_queue_service(stores: Stores) -> None:
    async with queue_service(stores) as q:
        from grpc_health.v1 import health_pb2, health_pb2_grpc

        health: Any = health_pb2_grpc.HealthStub(q.channel)  # the stubs type only sync channels
        reply = await health.Check(health_pb2.HealthCheckRequest(service="boxoffice.queue.v1.QueueService"))
        assert reply.status == health_pb2.HealthCheckResponse.SERVING
        assert isinstance(q.channel, grpc.aio.Channel)
