"""PaymentService's webhook endpoint as the sandbox provider calls it: the
:class:`~payment_svc.ports.WebhookSink` that delivers over gRPC."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import grpc

from gen.boxoffice.payment.v1 import payment_service_pb2 as pb
from gen.boxoffice.payment.v1 import payment_service_pb2_grpc as pb_grpc
from payment_svc.ports import WebhookSink

_DELIVERY_TIMEOUT_SECONDS = 10.0


class GrpcWebhookSink:
    """Delivers signed webhooks to PaymentService.HandleProviderWebhook at an
    address known once the server listens."""

    def __init__(self, address: Callable[[], str]) -> None:
        self._address = address
        self._channel: grpc.aio.Channel | None = None
        self._stub: Any = None

    async def deliver(self, signature: str, body: bytes) -> None:
        if self._stub is None:
            self._channel = grpc.aio.insecure_channel(self._address())
            self._stub = pb_grpc.PaymentServiceStub(self._channel)
        await self._stub.HandleProviderWebhook(
            pb.HandleProviderWebhookRequest(signature=signature, body=body), timeout=_DELIVERY_TIMEOUT_SECONDS
        )

    async def close(self) -> None:
        if self._channel is not None:
            await self._channel.close()
            self._channel = None
            self._stub = None


def _compliance(sink: GrpcWebhookSink) -> WebhookSink:
    return sink
