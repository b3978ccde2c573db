"""Client-side balancing: payment's booking client spreads its calls over
every address its target resolves to (round robin), still verifying each
server's certificate; servers send GOAWAY after their maximum connection
age, so that clients resolve again and reach new pods; and booking's
address may be a ``dns:///`` target."""

from __future__ import annotations

import asyncio
import re
import socket
from pathlib import Path
from typing import Any

import grpc
import httpx
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from boxoffice.config import ConfigError, Env, ServerConfig
from boxoffice.errors import BoxofficeError, Unavailable
from boxoffice.server import server_options
from payment_svc.adapters.booking import GrpcBookingClient
from payment_svc.config import PaymentConfig
from tests.runtime.processes import Role, role_processes
from tests.support import Stores, make_runtime, running

_HANDLED = re.compile(r'^grpc_server_handled_total\{[^}]*grpc_method="ExtendHold"[^}]*\} ([0-9.e+]+)$', re.MULTILINE)
_NO_HOLD = "00000000-0000-4000-8000-000000000000"


def _port_free_on_both() -> int:
    for _ in range(100):
        with socket.socket() as a, socket.socket() as b:
            try:
                a.bind(("127.0.0.1", 0))
                port = int(a.getsockname()[1])
                b.bind(("127.0.0.2", port))
            except OSError:
                continue
            return port
    raise RuntimeError("no port free on both loopback addresses")


async def _extend_holds(client: httpx.AsyncClient, role: Role) -> float | None:
    """ExtendHold calls the process has answered (None: not serving yet)."""
    assert role.process.returncode is None, f"{role.command} ended: {role.stderr()}"
    try:
        text = (await client.get(f"http://127.0.0.1:{role.metrics_port}/metrics")).text
    except httpx.TransportError:
        return None
    return sum(float(value) for value in _HANDLED.findall(text))


@pytest.mark.slow
async def test_payments_booking_client_spreads_calls_over_two_booking_processes(stores: Stores, tmp_path: Path) -> None:
    port = _port_free_on_both()
    both = [
        ("booking-svc", {"BOXOFFICE_GRPC_HOST": host, "BOXOFFICE_GRPC_PORT": str(port)})
        for host in ("127.0.0.1", "127.0.0.2")
    ]
    async with (
        role_processes(stores, both, tmp_path) as bookings,
        httpx.AsyncClient(timeout=10) as scraper,
    ):
        for _ in range(1200):
            if all([await _extend_holds(scraper, role) is not None for role in bookings]):
                break
            await asyncio.sleep(0.05)
        else:
            raise AssertionError("the booking processes never served /metrics")
        rt = make_runtime(stores, role="payment")
        target = f"ipv4:127.0.0.1:{port},127.0.0.2:{port}"
        # The test PKI's certificates name localhost (and 127.0.0.1), the
        # name a target of two addresses is verified against.
        channel = rt.channel("payment", target, server_name="localhost")
        booking = GrpcBookingClient(channel)
        try:
            counts: list[float] = [0.0, 0.0]
            for _ in range(50):
                for _ in range(10):
                    with pytest.raises(BoxofficeError) as refused:
                        await booking.extend_hold(_NO_HOLD, "fan", 60)
                    assert not isinstance(refused.value, Unavailable), refused.value
                counts = [await _extend_holds(scraper, role) or 0.0 for role in bookings]
                if all(count > 0 for count in counts):
                    break
            assert all(count > 0 for count in counts), counts
        finally:
            await channel.close()
        # mTLS still verifies the server: a name its certificate lacks fails.
        wrong = rt.channel("payment", target, server_name="booking-svc.elsewhere.example")
        try:
            with pytest.raises(Unavailable):
                await GrpcBookingClient(wrong).extend_hold(_NO_HOLD, "fan", 60)
        finally:
            await wrong.close()


async def test_a_server_sends_goaway_after_its_maximum_connection_age(stores: Stores) -> None:
    rt = make_runtime(
        stores,
        environ={
            "BOXOFFICE_GRPC_MAX_CONNECTION_AGE_SECONDS": "1",
            "BOXOFFICE_GRPC_MAX_CONNECTION_AGE_GRACE_SECONDS": "1",
        },
    )
    server = rt.grpc_server("booking", [])
    async with running([server]):
        channel = rt.channel("payment", server.local_address)
        try:
            health: Any = channel.stub(health_pb2_grpc.HealthStub)  # the stubs type only sync channels
            reply = await health.Check(health_pb2.HealthCheckRequest(), timeout=10)
            assert reply.status == health_pb2.HealthCheckResponse.SERVING
            raw = channel.channel()
            assert raw.get_state() == grpc.ChannelConnectivity.READY
            # The server ends the connection by itself: the channel leaves
            # READY (bounded only so that a broken build does not hang). The
            # wait returning is the proof; the state read after it may be
            # READY again, as round_robin reconnects at once.
            async with asyncio.timeout(60):
                await raw.wait_for_state_change(grpc.ChannelConnectivity.READY)
            # The next call connects again.
            reply = await health.Check(health_pb2.HealthCheckRequest(), timeout=10)
            assert reply.status == health_pb2.HealthCheckResponse.SERVING
        finally:
            await channel.close()


def test_connection_age_settings() -> None:
    config = ServerConfig.from_env(Env({}), default_grpc_port=0)
    options = dict(server_options(config))
    assert options["grpc.max_connection_age_ms"] == 300_000
    assert options["grpc.max_connection_age_grace_ms"] == 3_600_000
    off = ServerConfig.from_env(Env({"BOXOFFICE_GRPC_MAX_CONNECTION_AGE_SECONDS": "0"}), default_grpc_port=0)
    assert "grpc.max_connection_age_ms" not in dict(server_options(off))
    for name, value, message in (
        ("BOXOFFICE_GRPC_MAX_CONNECTION_AGE_SECONDS", "0.5", "must be 0 \\(off\\) or at least 1 second"),
        ("BOXOFFICE_GRPC_MAX_CONNECTION_AGE_SECONDS", "-1", "must be >= 0.0"),
        ("BOXOFFICE_GRPC_MAX_CONNECTION_AGE_GRACE_SECONDS", "100000", "must be <= 86400.0"),
        ("BOXOFFICE_GRPC_MAX_CONNECTION_AGE_SECONDS", "soon", "is not a number"),
    ):
        with pytest.raises(ConfigError, match=message):
            ServerConfig.from_env(Env({name: value}), default_grpc_port=0)


@pytest.mark.parametrize(
    "target",
    [
        "dns:///booking-svc-headless.boxoffice.svc.cluster.local:50051",
        "dns://10.96.0.10:53/booking-svc-headless:50051",
        "booking-svc:50051",
        "ipv4:10.0.0.1:50051,10.0.0.2:50051",
        "ipv6:[fd00::1]:50051",
        "127.0.0.1:50052",
    ],
)
def test_booking_address_takes_grpc_targets(target: str) -> None:
    assert PaymentConfig.from_env(Env({"BOXOFFICE_BOOKING_ADDR": target})).booking_addr == target


@pytest.mark.parametrize(
    "target", ["booking-svc", "dns:///booking-svc", "http://booking-svc:50051", "ipv4:booking:1", "127.0.0.1:0"]
)
def test_booking_address_refuses_what_is_not_a_target(target: str) -> None:
    with pytest.raises(ConfigError, match=r"BOXOFFICE_BOOKING_ADDR=.* is not a gRPC target"):
        PaymentConfig.from_env(Env({"BOXOFFICE_BOOKING_ADDR": target}))
