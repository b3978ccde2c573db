"""Prometheus metrics: one registry per process, passed in, never global.

gRPC metrics use the go-grpc-prometheus names so stock dashboards work.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from wsgiref.simple_server import WSGIServer

from prometheus_client import CollectorRegistry, Counter, Histogram, start_http_server

# Buckets that resolve sub-millisecond Redis calls as well as slow SQL.
LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


@dataclass(frozen=True)
class GrpcServerMetrics:
    """The go-grpc-prometheus server metric family."""

    started: Counter
    handled: Counter
    handling_seconds: Histogram
    msg_sent: Counter

    @classmethod
    def create(cls, registry: CollectorRegistry) -> GrpcServerMetrics:
        labels = ("grpc_type", "grpc_service", "grpc_method")
        return cls(
            started=Counter("grpc_server_started", "RPCs started on the server.", labels, registry=registry),
            handled=Counter(
                "grpc_server_handled",
                "RPCs completed on the server, regardless of success or failure.",
                (*labels, "grpc_code"),
                registry=registry,
            ),
            handling_seconds=Histogram(
                "grpc_server_handling_seconds",
                "Response latency (seconds) of gRPC that had been application-level handled by the server.",
                labels,
                buckets=LATENCY_BUCKETS,
                registry=registry,
            ),
            msg_sent=Counter(
                "grpc_server_msg_sent", "gRPC stream messages sent by the server.", labels, registry=registry
            ),
        )


class MetricsEndpoint:
    """The process's ``/metrics`` HTTP endpoint."""

    def __init__(self, registry: CollectorRegistry, host: str, port: int) -> None:
        self._registry = registry
        self._host = host
        self._port = port
        self._server: WSGIServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        if self._server is None:
            return self._port
        return int(self._server.server_port)

    @property
    def url(self) -> str:
        return f"http://{self._host}:{self.port}/metrics"

    def start(self) -> None:
        self._server, self._thread = start_http_server(self._port, addr=self._host, registry=self._registry)

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)
