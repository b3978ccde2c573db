"""Every bad input gets INVALID_ARGUMENT (or NOT_FOUND) with ErrorInfo
naming the field, and changes nothing in Redis or Postgres."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import grpc
import pytest

from boxoffice.errors import BoxofficeError, InvalidArgument, NotFound, from_rpc_error
from gen.boxoffice.queue.v1 import queue_service_pb2 as pb
from tests.queue.harness import QueueUnderTest, event_keys_dump, new_event_id, queue_service, rpc_error
from tests.support import ManualClock, Stores

LONG = "x" * 129


async def _stream_error(call: Any) -> BoxofficeError:
    try:
        async for _ in call:
            pass
    except grpc.aio.AioRpcError as err:
        return from_rpc_error(err)
    raise AssertionError("the stream ended without an error")


def _fan_requests(event_id: int) -> list[tuple[str, str, Any, Any]]:
    """(method, expected field, request, expected reason) for each bad fan input.
    A body without ``customer_id`` is not bad input: the customer is the
    edge's asserted fan (tests/queue/test_customer.py)."""
    bad: list[tuple[str, str, Any, Any]] = []
    for method in ("JoinQueue", "GetQueuePosition", "WatchQueuePosition", "LeaveQueue", "EndShoppingSession"):
        make: Callable[..., Any] = getattr(pb, f"{method}Request")
        extra: dict[str, Any] = {"reason": pb.SESSION_END_REASON_COMPLETED} if method == "EndShoppingSession" else {}
        bad += [
            (method, "event_id", make(event_id=0, customer_id="ann", **extra), "FIELD_REQUIRED"),
            (method, "event_id", make(event_id=-3, customer_id="ann", **extra), "INVALID_FIELD"),
            (method, "customer_id", make(event_id=event_id, customer_id=LONG, **extra), "INVALID_FIELD"),
            (method, "customer_id", make(event_id=event_id, customer_id="a\nb", **extra), "INVALID_FIELD"),
        ]
    bad += [
        (
            "JoinQueue",
            "client_id",
            pb.JoinQueueRequest(event_id=event_id, customer_id="ann", client_id=LONG),
            "INVALID_FIELD",
        ),
        (
            "JoinQueue",
            "client_id",
            pb.JoinQueueRequest(event_id=event_id, customer_id="ann", client_id="\x00"),
            "INVALID_FIELD",
        ),
        (
            "EndShoppingSession",
            "reason",
            pb.EndShoppingSessionRequest(event_id=event_id, customer_id="ann"),
            "FIELD_REQUIRED",
        ),
        (
            "EndShoppingSession",
            "reason",
            pb.EndShoppingSessionRequest(event_id=event_id, customer_id="ann", reason=99),  # type: ignore[arg-type]
            "INVALID_FIELD",
        ),
    ]
    for method in ("WatchAdmissionProgress", "GetEventQueue", "PauseAdmission", "ResumeAdmission", "GetQueueStats"):
        make = getattr(pb, f"{method}Request")
        bad += [
            (method, "event_id", make(event_id=0), "FIELD_REQUIRED"),
            (method, "event_id", make(event_id=-1), "INVALID_FIELD"),
        ]
    return bad


def _bad_configs(event_id: int, opens_ms: int) -> list[tuple[str, pb.EventQueueConfig | None, str]]:
    """(expected field, config, reason) for each bad configuration."""

    def config(**fields: Any) -> pb.EventQueueConfig:
        message = pb.EventQueueConfig(event_id=fields.pop("event_id", event_id), **fields)
        if "no_opens" not in fields:
            message.opens_at.FromMilliseconds(opens_ms)
        return message

    def with_duration(name: str, seconds: int, nanos: int = 0) -> pb.EventQueueConfig:
        message = config()
        getattr(message, name).seconds = seconds
        getattr(message, name).nanos = nanos
        return message

    no_opens = pb.EventQueueConfig(event_id=event_id)
    before_1970 = config()
    before_1970.opens_at.seconds = -10
    return [
        ("config", None, "FIELD_REQUIRED"),
        ("config.event_id", config(event_id=0), "FIELD_REQUIRED"),
        ("config.event_id", config(event_id=-7), "INVALID_FIELD"),
        ("config.opens_at", no_opens, "FIELD_REQUIRED"),
        ("config.opens_at", before_1970, "INVALID_FIELD"),
        ("config.admission_rate_per_second", config(admission_rate_per_second=-1), "INVALID_FIELD"),
        ("config.admission_rate_per_second", config(admission_rate_per_second=100_001), "INVALID_FIELD"),
        ("config.max_active_shoppers", config(max_active_shoppers=-5), "INVALID_FIELD"),
        ("config.pre_queue_window", with_duration("pre_queue_window", -1), "INVALID_FIELD"),
        ("config.pre_queue_window", with_duration("pre_queue_window", 8 * 86400), "INVALID_FIELD"),
        ("config.session_length", with_duration("session_length", 0), "INVALID_FIELD"),
        ("config.session_length", with_duration("session_length", 60, 1), "INVALID_FIELD"),
        ("config.session_length", with_duration("session_length", 60, -5), "INVALID_FIELD"),
        ("config.token_ttl", with_duration("token_ttl", 2 * 86400), "INVALID_FIELD"),
        ("config.claim_grace", with_duration("claim_grace", 1), "INVALID_FIELD"),
    ]


async def _snapshot(q: QueueUnderTest, event_id: int) -> tuple[object, ...]:
    stored = await q.app.rooms.get(event_id)
    return (stored, await event_keys_dump(q.redis, event_id))


async def test_every_bad_input_is_invalid_argument_and_changes_nothing(stores: Stores) -> None:
    clock = ManualClock()
    event_id = new_event_id()
    async with queue_service(stores, clock=clock) as q:
        opens_ms = int(clock.now() * 1000) - 1000
        await q.create_event(event_id, opens_at_ms=opens_ms)
        await q.stub.JoinQueue(pb.JoinQueueRequest(event_id=event_id, customer_id="ann"))
        before = await _snapshot(q, event_id)
        checked = 0
        for method, field, request, reason in _fan_requests(event_id):
            call = getattr(q.stub, method)(request)
            if method.startswith("Watch"):
                err = await _stream_error(call)
            else:
                err = await rpc_error(call)
            assert isinstance(err, InvalidArgument), (method, request, err)
            assert err.reason == reason and err.metadata == {"field": field}, (method, request, err)
            checked += 1
        for field, config, reason in _bad_configs(event_id, opens_ms):
            for method in ("CreateEventQueue", "UpdateEventQueue"):
                request = (
                    getattr(pb, f"{method}Request")(config=config) if config else getattr(pb, f"{method}Request")()
                )
                err = await rpc_error(getattr(q.stub, method)(request))
                assert isinstance(err, InvalidArgument), (method, config, err)
                assert err.reason == reason and err.metadata == {"field": field}, (method, config, err)
                checked += 1
        assert checked > 60
        assert await _snapshot(q, event_id) == before


async def test_unknown_events_are_not_found_and_create_nothing(stores: Stores) -> None:
    async with queue_service(stores) as q:
        missing = new_event_id()
        for call in (
            q.stub.EndShoppingSession(
                pb.EndShoppingSessionRequest(
                    event_id=missing, customer_id="ann", reason=pb.SESSION_END_REASON_COMPLETED
                )
            ),
            q.stub.JoinQueue(pb.JoinQueueRequest(event_id=missing, customer_id="ann")),
        ):
            err = await rpc_error(call)
            assert isinstance(err, NotFound) and err.metadata == {"event_id": str(missing)}
        for stream in (
            q.stub.WatchQueuePosition(pb.WatchQueuePositionRequest(event_id=missing, customer_id="ann")),
            q.stub.WatchAdmissionProgress(pb.WatchAdmissionProgressRequest(event_id=missing)),
        ):
            err = await _stream_error(stream)
            assert isinstance(err, NotFound) and err.reason == "EVENT_NOT_FOUND"
        assert await event_keys_dump(q.redis, missing) == {}


@pytest.mark.parametrize("customer_id", ["ann", "ünïcödé-名前", "x" * 128])
async def test_valid_customer_ids_are_accepted(stores: Stores, customer_id: str) -> None:
    clock = ManualClock()
    event_id = new_event_id()
    async with queue_service(stores, clock=clock) as q:
        await q.create_event(event_id, opens_at_ms=int(clock.now() * 1000))
        reply = await q.stub.JoinQueue(pb.JoinQueueRequest(event_id=event_id, customer_id=customer_id))
        assert reply.position.customer_id == customer_id
