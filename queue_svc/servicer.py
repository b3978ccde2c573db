"""boxoffice.queue.v1.QueueService on gRPC: each call parses its request
(``converters``), calls the handler and builds its response. Errors are
raised as domain errors; the shared interceptor turns them into statuses
with ErrorInfo.

The service's deprecated admin RPCs are not here: they are answered by
:class:`queue_svc.admin_servicer.AuditedQueueServicer`, beside the admin
service whose use cases they share."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import grpc

from boxoffice.server import Registration
from boxoffice.tokens import asserted_customer
from gen.boxoffice.queue.v1 import queue_service_pb2 as pb
from gen.boxoffice.queue.v1 import queue_service_pb2_grpc as pb_grpc
from queue_svc.converters import (
    parse_access_code,
    parse_client_id,
    parse_customer_id,
    parse_end_reason,
    parse_event_id,
    parse_lane_name,
    parse_presence_ids,
    parse_proof_page_size,
    parse_proof_page_token,
    parse_staff_pass,
    position_pb,
    progress_pb,
    proof_pb,
)
from queue_svc.handler import QueueHandler
from queue_svc.model import Position

SERVICE_NAME = pb.DESCRIPTOR.services_by_name["QueueService"].full_name

Context = grpc.aio.ServicerContext[Any, Any]


def _customer(claimed: str) -> str:
    """The fan a customer-scoped call acts for: the edge's assertion, never
    the body. A body ``customer_id`` (deprecated) is checked like any field,
    then must name the asserted fan."""
    if claimed:
        parse_customer_id(claimed)
    return parse_customer_id(asserted_customer(claimed))


class QueueServicer(pb_grpc.QueueServiceServicer):
    """The gRPC face of QueueHandler for fans and the edge."""

    def __init__(self, handler: QueueHandler) -> None:
        self._handler = handler

    def registration(self) -> Registration:
        return Registration(SERVICE_NAME, lambda server: pb_grpc.add_QueueServiceServicer_to_server(self, server))

    async def JoinQueue(self, request: pb.JoinQueueRequest, context: Context) -> pb.JoinQueueResponse:
        event_id = parse_event_id(request.event_id)
        customer_id = _customer(request.customer_id)
        client_id = parse_client_id(request.client_id)
        lane = parse_lane_name(request.lane)
        access_code = parse_access_code(request.access_code)
        staff_pass = parse_staff_pass(request.staff_pass)
        joined = await self._handler.join(
            event_id, customer_id, client_id, lane=lane, access_code=access_code, staff_pass=staff_pass
        )
        return pb.JoinQueueResponse(
            position=position_pb(joined.position), newly_joined=joined.newly_joined, pseudonym=joined.pseudonym
        )

    async def GetQueuePosition(
        self, request: pb.GetQueuePositionRequest, context: Context
    ) -> pb.GetQueuePositionResponse:
        event_id = parse_event_id(request.event_id)
        customer_id = _customer(request.customer_id)
        position = await self._handler.position(event_id, customer_id)
        return pb.GetQueuePositionResponse(position=position_pb(position))

    async def WatchQueuePosition(
        self, request: pb.WatchQueuePositionRequest, context: Context
    ) -> AsyncIterator[pb.WatchQueuePositionResponse]:
        event_id = parse_event_id(request.event_id)
        customer_id = _customer(request.customer_id)
        watch = await self._handler.watch_position(event_id, customer_id)
        try:
            position: Position | None = watch.first
            while position is not None:
                yield pb.WatchQueuePositionResponse(position=position_pb(position))
                position = await watch.next()
        finally:
            watch.close()

    async def WatchAdmissionProgress(
        self, request: pb.WatchAdmissionProgressRequest, context: Context
    ) -> AsyncIterator[pb.WatchAdmissionProgressResponse]:
        event_id = parse_event_id(request.event_id)
        lane = parse_lane_name(request.lane)
        async for progress in self._handler.watch_progress(event_id, lane):
            yield pb.WatchAdmissionProgressResponse(progress=progress_pb(progress))

    async def LeaveQueue(self, request: pb.LeaveQueueRequest, context: Context) -> pb.LeaveQueueResponse:
        event_id = parse_event_id(request.event_id)
        customer_id = _customer(request.customer_id)
        position = await self._handler.leave(event_id, customer_id)
        return pb.LeaveQueueResponse(position=position_pb(position))

    async def EndShoppingSession(
        self, request: pb.EndShoppingSessionRequest, context: Context
    ) -> pb.EndShoppingSessionResponse:
        event_id = parse_event_id(request.event_id)
        customer_id = _customer(request.customer_id)
        reason = parse_end_reason(request.reason)
        position = await self._handler.end_session(event_id, customer_id, reason)
        return pb.EndShoppingSessionResponse(position=position_pb(position))

    async def RecordPresence(self, request: pb.RecordPresenceRequest, context: Context) -> pb.RecordPresenceResponse:
        event_id = parse_event_id(request.event_id)
        customer_ids = parse_presence_ids(request.customer_ids)
        return pb.RecordPresenceResponse(waiting=await self._handler.record_presence(event_id, customer_ids))

    async def GetPreQueueProof(
        self, request: pb.GetPreQueueProofRequest, context: Context
    ) -> pb.GetPreQueueProofResponse:
        event_id = parse_event_id(request.event_id)
        page_size = parse_proof_page_size(request.page_size)
        after = parse_proof_page_token(event_id, request.page_token)
        return proof_pb(await self._handler.pre_queue_proof(event_id, page_size=page_size, after=after))

    async def RegisterForFanDraw(
        self, request: pb.RegisterForFanDrawRequest, context: Context
    ) -> pb.RegisterForFanDrawResponse:
        event_id = parse_event_id(request.event_id)
        customer_id = _customer("")
        registered = await self._handler.fan_draws.register(event_id, customer_id)
        answer = pb.RegisterForFanDrawResponse(
            newly_registered=registered.newly_registered, pseudonym=registered.pseudonym
        )
        answer.closes_at.FromMilliseconds(registered.closes_at_ms)
        return answer

    async def GetFanDrawResult(
        self, request: pb.GetFanDrawResultRequest, context: Context
    ) -> pb.GetFanDrawResultResponse:
        event_id = parse_event_id(request.event_id)
        result = await self._handler.fan_draws.result(event_id, _customer(""))
        answer = pb.GetFanDrawResultResponse(
            outcome=pb.FanDrawOutcome.ValueType(result.outcome.value),
            access_code=result.access_code,
            lane=result.lane,
            pseudonym=result.pseudonym,
        )
        answer.closes_at.FromMilliseconds(result.closes_at_ms)
        return answer

    async def GetFanDrawProof(self, request: pb.GetFanDrawProofRequest, context: Context) -> pb.GetFanDrawProofResponse:
        event_id = parse_event_id(request.event_id)
        page_size = parse_proof_page_size(request.page_size)
        after = parse_proof_page_token(event_id, request.page_token)
        proof, fan_draw = await self._handler.fan_draws.proof(event_id, page_size=page_size, after=after)
        # Fields 1 to 11 are the pre-queue proof's, number for number.
        answer = pb.GetFanDrawProofResponse.FromString(proof_pb(proof).SerializeToString())
        answer.winners = fan_draw.winners
        answer.lane = fan_draw.lane
        return answer
