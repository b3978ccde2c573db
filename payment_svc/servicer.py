"""PaymentService over gRPC: parse and validate, call the use case, build
the response. Domain errors travel as raised (the shared interceptor maps
them)."""

from __future__ import annotations

import re
from datetime import datetime
from typing import Any

import grpc
from google.protobuf import timestamp_pb2

from boxoffice import validate
from boxoffice.tokens import TokenSigner
from gen.boxoffice.payment.v1 import payment_service_pb2 as pb
from gen.boxoffice.payment.v1 import payment_service_pb2_grpc as pb_grpc
from payment_svc.idempotency import Idempotent, fingerprint
from payment_svc.issuer import TicketStore
from payment_svc.model import Payment, PaymentState, RefundSource, Ticket
from payment_svc.payments import Payments, parse_uuid
from payment_svc.webhook_handler import WebhookHandler

SERVICE_NAME = "boxoffice.payment.v1.PaymentService"

_CURRENCY = re.compile(r"[A-Z]{3}")
_STATES = {
    PaymentState.PENDING: pb.PAYMENT_STATE_PENDING,
    PaymentState.CAPTURED: pb.PAYMENT_STATE_CAPTURED,
    PaymentState.SUCCEEDED: pb.PAYMENT_STATE_SUCCEEDED,
    PaymentState.DECLINED: pb.PAYMENT_STATE_DECLINED,
    PaymentState.FAILED: pb.PAYMENT_STATE_FAILED,
    PaymentState.REFUND_REQUIRED: pb.PAYMENT_STATE_REFUND_REQUIRED,
    PaymentState.REFUNDED: pb.PAYMENT_STATE_REFUNDED,
    PaymentState.PARTIALLY_REFUNDED: pb.PAYMENT_STATE_PARTIALLY_REFUNDED,
}
_MAX_TOKEN = 1024


def _timestamp(value: datetime) -> timestamp_pb2.Timestamp:
    stamp = timestamp_pb2.Timestamp()
    stamp.FromDatetime(value)
    return stamp


def payment_to_proto(payment: Payment) -> pb.Payment:
    return pb.Payment(
        payment_id=payment.payment_id,
        hold_id=payment.hold_id,
        event_id=payment.event_id,
        customer_id=payment.customer_id,
        amount=pb.Money(currency_code=payment.currency, amount_minor=payment.amount_minor),
        state=_STATES[payment.state],
        provider_payment_id=payment.provider_payment_id,
        failure_reason=payment.failure_reason,
        refunded=pb.Money(currency_code=payment.currency, amount_minor=payment.refunded_minor),
        create_time=_timestamp(payment.created_at),
        update_time=_timestamp(payment.updated_at),
    )


def ticket_to_proto(ticket: Ticket) -> pb.Ticket:
    return pb.Ticket(
        ticket_id=ticket.ticket_id,
        event_id=ticket.event_id,
        hold_id=ticket.hold_id,
        customer_id=ticket.customer_id,
        section_id=ticket.section_id,
        seat_id=ticket.seat_id or 0,
        seat_label=ticket.seat_label,
        unit=ticket.unit,
        code=ticket.code,
        state=pb.TICKET_STATE_VOID if ticket.voided_at is not None else pb.TICKET_STATE_VALID,
        issue_time=_timestamp(ticket.issued_at),
        payment_id=ticket.payment_id,
    )


def _token(value: str) -> str:
    if not value:
        raise validate.required("access_token")
    if len(value) > _MAX_TOKEN:
        raise validate.invalid("access_token", "is too long")
    return value


class PaymentServicer(pb_grpc.PaymentServiceServicer):
    def __init__(
        self,
        *,
        payments: Payments,
        idempotent: Idempotent,
        webhooks: WebhookHandler,
        tickets: TicketStore,
        tokens: TokenSigner,
    ) -> None:
        self._payments = payments
        self._idempotent = idempotent
        self._webhooks = webhooks
        self._tickets = tickets
        self._tokens = tokens

    async def StartPayment(
        self, request: pb.StartPaymentRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.StartPaymentResponse:
        token = _token(request.access_token)
        hold_id = parse_uuid("hold_id", request.hold_id)
        method = validate.text("payment_method", request.payment_method, max_length=200)
        payment = await self._payments.start(token, hold_id, method)
        return pb.StartPaymentResponse(payment=payment_to_proto(payment))

    async def ConfirmPayment(
        self, request: pb.ConfirmPaymentRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.ConfirmPaymentResponse:
        payment_id = parse_uuid("payment_id", request.payment_id)
        key = validate.text("idempotency_key", request.idempotency_key, max_length=255)

        async def work() -> pb.ConfirmPaymentResponse:
            payment = await self._payments.settle(payment_id)
            return pb.ConfirmPaymentResponse(payment=payment_to_proto(payment))

        return await self._idempotent.run(
            "ConfirmPayment",
            key,
            fingerprint(payment_id),
            work,
            lambda response: response.SerializeToString(deterministic=True),
            pb.ConfirmPaymentResponse.FromString,
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
                "amount.currency_code", request.amount.currency_code, max_length=3, pattern=_CURRENCY
            )
            amount = validate.int_range("amount.amount_minor", request.amount.amount_minor, minimum=1, maximum=2**62)

        async def work() -> pb.RefundPaymentResponse:
            payment = await self._payments.refund(
                payment_id,
                request_key=f"request:{request_id}",
                amount_minor=amount,
                currency=currency,
                reason=reason,
                source=RefundSource.REQUEST,
            )
            return pb.RefundPaymentResponse(payment=payment_to_proto(payment))

        return await self._idempotent.run(
            "RefundPayment",
            request_id,
            fingerprint(payment_id, currency or "", str(amount or ""), reason),
            work,
            lambda response: response.SerializeToString(deterministic=True),
            pb.RefundPaymentResponse.FromString,
        )

    async def GetPayment(
        self, request: pb.GetPaymentRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.GetPaymentResponse:
        payment_id = parse_uuid("payment_id", request.payment_id)
        payment = await self._payments.get(payment_id)
        return pb.GetPaymentResponse(payment=payment_to_proto(payment))

    async def ListTickets(
        self, request: pb.ListTicketsRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.ListTicketsResponse:
        token = _token(request.access_token)
        event_id = validate.positive_id("event_id", request.event_id)
        hold_id = parse_uuid("hold_id", request.hold_id) if request.hold_id else None
        page_size = validate.int_range("page_size", request.page_size, minimum=0, maximum=1000) or 100
        page_token = validate.text("page_token", request.page_token, max_length=512, min_length=0)
        claims = self._tokens.verify(token, event_id=event_id)
        tickets, next_token = await self._tickets.list_for_customer(
            event_id=event_id,
            customer_id=claims.customer_id,
            hold_id=hold_id,
            page_size=page_size,
            page_token=page_token,
        )
        return pb.ListTicketsResponse(tickets=[ticket_to_proto(t) for t in tickets], next_page_token=next_token)
