"""CheckInService and CheckInAdminService on a real gRPC server (mTLS, the
checkin role's identity), as ``boxoffice checkin`` composes them, with the
edge's and the operator's channels."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from typing import Any

from boxoffice import ticketcodes
from boxoffice.runtime import Runtime
from checkin_svc import app as checkin_app
from checkin_svc.gate import DEVICE_KEY_METADATA_KEY
from gen.boxoffice.checkin.v1 import checkin_service_pb2 as pb
from gen.boxoffice.checkin.v1 import checkin_service_pb2_grpc as pb_grpc
from tests.edge.asserting import as_fan
from tests.support import ManualClock, MeshClient, Stores, make_runtime, running

# The keys the test's server verifies with (not the development ones).
CHECKIN_KEYS = "svc1:" + "5c" * 32
KEYS = ticketcodes.parse_keys(CHECKIN_KEYS)


def with_key(key: str, fan: str | None = None) -> tuple[tuple[str, str], ...]:
    """The metadata with which the edge passes a device's key on (and, for
    a customer-scoped call, asserts a fan)."""
    return ((DEVICE_KEY_METADATA_KEY, key), *(as_fan(fan) if fan else ()))


@dataclass
class Service:
    rt: Runtime
    composed: checkin_app.CheckInServer
    client: MeshClient
    clock: ManualClock

    @property
    def door(self) -> Any:
        """CheckInService as the edge."""
        return self.client.stub(pb_grpc.CheckInServiceStub, role="edge")

    @property
    def admin(self) -> Any:
        """CheckInAdminService as an operator."""
        return self.client.stub(pb_grpc.CheckInAdminServiceStub, role="operator")

    async def device(self, event_id: int, name: str = "North gate") -> tuple[pb.GateDevice, str]:
        made = await self.admin.CreateGateDevice(pb.CreateGateDeviceRequest(event_id=event_id, name=name))
        return made.device, made.key


@contextlib.asynccontextmanager
async def checkin_service(
    stores: Stores,
    *,
    environ: Mapping[str, str] | None = None,
    overrides: checkin_app.Overrides | None = None,
    clock: ManualClock | None = None,
) -> AsyncIterator[Service]:
    clock = clock or ManualClock()
    rt = make_runtime(
        stores,
        environ={
            "BOXOFFICE_CHECKIN_KEYS": CHECKIN_KEYS,
            # The suite shares a 2-core machine: a burst of scans may queue.
            "BOXOFFICE_DEFAULT_DEADLINE_SECONDS": "20",
            **(environ or {}),
        },
        clock=clock,
    )
    composed = checkin_app.compose_server(rt, overrides)
    async with running([*rt.infrastructure(), *composed.components]):
        client = MeshClient(stores, composed.server.address)
        try:
            yield Service(rt, composed, client, clock)
        finally:
            await client.close()
