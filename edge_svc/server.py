"""The edge's HTTP server as a component of the process: uvicorn (httptools)
in the process's event loop, beside grpc.aio.

Stopping drains in order: readiness fails at once (load balancers stop
sending), for ``drain_seconds`` requests are still answered, then open
Server-Sent Event streams end with a reconnect hint, the listener closes,
and requests in flight finish within the grace period.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import socket
from collections.abc import Generator

import uvicorn
from starlette.types import ASGIApp

from boxoffice.config import ConfigError
from edge_svc.http import EdgeApp
from edge_svc.progress import ProgressHub
from edge_svc.state import EdgeState

_log = logging.getLogger("boxoffice.edge.server")


class _Server(uvicorn.Server):
    @contextlib.contextmanager
    def capture_signals(self) -> Generator[None, None, None]:
        # The process's lifecycle owns SIGTERM and SIGINT.
        yield


def uvicorn_config(app: ASGIApp, *, grace_seconds: float) -> uvicorn.Config:
    """How the edge runs uvicorn (the benchmarks' bare servers run the same)."""
    return uvicorn.Config(
        app,
        http="httptools",
        lifespan="off",
        log_config=None,
        access_log=False,
        server_header=False,
        date_header=True,
        timeout_keep_alive=75,
        timeout_graceful_shutdown=max(1, int(grace_seconds)),
        backlog=4096,
        # The client's address comes from BOXOFFICE_EDGE_TRUSTED_PROXIES alone
        # (edge_svc.http.client_ip): uvicorn's own proxy headers would believe
        # any loopback peer's X-Forwarded-For before that list is consulted.
        proxy_headers=False,
    )


def bind(host: str, port: int) -> socket.socket:
    """A listening socket; ConfigError (one line) when it cannot be had."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # IPPROTO_TCP by name: asyncio sets TCP_NODELAY on accepted connections
    # only for sockets of that protocol; without it every response waits for
    # the client's delayed ACK (about 40 ms).
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(4096)
    except OSError as err:
        sock.close()
        if err.errno == errno.EADDRINUSE:
            raise ConfigError(f"the edge cannot listen on {host}:{port}: the port is in use") from None
        raise ConfigError(f"the edge cannot listen on {host}:{port}: {err.strerror or err}") from None
    sock.setblocking(False)
    return sock


class EdgeServer:
    """The HTTP listener of the edge."""

    def __init__(
        self,
        app: EdgeApp,
        state: EdgeState,
        hub: ProgressHub,
        *,
        host: str,
        port: int,
        drain_seconds: float,
        grace_seconds: float,
    ) -> None:
        self.name = "edge"
        self._app = app
        self._state = state
        self._hub = hub
        self._host = host
        self._port = port
        self._drain_seconds = drain_seconds
        self._grace_seconds = grace_seconds
        self._socket: socket.socket | None = None
        self._server: _Server | None = None
        self._task: asyncio.Task[None] | None = None

    @property
    def port(self) -> int:
        assert self._socket is not None, "not started"
        return int(self._socket.getsockname()[1])

    @property
    def address(self) -> str:
        host = f"[{self._host}]" if ":" in self._host else self._host
        return f"{host}:{self.port}"

    @property
    def url(self) -> str:
        return f"http://{self.address}"

    def accepted_nodelay(self) -> list[bool]:
        """Whether each open connection sends without waiting (TCP_NODELAY)."""
        if self._server is None:
            return []
        flags: list[bool] = []
        for connection in list(self._server.server_state.connections):
            transport = getattr(connection, "transport", None)
            sock = None if transport is None else transport.get_extra_info("socket")
            if sock is not None:
                flags.append(bool(sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY)))
        return flags

    async def start(self) -> None:
        self._socket = bind(self._host, self._port)
        self._server = _Server(uvicorn_config(self._app, grace_seconds=self._grace_seconds))
        self._task = asyncio.create_task(self._server.serve(sockets=[self._socket]), name="edge-http")
        while not self._server.started:
            if self._task.done():
                self._task.result()
                raise RuntimeError("the edge's HTTP server stopped while starting")
            await asyncio.sleep(0.01)
        self._state.started()

    async def stop(self, grace_seconds: float) -> None:
        self._state.drain()
        if self._drain_seconds > 0:
            _log.info("draining: readiness fails; still answering", extra={"drain_seconds": self._drain_seconds})
            await asyncio.sleep(self._drain_seconds)
        # Open streams end with a reconnect hint.
        self._hub.wake_all()
        if self._server is not None:
            self._server.should_exit = True
        if self._task is not None:
            try:
                await asyncio.wait_for(asyncio.shield(self._task), timeout=grace_seconds + 1)
            except TimeoutError:
                if self._server is not None:
                    self._server.force_exit = True
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(self._task, timeout=1)
        if self._socket is not None:
            self._socket.close()
