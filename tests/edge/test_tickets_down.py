"""The fan's tickets route while PaymentService (which keeps the tickets) is
stopped: a prompt 503 TICKETS_UNAVAILABLE with a Retry-After that the page
explains, not a generic failure it retries in silence; once PaymentService
runs again the same request reads the tickets."""

from __future__ import annotations

import contextlib
import signal
import time
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from edge_svc import app as edge_app
from tests.e2e.harness import eventually
from tests.edge.harness import GENEROUS, sign_in
from tests.runtime.processes import Role, free_port, role_processes
from tests.support import Stores, make_runtime, running

pytestmark = pytest.mark.slow


@contextlib.asynccontextmanager
async def _edge(stores: Stores, payment_addr: str) -> AsyncIterator[str]:
    """An edge whose PaymentService is at ``payment_addr`` (QueueService and
    BookingService are not needed here); its URL."""
    rt = make_runtime(stores)
    edge = edge_app.compose(
        rt,
        edge_app.Overrides(
            settings={
                "host": "127.0.0.1",
                "port": 0,
                "queue_addr": f"127.0.0.1:{free_port()}",
                "booking_addr": f"127.0.0.1:{free_port()}",
                "payment_addr": payment_addr,
                "dev_sign_in": True,
                "drain_seconds": 0.0,
                **GENEROUS,
            }
        ),
    )
    async with running([*rt.infrastructure(), *edge.components]):
        yield edge.server.url


def _payment_svc(stores: Stores, tmp_path: Path, port: int) -> contextlib.AbstractAsyncContextManager[list[Role]]:
    return role_processes(
        stores,
        [
            (
                "payment-svc",
                {
                    "BOXOFFICE_GRPC_PORT": str(port),
                    "BOXOFFICE_BOOKING_ADDR": f"127.0.0.1:{free_port()}",
                    "BOXOFFICE_SANDBOX_WEBHOOK_MODE": "manual",
                },
            )
        ],
        tmp_path,
    )


async def test_tickets_while_payment_service_is_stopped(stores: Stores, tmp_path: Path) -> None:
    port = free_port()
    event_id = 4242
    async with _edge(stores, f"127.0.0.1:{port}") as url, httpx.AsyncClient(base_url=url, timeout=30) as fan:
        await sign_in(fan, "ticket-holder")
        path = f"/v1/events/{event_id}/tickets"

        async def listed() -> httpx.Response | None:
            reply = await fan.get(path)
            return reply if reply.status_code == 200 else None

        async with _payment_svc(stores, tmp_path, port) as roles:
            # Running: the list is read (this fan has none).
            first = await eventually(listed, "the tickets read", seconds=60)
            assert first.json().get("tickets", []) == []
            roles[0].process.send_signal(signal.SIGKILL)
            await roles[0].process.wait()

            # Stopped: said at once and plainly.
            started = time.monotonic()
            reply = await fan.get(path)
            took = time.monotonic() - started
            assert reply.status_code == 503, reply.text
            error = reply.json()["error"]
            info = error["details"][0]
            assert info["reason"] == "TICKETS_UNAVAILABLE"
            assert info["metadata"]["upstream_reason"]
            assert int(reply.headers["retry-after"]) >= 1
            # Answered, not held until the request's deadline.
            assert took < 5.0, took

        # Running again: the same request reads the tickets.
        async with _payment_svc(stores, tmp_path, port):
            again = await eventually(listed, "the tickets read again", seconds=60)
            assert again.json().get("tickets", []) == []
