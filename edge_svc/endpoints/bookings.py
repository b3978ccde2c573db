"""A fan's paid bookings after the sale: what cancelling one would refund
(BookingService.GetCancellationQuote) and the cancel itself
(PaymentService.CancelBooking), for the signed-in fan's own bookings only:
another fan's answers 404 exactly as one that does not exist."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from google.protobuf.message import Message
from starlette.responses import Response

from boxoffice.errors import BoxofficeError, InvalidArgument
from edge_svc import errors
from edge_svc.endpoints.common import Callers, EdgeDeps, call_context, read_message, to_json, unknown_query
from edge_svc.http import Ctx, Handler, json_response
from edge_svc.mesh import BOOKING, PAYMENT
from gen.boxoffice.booking.v1 import booking_service_pb2 as booking_pb
from gen.boxoffice.payment.v1 import payment_service_pb2 as payment_pb

# What the services answer for a booking that is not the fan's or not there.
_NOT_YOURS = frozenset({"HOLD_NOT_FOUND", "NOT_HOLD_OWNER"})


class Bookings:
    def __init__(self, deps: EdgeDeps, callers: Callers) -> None:
        self._d = deps
        self._callers = callers

    def endpoints(self) -> Mapping[str, Handler]:
        return {
            "GetCancellationQuote": self.get_cancellation_quote,
            "CancelBooking": self.cancel_booking,
        }

    async def _call(self, ctx: Ctx, service: str, method: str, request: Message, fan: str) -> Any:
        try:
            return await self._d.mesh.call(service, method, request, call_context(ctx, fan))
        except BoxofficeError as err:
            if err.reason in _NOT_YOURS:
                raise errors.not_found("booking") from None
            raise

    async def get_cancellation_quote(self, ctx: Ctx) -> Response:
        session = await self._callers.fan(ctx)
        if ctx.request.query_params:
            raise unknown_query(set(ctx.request.query_params))
        request = booking_pb.GetCancellationQuoteRequest(booking_id=ctx.params["booking_id"])
        reply = await self._call(ctx, BOOKING, "GetCancellationQuote", request, session.customer_id)
        return json_response(to_json(reply))

    async def cancel_booking(self, ctx: Ctx) -> Response:
        session = await self._callers.fan(ctx)
        key = ctx.request.headers.get("idempotency-key", "")
        if not key:
            raise InvalidArgument(
                "the Idempotency-Key header is required", reason="FIELD_REQUIRED", metadata={"field": "Idempotency-Key"}
            )
        request = payment_pb.CancelBookingRequest()
        await read_message(ctx, request, max_bytes=self._d.config.max_body_bytes)
        request.booking_id = ctx.params["booking_id"]
        request.idempotency_key = key
        reply = await self._call(ctx, PAYMENT, "CancelBooking", request, session.customer_id)
        return json_response(to_json(reply))
