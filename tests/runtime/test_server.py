"""The shared gRPC runtime on a real loopback server: errors become rich
statuses, deadlines travel into the handler, metrics count, SIGTERM drains."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from typing import Any, cast

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from prometheus_client import CollectorRegistry

from boxoffice import access, caller, deadline
from boxoffice.errors import FailedPrecondition, from_rpc_error
from boxoffice.server import Drain, FailedCalls, GrpcServer, Registration
from boxoffice.wire import StreamBudget
from tests.e2e.harness import eventually
from tests.support import Stores, bare_server, client_channel, server_config

SERVICE = "boxoffice.test.v1.TestService"
# The test service's methods; the edge may call them.
_METHODS = ("Fail", "Budget", "Crash", "Slow", "Watch", "Flood")


def _identity(data: bytes) -> bytes:
    return data


class _Handlers:
    def __init__(self, drain: Drain) -> None:
        self.drain = drain
        self.seen_budget: float | None = None
        self.release = asyncio.Event()
        self.slow_entered = asyncio.Event()
        self.flood_ended = asyncio.Event()
        self.flood_tasks: list[asyncio.Task[Any] | None] = []
        self.flood_caller: str | None = None

    async def fail(self, request: bytes, context: grpc.aio.ServicerContext[bytes, bytes]) -> bytes:
        raise FailedPrecondition("seats taken", reason="SEAT_UNAVAILABLE", metadata={"seat_ids": "1,2"})

    async def budget(self, request: bytes, context: grpc.aio.ServicerContext[bytes, bytes]) -> bytes:
        self.seen_budget = deadline.remaining()
        return b"ok"

    async def crash(self, request: bytes, context: grpc.aio.ServicerContext[bytes, bytes]) -> bytes:
        raise RuntimeError("secret internals")

    async def slow(self, request: bytes, context: grpc.aio.ServicerContext[bytes, bytes]) -> bytes:
        self.slow_entered.set()
        await self.release.wait()
        return b"done"

    async def watch(self, request: bytes, context: grpc.aio.ServicerContext[bytes, bytes]) -> AsyncIterator[bytes]:
        yield b"first"
        await self.drain.wait()
        yield b"bye"

    async def flood(self, request: bytes, context: grpc.aio.ServicerContext[bytes, bytes]) -> AsyncIterator[bytes]:
        """Messages without an await of its own: whenever the call's task
        waits, it waits in gRPC's write, with this generator at its yield."""
        self.flood_tasks.append(asyncio.current_task())
        try:
            while True:
                yield b"x" * 16_384
        finally:
            self.flood_tasks.append(asyncio.current_task())
            self.flood_caller = caller.current().role
            self.flood_ended.set()

    def registration(self) -> Registration:
        handler = grpc.method_handlers_generic_handler(
            SERVICE,
            {
                "Fail": grpc.unary_unary_rpc_method_handler(self.fail, _identity, _identity),
                "Budget": grpc.unary_unary_rpc_method_handler(self.budget, _identity, _identity),
                "Crash": grpc.unary_unary_rpc_method_handler(self.crash, _identity, _identity),
                "Slow": grpc.unary_unary_rpc_method_handler(self.slow, _identity, _identity),
                "Watch": grpc.unary_stream_rpc_method_handler(self.watch, _identity, _identity),
                "Flood": grpc.unary_stream_rpc_method_handler(self.flood, _identity, _identity),
            },
        )
        return Registration(SERVICE, lambda server: server.add_generic_rpc_handlers((handler,)))


@pytest.fixture
def drain_seconds() -> str:
    return "0"


@pytest.fixture
async def served(
    stores: Stores, drain_seconds: str
) -> AsyncIterator[tuple[GrpcServer, _Handlers, grpc.aio.Channel, CollectorRegistry]]:
    registry = CollectorRegistry()
    drain = Drain()
    handlers = _Handlers(drain)
    config = server_config(BOXOFFICE_DEFAULT_DEADLINE_SECONDS="3", BOXOFFICE_DRAIN_SECONDS=drain_seconds)
    server = bare_server(
        stores,
        services=[handlers.registration()],
        allow={f"/{SERVICE}/{method}": frozenset({access.EDGE}) for method in _METHODS},
        config=config,
        registry=registry,
        drain=drain,
    )
    await server.start()
    channel = client_channel(stores, server.address, access.EDGE)
    try:
        yield server, handlers, channel, registry
    finally:
        await channel.close()
        await server.stop(0)


def _unary(channel: grpc.aio.Channel, method: str) -> grpc.aio.UnaryUnaryMultiCallable[bytes, bytes]:
    return channel.unary_unary(f"/{SERVICE}/{method}", request_serializer=_identity, response_deserializer=_identity)


async def test_domain_error_is_a_rich_status(
    served: tuple[GrpcServer, _Handlers, grpc.aio.Channel, CollectorRegistry],
) -> None:
    _, _, channel, registry = served
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await _unary(channel, "Fail")(b"")
    assert caught.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    err = from_rpc_error(caught.value)
    assert isinstance(err, FailedPrecondition)
    assert err.reason == "SEAT_UNAVAILABLE"
    assert err.metadata == {"seat_ids": "1,2"}
    handled = registry.get_sample_value(
        "grpc_server_handled_total",
        {"grpc_type": "unary", "grpc_service": SERVICE, "grpc_method": "Fail", "grpc_code": "FailedPrecondition"},
    )
    assert handled == 1.0


async def test_unhandled_error_is_internal_without_details(
    served: tuple[GrpcServer, _Handlers, grpc.aio.Channel, CollectorRegistry],
) -> None:
    _, _, channel, _ = served
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await _unary(channel, "Crash")(b"")
    assert caught.value.code() == grpc.StatusCode.INTERNAL
    assert "secret" not in (caught.value.details() or "")


async def test_client_deadline_bounds_the_handler(
    served: tuple[GrpcServer, _Handlers, grpc.aio.Channel, CollectorRegistry],
) -> None:
    _, handlers, channel, _ = served
    await _unary(channel, "Budget")(b"", timeout=1.5)
    # The wire rounds the deadline up a little (grpc-timeout has 8 digits).
    assert handlers.seen_budget is not None and 0 < handlers.seen_budget <= 1.6
    await _unary(channel, "Budget")(b"")
    assert handlers.seen_budget is not None and 1.6 < handlers.seen_budget <= 3.0  # clamped to the server default


async def test_health_and_reflection_are_served(
    served: tuple[GrpcServer, _Handlers, grpc.aio.Channel, CollectorRegistry],
) -> None:
    _, _, channel, _ = served
    stub: Any = health_pb2_grpc.HealthStub(channel)  # the stubs type only sync channels
    reply = await stub.Check(health_pb2.HealthCheckRequest(service=SERVICE))
    assert reply.status == health_pb2.HealthCheckResponse.SERVING
    from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

    refl: Any = reflection_pb2_grpc.ServerReflectionStub(cast(Any, channel))
    names: list[str] = []
    async for answer in refl.ServerReflectionInfo(iter([reflection_pb2.ServerReflectionRequest(list_services="")])):
        names.extend(s.name for s in answer.list_services_response.service)
    assert SERVICE in names and "grpc.health.v1.Health" in names


async def test_stop_drains_inflight_calls_and_streams(
    served: tuple[GrpcServer, _Handlers, grpc.aio.Channel, CollectorRegistry],
) -> None:
    server, handlers, channel, _ = served
    inflight = asyncio.ensure_future(_unary(channel, "Slow")(b""))
    stream = channel.unary_stream(f"/{SERVICE}/Watch", request_serializer=_identity, response_deserializer=_identity)(
        b""
    )
    assert await stream.read() == b"first"
    await asyncio.wait_for(handlers.slow_entered.wait(), 10)
    stopping = asyncio.ensure_future(server.stop(5))

    async def refused() -> bool | None:
        try:
            await _unary(channel, "Budget")(b"", timeout=1)
        except grpc.aio.AioRpcError:
            return True
        return None

    # New calls are refused while draining, with the slow call still in flight.
    await eventually(refused, "a new call refused while draining", seconds=10)
    assert not inflight.done()
    handlers.release.set()
    assert await inflight == b"done"
    assert await stream.read() == b"bye"
    assert await stream.code() == grpc.StatusCode.OK
    await stopping


async def test_a_process_keeps_at_most_its_stream_budget_open(stores: Stores) -> None:
    """One stream over the process's budget answers RESOURCE_EXHAUSTED at
    once; a stream that ends gives its place back."""
    registry = CollectorRegistry()
    drain = Drain()
    handlers = _Handlers(drain)
    budget = StreamBudget(2)
    server = bare_server(
        stores,
        services=[handlers.registration()],
        allow={f"/{SERVICE}/{method}": frozenset({access.EDGE}) for method in _METHODS},
        config=server_config(),
        registry=registry,
        drain=drain,
        streams=budget,
    )
    await server.start()
    channel = client_channel(stores, server.address, access.EDGE)
    watch = channel.unary_stream(f"/{SERVICE}/Watch", request_serializer=_identity, response_deserializer=_identity)
    try:
        first, second = watch(b""), watch(b"")
        assert await first.read() == b"first" and await second.read() == b"first"
        assert budget.open == 2
        third = watch(b"")
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await third.read()
        assert caught.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        refused = from_rpc_error(caught.value)
        assert refused.reason == "STREAMS_EXHAUSTED" and refused.metadata == {"limit": "2"}
        first.cancel()
        fourth = watch(b"")
        assert await fourth.read() == b"first"
        second.cancel()
        fourth.cancel()
    finally:
        await channel.close()
        await server.stop(0)
    assert budget.open == 0


@pytest.mark.parametrize("drain_seconds", ["0.5"])
async def test_sigterm_fails_health_first_and_keeps_serving_for_the_drain_delay(
    served: tuple[GrpcServer, _Handlers, grpc.aio.Channel, CollectorRegistry],
) -> None:
    server, _, channel, _ = served
    health: Any = health_pb2_grpc.HealthStub(channel)
    stopping = asyncio.ensure_future(server.stop(5))
    # Health answers NOT_SERVING while calls are still taken ...
    for _ in range(100):
        reply = await health.Check(health_pb2.HealthCheckRequest())
        if reply.status == health_pb2.HealthCheckResponse.NOT_SERVING:
            break
        await asyncio.sleep(0.005)
    assert reply.status == health_pb2.HealthCheckResponse.NOT_SERVING
    assert not stopping.done()
    assert await _unary(channel, "Budget")(b"", timeout=1) == b"ok"
    # ... and only then does the listener close.
    await stopping
    with pytest.raises(grpc.aio.AioRpcError):
        await _unary(channel, "Budget")(b"", timeout=1)


async def test_a_failed_call_is_logged_once_with_its_reason_and_request_id(
    served: tuple[GrpcServer, _Handlers, grpc.aio.Channel, CollectorRegistry], caplog: pytest.LogCaptureFixture
) -> None:
    _, _, channel, _ = served
    with caplog.at_level(logging.INFO, logger="boxoffice.server"), pytest.raises(grpc.aio.AioRpcError):
        await _unary(channel, "Fail")(b"", metadata=(("x-request-id", "req-42"),))
    lines = [r for r in caplog.records if r.getMessage() == "call failed"]
    assert len(lines) == 1
    line = lines[0].__dict__
    assert (line["code"], line["reason"], line["request_id"], line["grpc_method"]) == (
        "FAILED_PRECONDITION",
        "SEAT_UNAVAILABLE",
        "req-42",
        "Fail",
    )


def test_failed_calls_are_rate_limited_and_say_how_many_were_left_out(caplog: pytest.LogCaptureFixture) -> None:
    now = [100.0]
    log = FailedCalls(per_second=3, monotonic=lambda: now[0])

    class _Context:
        def invocation_metadata(self) -> tuple[tuple[str, str], ...]:
            return ()

    context: Any = _Context()
    labels = ("unary", SERVICE, "Fail")
    with caplog.at_level(logging.INFO, logger="boxoffice.server"):
        for _ in range(10):
            log.record(labels, grpc.StatusCode.UNAVAILABLE, "DATABASE_UNAVAILABLE", context)
        now[0] += 1
        log.record(labels, grpc.StatusCode.UNAVAILABLE, "DATABASE_UNAVAILABLE", context)
    lines = [r for r in caplog.records if r.getMessage() == "call failed"]
    assert len(lines) == 4
    assert lines[-1].__dict__["not_logged_since"] == 7
    assert all(r.levelno == logging.WARNING for r in lines)


async def test_every_methods_series_exist_from_the_start(stores: Stores) -> None:
    """A quiet method shows zeros on the dashboard, not nothing."""
    from gen.boxoffice.payment.v1 import payment_service_pb2

    name = payment_service_pb2.DESCRIPTOR.services_by_name["PaymentService"].full_name
    registry = CollectorRegistry()
    server = bare_server(
        stores,
        services=[Registration(name, lambda server: None)],
        allow={},
        config=server_config(),
        registry=registry,
        drain=Drain(),
    )
    await server.start()
    try:
        for method, kind in (("StartPayment", "unary"), ("ListTickets", "unary")):
            labels = {"grpc_type": kind, "grpc_service": name, "grpc_method": method}
            assert registry.get_sample_value("grpc_server_started_total", labels) == 0.0
            assert registry.get_sample_value("grpc_server_handled_total", {**labels, "grpc_code": "OK"}) == 0.0
            assert registry.get_sample_value("grpc_server_handling_seconds_count", labels) == 0.0
    finally:
        await server.stop(0)


async def test_a_stream_cancelled_while_writing_closes_its_handler_in_its_own_task(
    served: tuple[GrpcServer, _Handlers, grpc.aio.Channel, CollectorRegistry],
) -> None:
    """A client that cancels while the server waits to write: the handler's
    generator is closed at once, in the call's task and still acting as its
    caller, not later by the event loop's finalizer in another context."""
    _, handlers, channel, _ = served
    flood = channel.unary_stream(f"/{SERVICE}/Flood", request_serializer=_identity, response_deserializer=_identity)
    call = flood(b"")
    assert await call.read() == b"x" * 16_384
    call.cancel()
    await asyncio.wait_for(handlers.flood_ended.wait(), timeout=10)
    started, ended = handlers.flood_tasks
    assert started is not None and ended is started
    assert handlers.flood_caller == access.EDGE
