"""CheckInService over gRPC: a gate device's key from the call's metadata
(:mod:`checkin_svc.gate`), the request parsed (:mod:`checkin_svc.converters`),
the door's rules (:mod:`checkin_svc.handler`), the answer written. A scan's
verdict is an answer; errors are values (the shared interceptor maps them).
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Callable, Mapping
from datetime import UTC, datetime
from typing import Any

import grpc
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from boxoffice import ticketcodes, tokens, validate
from boxoffice.clock import Clock
from boxoffice.errors import FailedPrecondition, NotFound
from boxoffice.runtime import Pool
from boxoffice.server import Registration
from boxoffice.ticketcodes import TicketClaims, TicketCodeSigner
from checkin_svc import converters as conv
from checkin_svc.adapters.postgres import held_ticket
from checkin_svc.gate import DEVICE_KEY_METADATA_KEY, DeviceKeys
from checkin_svc.handler import MAX_UPLOAD, CheckInHandler
from checkin_svc.model import Direction, Scan
from checkin_svc.ports import ReEntry
from gen.boxoffice.checkin.v1 import checkin_service_pb2 as pb
from gen.boxoffice.checkin.v1 import checkin_service_pb2_grpc as pb_grpc

SERVICE_NAME = pb.DESCRIPTOR.services_by_name["CheckInService"].full_name
# Tickets a message of the check-in list carries (about 150 bytes each).
EXPORT_CHUNK = 500

Context = grpc.aio.ServicerContext[Any, Any]


def device_key(context: Context) -> str | None:
    """The key the edge passed on; None when there is none."""
    for key, value in tuple(context.invocation_metadata() or ()):
        if key == DEVICE_KEY_METADATA_KEY:
            return value if isinstance(value, str) else value.decode(errors="replace")
    return None


class Rotations:
    """A ticket's rotating code, for its holder only."""

    def __init__(self, pool: Pool, handler: CheckInHandler, signer: TicketCodeSigner) -> None:
        self._pool = pool
        self._handler = handler
        self._signer = signer

    async def of(self, ticket_id: str, customer_id: str) -> tuple[str, bytes]:
        """The ticket's signed code and its rotation secret; NOT_FOUND when
        it is not ``customer_id``'s (one that does not exist alike)."""
        held = await held_ticket(self._pool, ticket_id)
        if held is None or held.customer_id != customer_id:
            raise NotFound(
                "no ticket of yours has this id", reason="TICKET_NOT_FOUND", metadata={"ticket_id": ticket_id}
            )
        code = held.code
        if not ticketcodes.looks_signed(code):
            # A ticket of before signed codes: its rotating code is built on
            # a signed code of it (the stored code stays valid as it is).
            ticket = held.ticket
            claims = TicketClaims(
                ticket.ticket_id, ticket.event_id, ticket.section_id, ticket.seat_label, int(held.issued_at.timestamp())
            )
            code = self._signer.sign(claims)
        return code, await self._handler.ticket_secret(ticket_id)


class CheckInServicer(pb_grpc.CheckInServiceServicer):
    def __init__(
        self,
        *,
        handler: CheckInHandler,
        devices: DeviceKeys,
        rotations: Rotations,
        public_keys: Callable[[], Mapping[str, Ed25519PublicKey]],
        reentry: ReEntry,
        clock: Clock,
    ) -> None:
        self._handler = handler
        self._devices = devices
        self._rotations = rotations
        self._public_keys = public_keys
        self._reentry = reentry
        self._clock = clock

    def registration(self) -> Registration:
        return Registration(SERVICE_NAME, lambda server: pb_grpc.add_CheckInServiceServicer_to_server(self, server))

    def _now(self) -> datetime:
        return datetime.fromtimestamp(self._clock.now(), UTC)

    async def _exits_allowed(self, event_id: int) -> None:
        if not await self._reentry.allowed(event_id):
            raise FailedPrecondition(
                f"event {event_id} has no re-entry: there are no exit scans",
                reason="REENTRY_DISABLED",
                metadata={"event_id": str(event_id)},
            )

    async def Scan(self, request: pb.ScanRequest, context: Context) -> pb.ScanResponse:
        event_id = validate.positive_id("event_id", request.event_id)
        device = await self._devices.device(device_key(context), event_id)
        code = conv.parse_code("code", request.code)
        gate = conv.parse_gate("gate_id", request.gate_id)
        direction = conv.parse_direction("direction", request.direction)
        now = self._now()
        at = conv.parse_scanned_at("scanned_at", request.scanned_at, now) if request.HasField("scanned_at") else now
        if direction is Direction.OUT:
            await self._exits_allowed(event_id)
        outcome = await self._handler.scan(Scan(event_id, code, gate, device.device_id, at, direction))
        return conv.outcome_pb(outcome)

    async def ExportCheckInList(
        self, request: pb.ExportCheckInListRequest, context: Context
    ) -> AsyncIterator[pb.ExportCheckInListResponse]:
        event_id = validate.positive_id("event_id", request.event_id)
        await self._devices.device(device_key(context), event_id)
        since = conv.parse_cursor("since", request.since)
        listed = await self._handler.door_list(event_id, since)
        entries = listed.entries
        for start in range(0, len(entries), EXPORT_CHUNK):
            yield pb.ExportCheckInListResponse(
                entries=[conv.entry_pb(entry) for entry in entries[start : start + EXPORT_CHUNK]]
            )
        rules = await self._handler.door_rules(event_id)
        yield pb.ExportCheckInListResponse(
            cursor=conv.cursor_text(listed.cursor),
            rules=pb.DoorRules(static_codes=rules.static_codes, reentry=rules.reentry),
        )

    async def UploadScans(self, request: pb.UploadScansRequest, context: Context) -> pb.UploadScansResponse:
        event_id = validate.positive_id("event_id", request.event_id)
        device = await self._devices.device(device_key(context), event_id)
        now = self._now()
        scans: list[Scan] = []
        exits = False
        # The handler refuses more than MAX_UPLOAD before anything else; the
        # fields are checked first here only so that each names its index.
        for i, offline in enumerate(request.scans[: MAX_UPLOAD + 1]):
            where = f"scans[{i}]"
            if not offline.HasField("scanned_at"):
                raise validate.required(f"{where}.scanned_at")
            direction = conv.parse_direction(f"{where}.direction", offline.direction)
            exits = exits or direction is Direction.OUT
            scans.append(
                Scan(
                    event_id,
                    conv.parse_code(f"{where}.code", offline.code),
                    conv.parse_gate(f"{where}.gate_id", offline.gate_id),
                    device.device_id,
                    conv.parse_scanned_at(f"{where}.scanned_at", offline.scanned_at, now),
                    direction,
                )
            )
        if exits:
            await self._exits_allowed(event_id)
        uploaded = await self._handler.upload(scans)
        response = pb.UploadScansResponse(conflicts=sum(1 for u in uploaded if u.conflict))
        for i, scan in enumerate(uploaded):
            answer = conv.outcome_pb(scan.outcome)
            item = response.scans.add(index=i, result=answer.result, conflict=scan.conflict)
            if answer.HasField("ticket"):
                item.ticket.CopyFrom(answer.ticket)
            if answer.HasField("first_checkin"):
                item.first_checkin.CopyFrom(answer.first_checkin)
        return response

    async def GetCheckInKeys(self, request: pb.GetCheckInKeysRequest, context: Context) -> pb.GetCheckInKeysResponse:
        validate.positive_id("event_id", request.event_id)
        keys = ticketcodes.jwks(self._public_keys())["keys"]
        return pb.GetCheckInKeysResponse(keys=[pb.JsonWebKey(**key) for key in keys])

    async def GetTicketRotation(
        self, request: pb.GetTicketRotationRequest, context: Context
    ) -> pb.GetTicketRotationResponse:
        customer = tokens.asserted_customer()
        ticket_id = conv.parse_uuid("ticket_id", request.ticket_id)
        code, secret = await self._rotations.of(str(uuid.UUID(ticket_id)), customer)
        return pb.GetTicketRotationResponse(code=code, secret=secret, step_seconds=ticketcodes.ROTATION_STEP_SECONDS)
