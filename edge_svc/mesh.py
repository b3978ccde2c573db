"""The services, as the edge calls them: with the edge's own identity, the
fan it asserts (or the gate device's key it passes on), the request's id
and trace context, and the request's remaining deadline on every call."""

from __future__ import annotations

import urllib.parse
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any, Protocol

import grpc

from boxoffice import deadline
from boxoffice.caller import CUSTOMER_METADATA_KEY, EMAIL_METADATA_KEY, LANGUAGE_METADATA_KEY
from boxoffice.errors import BoxofficeError, from_rpc_error
from boxoffice.tls import ClientChannel
from edge_svc.metrics import EdgeMetrics
from gen.boxoffice.booking.v1 import booking_service_pb2_grpc as booking_grpc
from gen.boxoffice.checkin.v1 import checkin_service_pb2_grpc as checkin_grpc
from gen.boxoffice.payment.v1 import payment_service_pb2_grpc as payment_grpc
from gen.boxoffice.queue.v1 import queue_service_pb2 as queue_pb
from gen.boxoffice.queue.v1 import queue_service_pb2_grpc as queue_grpc

QUEUE = "queue"
BOOKING = "booking"
PAYMENT = "payment"
CHECKIN = "checkin"
# A gate device's key, as the edge received it (CheckInService checks it).
DEVICE_KEY_METADATA_KEY = "x-boxoffice-device-key"

# What a peer that cannot be reached is called in an answer (never its address).
_UNREACHABLE = {
    QUEUE: "the waiting room is not reachable; try again shortly",
    BOOKING: "seat booking is not reachable; try again shortly",
    PAYMENT: "payments are not reachable; try again shortly",
    CHECKIN: "check-in is not reachable; try again shortly",
}


@dataclass(frozen=True, slots=True)
class CallContext:
    """What travels with every call made for one HTTP request."""

    request_id: str
    traceparent: str
    # The fan the call acts for; None asserts nobody.
    fan: str | None = None
    # The fan's verified e-mail address and language (StartPayment's, for
    # the tickets' e-mail); None asserts none.
    email: str | None = None
    language: str | None = None
    # A gate device's key, passed on untouched; None passes none.
    device_key: str | None = None

    def metadata(self) -> tuple[tuple[str, str], ...]:
        items: list[tuple[str, str]] = [("x-request-id", self.request_id), ("traceparent", self.traceparent)]
        if self.fan is not None:
            items.append((CUSTOMER_METADATA_KEY, urllib.parse.quote(self.fan, safe="")))
            if self.email is not None:
                items.append((EMAIL_METADATA_KEY, urllib.parse.quote(self.email, safe="")))
            if self.language is not None:
                items.append((LANGUAGE_METADATA_KEY, self.language))
        if self.device_key is not None:
            items.append((DEVICE_KEY_METADATA_KEY, self.device_key))
        return tuple(items)


class Mesh(Protocol):
    """The calls the edge makes."""

    async def call(self, service: str, method: str, request: Any, ctx: CallContext) -> Any:
        """One unary call; a failure raises the domain error it carries."""

    def watch_progress(self, event_id: int, lane: str = "") -> AsyncIterator[queue_pb.AdmissionProgress]:
        """The admission progress of an event's lane ("" the general one),
        as QueueService streams it."""

    def stream(self, service: str, method: str, request: Any, ctx: CallContext) -> AsyncIterator[Any]:
        """One server-streaming call's messages; a failure (before or
        between messages) raises the domain error it carries."""


class GrpcMesh:
    """:class:`Mesh` over the edge's client channels."""

    def __init__(self, channels: dict[str, ClientChannel], metrics: EdgeMetrics) -> None:
        self._channels = channels
        self._metrics = metrics
        self._stubs = {
            QUEUE: queue_grpc.QueueServiceStub,
            BOOKING: booking_grpc.BookingServiceStub,
            PAYMENT: payment_grpc.PaymentServiceStub,
            CHECKIN: checkin_grpc.CheckInServiceStub,
        }

    def _stub(self, service: str) -> Any:
        return self._channels[service].stub(self._stubs[service])

    async def call(self, service: str, method: str, request: Any, ctx: CallContext) -> Any:
        try:
            return await getattr(self._stub(service), method)(
                request, timeout=deadline.remaining(), metadata=ctx.metadata()
            )
        except grpc.aio.AioRpcError as err:
            raise self._failed(service, err) from None

    async def stream(self, service: str, method: str, request: Any, ctx: CallContext) -> AsyncIterator[Any]:
        call = getattr(self._stub(service), method)(request, timeout=deadline.remaining(), metadata=ctx.metadata())
        try:
            async for reply in call:
                yield reply
        except grpc.aio.AioRpcError as err:
            raise self._failed(service, err) from None
        finally:
            call.cancel()

    async def watch_progress(self, event_id: int, lane: str = "") -> AsyncIterator[queue_pb.AdmissionProgress]:
        call = self._stub(QUEUE).WatchAdmissionProgress(
            queue_pb.WatchAdmissionProgressRequest(event_id=event_id, lane=lane)
        )
        try:
            async for reply in call:
                yield reply.progress
        except grpc.aio.AioRpcError as err:
            raise self._failed(QUEUE, err) from None
        finally:
            call.cancel()

    def _failed(self, service: str, err: grpc.aio.AioRpcError) -> BoxofficeError:
        failure = from_rpc_error(err)
        self._metrics.upstream_errors.labels(service, failure.code.name).inc()
        if failure.reason == "UPSTREAM_FAILED":
            # No ErrorInfo: the peer was not reached, or answered only a code.
            # Its own words may name internal addresses; say which service.
            failure.message = _UNREACHABLE[service]
        return failure

    async def close(self) -> None:
        for channel in self._channels.values():
            await channel.close()
