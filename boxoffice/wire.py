"""Bad input stays cheap: what arrives on the wire before a handler sees it.

A request that does not decode (truncated bytes, a string field that is not
UTF-8, a wrong wire type) would otherwise escape grpc's deserializer as an
exception: the caller gets UNKNOWN and the process writes a traceback per
call, which a flood turns into a log storm. :func:`guard` makes every
method's deserializer total: an undecodable message becomes a
:class:`Malformed` value, and the call answers INVALID_ARGUMENT with the
reason ``MALFORMED_REQUEST`` before any work is done, logging nothing.

:class:`StreamBudget` bounds the server streams one process keeps open
(each costs tens of KB); HTTP/2 bounds the streams of one connection
(``grpc.max_concurrent_streams``, see :func:`boxoffice.server.server_options`).
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass
from typing import Any, cast

import grpc
from google.protobuf.message import DecodeError

from boxoffice.errors import InvalidArgument, ResourceExhausted


@dataclass(frozen=True, slots=True)
class Malformed:
    """A request message that did not decode, in place of the message."""

    detail: str


def _total(deserializer: Callable[[bytes], Any]) -> Callable[[bytes], Any]:
    def deserialize(data: bytes) -> Any:
        try:
            return deserializer(data)
        except (DecodeError, ValueError, TypeError) as err:
            return Malformed(str(err)[:200])

    return deserialize


def check(request: Any) -> None:
    """Raise INVALID_ARGUMENT for a request that did not decode."""
    if type(request) is Malformed:
        raise InvalidArgument(
            "the request message could not be decoded", reason="MALFORMED_REQUEST", metadata={"detail": request.detail}
        )


def guard(handler: grpc.RpcMethodHandler[Any, Any]) -> grpc.RpcMethodHandler[Any, Any]:
    """``handler`` with a deserializer that never raises and a behaviour that
    answers a :class:`Malformed` request INVALID_ARGUMENT (as a domain error,
    so the caller of this function, the server's interceptor, maps it to the
    wire like any other)."""
    deserializer = handler.request_deserializer
    if deserializer is None:
        return handler  # raw bytes: nothing to decode
    total = _total(deserializer)
    if handler.unary_unary is not None:
        unary = cast(Callable[[Any, Any], Awaitable[Any]], handler.unary_unary)

        async def unary_behavior(request: Any, context: Any) -> Any:
            check(request)
            return await unary(request, context)

        return grpc.unary_unary_rpc_method_handler(
            unary_behavior, request_deserializer=total, response_serializer=handler.response_serializer
        )
    if handler.unary_stream is not None:
        stream = cast(Callable[[Any, Any], AsyncIterator[Any]], handler.unary_stream)

        async def stream_behavior(request: Any, context: Any) -> AsyncIterator[Any]:
            check(request)
            async for message in stream(request, context):
                yield message

        return grpc.unary_stream_rpc_method_handler(
            stream_behavior, request_deserializer=total, response_serializer=handler.response_serializer
        )
    if handler.stream_stream is not None:
        bidi = cast(Callable[[Any, Any], AsyncIterator[Any]], handler.stream_stream)

        async def bidi_behavior(requests: AsyncIterator[Any], context: Any) -> AsyncIterator[Any]:
            async def checked() -> AsyncIterator[Any]:
                async for request in requests:
                    check(request)
                    yield request

            async for message in bidi(checked(), context):
                yield message

        return grpc.stream_stream_rpc_method_handler(
            bidi_behavior, request_deserializer=total, response_serializer=handler.response_serializer
        )
    return handler


class StreamBudget:
    """At most ``limit`` server streams open in this process at once; one
    more answers RESOURCE_EXHAUSTED (``STREAMS_EXHAUSTED``) at once."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.open = 0

    @contextlib.contextmanager
    def hold(self) -> Iterator[None]:
        if self.open >= self.limit:
            raise ResourceExhausted(
                f"this server keeps at most {self.limit} streams open; retry later or elsewhere",
                reason="STREAMS_EXHAUSTED",
                metadata={"limit": str(self.limit)},
            )
        self.open += 1
        try:
            yield
        finally:
            self.open -= 1
