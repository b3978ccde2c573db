"""PaymentService over gRPC: parse the request (:mod:`payment_svc.converters`),
call the use case, write the response. ConfirmPayment and RefundPayment run
under their idempotency keys, scoped to the customer of the payment they
name (see :mod:`payment_svc.idempotency`), whose stored answers are the
serialized responses. Domain errors travel as raised (the shared interceptor maps them).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import grpc
from google.protobuf.message import Message

from boxoffice import caller, validate
from boxoffice.server import Registration
from gen.boxoffice.payment.v1 import payment_service_pb2 as pb
from gen.boxoffice.payment.v1 import payment_service_pb2_grpc as pb_grpc
from payment_svc.converters import (
    CURRENCY,
    access_token,
    parse_email,
    parse_uuid,
    payment_to_proto,
    ticket_to_proto,
    transfer_to_proto,
)
from payment_svc.fan_cancel import Cancelled, FanCancellation
from payment_svc.handler import PaymentHandler
from payment_svc.idempotency import Idempotent, fingerprint, key_scope
from payment_svc.model import PaymentState, RefundOrder, RefundSource
from payment_svc.provider_webhooks import ProviderWebhooks
from payment_svc.transfers import TicketTransfers

SERVICE_NAME = "boxoffice.payment.v1.PaymentService"

M = TypeVar("M", bound=Message)


class PaymentServicer(pb_grpc.PaymentServiceServicer):
    def __init__(
        self,
        *,
        handler: PaymentHandler,
        webhooks: ProviderWebhooks,
        idempotent: Idempotent,
        cancellation: FanCancellation,
        transfers: TicketTransfers,
    ) -> None:
        self._handler = handler
        self._webhooks = webhooks
        self._idempotent = idempotent
        self._cancellation = cancellation
        self._transfers = transfers

    def registration(self) -> Registration:
        return Registration(SERVICE_NAME, lambda server: pb_grpc.add_PaymentServiceServicer_to_server(self, server))

    async def _replayable(
        self,
        scope: str,
        key: str,
        parameters: bytes,
        work: Callable[[], Awaitable[M]],
        response: type[M],
        settled: Callable[[], Awaitable[M | None]] | None = None,
    ) -> M:
        """``work``'s answer, or the answer stored under the key (or, while
        the key is in flight, ``settled``'s)."""
        return await self._idempotent.run(
            scope,
            key,
            parameters,
            work,
            lambda reply: reply.SerializeToString(deterministic=True),
            response.FromString,
            settled,
        )

    async def StartPayment(
        self, request: pb.StartPaymentRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.StartPaymentResponse:
        token = access_token(request.access_token)
        hold_id = parse_uuid("hold_id", request.hold_id)
        method = validate.text("payment_method", request.payment_method, max_length=200)
        payment = await self._handler.start(token, hold_id, method)
        return pb.StartPaymentResponse(payment=payment_to_proto(payment))

    async def ConfirmPayment(
        self, request: pb.ConfirmPaymentRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.ConfirmPaymentResponse:
        payment_id = parse_uuid("payment_id", request.payment_id)
        key = validate.text("idempotency_key", request.idempotency_key, max_length=255)
        # Only the payment's own customer confirms it (nothing is stored otherwise).
        await self._handler.visible(payment_id)

        async def work() -> pb.ConfirmPaymentResponse:
            payment = await self._handler.settle(payment_id)
            return pb.ConfirmPaymentResponse(payment=payment_to_proto(payment))

        async def settled() -> pb.ConfirmPaymentResponse | None:
            # Another request holds the key (or held it and died): a payment
            # that already succeeded is the answer it would store.
            payment = await self._handler.get(payment_id)
            if payment.state != PaymentState.SUCCEEDED:
                return None
            return pb.ConfirmPaymentResponse(payment=payment_to_proto(payment))

        return await self._replayable(
            await self._handler.key_scope("ConfirmPayment", payment_id),
            key,
            fingerprint(payment_id),
            work,
            pb.ConfirmPaymentResponse,
            settled,
        )

    async def HandleProviderWebhook(
        self, request: pb.HandleProviderWebhookRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.HandleProviderWebhookResponse:
        outcome = await self._webhooks.handle(request.signature, request.body)
        response = pb.HandleProviderWebhookResponse(
            provider_event_id=outcome.provider_event_id, duplicate=outcome.duplicate
        )
        if outcome.payment is not None:
            response.payment.CopyFrom(payment_to_proto(outcome.payment))
        return response

    async def RefundPayment(
        self, request: pb.RefundPaymentRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.RefundPaymentResponse:
        payment_id = parse_uuid("payment_id", request.payment_id)
        request_id = validate.text("request_id", request.request_id, max_length=64)
        reason = validate.text("reason", request.reason, max_length=500, min_length=0)
        amount: int | None = None
        currency: str | None = None
        if request.HasField("amount"):
            currency = validate.text(
                "amount.currency_code", request.amount.currency_code, max_length=3, pattern=CURRENCY
            )
            amount = validate.int_range("amount.amount_minor", request.amount.amount_minor, minimum=1, maximum=2**62)

        async def work() -> pb.RefundPaymentResponse:
            order = RefundOrder(
                payment_id,
                request_key=f"request:{request_id}",
                amount_minor=amount,
                currency=currency,
                reason=reason,
                source=RefundSource.REQUEST,
            )
            payment = await self._handler.request_refund(order)
            return pb.RefundPaymentResponse(payment=payment_to_proto(payment))

        parameters = fingerprint(payment_id, currency or "", str(amount or ""), reason)
        return await self._replayable(
            await self._handler.key_scope("RefundPayment", payment_id),
            request_id,
            parameters,
            work,
            pb.RefundPaymentResponse,
        )

    async def GetPayment(
        self, request: pb.GetPaymentRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.GetPaymentResponse:
        payment_id = parse_uuid("payment_id", request.payment_id)
        payment = await self._handler.visible(payment_id)
        return pb.GetPaymentResponse(payment=payment_to_proto(payment))

    async def ListTickets(
        self, request: pb.ListTicketsRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.ListTicketsResponse:
        # Through the edge the asserted fan needs no token: tickets outlive
        # the shopping session.
        token = request.access_token if caller.current().is_edge else access_token(request.access_token)
        event_id = validate.positive_id("event_id", request.event_id)
        hold_id = parse_uuid("hold_id", request.hold_id) if request.hold_id else None
        page_size = validate.int_range("page_size", request.page_size, minimum=0, maximum=1000) or 100
        page_token = validate.text("page_token", request.page_token, max_length=512, min_length=0)
        tickets, next_token = await self._handler.list_tickets(
            token, event_id=event_id, hold_id=hold_id, page_size=page_size, page_token=page_token
        )
        return pb.ListTicketsResponse(tickets=[ticket_to_proto(t) for t in tickets], next_page_token=next_token)

    async def CancelBooking(
        self, request: pb.CancelBookingRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.CancelBookingResponse:
        booking_id = parse_uuid("booking_id", request.booking_id)
        key = validate.text("idempotency_key", request.idempotency_key, max_length=255)
        if not request.HasField("quoted_refund"):
            raise validate.required("quoted_refund", "quoted_refund is required: the refund of the quote accepted")
        currency = validate.text(
            "quoted_refund.currency_code", request.quoted_refund.currency_code, max_length=3, pattern=CURRENCY
        )
        quoted = validate.int_range(
            "quoted_refund.amount_minor", request.quoted_refund.amount_minor, minimum=1, maximum=2**62
        )
        # Only the fan's own paid booking (nothing is stored otherwise).
        payment = await self._cancellation.paid_booking(booking_id)

        def answer(done: Cancelled) -> pb.CancelBookingResponse:
            return pb.CancelBookingResponse(
                booking_id=booking_id,
                refund=pb.Money(currency_code=done.payment.currency, amount_minor=done.refund_minor),
                payment=payment_to_proto(done.payment),
            )

        async def work() -> pb.CancelBookingResponse:
            return answer(await self._cancellation.cancel(payment, quoted, currency))

        async def settled() -> pb.CancelBookingResponse | None:
            done = await self._cancellation.settled(booking_id)
            return None if done is None else answer(done)

        return await self._replayable(
            key_scope("CancelBooking", payment.payment_id, payment.customer_id),
            key,
            fingerprint(booking_id, currency, str(quoted)),
            work,
            pb.CancelBookingResponse,
            settled,
        )

    async def TransferTicket(
        self, request: pb.TransferTicketRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.TransferTicketResponse:
        ticket_id = parse_uuid("ticket_id", request.ticket_id)
        email = parse_email("email", request.email)
        transfer = await self._transfers.transfer(ticket_id, email)
        return pb.TransferTicketResponse(transfer=transfer_to_proto(transfer))

    async def ClaimTransfer(
        self, request: pb.ClaimTransferRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.ClaimTransferResponse:
        transfer_id = parse_uuid("transfer_id", request.transfer_id)
        secret = validate.text("claim_secret", request.claim_secret, max_length=100)
        transfer, ticket = await self._transfers.claim(transfer_id, secret)
        return pb.ClaimTransferResponse(transfer=transfer_to_proto(transfer), ticket=ticket_to_proto(ticket))

    async def CancelTransfer(
        self, request: pb.CancelTransferRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.CancelTransferResponse:
        transfer_id = parse_uuid("transfer_id", request.transfer_id)
        transfer = await self._transfers.cancel(transfer_id)
        return pb.CancelTransferResponse(transfer=transfer_to_proto(transfer))
