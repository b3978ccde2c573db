"""boxoffice.queue.v1.QueueAdminService on gRPC, and the audited face of
QueueService's deprecated admin RPCs.

:class:`QueueAdmin` holds the waiting-room administration on the handler's
use cases, each change run through the :class:`boxoffice.audit.Auditor`
(the one place an admin action is recorded); both servicers below parse
their requests and call it. The handler's waiting-room repository is built
on the auditor's pool, so that a change joins the action's transaction and
commits with its audit row.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable
from typing import Any

import grpc
from google.protobuf import timestamp_pb2
from google.protobuf.message import Message

from boxoffice import validate
from boxoffice.audit import Auditor, Json, message_json
from boxoffice.clock import Clock
from boxoffice.server import Registration
from gen.boxoffice.queue.v1 import queue_admin_service_pb2 as apb
from gen.boxoffice.queue.v1 import queue_admin_service_pb2_grpc as apb_grpc
from gen.boxoffice.queue.v1 import queue_service_pb2 as pb
from queue_svc import errors, passes
from queue_svc.converters import (
    RoomSettings,
    config_pb,
    lane_pb,
    parse_config,
    parse_customer_id,
    parse_event_id,
    parse_lane_name,
    parse_room_settings,
    progress_pb,
)
from queue_svc.fan_draws import FanDraws
from queue_svc.handler import QueueHandler
from queue_svc.lanes import LaneDoor
from queue_svc.model import FanDraw, LaneEntry, Progress, QueueState, WaitingRoomConfig
from queue_svc.passes import StaffPass, StaffPasses
from queue_svc.ports import AccessCodeRepository, CodeBatch, FanOp, QueueStore
from queue_svc.servicer import QueueServicer

ADMIN_SERVICE_NAME = apb.DESCRIPTOR.services_by_name["QueueAdminService"].full_name
_QUEUE_SERVICE_NAME = pb.DESCRIPTOR.services_by_name["QueueService"].full_name

# The metric label of a session an operator ended.
REVOKED = "revoked"

Context = grpc.aio.ServicerContext[Any, Any]


def _method(service: str, name: str) -> str:
    return f"/{service}/{name}"


def waiting_room_pb(config: WaitingRoomConfig) -> apb.WaitingRoom:
    """The admin contract's WaitingRoom mirrors EventQueueConfig field for
    field, and adds its own settings."""
    room = apb.WaitingRoom.FromString(config_pb(config).SerializeToString())
    room.presence_grace.FromMilliseconds(config.presence_grace_ms)
    room.safety_net = config.safety_net
    room.admission_rate_min_per_second = config.admission_rate_min_per_second
    room.admission_rate_max_per_second = config.admission_rate_max_per_second
    room.lanes.extend(lane_pb(lane) for lane in config.lanes)
    return room


def parse_waiting_room(message: apb.WaitingRoom, *, present: bool) -> WaitingRoomConfig:
    config = parse_config(pb.EventQueueConfig.FromString(message.SerializeToString()), present=present)
    return parse_room_settings(message).applied(config)


def stats_pb(progress: Progress) -> apb.WaitingRoomStats:
    observed = timestamp_pb2.Timestamp()
    observed.FromMilliseconds(progress.observed_at_ms)
    return apb.WaitingRoomStats(
        event_id=progress.event_id,
        admission=apb.WaitingRoomAdmission.ValueType(progress.admission_state.value),
        queue_length=progress.queue_length,
        active_shoppers=progress.active_shoppers,
        admitted_total=progress.admitted_total,
        joined_total=progress.joined_total,
        admission_rate_per_second=round(progress.rate_per_second, 3),
        observed_at=observed,
        target_admission_rate_per_second=round(progress.target_rate_per_second, 3),
        rate_reason=apb.WaitingRoomRateReason.ValueType(progress.rate_reason.value),
    )


@dataclasses.dataclass(frozen=True)
class Revocation:
    """What RevokeCustomer did to one customer's place."""

    event_id: int
    customer_id: str
    previous: QueueState
    state: QueueState

    @property
    def revoked(self) -> bool:
        return self.state is not self.previous

    def json(self) -> Json:
        return {"event_id": str(self.event_id), "customer_id": self.customer_id, "state": self.state.name}


@dataclasses.dataclass(frozen=True)
class Flagging:
    """What RevokeCustomer's SHADOW or UNSHADOW did to one customer."""

    event_id: int
    customer_id: str
    flagged: bool
    changed: bool
    previous: QueueState
    state: QueueState

    def json(self) -> Json:
        return {
            "event_id": str(self.event_id),
            "customer_id": self.customer_id,
            "shadowed": self.flagged,
            "changed": self.changed,
            "state": self.state.name,
        }


@dataclasses.dataclass(frozen=True, slots=True)
class CodesMade:
    """A batch of access codes, made and stored (only the hashes)."""

    batch_id: int
    codes: tuple[str, ...]

    def json(self) -> Json:
        # Never the codes themselves: the audit log is no place for them.
        return {"batch_id": str(self.batch_id), "count": len(self.codes)}


@dataclasses.dataclass(frozen=True, slots=True)
class PassIssued:
    """A signed staff pass."""

    staff_pass: str
    details: StaffPass

    def json(self) -> Json:
        # Never the pass itself (a bearer credential): whom and until when.
        return {
            "event_id": str(self.details.event_id),
            "staff_name": self.details.staff_name,
            "expires_at_ms": str(self.details.expires_at_ms),
        }


# CreateAccessCodes: codes per batch and uses per code, at most.
MAX_CODES_PER_BATCH = 100_000
MAX_CODE_USES = 1_000_000
MAX_LABEL_LENGTH = 200
# CreateFanDraw: winners at most, and how long the winners' codes work.
MAX_DRAW_WINNERS = 10_000_000
DEFAULT_CODE_VALIDITY_MS = 30 * 24 * 3600 * 1000
CODE_VALIDITY_MS = (3600 * 1000, 90 * 24 * 3600 * 1000)
# IssueStaffPass: how long a pass may work.
STAFF_PASS_TTL_MS = (60_000, 7 * 24 * 3600 * 1000)


class QueueAdmin:
    """The waiting-room administration, every change audited."""

    def __init__(
        self,
        *,
        handler: QueueHandler,
        store: QueueStore,
        auditor: Auditor,
        clock: Clock,
        door: LaneDoor,
        codes: AccessCodeRepository,
        staff: StaffPasses,
        fan_draws: FanDraws,
    ) -> None:
        self._handler = handler
        self._store = store
        self._audit = auditor
        self._clock = self.clock = clock
        self._door = door
        self._codes = codes
        self._staff = staff
        self._fan_draws = fan_draws

    async def create_codes(self, method: str, request: Message, batch: CodeBatch, count: int) -> CodesMade:
        """A batch of codes for a lane whose entry is by code."""

        async def create() -> CodesMade:
            view = await self._door.lane(batch.event_id, batch.lane)
            if view.entry is not LaneEntry.CODE or not batch.lane:
                raise errors.lane_not_found(batch.event_id, batch.lane)
            codes = tuple(passes.new_code() for _ in range(count))
            batch_id = await self._codes.create(batch, [passes.code_hash(code) for code in codes])
            return CodesMade(batch_id, codes)

        made: CodesMade = await self._audit.run(method, request, before=_nothing, action=create, after=CodesMade.json)
        return made

    async def create_fan_draw(self, method: str, request: Message, fan_draw: FanDraw) -> str:
        """The event's verified-fan draw; its commitment."""

        async def create() -> str:
            return await self._fan_draws.create(fan_draw)

        def after(commitment: str) -> Json:
            return {"event_id": str(fan_draw.event_id), "lane": fan_draw.lane, "commitment": commitment}

        commitment: str = await self._audit.run(method, request, before=_nothing, action=create, after=after)
        return commitment

    async def issue_staff_pass(
        self, method: str, request: Message, event_id: int, staff_name: str, ttl_ms: int
    ) -> PassIssued:
        async def issue() -> PassIssued:
            room = await self._door.room(event_id)
            if not any(lane.entry is LaneEntry.STAFF for lane in room.lanes):
                raise errors.lane_not_found(event_id, "staff")
            sealed, details = self._staff.issue(event_id, staff_name, ttl_ms)
            return PassIssued(sealed, details)

        issued: PassIssued = await self._audit.run(
            method, request, before=_nothing, action=issue, after=PassIssued.json
        )
        return issued

    async def _room_json(self, event_id: int) -> Json | None:
        return message_json(waiting_room_pb(await self._handler.get_waiting_room(event_id)))

    async def _change(
        self, method: str, request: Message, event_id: int, change: Callable[[], Awaitable[WaitingRoomConfig]]
    ) -> WaitingRoomConfig:
        stored: WaitingRoomConfig = await self._audit.run(
            method,
            request,
            before=lambda: self._room_json(event_id),
            action=change,
            after=lambda config: message_json(waiting_room_pb(config)),
        )
        return stored

    async def create(self, method: str, request: Message, config: WaitingRoomConfig) -> WaitingRoomConfig:
        return await self._change(method, request, config.event_id, lambda: self._handler.create_waiting_room(config))

    async def update(
        self, method: str, request: Message, config: WaitingRoomConfig, *, keep_room_settings: bool = False
    ) -> WaitingRoomConfig:
        """Replace the configuration; ``keep_room_settings`` (the deprecated
        UpdateEventQueue, whose message lacks them) keeps the stored
        settings only WaitingRoom carries."""

        async def update() -> WaitingRoomConfig:
            updated = config
            if keep_room_settings:
                stored = await self._handler.get_waiting_room(config.event_id)
                updated = RoomSettings.of(stored).applied(config)
            return await self._handler.update_waiting_room(updated)

        return await self._change(method, request, config.event_id, update)

    async def set_paused(self, method: str, request: Message, event_id: int, paused: bool) -> WaitingRoomConfig:
        return await self._change(method, request, event_id, lambda: self._handler.set_paused(event_id, paused))

    async def open(self, method: str, request: Message, event_id: int) -> WaitingRoomConfig:
        """Opens at the latest now, and unpaused; an open room is left as it is."""

        async def open_now() -> WaitingRoomConfig:
            config = await self._handler.get_waiting_room(event_id)
            now_ms = int(self._clock.now() * 1000)
            if config.opens_at_ms <= now_ms and not config.paused:
                return config
            opened = dataclasses.replace(config, opens_at_ms=min(config.opens_at_ms, now_ms), paused=False)
            return await self._handler.update_waiting_room(opened)

        return await self._change(method, request, event_id, open_now)

    async def _look(self, event_id: int, customer_id: str) -> QueueState:
        for _ in range(2):
            now_ms = int(self._clock.now() * 1000)
            place = await self._store.fan(event_id, customer_id, now_ms=now_ms, op=FanOp.LOOK)
            if place is not None:
                return place.state
            await self._handler.stats(event_id)  # mirrors the configuration Redis lacks, or NOT_FOUND
        raise errors.unknown_event(event_id)

    async def flag(self, method: str, request: Message, event_id: int, customer_id: str, flagged: bool) -> Flagging:
        """Put a customer in the shadow lane (never admitted) or take them out."""

        async def flag() -> Flagging:
            previous = await self._look(event_id, customer_id)  # NOT_FOUND for an unknown event
            now_ms = int(self._clock.now() * 1000)
            changed = await self._store.flag(event_id, customer_id, flagged=flagged, now_ms=now_ms)
            if changed is None:
                raise errors.unknown_event(event_id)
            state = await self._look(event_id, customer_id)
            return Flagging(event_id, customer_id, flagged, changed, previous, state)

        async def before() -> Json | None:
            state = await self._look(event_id, customer_id)
            return {"event_id": str(event_id), "customer_id": customer_id, "state": state.name}

        flagging: Flagging = await self._audit.run(method, request, before=before, action=flag, after=Flagging.json)
        return flagging

    async def revoke(self, method: str, request: Message, event_id: int, customer_id: str) -> Revocation:
        """A waiting customer leaves, an admitted one's session ends."""

        async def look() -> QueueState:
            return await self._look(event_id, customer_id)

        async def revoke() -> Revocation:
            previous = await look()
            position = await self._handler.leave(event_id, customer_id)
            if position.state is QueueState.ADMITTED:
                position = await self._handler.end_session(event_id, customer_id, REVOKED)
            return Revocation(event_id, customer_id, previous, position.state)

        async def before() -> Json | None:
            state = await look()
            return {"event_id": str(event_id), "customer_id": customer_id, "state": state.name}

        revocation: Revocation = await self._audit.run(
            method, request, before=before, action=revoke, after=Revocation.json
        )
        return revocation


class QueueAdminServicer(apb_grpc.QueueAdminServiceServicer):
    """The gRPC face of QueueAdmin."""

    def __init__(self, admin: QueueAdmin, handler: QueueHandler) -> None:
        self._admin = admin
        self._handler = handler

    def registration(self) -> Registration:
        return Registration(
            ADMIN_SERVICE_NAME, lambda server: apb_grpc.add_QueueAdminServiceServicer_to_server(self, server)
        )

    @staticmethod
    def _method(name: str) -> str:
        return _method(ADMIN_SERVICE_NAME, name)

    async def CreateWaitingRoom(
        self, request: apb.CreateWaitingRoomRequest, context: Context
    ) -> apb.CreateWaitingRoomResponse:
        config = parse_waiting_room(request.config, present=request.HasField("config"))
        stored = await self._admin.create(self._method("CreateWaitingRoom"), request, config)
        return apb.CreateWaitingRoomResponse(config=waiting_room_pb(stored))

    async def UpdateWaitingRoom(
        self, request: apb.UpdateWaitingRoomRequest, context: Context
    ) -> apb.UpdateWaitingRoomResponse:
        config = parse_waiting_room(request.config, present=request.HasField("config"))
        stored = await self._admin.update(self._method("UpdateWaitingRoom"), request, config)
        return apb.UpdateWaitingRoomResponse(config=waiting_room_pb(stored))

    async def GetWaitingRoom(self, request: apb.GetWaitingRoomRequest, context: Context) -> apb.GetWaitingRoomResponse:
        config = await self._handler.get_waiting_room(parse_event_id(request.event_id))
        return apb.GetWaitingRoomResponse(config=waiting_room_pb(config))

    async def OpenWaitingRoom(
        self, request: apb.OpenWaitingRoomRequest, context: Context
    ) -> apb.OpenWaitingRoomResponse:
        event_id = parse_event_id(request.event_id)
        stored = await self._admin.open(self._method("OpenWaitingRoom"), request, event_id)
        return apb.OpenWaitingRoomResponse(config=waiting_room_pb(stored))

    async def PauseWaitingRoom(
        self, request: apb.PauseWaitingRoomRequest, context: Context
    ) -> apb.PauseWaitingRoomResponse:
        event_id = parse_event_id(request.event_id)
        stored = await self._admin.set_paused(self._method("PauseWaitingRoom"), request, event_id, True)
        return apb.PauseWaitingRoomResponse(config=waiting_room_pb(stored))

    async def ResumeWaitingRoom(
        self, request: apb.ResumeWaitingRoomRequest, context: Context
    ) -> apb.ResumeWaitingRoomResponse:
        event_id = parse_event_id(request.event_id)
        stored = await self._admin.set_paused(self._method("ResumeWaitingRoom"), request, event_id, False)
        return apb.ResumeWaitingRoomResponse(config=waiting_room_pb(stored))

    async def GetWaitingRoomStats(
        self, request: apb.GetWaitingRoomStatsRequest, context: Context
    ) -> apb.GetWaitingRoomStatsResponse:
        event_id = parse_event_id(request.event_id)
        progress = await self._handler.stats(event_id)
        config = await self._handler.get_waiting_room(event_id)
        return apb.GetWaitingRoomStatsResponse(stats=stats_pb(progress), config=waiting_room_pb(config))

    async def RevokeCustomer(self, request: apb.RevokeCustomerRequest, context: Context) -> apb.RevokeCustomerResponse:
        event_id = parse_event_id(request.event_id)
        customer_id = parse_customer_id(request.customer_id)
        method = self._method("RevokeCustomer")
        if request.action in (apb.REVOKE_ACTION_SHADOW, apb.REVOKE_ACTION_UNSHADOW):
            shadow = request.action == apb.REVOKE_ACTION_SHADOW
            flagging = await self._admin.flag(method, request, event_id, customer_id, shadow)
            return apb.RevokeCustomerResponse(
                event_id=event_id,
                customer_id=customer_id,
                previous_state=apb.CustomerState.ValueType(flagging.previous.value),
                state=apb.CustomerState.ValueType(flagging.state.value),
                revoked=flagging.changed,
                shadowed=flagging.flagged,
            )
        if request.action not in (apb.REVOKE_ACTION_UNSPECIFIED, apb.REVOKE_ACTION_END_PLACE):
            raise validate.invalid("action", f"unknown action {request.action}")
        done = await self._admin.revoke(method, request, event_id, customer_id)
        return apb.RevokeCustomerResponse(
            event_id=done.event_id,
            customer_id=done.customer_id,
            previous_state=apb.CustomerState.ValueType(done.previous.value),
            state=apb.CustomerState.ValueType(done.state.value),
            revoked=done.revoked,
        )

    async def CreateAccessCodes(
        self, request: apb.CreateAccessCodesRequest, context: Context
    ) -> apb.CreateAccessCodesResponse:
        event_id = parse_event_id(request.event_id)
        lane = parse_lane_name(request.lane)
        if not lane:
            raise validate.invalid("lane", "must name a lane whose entry is by code")
        validate.int_range("count", request.count, minimum=1, maximum=MAX_CODES_PER_BATCH)
        validate.int_range("max_uses", request.max_uses, minimum=1, maximum=MAX_CODE_USES)
        if len(request.label) > MAX_LABEL_LENGTH:
            raise validate.invalid("label", f"must be at most {MAX_LABEL_LENGTH} characters")
        now_ms = int(self._admin.clock.now() * 1000)
        valid_from = request.valid_from.ToMilliseconds() if request.HasField("valid_from") else now_ms
        if not request.HasField("valid_until"):
            raise validate.invalid("valid_until", "is required")
        valid_until = request.valid_until.ToMilliseconds()
        if valid_until <= valid_from:
            raise validate.invalid("valid_until", "must be after valid_from")
        batch = CodeBatch(event_id, lane, request.max_uses, valid_from, valid_until, request.label)
        made = await self._admin.create_codes(self._method("CreateAccessCodes"), request, batch, request.count)
        return apb.CreateAccessCodesResponse(batch_id=made.batch_id, codes=made.codes)

    async def CreateFanDraw(self, request: apb.CreateFanDrawRequest, context: Context) -> apb.CreateFanDrawResponse:
        event_id = parse_event_id(request.event_id)
        lane = parse_lane_name(request.lane)
        if not lane:
            raise validate.invalid("lane", "must name a lane whose entry is by code")
        if not request.HasField("closes_at"):
            raise validate.invalid("closes_at", "is required")
        closes_ms = request.closes_at.ToMilliseconds()
        if closes_ms <= int(self._admin.clock.now() * 1000):
            raise validate.invalid("closes_at", "must be in the future")
        validate.int_range("winners", request.winners, minimum=1, maximum=MAX_DRAW_WINNERS)
        validity_ms = request.code_validity.ToMilliseconds() if request.HasField("code_validity") else 0
        if not validity_ms:
            validity_ms = DEFAULT_CODE_VALIDITY_MS
        low, high = CODE_VALIDITY_MS
        if not low <= validity_ms <= high:
            raise validate.invalid("code_validity", "must be 1 hour to 90 days")
        fan_draw = FanDraw(event_id, lane, closes_ms, request.winners, validity_ms)
        commitment = await self._admin.create_fan_draw(self._method("CreateFanDraw"), request, fan_draw)
        answer = apb.CreateFanDrawResponse(event_id=event_id, commitment=commitment)
        answer.closes_at.FromMilliseconds(closes_ms)
        return answer

    async def IssueStaffPass(self, request: apb.IssueStaffPassRequest, context: Context) -> apb.IssueStaffPassResponse:
        event_id = parse_event_id(request.event_id)
        name = parse_customer_id(request.staff_name)
        low, high = STAFF_PASS_TTL_MS
        ttl_ms = request.ttl.ToMilliseconds() if request.HasField("ttl") else 0
        if not low <= ttl_ms <= high:
            raise validate.invalid("ttl", "must be 1 minute to 7 days")
        issued = await self._admin.issue_staff_pass(self._method("IssueStaffPass"), request, event_id, name, ttl_ms)
        answer = apb.IssueStaffPassResponse(staff_pass=issued.staff_pass)
        answer.expires_at.FromMilliseconds(issued.details.expires_at_ms)
        return answer


async def _nothing() -> Json | None:
    return None


class AuditedQueueServicer(QueueServicer):
    """QueueService with its deprecated admin RPCs, each the QueueAdminService
    RPC's use case under the old message: a change through
    :class:`QueueAdmin`, audited like the admin service's; a read from the
    handler (the fans' RPCs are QueueServicer's own)."""

    def __init__(self, handler: QueueHandler, admin: QueueAdmin) -> None:
        super().__init__(handler)
        self._admin = admin

    @staticmethod
    def _method(name: str) -> str:
        return _method(_QUEUE_SERVICE_NAME, name)

    async def CreateEventQueue(
        self, request: pb.CreateEventQueueRequest, context: Context
    ) -> pb.CreateEventQueueResponse:
        config = parse_config(request.config, present=request.HasField("config"))
        stored = await self._admin.create(self._method("CreateEventQueue"), request, config)
        return pb.CreateEventQueueResponse(config=config_pb(stored))

    async def UpdateEventQueue(
        self, request: pb.UpdateEventQueueRequest, context: Context
    ) -> pb.UpdateEventQueueResponse:
        config = parse_config(request.config, present=request.HasField("config"))
        stored = await self._admin.update(self._method("UpdateEventQueue"), request, config, keep_room_settings=True)
        return pb.UpdateEventQueueResponse(config=config_pb(stored))

    async def GetEventQueue(self, request: pb.GetEventQueueRequest, context: Context) -> pb.GetEventQueueResponse:
        config = await self._handler.get_waiting_room(parse_event_id(request.event_id))
        return pb.GetEventQueueResponse(config=config_pb(config))

    async def PauseAdmission(self, request: pb.PauseAdmissionRequest, context: Context) -> pb.PauseAdmissionResponse:
        event_id = parse_event_id(request.event_id)
        stored = await self._admin.set_paused(self._method("PauseAdmission"), request, event_id, True)
        return pb.PauseAdmissionResponse(config=config_pb(stored))

    async def ResumeAdmission(self, request: pb.ResumeAdmissionRequest, context: Context) -> pb.ResumeAdmissionResponse:
        event_id = parse_event_id(request.event_id)
        stored = await self._admin.set_paused(self._method("ResumeAdmission"), request, event_id, False)
        return pb.ResumeAdmissionResponse(config=config_pb(stored))

    async def GetQueueStats(self, request: pb.GetQueueStatsRequest, context: Context) -> pb.GetQueueStatsResponse:
        progress = await self._handler.stats(parse_event_id(request.event_id))
        return pb.GetQueueStatsResponse(progress=progress_pb(progress), joined_total=progress.joined_total)
