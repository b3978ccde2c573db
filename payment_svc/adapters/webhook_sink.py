"""PaymentService's webhook endpoint as the sandbox provider calls it: the
:class:`~payment_svc.ports.WebhookSink` that delivers over gRPC."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from boxoffice.tls import ClientChannel
from gen.boxoffice.payment.v1 import payment_service_pb2 as pb
from gen.boxoffice.payment.v1 import payment_service_pb2_grpc as pb_grpc
from payment_svc.ports import WebhookSink

_DELIVERY_TIMEOUT_SECONDS = 10.0


class GrpcWebhookSink:
    """Delivers signed webhooks to PaymentService.HandleProviderWebhook over
    a channel made once the server listens (``dial``, as the payment
    identity: see :meth:`boxoffice.runtime.Runtime.channel`)."""

    def __init__(self, dial: Callable[[], ClientChannel]) -> None:
        self._dial = dial
        self._channel: ClientChannel | None = None

    async def deliver(self, signature: str, body: bytes) -> None:
        if self._channel is None:
            self._channel = self._dial()
        stub: Any = self._channel.stub(pb_grpc.PaymentServiceStub)
        await stub.HandleProviderWebhook(
            pb.HandleProviderWebhookRequest(signature=signature, body=body), timeout=_DELIVERY_TIMEOUT_SECONDS
        )

    async def close(self) -> None:
        if self._channel is not None:
            await self._channel.close()
            self._channel = None


def _compliance(sink: GrpcWebhookSink) -> WebhookSink:
    return sink
