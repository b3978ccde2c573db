"""What the `boxoffice admin` tests share: QueueService and BookingService
as `boxoffice up` composes them, the command run against them in its own
process as the operator, their clients as the edge and the operator, and
the event file the tests start from. A test module takes the fixture by
importing ``mesh``."""

from __future__ import annotations

import contextlib
import os
import textwrap
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from booking_svc import app as booking_app
from boxoffice import access
from boxoffice.runtime import Runtime
from boxoffice.tls import CertFiles
from gen.boxoffice.queue.v1 import queue_admin_service_pb2 as apb
from gen.boxoffice.queue.v1 import queue_admin_service_pb2_grpc as apb_grpc
from gen.boxoffice.queue.v1 import queue_service_pb2_grpc as qpb_grpc
from queue_svc.app import QueueApp
from tests.e2e.harness import Result, run_admin
from tests.edge.asserting import edge_mesh_client
from tests.queue.harness import AlwaysLeader
from tests.support import Stores, make_runtime, running


@dataclass
class Mesh:
    stores: Stores
    rt: Runtime
    queue_addr: str
    booking_addr: str
    tmp: Path
    # The queue's app, whose admitter a test ticks by hand (it leads at epoch 1).
    queue: QueueApp

    async def admin(self, *args: str, files: CertFiles | None = None, tls: bool = True) -> Result:
        """``boxoffice admin ARGS`` in its own process, as the operator
        (or with ``files``; ``tls=False``: no TLS files at all)."""
        addresses = {"queue": self.queue_addr, "booking": self.booking_addr}
        return await run_admin(self.stores, addresses, *args, files=files, tls=tls)

    def file(self, name: str, text: str) -> str:
        path = self.tmp / name
        path.write_text(textwrap.dedent(text).lstrip())
        return str(path)


@pytest.fixture
async def mesh(stores: Stores, tmp_path: Path) -> AsyncIterator[Mesh]:
    """QueueService and BookingService, each as its own role, as `boxoffice up` composes them."""
    rt = make_runtime(stores)
    queue = QueueApp(rt, leadership=AlwaysLeader(1))
    booking = booking_app.build_server(rt)
    components = [*queue.components("server"), *booking.components]
    async with running([*rt.infrastructure(), *components]):
        yield Mesh(stores, rt, queue.server.address, booking.grpc.address, tmp_path, queue)


@contextlib.asynccontextmanager
async def edge_queue(mesh: Mesh) -> AsyncIterator[Any]:
    """QueueService as the edge, for the fans of a test."""
    async with edge_mesh_client(mesh.stores, mesh.queue_addr) as client:
        yield client.stub(qpb_grpc.QueueServiceStub, role=access.EDGE)


@contextlib.asynccontextmanager
async def operator_queue(mesh: Mesh) -> AsyncIterator[Any]:
    """QueueAdminService as the operator, to read what the command stored."""
    async with edge_mesh_client(mesh.stores, mesh.queue_addr) as client:
        yield client.stub(apb_grpc.QueueAdminServiceStub, role=access.OPERATOR)


async def stored_room(mesh: Mesh, event_id: int) -> apb.WaitingRoom:
    async with operator_queue(mesh) as admin:
        reply = await admin.GetWaitingRoom(apb.GetWaitingRoomRequest(event_id=event_id))
    room: apb.WaitingRoom = reply.config
    return room


def iso(value: datetime) -> str:
    return value.astimezone(UTC).isoformat().replace("+00:00", "Z")


def event_yaml(event_id: int, *, opens_in: timedelta = timedelta(hours=1), room_extra: str = "") -> str:
    """An event file; ``room_extra``: more lines of its waiting room (each
    starting with a newline and indented ten spaces)."""
    now = datetime.now(UTC)
    return f"""
        event:
          id: {event_id}
          name: Night of the admin command
          kind: concert
          starts_at: {iso(now + timedelta(days=30))}
          max_seats_per_customer: 4
          max_tickets_per_customer: 6
          refund:
            percent: 50
            until: {iso(now + timedelta(days=20))}
        sections:
          - id: A
            name: Stalls A
            kind: seated
            price: {{currency: EUR, amount_minor: 6500}}
          - id: FLOOR
            kind: general_admission
            capacity: 200
            price: {{currency: EUR, amount_minor: 3000}}
        waiting_room:
          opens_at: {iso(now + opens_in)}
          admission_rate_per_second: 25
          max_active_shoppers: 100
          session_length_seconds: 600{room_extra}
        """


def new_event_id() -> int:
    return int.from_bytes(os.urandom(5), "big") + 10**9
