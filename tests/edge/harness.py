"""The whole mesh behind a real edge, for tests that speak HTTP only: every
role of the three services (tests.e2e.harness.whole_mesh) and the edge
composed as `boxoffice up` composes it, on a loopback port, with an
operator's client to set events up."""

from __future__ import annotations

import contextlib
import json
import uuid
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
from google.protobuf.duration_pb2 import Duration

from boxoffice import access
from boxoffice.clock import Clock
from edge_svc import app as edge_app
from edge_svc.app import Edge
from gen.boxoffice.booking.v1 import booking_service_pb2 as bpb
from gen.boxoffice.booking.v1 import booking_service_pb2_grpc as bpb_grpc
from gen.boxoffice.queue.v1 import queue_service_pb2 as qpb
from gen.boxoffice.queue.v1 import queue_service_pb2_grpc as qpb_grpc
from tests.e2e.harness import ts, whole_mesh
from tests.support import MeshClient, Stores, make_runtime, running

# Limits high enough that a test's own traffic from one address never hits them.
GENEROUS = {
    "ip_rate_per_second": 100_000.0,
    "ip_burst": 100_000,
    "account_rate_per_second": 100_000.0,
    "account_burst": 100_000,
    "sse_per_address": 100_000,
    "sse_per_account": 100_000,
}


@dataclass
class EdgeStack:
    edge: Edge
    url: str
    addresses: Mapping[str, str]
    # Clients of the services' own ports, by component (operator set-up, checks).
    operators: Mapping[str, MeshClient]

    def client(self, **kwargs: Any) -> httpx.AsyncClient:
        return httpx.AsyncClient(base_url=self.url, timeout=30.0, **kwargs)

    def client_from(self, address: str, **kwargs: Any) -> httpx.AsyncClient:
        """A client whose connections come from ``address`` (a loopback
        address of its own, so that a test that spends a per-address limit
        spends no other test's)."""
        transport = httpx.AsyncHTTPTransport(local_address=address)
        return httpx.AsyncClient(base_url=self.url, timeout=30.0, transport=transport, **kwargs)

    async def event(
        self,
        *,
        seats: int = 8,
        standing: int = 0,
        max_active: int = 10,
        rate: int = 100,
        opens_in_seconds: float = -1.0,
        price_minor: int = 4500,
        paused: bool = False,
        hold_ttl_seconds: int = 0,
        refund_percent: int | None = None,
        refundable_until: datetime | None = None,
        transfers: bool | None = None,
        max_tickets_per_customer: int = 0,
    ) -> int:
        """A new event with a seated section A (row K) and, optionally, a
        standing FLOOR, and its open waiting room; its id. ``hold_ttl_seconds``:
        how long a hold lasts (0: the default). ``refund_percent``: what a
        cancellation refunds until ``refundable_until`` (default: in 29 days);
        None: no refunds."""
        event_id = int(uuid.uuid4().int % 10**12) + 10**6
        now = datetime.now(UTC)
        sections = [
            bpb.SectionSpec(
                section_id="A",
                display_name="Stalls",
                kind=bpb.SECTION_KIND_SEATED,
                price=bpb.Money(currency_code="EUR", amount_minor=price_minor),
            )
        ]
        if standing:
            sections.append(
                bpb.SectionSpec(
                    section_id="FLOOR",
                    display_name="Floor",
                    kind=bpb.SECTION_KIND_GENERAL_ADMISSION,
                    capacity=standing,
                    price=bpb.Money(currency_code="EUR", amount_minor=price_minor),
                )
            )
        booking = self.operators["booking"].stub(bpb_grpc.BookingServiceStub)
        await booking.CreateEvent(
            bpb.CreateEventRequest(
                event_id=event_id,
                display_name="Edge test",
                kind=bpb.EVENT_KIND_CONCERT,
                starts_at=ts(now + timedelta(days=30)),
                sections=sections,
                hold_ttl=Duration(seconds=hold_ttl_seconds) if hold_ttl_seconds else None,
                refund_policy=None
                if refund_percent is None
                else bpb.RefundPolicy(
                    refundable_until=ts(refundable_until or now + timedelta(days=29)), refund_percent=refund_percent
                ),
                transfers=transfers,
                max_tickets_per_customer=max_tickets_per_customer,
            )
        )
        await booking.LoadInventory(
            bpb.LoadInventoryRequest(
                event_id=event_id,
                rows=[bpb.SeatRowSpec(section_id="A", row_label="K", first_seat_number=1, seat_count=seats)],
            )
        )
        queue = self.operators["queue"].stub(qpb_grpc.QueueServiceStub)
        await queue.CreateEventQueue(
            qpb.CreateEventQueueRequest(
                config=qpb.EventQueueConfig(
                    event_id=event_id,
                    opens_at=ts(now + timedelta(seconds=opens_in_seconds)),
                    admission_rate_per_second=rate,
                    max_active_shoppers=max_active,
                    paused=paused,
                )
            )
        )
        return event_id


@contextlib.asynccontextmanager
async def edge_stack(
    stores: Stores,
    *,
    settings: Mapping[str, object] | None = None,
    prefix: str = "edge",
    booking_clock: Clock | None = None,
) -> AsyncIterator[EdgeStack]:
    async with whole_mesh(stores, f"ticket-issued-{prefix}", booking_clock=booking_clock) as addresses:
        rt = make_runtime(stores)
        edge = edge_app.compose(
            rt,
            edge_app.Overrides(
                settings={
                    "host": "127.0.0.1",
                    "port": 0,
                    "queue_addr": addresses["queue"],
                    "booking_addr": addresses["booking"],
                    "payment_addr": addresses["payment"],
                    "checkin_addr": addresses["checkin"],
                    "dev_sign_in": True,
                    "drain_seconds": 0.0,
                    **GENEROUS,
                    **(settings or {}),
                }
            ),
        )
        operators = {name: MeshClient(stores, addresses[name]) for name in ("queue", "booking", "payment", "checkin")}
        try:
            async with running([*rt.infrastructure(), *edge.components]):
                yield EdgeStack(edge=edge, url=edge.server.url, addresses=addresses, operators=operators)
        finally:
            for client in operators.values():
                await client.close()


async def sign_in(client: httpx.AsyncClient, name: str) -> None:
    reply = await client.post("/v1/session", json={"name": name})
    assert reply.status_code == 200, reply.text
    assert client.cookies.get("bo_session")


def loopback_address() -> str:
    """A fresh address of 127.0.0.0/8 (all of it is loopback on Linux)."""
    number = uuid.uuid4().int
    return f"127.{number % 250 + 2}.{(number >> 8) % 250}.{(number >> 16) % 250 + 1}"


def error_of(reply: httpx.Response) -> tuple[int, str, str]:
    """(HTTP status, canonical status name, ErrorInfo reason) of an error answer."""
    body = json.loads(reply.text)["error"]
    assert body["code"] == reply.status_code
    (info,) = body["details"]
    assert info["@type"] == "type.googleapis.com/google.rpc.ErrorInfo" and info["domain"] == "boxoffice"
    return reply.status_code, body["status"], info["reason"]


__all__ = ["GENEROUS", "EdgeStack", "access", "edge_stack", "error_of", "loopback_address", "sign_in"]
