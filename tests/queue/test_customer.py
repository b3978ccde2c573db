"""The fan a QueueService call acts for is the one the edge asserts, never
the one a request body names: a body naming another fan is refused
(PERMISSION_DENIED), a call asserting nobody is refused (UNAUTHENTICATED),
and neither changes anything or hands out a token."""

from __future__ import annotations

from typing import Any

import grpc
import pytest

from boxoffice.errors import BoxofficeError, PermissionDenied, Unauthenticated, from_rpc_error
from gen.boxoffice.queue.v1 import queue_service_pb2 as pb
from tests.edge.asserting import as_fan
from tests.queue.harness import QueueUnderTest, event_keys_dump, new_event_id, queue_service
from tests.support import ManualClock, Stores

METHODS = ("JoinQueue", "GetQueuePosition", "WatchQueuePosition", "LeaveQueue", "EndShoppingSession")


def _request(method: str, event_id: int, customer_id: str) -> Any:
    extra: dict[str, Any] = {"reason": pb.SESSION_END_REASON_COMPLETED} if method == "EndShoppingSession" else {}
    return getattr(pb, f"{method}Request")(event_id=event_id, customer_id=customer_id, **extra)


async def _call(q: QueueUnderTest, method: str, request: Any, metadata: Any = None) -> list[Any]:
    """The answers of one call (a stream's every answer)."""
    call = getattr(q.stub, method)(request, metadata=metadata)
    if method.startswith("Watch"):
        return [answer async for answer in call]
    return [await call]


async def _refusal(q: QueueUnderTest, method: str, request: Any, metadata: Any = None) -> BoxofficeError:
    try:
        answers = await _call(q, method, request, metadata)
    except grpc.aio.AioRpcError as err:
        return from_rpc_error(err)
    raise AssertionError(f"{method} answered {answers}")


async def _admitted_room(q: QueueUnderTest, clock: ManualClock, fans: list[str]) -> int:
    event_id = new_event_id()
    await q.create_event(event_id, opens_at_ms=int(clock.now() * 1000) - 1000, admission_rate_per_second=10)
    for fan in fans:
        await q.stub.JoinQueue(pb.JoinQueueRequest(event_id=event_id), metadata=as_fan(fan))
    await q.app.admitter.tick_event(event_id, 1)
    clock.advance(1.0)
    await q.app.admitter.tick_event(event_id, 1)
    return event_id


async def test_the_customer_is_the_asserted_fan_and_the_body_may_omit_it(stores: Stores) -> None:
    clock = ManualClock()
    async with queue_service(stores, clock=clock) as q:
        event_id = await _admitted_room(q, clock, ["fan-1"])
        got = await q.stub.GetQueuePosition(pb.GetQueuePositionRequest(event_id=event_id), metadata=as_fan("fan-1"))
        assert got.position.customer_id == "fan-1" and got.position.state == pb.QUEUE_STATE_ADMITTED
        claims = q.rt.token_signer.verify(got.position.access_token, event_id=event_id)
        assert claims.customer_id == "fan-1"
        # The body may repeat the asserted fan.
        same = await q.stub.GetQueuePosition(
            pb.GetQueuePositionRequest(event_id=event_id, customer_id="fan-1"), metadata=as_fan("fan-1")
        )
        assert same.position.customer_id == "fan-1"


@pytest.mark.parametrize("method", METHODS)
async def test_a_body_naming_another_fan_is_refused_and_changes_nothing(stores: Stores, method: str) -> None:
    clock = ManualClock()
    async with queue_service(stores, clock=clock) as q:
        event_id = await _admitted_room(q, clock, ["victim3", "fan-1"])
        before = await event_keys_dump(q.redis, event_id)
        err = await _refusal(q, method, _request(method, event_id, "victim3"), as_fan("fan-1"))
        assert isinstance(err, PermissionDenied) and err.reason == "CUSTOMER_MISMATCH", err
        assert await event_keys_dump(q.redis, event_id) == before


@pytest.mark.parametrize("method", METHODS)
async def test_a_call_asserting_no_fan_is_unauthenticated_and_changes_nothing(stores: Stores, method: str) -> None:
    clock = ManualClock()
    async with queue_service(stores, clock=clock) as q:
        event_id = await _admitted_room(q, clock, ["victim3"])
        before = await event_keys_dump(q.redis, event_id)
        # The test edge asserts the fan the body names; an empty value asserts nobody.
        for request in (_request(method, event_id, ""), _request(method, event_id, "victim3")):
            err = await _refusal(q, method, request, (("x-boxoffice-customer", ""),))
            assert isinstance(err, Unauthenticated) and err.reason == "CUSTOMER_NOT_ASSERTED", err
        assert await event_keys_dump(q.redis, event_id) == before


async def test_a_token_is_handed_only_to_the_fan_it_names(stores: Stores) -> None:
    """The issue's attack: GetQueuePosition {customer_id: victim3} from the
    edge asserting fan-1 got victim3's token."""
    clock = ManualClock()
    async with queue_service(stores, clock=clock) as q:
        event_id = await _admitted_room(q, clock, ["victim3"])
        before = await event_keys_dump(q.redis, event_id)
        issued = q.app.rt.registry.get_sample_value("boxoffice_queue_tokens_issued_total")
        for method in ("GetQueuePosition", "WatchQueuePosition"):
            err = await _refusal(q, method, _request(method, event_id, "victim3"), as_fan("fan-1"))
            assert isinstance(err, PermissionDenied) and err.reason == "CUSTOMER_MISMATCH"
        assert q.app.rt.registry.get_sample_value("boxoffice_queue_tokens_issued_total") == issued
        assert await event_keys_dump(q.redis, event_id) == before
        # Asserting fan-1 with no body reads fan-1's place (never queued), never victim3's.
        own = await q.stub.GetQueuePosition(pb.GetQueuePositionRequest(event_id=event_id), metadata=as_fan("fan-1"))
        assert own.position.customer_id == "fan-1" and own.position.state == pb.QUEUE_STATE_NOT_IN_QUEUE
        assert not own.position.access_token
