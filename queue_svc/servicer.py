"""boxoffice.queue.v1.QueueService on gRPC: parse and validate each request,
call the handler, build the response. Errors are raised as domain errors;
the shared interceptor turns them into statuses with ErrorInfo."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import grpc
from google.protobuf import duration_pb2, timestamp_pb2

from boxoffice import validate
from boxoffice.server import Registration
from gen.boxoffice.queue.v1 import queue_service_pb2 as pb
from gen.boxoffice.queue.v1 import queue_service_pb2_grpc as pb_grpc
from queue_svc import model
from queue_svc.model import EventQueueConfig, Position, Progress
from queue_svc.service import QueueHandler

SERVICE_NAME = pb.DESCRIPTOR.services_by_name["QueueService"].full_name

MAX_CUSTOMER_ID_LENGTH = 128
MAX_CLIENT_ID_LENGTH = 128

_SECOND_MS = 1000
_MINUTE_MS = 60 * _SECOND_MS
_HOUR_MS = 60 * _MINUTE_MS
_DAY_MS = 24 * _HOUR_MS
# 0001-01-01 .. 9999-12-31, the range of google.protobuf.Timestamp.
_TIMESTAMP_MIN_SECONDS = -62135596800
_TIMESTAMP_MAX_SECONDS = 253402300799

_END_REASONS = {
    pb.SESSION_END_REASON_COMPLETED: "completed",
    pb.SESSION_END_REASON_ABANDONED: "abandoned",
}

Context = grpc.aio.ServicerContext[Any, Any]


def _event_id(value: int, field: str = "event_id") -> int:
    return validate.positive_id(field, value)


def _customer_id(value: str) -> str:
    return validate.text("customer_id", value, max_length=MAX_CUSTOMER_ID_LENGTH)


def _position_pb(position: Position) -> pb.QueuePosition:
    message = pb.QueuePosition(
        event_id=position.event_id,
        customer_id=position.customer_id,
        state=pb.QueueState.ValueType(position.state.value),
        ahead=position.ahead,
        score=position.score,
        admission_state=pb.AdmissionState.ValueType(position.admission_state.value),
    )
    if position.eta_seconds is not None:
        message.eta.seconds = round(position.eta_seconds)
    if position.poll_after_seconds is not None:
        message.poll_after.seconds = round(position.poll_after_seconds)
    if position.access_token:
        message.access_token = position.access_token
        message.access_token_expires_at.seconds = position.access_token_expires_at
    return message


def _progress_pb(progress: Progress) -> pb.AdmissionProgress:
    observed = timestamp_pb2.Timestamp()
    observed.FromMilliseconds(progress.observed_at_ms)
    return pb.AdmissionProgress(
        event_id=progress.event_id,
        admitted_through_score=progress.admitted_through_score,
        queue_length=progress.queue_length,
        active_shoppers=progress.active_shoppers,
        admitted_total=progress.admitted_total,
        admission_rate_per_second=round(progress.rate_per_second, 3),
        admission_state=pb.AdmissionState.ValueType(progress.admission_state.value),
        observed_at=observed,
    )


def _ms_duration(ms: int) -> duration_pb2.Duration:
    return duration_pb2.Duration(seconds=ms // 1000, nanos=(ms % 1000) * 1_000_000)


def config_pb(config: EventQueueConfig) -> pb.EventQueueConfig:
    opens_at = timestamp_pb2.Timestamp()
    opens_at.FromMilliseconds(config.opens_at_ms)
    return pb.EventQueueConfig(
        event_id=config.event_id,
        opens_at=opens_at,
        pre_queue_window=_ms_duration(config.pre_queue_window_ms),
        admission_rate_per_second=config.admission_rate_per_second,
        max_active_shoppers=config.max_active_shoppers,
        session_length=_ms_duration(config.session_length_ms),
        token_ttl=_ms_duration(config.token_ttl_ms),
        claim_grace=_ms_duration(config.claim_grace_ms),
        paused=config.paused,
    )


def _duration_ms(message: pb.EventQueueConfig, name: str, *, default_ms: int, minimum_ms: int, maximum_ms: int) -> int:
    path = f"config.{name}"
    if not message.HasField(name):  # type: ignore[arg-type]
        return default_ms
    value: duration_pb2.Duration = getattr(message, name)
    if not -999_999_999 <= value.nanos <= 999_999_999 or (value.seconds * value.nanos < 0):
        raise validate.invalid(path, "is not a valid duration")
    if value.nanos % 1_000_000:
        raise validate.invalid(path, "must be a whole number of milliseconds")
    ms = value.seconds * 1000 + value.nanos // 1_000_000
    if ms < minimum_ms or ms > maximum_ms:
        raise validate.invalid(path, f"must be between {minimum_ms / 1000:g} s and {maximum_ms / 1000:g} s")
    return ms


def _count(field: str, value: int, *, default: int, maximum: int) -> int:
    if value == 0:
        return default
    return validate.int_range(f"config.{field}", value, minimum=1, maximum=maximum)


def parse_config(message: pb.EventQueueConfig, *, present: bool) -> EventQueueConfig:
    """A validated configuration; unset fields take their defaults."""
    if not present:
        raise validate.required("config")
    event_id = _event_id(message.event_id, "config.event_id")
    if not message.HasField("opens_at"):
        raise validate.required("config.opens_at")
    opens = message.opens_at
    if not (_TIMESTAMP_MIN_SECONDS <= opens.seconds <= _TIMESTAMP_MAX_SECONDS) or not 0 <= opens.nanos < 10**9:
        raise validate.invalid("config.opens_at", "is not a valid timestamp")
    if opens.seconds < 0:
        raise validate.invalid("config.opens_at", "must be after 1970-01-01")
    return EventQueueConfig(
        event_id=event_id,
        opens_at_ms=opens.seconds * 1000 + opens.nanos // 1_000_000,
        pre_queue_window_ms=_duration_ms(
            message,
            "pre_queue_window",
            default_ms=model.DEFAULT_PRE_QUEUE_WINDOW_MS,
            minimum_ms=0,
            maximum_ms=7 * _DAY_MS,
        ),
        admission_rate_per_second=_count(
            "admission_rate_per_second",
            message.admission_rate_per_second,
            default=model.DEFAULT_ADMISSION_RATE_PER_SECOND,
            maximum=100_000,
        ),
        max_active_shoppers=_count(
            "max_active_shoppers",
            message.max_active_shoppers,
            default=model.DEFAULT_MAX_ACTIVE_SHOPPERS,
            maximum=10_000_000,
        ),
        session_length_ms=_duration_ms(
            message,
            "session_length",
            default_ms=model.DEFAULT_SESSION_LENGTH_MS,
            minimum_ms=10 * _SECOND_MS,
            maximum_ms=_DAY_MS,
        ),
        token_ttl_ms=_duration_ms(
            message,
            "token_ttl",
            default_ms=model.DEFAULT_TOKEN_TTL_MS,
            minimum_ms=10 * _SECOND_MS,
            maximum_ms=_DAY_MS,
        ),
        claim_grace_ms=_duration_ms(
            message,
            "claim_grace",
            default_ms=model.DEFAULT_CLAIM_GRACE_MS,
            minimum_ms=5 * _SECOND_MS,
            maximum_ms=_HOUR_MS,
        ),
        paused=message.paused,
    )


class QueueServicer(pb_grpc.QueueServiceServicer):
    """The gRPC face of QueueHandler."""

    def __init__(self, handler: QueueHandler) -> None:
        self._handler = handler

    def registration(self) -> Registration:
        return Registration(SERVICE_NAME, lambda server: pb_grpc.add_QueueServiceServicer_to_server(self, server))

    async def JoinQueue(self, request: pb.JoinQueueRequest, context: Context) -> pb.JoinQueueResponse:
        event_id = _event_id(request.event_id)
        customer_id = _customer_id(request.customer_id)
        client_id = validate.text("client_id", request.client_id, max_length=MAX_CLIENT_ID_LENGTH, min_length=0)
        position, newly = await self._handler.join(event_id, customer_id, client_id)
        return pb.JoinQueueResponse(position=_position_pb(position), newly_joined=newly)

    async def GetQueuePosition(
        self, request: pb.GetQueuePositionRequest, context: Context
    ) -> pb.GetQueuePositionResponse:
        event_id = _event_id(request.event_id)
        customer_id = _customer_id(request.customer_id)
        position = await self._handler.position(event_id, customer_id)
        return pb.GetQueuePositionResponse(position=_position_pb(position))

    async def WatchQueuePosition(
        self, request: pb.WatchQueuePositionRequest, context: Context
    ) -> AsyncIterator[pb.WatchQueuePositionResponse]:
        event_id = _event_id(request.event_id)
        customer_id = _customer_id(request.customer_id)
        watch = await self._handler.watch_position(event_id, customer_id)
        try:
            position: Position | None = watch.first
            while position is not None:
                yield pb.WatchQueuePositionResponse(position=_position_pb(position))
                position = await watch.next()
        finally:
            watch.close()

    async def WatchAdmissionProgress(
        self, request: pb.WatchAdmissionProgressRequest, context: Context
    ) -> AsyncIterator[pb.WatchAdmissionProgressResponse]:
        event_id = _event_id(request.event_id)
        async for progress in self._handler.watch_progress(event_id):
            yield pb.WatchAdmissionProgressResponse(progress=_progress_pb(progress))

    async def LeaveQueue(self, request: pb.LeaveQueueRequest, context: Context) -> pb.LeaveQueueResponse:
        event_id = _event_id(request.event_id)
        customer_id = _customer_id(request.customer_id)
        position = await self._handler.leave(event_id, customer_id)
        return pb.LeaveQueueResponse(position=_position_pb(position))

    async def EndShoppingSession(
        self, request: pb.EndShoppingSessionRequest, context: Context
    ) -> pb.EndShoppingSessionResponse:
        event_id = _event_id(request.event_id)
        customer_id = _customer_id(request.customer_id)
        if request.reason == pb.SESSION_END_REASON_UNSPECIFIED:
            raise validate.required("reason")
        reason = _END_REASONS.get(request.reason)
        if reason is None:
            raise validate.invalid("reason", f"unknown reason {request.reason}")
        position = await self._handler.end_session(event_id, customer_id, reason)
        return pb.EndShoppingSessionResponse(position=_position_pb(position))

    async def CreateEventQueue(
        self, request: pb.CreateEventQueueRequest, context: Context
    ) -> pb.CreateEventQueueResponse:
        config = parse_config(request.config, present=request.HasField("config"))
        return pb.CreateEventQueueResponse(config=config_pb(await self._handler.create_event(config)))

    async def UpdateEventQueue(
        self, request: pb.UpdateEventQueueRequest, context: Context
    ) -> pb.UpdateEventQueueResponse:
        config = parse_config(request.config, present=request.HasField("config"))
        return pb.UpdateEventQueueResponse(config=config_pb(await self._handler.update_event(config)))

    async def GetEventQueue(self, request: pb.GetEventQueueRequest, context: Context) -> pb.GetEventQueueResponse:
        config = await self._handler.get_event(_event_id(request.event_id))
        return pb.GetEventQueueResponse(config=config_pb(config))

    async def PauseAdmission(self, request: pb.PauseAdmissionRequest, context: Context) -> pb.PauseAdmissionResponse:
        config = await self._handler.set_paused(_event_id(request.event_id), True)
        return pb.PauseAdmissionResponse(config=config_pb(config))

    async def ResumeAdmission(self, request: pb.ResumeAdmissionRequest, context: Context) -> pb.ResumeAdmissionResponse:
        config = await self._handler.set_paused(_event_id(request.event_id), False)
        return pb.ResumeAdmissionResponse(config=config_pb(config))

    async def GetQueueStats(self, request: pb.GetQueueStatsRequest, context: Context) -> pb.GetQueueStatsResponse:
        progress = await self._handler.stats(_event_id(request.event_id))
        return pb.GetQueueStatsResponse(progress=_progress_pb(progress), joined_total=progress.joined_total)
