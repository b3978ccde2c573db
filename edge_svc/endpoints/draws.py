"""The draws: the pre-queue shuffle's public proof and the verified-fan
draw (register, a fan's result, its public proof)."""

from __future__ import annotations

from collections.abc import Mapping

from starlette.responses import Response

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
from edge_svc.http import Ctx, Handler, json_response
from edge_svc.mesh import QUEUE
from gen.boxoffice.queue.v1 import queue_service_pb2 as queue_pb


class Draws:
    def __init__(self, deps: EdgeDeps, callers: Callers) -> None:
        self._d = deps
        self._callers = callers

    def endpoints(self) -> Mapping[str, Handler]:
        return {
            "GetPreQueueProof": self.get_pre_queue_proof,
            "RegisterForFanDraw": self.register_for_fan_draw,
            "GetFanDrawResult": self.get_fan_draw_result,
            "GetFanDrawProof": self.get_fan_draw_proof,
        }

    async def get_pre_queue_proof(self, ctx: Ctx) -> Response:
        return await self._proof(ctx, "GetPreQueueProof", queue_pb.GetPreQueueProofRequest)

    async def get_fan_draw_proof(self, ctx: Ctx) -> Response:
        return await self._proof(ctx, "GetFanDrawProof", queue_pb.GetFanDrawProofRequest)

    async def _proof(
        self,
        ctx: Ctx,
        method: str,
        request_type: type[queue_pb.GetPreQueueProofRequest] | type[queue_pb.GetFanDrawProofRequest],
    ) -> Response:
        """A draw's public proof (the pre-queue's or the verified-fan
        draw's), one page, loaded once per page and max age."""
        event_id = event_id_of(ctx)
        query = ctx.request.query_params
        unknown = set(query) - {"pageSize", "pageToken"}
        if unknown:
            raise unknown_query(unknown)
        page_size = _page_size(int_query(query.get("pageSize"), "pageSize", maximum=10_000))
        page_token = query.get("pageToken", "")

        async def load() -> bytes:
            request = request_type(event_id=event_id, page_size=page_size, page_token=page_token)
            return to_json(await self._d.mesh.call(QUEUE, method, request, call_context(ctx, None)))

        return await self._d.events.answer(ctx, (method, event_id, page_size, page_token), load)

    async def register_for_fan_draw(self, ctx: Ctx) -> Response:
        """Registration for the verified-fan draw, behind the same challenge
        as the join (a draw's entries are worth as much as places)."""
        session = await self._callers.fan(ctx)
        event_id = event_id_of(ctx)
        request = queue_pb.RegisterForFanDrawRequest()
        await read_message(ctx, request, max_bytes=self._d.config.max_body_bytes)
        await self._callers.human(ctx, event_id, session)
        request.event_id = event_id
        reply = await self._d.mesh.call(QUEUE, "RegisterForFanDraw", request, call_context(ctx, session.customer_id))
        return json_response(to_json(reply))

    async def get_fan_draw_result(self, ctx: Ctx) -> Response:
        session = await self._callers.fan(ctx)
        request = queue_pb.GetFanDrawResultRequest(event_id=event_id_of(ctx))
        reply = await self._d.mesh.call(QUEUE, "GetFanDrawResult", request, call_context(ctx, session.customer_id))
        return json_response(to_json(reply))


# The page sizes a public proof is loaded in: a size asked is rounded down
# to one of them (a page holds at most what was asked), so that distinct
# sizes share a few cached pages instead of one backend call each.
PAGE_SIZES = (1, 10, 100, 1000, 10_000)


def _page_size(asked: int) -> int:
    """0 (the service's default) stays 0; any other size is the largest
    of :data:`PAGE_SIZES` not above it."""
    if asked == 0:
        return 0
    return max(size for size in PAGE_SIZES if size <= asked)
