"""The error registry at run time, on a real loopback server: a published
reason goes out quietly, an unpublished one goes out unchanged but warns, an
unexpected exception answers INTERNAL with an ErrorInfo, and a status without
ErrorInfo reads back as a published reason."""

from __future__ import annotations

import asyncio
import socket
import warnings
from collections.abc import AsyncIterator

import grpc
import pytest
from prometheus_client import CollectorRegistry

from boxoffice import access
from boxoffice.errors import (
    SHARED_REASONS,
    DeadlineExceeded,
    Internal,
    ResourceExhausted,
    Unavailable,
    UnpublishedReasonWarning,
    error_class_for_code,
    from_rpc_error,
    package_of,
    published_reasons,
    wire_reason,
)
from boxoffice.server import Drain, Registration
from tests.support import Stores, bare_server, client_channel, server_config

# A stand-in served under a published package's name, so that the interceptor
# checks its reasons against boxoffice.queue.v1.ErrorReason.
SERVICE = "boxoffice.queue.v1.QueueService"


def _identity(data: bytes) -> bytes:
    return data


async def _published(request: bytes, context: grpc.aio.ServicerContext[bytes, bytes]) -> bytes:
    raise ResourceExhausted("too many joins", reason="RATE_LIMITED", metadata={"limit": "account"})


async def _unpublished(request: bytes, context: grpc.aio.ServicerContext[bytes, bytes]) -> bytes:
    raise ResourceExhausted("made up", reason="NOT_PUBLISHED_ANYWHERE", metadata={"k": "v"})


async def _unpublished_stream(request: bytes, context: grpc.aio.ServicerContext[bytes, bytes]) -> AsyncIterator[bytes]:
    yield b"first"
    raise Unavailable("made up", reason="NOT_PUBLISHED_IN_A_STREAM")


async def _crash(request: bytes, context: grpc.aio.ServicerContext[bytes, bytes]) -> bytes:
    raise RuntimeError("secret internals")


async def _bare(request: bytes, context: grpc.aio.ServicerContext[bytes, bytes]) -> bytes:
    await context.abort(grpc.StatusCode.UNAVAILABLE, "a bare status")
    return b""


async def _slow(request: bytes, context: grpc.aio.ServicerContext[bytes, bytes]) -> bytes:
    await asyncio.sleep(5)
    return b""


def _registration() -> Registration:
    unary = {
        "Published": _published,
        "Unpublished": _unpublished,
        "Crash": _crash,
        "Bare": _bare,
        "Slow": _slow,
    }
    methods: dict[str, grpc.RpcMethodHandler[bytes, bytes]] = {
        name: grpc.unary_unary_rpc_method_handler(behavior, _identity, _identity) for name, behavior in unary.items()
    }
    methods["UnpublishedStream"] = grpc.unary_stream_rpc_method_handler(_unpublished_stream, _identity, _identity)
    handler = grpc.method_handlers_generic_handler(SERVICE, methods)
    return Registration(SERVICE, lambda server: server.add_generic_rpc_handlers((handler,)))


@pytest.fixture
async def channel(stores: Stores) -> AsyncIterator[grpc.aio.Channel]:
    drain = Drain()
    config = server_config(BOXOFFICE_DEFAULT_DEADLINE_SECONDS="3")
    methods = ("Published", "Unpublished", "UnpublishedStream", "Crash", "Bare", "Slow")
    server = bare_server(
        stores,
        services=[_registration()],
        allow={f"/{SERVICE}/{method}": frozenset({access.EDGE}) for method in methods},
        config=config,
        registry=CollectorRegistry(),
        drain=drain,
    )
    await server.start()
    chan = client_channel(stores, server.address, access.EDGE)
    try:
        yield chan
    finally:
        await chan.close()
        await server.stop(0)


async def _call(channel: grpc.aio.Channel, method: str, deadline_seconds: float | None = None) -> grpc.aio.AioRpcError:
    call = channel.unary_unary(f"/{SERVICE}/{method}", request_serializer=_identity, response_deserializer=_identity)
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await call(b"", timeout=deadline_seconds)
    return caught.value


async def test_a_published_reason_goes_out_without_a_warning(channel: grpc.aio.Channel) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error", UnpublishedReasonWarning)
        err = from_rpc_error(await _call(channel, "Published"))
    assert isinstance(err, ResourceExhausted)
    assert (err.reason, err.metadata) == ("RATE_LIMITED", {"limit": "account"})


async def test_an_unpublished_reason_goes_out_unchanged_and_warns(channel: grpc.aio.Channel) -> None:
    with pytest.warns(UnpublishedReasonWarning, match="NOT_PUBLISHED_ANYWHERE"):
        rpc_error = await _call(channel, "Unpublished")
    assert rpc_error.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    err = from_rpc_error(rpc_error)
    assert (err.reason, err.metadata) == ("NOT_PUBLISHED_ANYWHERE", {"k": "v"})


async def test_an_unpublished_reason_in_a_stream_warns(channel: grpc.aio.Channel) -> None:
    call = channel.unary_stream(
        f"/{SERVICE}/UnpublishedStream", request_serializer=_identity, response_deserializer=_identity
    )
    received: list[bytes] = []
    with pytest.warns(UnpublishedReasonWarning, match="NOT_PUBLISHED_IN_A_STREAM"):
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            async for message in call(b""):
                received.append(message)
    assert received == [b"first"]
    assert from_rpc_error(caught.value).reason == "NOT_PUBLISHED_IN_A_STREAM"


async def test_an_unexpected_exception_is_internal_with_an_error_info(channel: grpc.aio.Channel) -> None:
    rpc_error = await _call(channel, "Crash")
    assert rpc_error.code() == grpc.StatusCode.INTERNAL
    assert "secret" not in (rpc_error.details() or "")
    trailers = dict(tuple(rpc_error.trailing_metadata() or ()))
    assert "grpc-status-details-bin" in trailers
    err = from_rpc_error(rpc_error)
    assert isinstance(err, Internal)
    assert err.reason == "INTERNAL"


async def test_a_bare_status_reads_back_as_upstream_failed(channel: grpc.aio.Channel) -> None:
    err = from_rpc_error(await _call(channel, "Bare"))
    assert isinstance(err, Unavailable)
    assert (err.reason, err.metadata) == ("UPSTREAM_FAILED", {"upstream_code": "UNAVAILABLE"})


async def test_a_client_deadline_reads_back_as_deadline_exceeded(channel: grpc.aio.Channel) -> None:
    err = from_rpc_error(await _call(channel, "Slow", deadline_seconds=0.2))
    assert isinstance(err, DeadlineExceeded)
    assert (err.reason, err.metadata) == ("DEADLINE_EXCEEDED", {})


async def test_an_unreachable_peer_reads_back_as_upstream_failed() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as chan:
        err = from_rpc_error(await _call(chan, "Published", deadline_seconds=2))
    assert isinstance(err, Unavailable)
    assert (err.reason, err.metadata) == ("UPSTREAM_FAILED", {"upstream_code": "UNAVAILABLE"})


def test_the_fallback_reasons_are_published_everywhere() -> None:
    assert {"DEADLINE_EXCEEDED", "UPSTREAM_FAILED", "INTERNAL"} <= SHARED_REASONS


def test_the_registry_answers_by_package_and_by_code() -> None:
    assert package_of(SERVICE) == "boxoffice.queue.v1"
    assert "RATE_LIMITED" in published_reasons("boxoffice.queue.v1")
    assert "RATE_LIMITED" not in published_reasons("boxoffice.booking.v1")
    assert wire_reason("ERROR_REASON_SEAT_UNAVAILABLE") == "SEAT_UNAVAILABLE"
    with pytest.raises(ValueError):
        wire_reason("SEAT_UNAVAILABLE")
    assert error_class_for_code("RESOURCE_EXHAUSTED") is ResourceExhausted
    assert error_class_for_code(grpc.StatusCode.CANCELLED) is Internal
