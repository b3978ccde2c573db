"""boxoffice.checkin.v1.CheckInAdminService: gate devices made, revoked and
listed by operators, every change run through the
:class:`boxoffice.audit.Auditor` (the device store is built on the auditor's
pool, so a change commits with its audit row). A new device's key is in the
answer only: the audit records the device, never its key.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import grpc

from boxoffice import validate
from boxoffice.audit import Auditor, Json, message_json
from boxoffice.errors import NotFound
from boxoffice.server import Registration
from checkin_svc import converters as conv
from checkin_svc.adapters.postgres import PgGateDeviceStore
from checkin_svc.devices import GateDevice
from checkin_svc.gate import DeviceKeys
from gen.boxoffice.checkin.v1 import checkin_service_pb2 as pb
from gen.boxoffice.checkin.v1 import checkin_service_pb2_grpc as pb_grpc

ADMIN_SERVICE_NAME = pb.DESCRIPTOR.services_by_name["CheckInAdminService"].full_name
MAX_NAME = 100

Context = grpc.aio.ServicerContext[Any, Any]


def _method(name: str) -> str:
    return f"/{ADMIN_SERVICE_NAME}/{name}"


def _json(device: GateDevice) -> Json:
    return message_json(conv.device_pb(device))


def _not_found(device_id: str) -> NotFound:
    return NotFound(f"no gate device {device_id}", reason="DEVICE_NOT_FOUND", metadata={"device_id": device_id})


class CheckInAdminServicer(pb_grpc.CheckInAdminServiceServicer):
    def __init__(self, *, store: PgGateDeviceStore, auditor: Auditor, keys: DeviceKeys) -> None:
        self._store = store
        self._audit = auditor
        self._keys = keys

    def registration(self) -> Registration:
        add: Callable[[Any, grpc.aio.Server], None] = pb_grpc.add_CheckInAdminServiceServicer_to_server
        return Registration(ADMIN_SERVICE_NAME, lambda server: add(self, server))

    async def CreateGateDevice(
        self, request: pb.CreateGateDeviceRequest, context: Context
    ) -> pb.CreateGateDeviceResponse:
        event_id = validate.positive_id("event_id", request.event_id)
        name = validate.text("name", request.name.strip(), max_length=MAX_NAME)

        async def none() -> Json | None:
            return None

        device, key = await self._audit.run(
            _method("CreateGateDevice"),
            request,
            before=none,
            action=lambda: self._store.create(event_id, name),
            after=lambda made: _json(made[0]),
        )
        return pb.CreateGateDeviceResponse(device=conv.device_pb(device), key=key)

    async def RevokeGateDevice(
        self, request: pb.RevokeGateDeviceRequest, context: Context
    ) -> pb.RevokeGateDeviceResponse:
        device_id = conv.parse_uuid("device_id", request.device_id)

        async def before() -> Json | None:
            found = await self._store.get(device_id)
            return None if found is None else _json(found)

        async def revoke() -> GateDevice:
            revoked = await self._store.revoke(device_id)
            if revoked is None:
                raise _not_found(device_id)
            return revoked

        device = await self._audit.run(_method("RevokeGateDevice"), request, before=before, action=revoke, after=_json)
        self._keys.forget(device.device_id)
        return pb.RevokeGateDeviceResponse(device=conv.device_pb(device))

    async def ListGateDevices(self, request: pb.ListGateDevicesRequest, context: Context) -> pb.ListGateDevicesResponse:
        event_id = validate.positive_id("event_id", request.event_id)
        found = await self._store.of_event(event_id)
        return pb.ListGateDevicesResponse(devices=[conv.device_pb(device) for device in found])
