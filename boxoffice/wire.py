"""Bad input stays cheap: what arrives on the wire before a handler sees it.

A request that does not decode (truncated bytes, a string field that is not
UTF-8, a wrong wire type) would otherwise escape grpc's deserializer as an
exception: the caller gets UNKNOWN and the process writes a traceback per
call, which a flood turns into a log storm. :func:`total` makes a
method's deserializer total: an undecodable message becomes a
:class:`Malformed` value, and :func:`check` answers the call
INVALID_ARGUMENT with the reason ``MALFORMED_REQUEST`` before any work is
done, logging nothing.

:class:`StreamBudget` bounds the server streams one process keeps open
(each costs tens of KB); HTTP/2 bounds the streams of one connection
(``grpc.max_concurrent_streams``, see :func:`boxoffice.server.server_options`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from google.protobuf.message import DecodeError

from boxoffice.errors import InvalidArgument, ResourceExhausted


@dataclass(frozen=True, slots=True)
class Malformed:
    """A request message that did not decode, in place of the message."""

    detail: str


def total(deserializer: Callable[[bytes], Any] | None) -> Callable[[bytes], Any] | None:
    """``deserializer`` made total: a message it cannot decode becomes a
    :class:`Malformed` value (see :func:`check`) instead of an exception."""
    if deserializer is None:
        return None  # raw bytes: nothing to decode

    def deserialize(data: bytes) -> Any:
        try:
            return deserializer(data)
        except (DecodeError, ValueError, TypeError) as err:
            return Malformed(str(err)[:200])

    return deserialize


def check(request: Any) -> None:
    """Raise INVALID_ARGUMENT for a request that did not decode (the
    server's call wrapper calls it first thing in every call it serves)."""
    if type(request) is Malformed:
        raise InvalidArgument(
            "the request message could not be decoded", reason="MALFORMED_REQUEST", metadata={"detail": request.detail}
        )


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
