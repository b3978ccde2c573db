"""A grpc.aio server with health, reflection, metrics, the gate and a
drain; the channel arguments every server takes."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import grpc
from google.protobuf import descriptor_pool
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_health.v1.health import aio as health_aio
from grpc_reflection.v1alpha import reflection, reflection_pb2_grpc

from boxoffice.config import ConfigError, ServerConfig
from boxoffice.metrics import GrpcServerMetrics
from boxoffice.server._calls import CallWrapper, go_code_name
from boxoffice.server._gate import Gate
from boxoffice.tracing import Tracing
from boxoffice.wire import StreamBudget

_log = logging.getLogger("boxoffice.server")


class Drain:
    """Set when the process starts shutting down; long streams watch it and
    end so that the server can stop within its grace period."""

    def __init__(self) -> None:
        self._event = asyncio.Event()

    def start(self) -> None:
        self._event.set()

    @property
    def draining(self) -> bool:
        return self._event.is_set()

    async def wait(self) -> None:
        await self._event.wait()


@dataclass(frozen=True)
class Registration:
    """One gRPC service to serve: its full name and how to add its servicer."""

    service_name: str
    add_to_server: Callable[[grpc.aio.Server], None]


def server_options(config: ServerConfig) -> list[tuple[str, int]]:
    """Channel args for a server that takes flash crowds of streams."""
    return [
        *_connection_age(config),
        ("grpc.max_concurrent_streams", config.max_concurrent_streams),
        ("grpc.max_receive_message_length", config.max_message_bytes),
        # The defaults (about 1,000 soft / 3,000 hard) cancel about half of a
        # burst of 10,000 stream opens.
        ("grpc.server.max_pending_requests", config.max_pending_requests),
        ("grpc.server.max_pending_requests_hard_limit", config.max_pending_requests * 2),
        # Ping idle streams so that dead clients are noticed; let clients ping
        # every 10 s without being sent GOAWAY too_many_pings.
        ("grpc.keepalive_time_ms", 60_000),
        ("grpc.keepalive_timeout_ms", 20_000),
        ("grpc.http2.min_ping_interval_without_data_ms", 10_000),
        ("grpc.keepalive_permit_without_calls", 1),
        # Only copies of one server role share a port (gRPC's default on Linux is to share).
        ("grpc.so_reuseport", int(config.reuse_port)),
    ]


def _connection_age(config: ServerConfig) -> list[tuple[str, int]]:
    """GOAWAY to each client connection after the maximum age (gRPC adds
    +-10% jitter), so that clients re-resolve and spread over new pods."""
    if config.max_connection_age_seconds <= 0:
        return []
    options = [("grpc.max_connection_age_ms", int(config.max_connection_age_seconds * 1000))]
    if config.max_connection_age_grace_seconds > 0:
        options.append(("grpc.max_connection_age_grace_ms", int(config.max_connection_age_grace_seconds * 1000)))
    return options


class GrpcServer:
    """A grpc.aio server with health, reflection, metrics, the gate and a
    drain.

    ``credentials`` (None: plaintext, behind a sidecar that does mTLS) are
    the server's TLS; ``health_port`` (None: none) adds a plaintext server
    with only grpc.health.v1 on that port, for kubelet's gRPC probes, which
    present no certificate. It shares the health servicer, so it too
    answers NOT_SERVING once the server drains."""

    def __init__(
        self,
        *,
        name: str,
        config: ServerConfig,
        metrics: GrpcServerMetrics,
        services: Sequence[Registration],
        drain: Drain,
        gate: Gate,
        credentials: grpc.ServerCredentials | None = None,
        health_port: int | None = None,
        streams: StreamBudget | None = None,
        tracing: Tracing | None = None,
    ) -> None:
        self.name = name
        self._config = config
        self._services = services
        self._drain = drain
        self._gate = gate
        self._credentials = credentials
        self._health = health_aio.HealthServicer()
        self._grpc_metrics = metrics
        self._server = grpc.aio.server(options=server_options(config))
        self._wrapper = CallWrapper(
            metrics, config.default_deadline_seconds, gate, streams, tracing=tracing, component=name
        )
        self._health_port = health_port
        self._health_server: grpc.aio.Server | None = None
        self.port = 0
        # The plaintext health port once listening (None: none).
        self.health_port: int | None = None

    @property
    def address(self) -> str:
        host = self._config.grpc_host
        return f"[{host}]:{self.port}" if ":" in host else f"{host}:{self.port}"

    @property
    def local_address(self) -> str:
        """What a client on this machine dials: loopback when the server
        listens on every address (its certificate names 127.0.0.1, not
        0.0.0.0)."""
        if self._config.grpc_host in ("0.0.0.0", "::", ""):
            return f"127.0.0.1:{self.port}"
        return self.address

    async def start(self) -> None:
        registrar = self._wrapper.registrar(self._server)
        for service in self._services:
            service.add_to_server(registrar)
        health_pb2_grpc.add_HealthServicer_to_server(self._health, registrar)
        names = [s.service_name for s in self._services]
        # The asyncio servicer (enable_server_reflection picks it only for a
        # grpc.aio.Server itself).
        add_reflection: Callable[[Any, grpc.aio.Server], None] = (
            reflection_pb2_grpc.add_ServerReflectionServicer_to_server
        )
        add_reflection(
            reflection.aio.ReflectionServicer(
                [*names, health_pb2.DESCRIPTOR.services_by_name["Health"].full_name, reflection.SERVICE_NAME]
            ),
            registrar,
        )
        self._gate.label_services(names)
        self._metrics_from_zero(names)
        address = self._config.grpc_address
        try:
            if self._credentials is None:
                self.port = self._server.add_insecure_port(address)
            else:
                self.port = self._server.add_secure_port(address, self._credentials)
        except RuntimeError:
            self.port = 0
        if self.port == 0:
            raise ConfigError(
                f"{self.name} cannot listen on {address}: the port is in use or the address is not this host's"
            )
        if self._health_port is not None:
            await self._start_health_server(self._health_port)
        await self._server.start()
        for service_name in ["", *names]:
            await self._health.set(service_name, health_pb2.HealthCheckResponse.SERVING)
        _log.info(
            "serving",
            extra={
                "component": self.name,
                "address": self.address,
                "tls": self._credentials is not None,
                "health_port": self.health_port,
            },
        )

    def _metrics_from_zero(self, service_names: Sequence[str]) -> None:
        """Every method's series exist from the start (at zero), so that
        dashboards and rate() see a quiet method, not a missing one."""
        pool = descriptor_pool.Default()
        for name in service_names:
            try:
                service = pool.FindServiceByName(name)
            except KeyError:
                continue  # a service without a descriptor (tests' own)
            for method in service.methods:
                if method.client_streaming and method.server_streaming:
                    kind = "bidi_stream"
                elif method.client_streaming:
                    kind = "client_stream"
                elif method.server_streaming:
                    kind = "server_stream"
                else:
                    kind = "unary"
                labels = (kind, name, method.name)
                self._grpc_metrics.started.labels(*labels)
                self._grpc_metrics.handled.labels(*labels, go_code_name(grpc.StatusCode.OK))
                self._grpc_metrics.handling_seconds.labels(*labels)

    async def _start_health_server(self, port: int) -> None:
        server = grpc.aio.server(
            options=[("grpc.max_concurrent_streams", 16), ("grpc.so_reuseport", int(self._config.reuse_port))]
        )
        health_pb2_grpc.add_HealthServicer_to_server(self._health, server)
        host = self._config.grpc_host
        address = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        try:
            bound = server.add_insecure_port(address)
        except RuntimeError:
            bound = 0
        if bound == 0:
            raise ConfigError(f"cannot listen on {address} (BOXOFFICE_HEALTH_PORT): the port is in use")
        await server.start()
        self._health_server = server
        self.health_port = bound

    async def stop(self, grace_seconds: float) -> None:
        """Health NOT_SERVING first; calls still served for the drain delay
        (load balancers and clients' health checks notice and stop sending);
        then streams told to end, the listener closed, and in-flight calls
        given ``grace_seconds`` to finish."""
        await self._health.enter_graceful_shutdown()
        if self._config.drain_seconds > 0:
            _log.info(
                "draining: health answers NOT_SERVING, calls still served",
                extra={"component": self.name, "drain_seconds": self._config.drain_seconds},
            )
            await asyncio.sleep(self._config.drain_seconds)
        self._drain.start()
        await self._server.stop(grace_seconds)
        if self._health_server is not None:
            await self._health_server.stop(0)
        _log.info("stopped", extra={"component": self.name})
