"""The checkout: an admitted fan's holds, payments and tickets, and the
payment provider's webhook."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import grpc
from google.protobuf.message import Message
from starlette.responses import Response

from boxoffice import boundedjson
from boxoffice.errors import BoxofficeError, InvalidArgument, Unauthenticated, Unavailable
from edge_svc import errors
from edge_svc.endpoints.common import (
    Callers,
    EdgeDeps,
    call_context,
    event_id_of,
    int_query,
    read_message,
    to_json,
    unknown_query,
)
from edge_svc.http import Ctx, Handler, json_response, read_body
from edge_svc.identity import Session
from edge_svc.mesh import BOOKING, PAYMENT
from edge_svc.ratelimit import Limit
from gen.boxoffice.booking.v1 import booking_service_pb2 as booking_pb
from gen.boxoffice.payment.v1 import payment_service_pb2 as payment_pb

# Webhook bodies are at most this long (PaymentService's limit), and nest
# at most this deep (a provider's event nests about 10).
_WEBHOOK_MAX_BYTES = 64 * 1024
_WEBHOOK_MAX_DEPTH = 32

# Answers of the services that, for a hold, mean "not yours or not there":
# answered alike, so that hold ids reveal nothing.
_NOT_YOUR_HOLD = frozenset({"NOT_HOLD_OWNER", "HOLD_NOT_FOUND", "TOKEN_WRONG_EVENT"})
# Codes of a ListTickets that mean "PaymentService cannot answer now".
_DOWN = frozenset({grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED})


def fan_language(accept_language: str) -> str:
    """The first language of an Accept-Language header that the tickets'
    e-mail is written in (en, vi, pt-BR; any Portuguese is pt-BR), else en."""
    for item in accept_language.split(",")[:20]:
        tag = item.split(";", 1)[0].strip().lower()
        if tag.startswith("vi"):
            return "vi"
        if tag.startswith("pt"):
            return "pt-BR"
        if tag.startswith("en"):
            return "en"
    return "en"


class Checkout:
    def __init__(self, deps: EdgeDeps, callers: Callers) -> None:
        self._d = deps
        self._callers = callers
        self._webhook_limit = Limit(deps.config.webhook_rate_per_second, deps.config.webhook_burst)

    def endpoints(self) -> Mapping[str, Handler]:
        return {
            "HoldSeats": self.hold_seats,
            "GetHold": self.get_hold,
            "ReleaseHold": self.release_hold,
            "StartPayment": self.start_payment,
            "ConfirmPayment": self.confirm_payment,
            "GetPayment": self.get_payment,
            "ListTickets": self.list_tickets,
            "HandleProviderWebhook": self.handle_provider_webhook,
        }

    async def _hold_call(self, ctx: Ctx, service: str, method: str, request: Message, session: Session) -> Any:
        try:
            return await self._d.mesh.call(service, method, request, call_context(ctx, session.customer_id))
        except BoxofficeError as err:
            if err.reason in _NOT_YOUR_HOLD:
                raise errors.not_found("hold") from None
            raise

    async def hold_seats(self, ctx: Ctx) -> Response:
        session, token = await self._callers.shopper(ctx)
        request = booking_pb.HoldSeatsRequest()
        await read_message(ctx, request, max_bytes=self._d.config.max_body_bytes)
        request.event_id = event_id_of(ctx)
        request.access_token = token
        reply = await self._d.mesh.call(BOOKING, "HoldSeats", request, call_context(ctx, session.customer_id))
        return json_response(to_json(reply))

    async def get_hold(self, ctx: Ctx) -> Response:
        session, token = await self._callers.shopper(ctx)
        request = booking_pb.GetHoldRequest(access_token=token, hold_id=ctx.params["hold_id"])
        return json_response(to_json(await self._hold_call(ctx, BOOKING, "GetHold", request, session)))

    async def release_hold(self, ctx: Ctx) -> Response:
        session, token = await self._callers.shopper(ctx)
        request = booking_pb.ReleaseHoldRequest(access_token=token, hold_id=ctx.params["hold_id"])
        return json_response(to_json(await self._hold_call(ctx, BOOKING, "ReleaseHold", request, session)))

    async def start_payment(self, ctx: Ctx) -> Response:
        session, token = await self._callers.shopper(ctx)
        request = payment_pb.StartPaymentRequest()
        await read_message(ctx, request, max_bytes=self._d.config.max_body_bytes)
        request.access_token = token
        request.hold_id = ctx.params["hold_id"]
        # The fan's verified address and language go with the payment, for
        # the tickets' e-mail.
        call = dataclasses.replace(
            call_context(ctx, session.customer_id),
            email=session.email,
            language=fan_language(ctx.request.headers.get("accept-language", "")),
        )
        try:
            reply = await self._d.mesh.call(PAYMENT, "StartPayment", request, call)
        except BoxofficeError as err:
            if err.reason in _NOT_YOUR_HOLD:
                raise errors.not_found("hold") from None
            raise
        return json_response(to_json(reply))

    async def confirm_payment(self, ctx: Ctx) -> Response:
        session = await self._callers.fan(ctx)
        key = ctx.request.headers.get("idempotency-key", "")
        if not key:
            raise InvalidArgument(
                "the Idempotency-Key header is required", reason="FIELD_REQUIRED", metadata={"field": "Idempotency-Key"}
            )
        request = payment_pb.ConfirmPaymentRequest()
        await read_message(ctx, request, max_bytes=self._d.config.max_body_bytes)
        request.payment_id = ctx.params["payment_id"]
        request.idempotency_key = key
        reply = await self._d.mesh.call(PAYMENT, "ConfirmPayment", request, call_context(ctx, session.customer_id))
        return json_response(to_json(reply))

    async def get_payment(self, ctx: Ctx) -> Response:
        session = await self._callers.fan(ctx)
        request = payment_pb.GetPaymentRequest(payment_id=ctx.params["payment_id"])
        reply = await self._d.mesh.call(PAYMENT, "GetPayment", request, call_context(ctx, session.customer_id))
        return json_response(to_json(reply))

    async def list_tickets(self, ctx: Ctx) -> Response:
        session = await self._callers.fan(ctx)
        query = ctx.request.query_params
        unknown = set(query) - {"holdId", "pageSize", "pageToken"}
        if unknown:
            raise unknown_query(unknown)
        request = payment_pb.ListTicketsRequest(
            event_id=event_id_of(ctx),
            access_token=self._callers.access_token(ctx, required=False),
            hold_id=query.get("holdId", ""),
            page_size=int_query(query.get("pageSize"), "pageSize"),
            page_token=query.get("pageToken", ""),
        )
        call = call_context(ctx, session.customer_id)
        try:
            try:
                reply = await self._d.mesh.call(PAYMENT, "ListTickets", request, call)
            except BoxofficeError as err:
                if request.access_token and err.reason.startswith(("TOKEN_", "SESSION_ENDED")):
                    # A stale token cookie: the fan's own tickets need none.
                    request.access_token = ""
                    reply = await self._d.mesh.call(PAYMENT, "ListTickets", request, call)
                else:
                    raise
        except BoxofficeError as err:
            if err.code not in _DOWN:
                raise
            # PaymentService is down: say so plainly (the page tells the fan
            # their tickets are kept and shows them once it is back).
            raise Unavailable(
                "your tickets are kept but cannot be read right now; ask again shortly",
                reason="TICKETS_UNAVAILABLE",
                metadata={"upstream_reason": err.reason},
            ) from None
        return json_response(to_json(reply))

    async def handle_provider_webhook(self, ctx: Ctx) -> Response:
        """The provider's webhook, forwarded to PaymentService only when it
        can be one: within its sender's limit, signed, and a JSON object
        within its size and depth (PaymentService checks the signature)."""
        await self._callers.limit(ctx, "webhook", self._webhook_limit)
        signature = ctx.request.headers.get(self._d.config.webhook_signature_header, "")
        if not signature:
            raise Unauthenticated("the webhook carries no signature", reason="WEBHOOK_SIGNATURE_MISSING")
        body = await read_body(ctx.request, _WEBHOOK_MAX_BYTES)
        try:
            document = boundedjson.loads(body, max_bytes=_WEBHOOK_MAX_BYTES, max_depth=_WEBHOOK_MAX_DEPTH)
        except ValueError as err:
            raise InvalidArgument(f"the webhook body cannot be read: {err}", reason="WEBHOOK_MALFORMED") from None
        if not isinstance(document, dict):
            raise InvalidArgument("the webhook body is not a JSON object", reason="WEBHOOK_MALFORMED")
        request = payment_pb.HandleProviderWebhookRequest(signature=signature, body=body)
        reply = await self._d.mesh.call(PAYMENT, "HandleProviderWebhook", request, call_context(ctx, None))
        return json_response(to_json(reply))
