"""Ticket transfers: a fan offers one of their tickets to a friend, and the
friend, signed in, claims it with the link's secret (PaymentService's
TransferTicket, ClaimTransfer and CancelTransfer, the edge asserting the fan)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from starlette.responses import Response

from edge_svc.endpoints.checkout import fan_language
from edge_svc.endpoints.common import Callers, EdgeDeps, call_context, read_message, to_json
from edge_svc.http import Ctx, Handler, json_response
from edge_svc.mesh import PAYMENT
from gen.boxoffice.payment.v1 import payment_service_pb2 as payment_pb


class Transfers:
    def __init__(self, deps: EdgeDeps, callers: Callers) -> None:
        self._d = deps
        self._callers = callers

    def endpoints(self) -> Mapping[str, Handler]:
        return {
            "TransferTicket": self.transfer_ticket,
            "ClaimTransfer": self.claim_transfer,
            "CancelTransfer": self.cancel_transfer,
        }

    async def transfer_ticket(self, ctx: Ctx) -> Response:
        session = await self._callers.fan(ctx)
        request = payment_pb.TransferTicketRequest()
        await read_message(ctx, request, max_bytes=self._d.config.max_body_bytes)
        request.ticket_id = ctx.params["ticket_id"]
        # The friend's e-mail is written in the sender's language.
        call = dataclasses.replace(
            call_context(ctx, session.customer_id),
            language=fan_language(ctx.request.headers.get("accept-language", "")),
        )
        reply = await self._d.mesh.call(PAYMENT, "TransferTicket", request, call)
        return json_response(to_json(reply))

    async def claim_transfer(self, ctx: Ctx) -> Response:
        session = await self._callers.fan(ctx)
        request = payment_pb.ClaimTransferRequest()
        await read_message(ctx, request, max_bytes=self._d.config.max_body_bytes)
        request.transfer_id = ctx.params["transfer_id"]
        reply = await self._d.mesh.call(PAYMENT, "ClaimTransfer", request, call_context(ctx, session.customer_id))
        return json_response(to_json(reply))

    async def cancel_transfer(self, ctx: Ctx) -> Response:
        session = await self._callers.fan(ctx)
        request = payment_pb.CancelTransferRequest()
        await read_message(ctx, request, max_bytes=self._d.config.max_body_bytes)
        request.transfer_id = ctx.params["transfer_id"]
        reply = await self._d.mesh.call(PAYMENT, "CancelTransfer", request, call_context(ctx, session.customer_id))
        return json_response(to_json(reply))
