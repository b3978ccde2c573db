"""The whole mesh for end-to-end tests: every role of the three services
in one process, each server serving as its own role over mTLS, with the
small helpers those tests share."""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import sys
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import TypeVar

from google.protobuf import timestamp_pb2

from boxoffice import access
from boxoffice.clock import Clock
from boxoffice.lifecycle import Component
from boxoffice.tls import CertFiles
from boxoffice.tracing import Tracing
from tests.support import Stores, all_migrations, make_runtime, running

T = TypeVar("T")

_ADMIN = "import os, sys; from boxoffice_cli.admin import main; sys.exit(main(sys.argv[1:], os.environ))"


@dataclass
class Result:
    """What a command run as its own process did."""

    code: int
    out: str
    err: str


async def run_admin(
    stores: Stores,
    addresses: Mapping[str, str],
    *args: str,
    files: CertFiles | None = None,
    tls: bool = True,
) -> Result:
    """``boxoffice admin ARGS`` in its own process, dialling ``addresses``
    (by component: queue, booking, payment) as the operator (or with
    ``files``; ``tls=False``: no TLS files at all)."""
    env = {**os.environ, **{f"BOXOFFICE_ADMIN_{name.upper()}_ADDR": addr for name, addr in addresses.items()}}
    if tls:
        identity = files or stores.pki.files(access.OPERATOR)
        env |= {
            "BOXOFFICE_TLS_CA_FILE": str(identity.ca),
            "BOXOFFICE_TLS_CERT_FILE": str(identity.cert),
            "BOXOFFICE_TLS_KEY_FILE": str(identity.key),
        }
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-c", _ADMIN, *args, env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    out, err = await asyncio.wait_for(proc.communicate(), timeout=60)
    assert proc.returncode is not None
    return Result(proc.returncode, out.decode(), err.decode())


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def ts(value: datetime) -> timestamp_pb2.Timestamp:
    out = timestamp_pb2.Timestamp()
    out.FromDatetime(value)
    return out


async def eventually(probe: Callable[[], Awaitable[T | None]], what: str, seconds: float = 20.0) -> T:
    """Poll until ``probe`` answers something (no timing is asserted: the
    bound only keeps a broken build from hanging)."""
    for _ in range(int(seconds / 0.05)):
        found = await probe()
        if found is not None:
            return found
        await asyncio.sleep(0.05)
    raise AssertionError(f"never happened: {what}")


@contextlib.asynccontextmanager
async def whole_mesh(
    stores: Stores,
    stream_prefix: str,
    *,
    tracing: Tracing | None = None,
    webhooks: str = "auto",
    booking_clock: Clock | None = None,
) -> AsyncIterator[dict[str, str]]:
    """Every role of queue, booking, payment and check-in running (fast timings, a
    ticket stream of its own named after ``stream_prefix``); the servers'
    addresses by component name. ``tracing``: the process's tracer
    provider (a test's in-memory exporter), else none. ``webhooks``: the
    sandbox's webhook mode; "manual" when only the test's own calls may
    settle a payment (an automatic webhook confirms the hold in a trace of
    its own when it comes before the test's ConfirmPayment). ``booking_clock``: the clock of
    booking's roles (holds, refund windows), for a test that moves time for
    booking alone."""
    from booking_svc import app as booking_app
    from checkin_svc import app as checkin_app
    from payment_svc import app as payment_app
    from queue_svc import app as queue_app

    assert all_migrations()  # the session's database has every service's schema
    booking_port = free_port()
    environ = {
        "BOXOFFICE_BOOKING_ADDR": f"127.0.0.1:{booking_port}",
        "BOXOFFICE_QUEUE_TICK_SECONDS": "0.05",
        "BOXOFFICE_LEADER_RETRY_SECONDS": "0.2",
        "BOXOFFICE_LEADER_RENEW_DEADLINE_SECONDS": "1",
        "BOXOFFICE_LEADER_LEASE_SECONDS": "2",
        "BOXOFFICE_SANDBOX_DELAY_SECONDS": "0.01",
        "BOXOFFICE_SANDBOX_WEBHOOK_DELAY_SECONDS": "0.2",
        "BOXOFFICE_SANDBOX_WEBHOOK_MODE": webhooks,
        "BOXOFFICE_TICKET_STREAM": f"{stream_prefix}-{uuid.uuid4().hex[:12]}",
        "BOXOFFICE_CONSUMER_BLOCK_MS": "100",
        "BOXOFFICE_DB_POOL_MAX": "20",
    }
    rt = make_runtime(stores, environ=environ)
    # Booking on a runtime of its own when it keeps its own time.
    booking_rt = rt if booking_clock is None else make_runtime(stores, environ=environ, clock=booking_clock)
    runtimes = [rt] if booking_rt is rt else [rt, booking_rt]
    for runtime in runtimes:
        if tracing is not None:
            runtime.tracing = tracing
        runtime.grpc_ports.update({"queue": 0, "booking": booking_port, "payment": 0, "checkin": 0})
    components: list[Component] = []
    for module, runtime in ((queue_app, rt), (booking_app, booking_rt), (payment_app, rt), (checkin_app, rt)):
        for role in module.ROLES.values():
            components.extend(await module.build(runtime, role))
    async with running([*(c for runtime in runtimes for c in runtime.infrastructure()), *components]):
        yield {c.name: str(getattr(c, "address")) for c in components if hasattr(c, "address")}  # noqa: B009
