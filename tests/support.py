"""Helpers for tests: stores, the test PKI, a clock tests move, running
components, and client channels as a role of the mesh."""

from __future__ import annotations

import contextlib
import datetime
import os
import time
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

import grpc
import pytest
from prometheus_client import CollectorRegistry

from boxoffice import access
from boxoffice.clock import Clock
from boxoffice.config import Env, ServerConfig
from boxoffice.db import Migration
from boxoffice.lifecycle import Component
from boxoffice.metrics import GrpcServerMetrics
from boxoffice.runtime import Runtime
from boxoffice.server import Drain, Gate, GrpcServer, Registration
from boxoffice.tls import Authority, CallerResolver, CertFiles, server_credentials, write_identity
from boxoffice.wire import StreamBudget

TRUST_DOMAIN = "boxoffice.local"
NAMESPACE = "boxoffice-test"
# The components whose servers `make_runtime` gives their own role's identity.
_COMPONENTS = ("queue", "booking", "payment", "checkin", "edge")


@dataclass(frozen=True)
class Pki:
    """The test session's certificates: the mesh's CA and one identity per
    role, plus identities the mesh must refuse: an edge certificate from
    another CA, an edge of another trust domain (from the mesh's CA) and an
    expired edge certificate."""

    authority: Authority
    directory: Path
    roles: Mapping[str, CertFiles]
    foreign_ca: CertFiles
    other_domain: CertFiles
    expired: CertFiles

    def files(self, role: str) -> CertFiles:
        return self.roles[role]

    def issue(self, name: str, spiffe_id: str, **kwargs: Any) -> CertFiles:
        """A new identity from the mesh's CA in ``<directory>/<name>``."""
        cert, key = self.authority.issue(spiffe_id, **kwargs)
        return write_identity(self.directory / name, name, self.authority.cert_pem, cert, key)


def make_pki(directory: Path) -> Pki:
    mesh = Authority.create("boxoffice test CA")
    roles = {}
    for role in access.ROLES:
        cert, key = mesh.issue(access.spiffe_id(TRUST_DOMAIN, NAMESPACE, role))
        roles[role] = write_identity(directory / "mesh", role, mesh.cert_pem, cert, key)
    foreign = Authority.create("boxoffice test CA")  # the same name, another key
    cert, key = foreign.issue(access.spiffe_id(TRUST_DOMAIN, NAMESPACE, access.EDGE))
    foreign_files = write_identity(directory / "foreign", "edge", mesh.cert_pem, cert, key)
    cert, key = mesh.issue(access.spiffe_id("other.example", NAMESPACE, access.EDGE))
    other_files = write_identity(directory / "other-domain", "edge", mesh.cert_pem, cert, key)
    cert, key = mesh.issue(
        access.spiffe_id(TRUST_DOMAIN, NAMESPACE, access.EDGE),
        not_before=datetime.datetime.now(datetime.UTC) - datetime.timedelta(days=3),
        valid_for=datetime.timedelta(days=1),
    )
    expired_files = write_identity(directory / "expired", "edge", mesh.cert_pem, cert, key)
    return Pki(mesh, directory, roles, foreign_files, other_files, expired_files)


@dataclass(frozen=True)
class Stores:
    database_url: str
    redis_url: str
    admin_url: str
    tmp: Path
    pki: Pki
    # redis_url names a node of a Redis Cluster.
    redis_cluster: bool = False


class ManualClock:
    """Wall-clock time that starts now and moves only when told."""

    def __init__(self, start: float | None = None) -> None:
        self._now = time.time() if start is None else start

    def now(self) -> float:
        return self._now

    def advance(self, seconds: float) -> None:
        self._now += seconds


def all_migrations() -> list[Migration]:
    from booking_svc import app as booking_app
    from checkin_svc import app as checkin_app
    from mail_svc import app as mail_app
    from payment_svc import app as payment_app
    from queue_svc import app as queue_app

    return [
        *queue_app.migrations(),
        *booking_app.migrations(),
        *payment_app.migrations(),
        *checkin_app.migrations(),
        *mail_app.migrations(),
    ]


@contextlib.asynccontextmanager
async def running(components: Sequence[Component], grace_seconds: float = 2.0) -> AsyncIterator[None]:
    """Start components in order; stop them in reverse order afterwards."""
    started: list[Component] = []
    try:
        for component in components:
            await component.start()
            started.append(component)
        yield
    finally:
        for component in reversed(started):
            await component.stop(grace_seconds)


def tls_environ(files: CertFiles) -> dict[str, str]:
    """The settings of a process whose identity is ``files``."""
    return {
        "BOXOFFICE_TLS_CA_FILE": str(files.ca),
        "BOXOFFICE_TLS_CERT_FILE": str(files.cert),
        "BOXOFFICE_TLS_KEY_FILE": str(files.key),
    }


def make_runtime(
    stores: Stores,
    *,
    role: str | None = None,
    environ: dict[str, str] | None = None,
    clock: Clock | None = None,
) -> Runtime:
    """A Runtime on loopback port 0 against the test stores, with mTLS:
    as ``role`` for everything it serves and dials, or (None) as
    `boxoffice up` runs, each service as its own role."""
    base = {"BOXOFFICE_GRPC_PORT": "0", "BOXOFFICE_TRUST_DOMAIN": TRUST_DOMAIN, "BOXOFFICE_DRAIN_SECONDS": "0"}
    if role is not None:
        base.update(tls_environ(stores.pki.files(role)))
    if stores.redis_cluster:
        base["BOXOFFICE_REDIS_CLUSTER"] = "true"
    env = Env({**base, **(environ or {})})
    rt = Runtime.from_env(env, database_url=stores.database_url, redis_url=stores.redis_url, clock=clock)
    if role is None and rt.tls.enabled and not rt.tls.has_files:
        for component in _COMPONENTS:
            rt.identities[component] = stores.pki.files(component)
    return rt


def server_config(**settings: str) -> ServerConfig:
    """A bare server's settings on port 0 that stop without the drain delay,
    with ``settings`` (BOXOFFICE_... names) over them."""
    return ServerConfig.from_env(Env({"BOXOFFICE_DRAIN_SECONDS": "0", **settings}), default_grpc_port=0)


def bare_server(
    stores: Stores,
    *,
    services: Sequence[Registration],
    allow: Mapping[str, frozenset[str]],
    config: ServerConfig,
    registry: CollectorRegistry,
    drain: Drain,
    role: str = access.QUEUE,
    files: CertFiles | None = None,
    health_port: int | None = None,
    streams: StreamBudget | None = None,
) -> GrpcServer:
    """A GrpcServer of test services (no app) serving mTLS as ``role`` (or
    with ``files``), whose authorization table is the mesh's plus ``allow``
    (full method -> roles) for the test's own methods."""
    gate = Gate(
        CallerResolver("tls", TRUST_DOMAIN),
        Gate.refused_counter(registry),
        policy={**access.POLICY, **allow},
    )
    return GrpcServer(
        name="test",
        config=config,
        metrics=GrpcServerMetrics.create(registry),
        services=services,
        drain=drain,
        gate=gate,
        credentials=server_credentials(files or stores.pki.files(role)),
        health_port=health_port,
        streams=streams,
    )


def channel_credentials(files: CertFiles | None, ca: Path) -> grpc.ChannelCredentials:
    """TLS credentials trusting ``ca``, presenting ``files`` (None: no
    client certificate)."""
    if files is None:
        return grpc.ssl_channel_credentials(root_certificates=ca.read_bytes())
    return grpc.ssl_channel_credentials(
        root_certificates=ca.read_bytes(), private_key=files.key.read_bytes(), certificate_chain=files.cert.read_bytes()
    )


def client_channel(stores: Stores, address: str, role: str | None = access.EDGE) -> grpc.aio.Channel:
    """A channel to a test server as ``role`` (the edge for customer-facing
    calls, ``operator`` for admin calls, ``payment`` for ExtendHold and
    ConfirmHold; None: TLS with no client certificate)."""
    pki = stores.pki
    files = None if role is None else pki.files(role)
    return grpc.aio.secure_channel(address, channel_credentials(files, pki.files(access.EDGE).ca))


# The role a test's call takes when the table allows several.
_PREFERRED = (access.EDGE, access.PAYMENT, access.OPERATOR, *access.ROLES)


def _service_of(factory: Callable[[grpc.aio.Channel], Any]) -> str:
    """``boxoffice.booking.v1.BookingService`` for ``BookingServiceStub`` of
    ``gen.boxoffice.booking.v1.booking_service_pb2_grpc``."""
    package = factory.__module__.removeprefix("gen.").rsplit(".", 1)[0]
    return f"{package}.{factory.__name__.removesuffix('Stub')}"


class MeshClient:
    """Channels to one server as the roles a test needs, made when first
    used. ``stub(...)`` sends each method as a role the authorization table
    allows it (the edge first, then payment, then operator)."""

    def __init__(self, stores: Stores, address: str) -> None:
        self._stores = stores
        self.address = address
        self._channels: dict[str, grpc.aio.Channel] = {}

    def channel(self, role: str) -> grpc.aio.Channel:
        if role not in self._channels:
            self._channels[role] = client_channel(self._stores, self.address, role)
        return self._channels[role]

    def stub(self, factory: Callable[[grpc.aio.Channel], Any], *, role: str | None = None) -> Any:
        if role is not None:
            return factory(self.channel(role))
        return _RoutedStub(self, factory)

    async def close(self) -> None:
        for channel in self._channels.values():
            await channel.close()
        self._channels.clear()


class _RoutedStub:
    def __init__(self, client: MeshClient, factory: Callable[[grpc.aio.Channel], Any]) -> None:
        self._client = client
        self._factory = factory
        self._service = _service_of(factory)
        self._stubs: dict[str, Any] = {}

    def __getattr__(self, method: str) -> Any:
        allowed = access.POLICY.get(f"/{self._service}/{method}", frozenset())
        role = next((r for r in _PREFERRED if r in allowed), access.EDGE)
        stub = self._stubs.get(role)
        if stub is None:
            stub = self._stubs[role] = self._factory(self._client.channel(role))
        return getattr(stub, method)


@contextlib.asynccontextmanager
async def mesh_client(stores: Stores, address: str) -> AsyncIterator[MeshClient]:
    client = MeshClient(stores, address)
    try:
        yield client
    finally:
        await client.close()


# Secrets that are not the development ones, for the processes a test starts
# off the embedded stores (such a process refuses development secrets).
MESH_SECRETS = {
    "BOXOFFICE_TOKEN_KEYS": "test1:test-token-key-0123456789abcdef",
    "BOXOFFICE_WEBHOOK_SECRETS": "whsec_test_0123456789abcdef",
    "BOXOFFICE_CHECKIN_KEYS": "test1:" + "7e57" * 16,
    # A staging mesh: the sandbox named explicitly (its tickets say so).
    "BOXOFFICE_PAYMENT_PROVIDER": "sandbox",
}


def under_ci() -> bool:
    """Whether the suite runs as CI (``CI=true``), where a test must not be
    skipped for something CI is expected to have."""
    return os.environ.get("CI", "").lower() in ("true", "1")


def unavailable(message: str) -> NoReturn:
    """A tool or input the test needs is missing: the test fails with
    ``message`` under CI and is skipped elsewhere."""
    if under_ci():
        pytest.fail(message)
    pytest.skip(message)
