"""Mutual TLS and the gate on a real loopback server: certificates rotate
under calls in flight, peers the mesh does not know fail the handshake or
are refused before the handler runs, the caller reaches the handler, the
plaintext health port, the settings, and `boxoffice up`'s local CA."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import ssl
import stat
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import pytest
from cryptography import x509
from grpc_health.v1 import health_pb2, health_pb2_grpc
from prometheus_client import CollectorRegistry

from boxoffice import access, caller
from boxoffice.config import ConfigError, Env, TlsConfig
from boxoffice.errors import PermissionDenied, from_rpc_error
from boxoffice.metrics import GrpcServerMetrics
from boxoffice.server import Drain, Gate, GrpcServer, Registration
from boxoffice.tls import (
    CallerResolver,
    CertFiles,
    ClientChannel,
    identity_from_xfcc,
    local_pki,
    server_credentials,
    spiffe_ids_of,
)
from boxoffice_cli import main as cli
from tests.e2e.harness import eventually
from tests.support import (
    NAMESPACE,
    TRUST_DOMAIN,
    Stores,
    bare_server,
    channel_credentials,
    make_runtime,
    server_config,
)

SERVICE = "boxoffice.test.v1.TlsService"
WHO = f"/{SERVICE}/Who"
SLOW = f"/{SERVICE}/Slow"


def _identity(data: bytes) -> bytes:
    return data


def _serial(pem: bytes) -> int:
    return int(x509.load_pem_x509_certificate(pem).serial_number)


class _Service:
    """``Who`` answers the serial of the client certificate the server saw
    and the caller bound for the handler; ``Slow`` waits to be released."""

    def __init__(self) -> None:
        self.calls = 0
        self.release = asyncio.Event()
        self.slow_entered = asyncio.Event()

    async def who(self, request: bytes, context: grpc.aio.ServicerContext[bytes, bytes]) -> bytes:
        self.calls += 1
        pems = list(context.auth_context().get("x509_pem_cert") or ())
        who = caller.current()
        serial = _serial(pems[0]) if pems else 0
        return f"{serial}|{who.role}|{who.customer_id}|{who.email}|{who.language}".encode()

    async def slow(self, request: bytes, context: grpc.aio.ServicerContext[bytes, bytes]) -> bytes:
        self.slow_entered.set()
        await self.release.wait()
        return b"done"

    def registration(self) -> Registration:
        handler = grpc.method_handlers_generic_handler(
            SERVICE,
            {
                "Who": grpc.unary_unary_rpc_method_handler(self.who, _identity, _identity),
                "Slow": grpc.unary_unary_rpc_method_handler(self.slow, _identity, _identity),
            },
        )
        return Registration(SERVICE, lambda server: server.add_generic_rpc_handlers((handler,)))


_ALLOW = {WHO: frozenset({access.EDGE}), SLOW: frozenset({access.EDGE})}


@dataclass
class Served:
    server: GrpcServer
    service: _Service
    registry: CollectorRegistry


@contextlib.asynccontextmanager
async def served(
    stores: Stores, *, files: CertFiles | None = None, health_port: int | None = None
) -> AsyncIterator[Served]:
    service = _Service()
    registry = CollectorRegistry()
    server = bare_server(
        stores,
        services=[service.registration()],
        allow=_ALLOW,
        config=server_config(),
        registry=registry,
        drain=Drain(),
        files=files,
        health_port=health_port,
    )
    await server.start()
    try:
        yield Served(server, service, registry)
    finally:
        service.release.set()
        await server.stop(0)


def _who(channel: grpc.aio.Channel) -> grpc.aio.UnaryUnaryMultiCallable[bytes, bytes]:
    return channel.unary_unary(WHO, request_serializer=_identity, response_deserializer=_identity)


def _fresh(stores: Stores, role: str) -> CertFiles:
    """A new identity of ``role`` in a folder of its own (to rotate)."""
    return stores.pki.issue(f"{role}-{uuid.uuid4().hex[:8]}", access.spiffe_id(TRUST_DOMAIN, NAMESPACE, role))


def _rotate(stores: Stores, files: CertFiles, role: str) -> int:
    """Renews ``files`` in place (key first, as a Secret update may); the new serial."""
    cert, key = stores.pki.authority.issue(access.spiffe_id(TRUST_DOMAIN, NAMESPACE, role))
    files.key.write_bytes(key)
    files.cert.write_bytes(cert)
    return _serial(cert)


def _server_serial(address: str, client: CertFiles) -> int:
    """The serial of the certificate the server presents to a new connection."""
    host, _, port = address.rpartition(":")
    context = ssl.create_default_context(cafile=str(client.ca))
    context.load_cert_chain(str(client.cert), str(client.key))
    context.set_alpn_protocols(["h2"])
    with socket.create_connection((host, int(port)), timeout=5) as raw:
        with context.wrap_socket(raw, server_hostname=host) as tls:
            der = tls.getpeercert(binary_form=True)
    assert der is not None
    return int(x509.load_der_x509_certificate(der).serial_number)


async def test_certificates_rotate_while_calls_flow_and_none_fails(stores: Stores) -> None:
    server_files, client_files = _fresh(stores, access.QUEUE), _fresh(stores, access.EDGE)
    old_client = _serial(client_files.cert.read_bytes())
    async with served(stores, files=server_files) as s:
        old_server = await asyncio.to_thread(_server_serial, s.server.address, client_files)
        assert old_server == _serial(server_files.cert.read_bytes())
        seen: list[int] = []
        failures: list[BaseException] = []
        stop = asyncio.Event()

        async def worker(client: ClientChannel) -> None:
            while not stop.is_set():
                try:
                    answer = await _who(client.channel())(b"", timeout=5)
                except grpc.aio.AioRpcError as err:
                    failures.append(err)
                    continue
                seen.append(int(answer.decode().split("|")[0]))

        async with ClientChannel(s.server.address, client_files) as client:
            workers = [asyncio.create_task(worker(client)) for _ in range(4)]
            await asyncio.sleep(0.3)
            new_server = _rotate(stores, server_files, access.QUEUE)
            new_client = _rotate(stores, client_files, access.EDGE)
            for _ in range(100):
                if seen and seen[-1] == new_client:
                    break
                await asyncio.sleep(0.05)
            await asyncio.sleep(0.3)  # calls keep flowing on the new channel
            stop.set()
            await asyncio.gather(*workers)
        assert failures == []
        assert seen[0] == old_client and seen[-1] == new_client
        assert set(seen) == {old_client, new_client}
        # A new connection gets the server's new certificate.
        for _ in range(40):
            presented = await asyncio.to_thread(_server_serial, s.server.address, client_files)
            if presented == new_server:
                break
            await asyncio.sleep(0.1)
        assert presented == new_server != old_server


async def test_a_half_renewed_pair_keeps_the_old_certificate(stores: Stores) -> None:
    server_files, client_files = _fresh(stores, access.QUEUE), _fresh(stores, access.EDGE)
    async with served(stores, files=server_files) as s:
        old = await asyncio.to_thread(_server_serial, s.server.address, client_files)
        cert, _ = stores.pki.authority.issue(access.spiffe_id(TRUST_DOMAIN, NAMESPACE, access.QUEUE))
        server_files.cert.write_bytes(cert)  # its key never comes
        await asyncio.sleep(1.2)
        assert await asyncio.to_thread(_server_serial, s.server.address, client_files) == old


async def _refused_by_handshake(stores: Stores, address: str, files: CertFiles | None) -> None:
    credentials = channel_credentials(files, stores.pki.files(access.EDGE).ca)
    async with grpc.aio.secure_channel(address, credentials) as channel:
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await _who(channel)(b"", timeout=5)
    assert caught.value.code() == grpc.StatusCode.UNAVAILABLE


async def test_peers_without_a_certificate_of_the_mesh_fail_the_handshake(stores: Stores) -> None:
    async with served(stores) as s:
        await _refused_by_handshake(stores, s.server.address, None)
        await _refused_by_handshake(stores, s.server.address, stores.pki.foreign_ca)
        await _refused_by_handshake(stores, s.server.address, stores.pki.expired)
        assert s.service.calls == 0


async def test_a_client_refuses_a_server_of_another_ca(stores: Stores) -> None:
    async with served(stores, files=stores.pki.foreign_ca) as s:
        await _refused_by_handshake(stores, s.server.address, stores.pki.files(access.EDGE))
        assert s.service.calls == 0


def _refusals(registry: CollectorRegistry, role: str) -> float:
    labels = {"grpc_service": SERVICE, "grpc_method": "Who", "role": role}
    return registry.get_sample_value("boxoffice_grpc_calls_refused_total", labels) or 0.0


async def test_refused_callers_get_permission_denied_before_the_handler_counted_and_logged_once(
    stores: Stores, caplog: pytest.LogCaptureFixture
) -> None:
    async with served(stores) as s:
        address = s.server.address
        # Series exist before the first refusal.
        assert _refusals(s.registry, access.OPERATOR) == 0.0
        assert (
            s.registry.get_sample_value(
                "boxoffice_grpc_calls_refused_total", {"grpc_service": SERVICE, "grpc_method": "Who", "role": "none"}
            )
            == 0.0
        )
        cases = [
            (stores.pki.other_domain, "CALLER_UNKNOWN", "none"),
            (stores.pki.files(access.OPERATOR), "CALLER_NOT_ALLOWED", "operator"),
        ]
        with caplog.at_level(logging.WARNING, logger="boxoffice.server"):
            for files, reason, role in cases:
                async with grpc.aio.secure_channel(address, channel_credentials(files, files.ca)) as channel:
                    for _ in range(3):
                        with pytest.raises(grpc.aio.AioRpcError) as caught:
                            await _who(channel)(b"", timeout=5)
                        err = from_rpc_error(caught.value)
                        assert isinstance(err, PermissionDenied) and err.reason == reason
                        assert err.metadata["method"] == WHO
                assert _refusals(s.registry, role) == 3.0
        assert s.service.calls == 0
        refusals = [r for r in caplog.records if r.getMessage() == "call refused"]
        assert len(refusals) == 2  # once per (method, role), not per call


async def test_the_handler_sees_the_caller_and_only_the_edge_asserts_a_customer(stores: Stores) -> None:
    async with served(stores) as s:
        credentials = channel_credentials(stores.pki.files(access.EDGE), stores.pki.files(access.EDGE).ca)
        async with grpc.aio.secure_channel(s.server.address, credentials) as channel:
            answer = await _who(channel)(b"", metadata=((caller.CUSTOMER_METADATA_KEY, "fan-7"),), timeout=5)
            assert answer.decode().split("|")[1:] == ["edge", "fan-7", "None", "None"]
            answer = await _who(channel)(b"", timeout=5)
            assert answer.decode().split("|")[1:] == ["edge", "None", "None", "None"]
            # The fan's address (percent-encoded) and language, for the tickets' e-mail.
            asserted = (
                (caller.CUSTOMER_METADATA_KEY, "fan-7"),
                (caller.EMAIL_METADATA_KEY, "fan%2B7@example.test"),
                (caller.LANGUAGE_METADATA_KEY, "pt-BR"),
            )
            answer = await _who(channel)(b"", metadata=asserted, timeout=5)
            assert answer.decode().split("|")[1:] == ["edge", "fan-7", "fan+7@example.test", "pt-BR"]
            # What is not an address or a language the e-mail is written in is nothing.
            odd = (
                (caller.CUSTOMER_METADATA_KEY, "fan-7"),
                (caller.EMAIL_METADATA_KEY, "no-at-sign"),
                (caller.LANGUAGE_METADATA_KEY, "fr"),
            )
            answer = await _who(channel)(b"", metadata=odd, timeout=5)
            assert answer.decode().split("|")[1:] == ["edge", "fan-7", "None", "None"]


async def test_the_health_port_answers_without_a_certificate_and_follows_the_drain(stores: Stores) -> None:
    async with served(stores, health_port=0) as s:
        assert s.server.health_port
        probe = grpc.aio.insecure_channel(f"127.0.0.1:{s.server.health_port}")
        health: Any = health_pb2_grpc.HealthStub(probe)
        try:
            reply = await health.Check(health_pb2.HealthCheckRequest(), timeout=5)
            assert reply.status == health_pb2.HealthCheckResponse.SERVING
            # Only health there: the service is not served in plaintext.
            with pytest.raises(grpc.aio.AioRpcError) as caught:
                await _who(probe)(b"", timeout=5)
            assert caught.value.code() == grpc.StatusCode.UNIMPLEMENTED
            credentials = channel_credentials(stores.pki.files(access.EDGE), stores.pki.files(access.EDGE).ca)
            async with grpc.aio.secure_channel(s.server.address, credentials) as channel:
                inflight = asyncio.ensure_future(
                    channel.unary_unary(SLOW, request_serializer=_identity, response_deserializer=_identity)(
                        b"", timeout=10
                    )
                )
                await asyncio.wait_for(s.service.slow_entered.wait(), timeout=10)
                stopping = asyncio.ensure_future(s.server.stop(5))

                async def not_serving() -> bool | None:
                    reply = await health.Check(health_pb2.HealthCheckRequest(), timeout=5)
                    return True if reply.status == health_pb2.HealthCheckResponse.NOT_SERVING else None

                # The health port answers NOT_SERVING while the call is still in flight.
                await eventually(not_serving, "the health port answers NOT_SERVING", seconds=10)
                assert not inflight.done()
                s.service.release.set()
                assert await inflight == b"done"
                await stopping
        finally:
            await probe.close()


def _plain_server(source: str) -> tuple[GrpcServer, _Service]:
    service = _Service()
    registry = CollectorRegistry()
    gate = Gate(
        CallerResolver(source, TRUST_DOMAIN), Gate.refused_counter(registry), policy={**access.POLICY, **_ALLOW}
    )
    server = GrpcServer(
        name="test",
        config=server_config(),
        metrics=GrpcServerMetrics.create(registry),
        services=[service.registration()],
        drain=Drain(),
        gate=gate,
    )
    return server, service


def _xfcc(domain: str, role: str) -> tuple[tuple[str, str], ...]:
    uri = access.spiffe_id(domain, NAMESPACE, role)
    return (("x-forwarded-client-cert", f'By=spiffe://{TRUST_DOMAIN}/ns/x/sa/queue;Hash=ab;Subject="";URI={uri}'),)


async def _reason(call: Any) -> str:
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await call
    return from_rpc_error(caught.value).reason


async def test_tls_off_trusts_the_sidecar_header_only_when_told() -> None:
    trusting, trusting_service = _plain_server("xfcc")
    blind, blind_service = _plain_server("none")
    await trusting.start()
    await blind.start()
    try:
        async with grpc.aio.insecure_channel(trusting.address) as channel:
            answer = await _who(channel)(b"", metadata=_xfcc(TRUST_DOMAIN, access.EDGE), timeout=5)
            assert answer.decode().split("|")[1] == "edge"
            assert await _reason(_who(channel)(b"", timeout=5)) == "CALLER_UNKNOWN"
            assert await _reason(_who(channel)(b"", metadata=_xfcc("other.example", access.EDGE))) == "CALLER_UNKNOWN"
            assert await _reason(_who(channel)(b"", metadata=_xfcc(TRUST_DOMAIN, access.QUEUE))) == "CALLER_NOT_ALLOWED"
        async with grpc.aio.insecure_channel(blind.address) as channel:
            metadata = _xfcc(TRUST_DOMAIN, access.EDGE)
            assert await _reason(_who(channel)(b"", metadata=metadata, timeout=5)) == "CALLER_UNKNOWN"
            health: Any = health_pb2_grpc.HealthStub(channel)
            reply = await health.Check(health_pb2.HealthCheckRequest(), timeout=5)
            assert reply.status == health_pb2.HealthCheckResponse.SERVING  # health answers anyone
        assert trusting_service.calls == 1 and blind_service.calls == 0
    finally:
        await trusting.stop(0)
        await blind.stop(0)


def test_the_xfcc_uri_is_the_last_hop_s() -> None:
    edge = access.spiffe_id(TRUST_DOMAIN, "ns", "edge")
    assert identity_from_xfcc(f"URI={edge}") == edge
    assert identity_from_xfcc(f'By=a;URI="{edge}";DNS=x') == edge
    assert identity_from_xfcc(f'URI=spiffe://x/ns/a/sa/operator;Subject="a,b;c",URI={edge}') == edge
    assert identity_from_xfcc('Subject="URI=spiffe://evil";Hash=1') is None
    assert identity_from_xfcc("") is None
    assert identity_from_xfcc("URI=" + "a" * 20_000) is None


def test_tls_settings_are_checked() -> None:
    config = TlsConfig.from_env(Env({}))
    assert (config.enabled, config.trust_domain, config.mesh_identity, config.health_port) == (
        True,
        "boxoffice.local",
        None,
        None,
    )
    assert TlsConfig.from_env(Env({}), default_health_port=50050).health_port == 50050
    assert TlsConfig.from_env(Env({"BOXOFFICE_HEALTH_PORT": "off"}), default_health_port=50050).health_port is None
    with pytest.raises(ConfigError, match="BOXOFFICE_TLS_CA_FILE"):
        config.require_files()
    bad = [
        {"BOXOFFICE_TLS": "maybe"},
        {"BOXOFFICE_TLS_CERT_FILE": "/x.pem"},
        {"BOXOFFICE_TRUST_DOMAIN": "Not A Domain"},
        {"BOXOFFICE_TLS_MESH_IDENTITY": "xfcc"},
        {"BOXOFFICE_TLS": "off", "BOXOFFICE_TLS_MESH_IDENTITY": "header"},
        {"BOXOFFICE_HEALTH_PORT": "70000"},
    ]
    for environ in bad:
        with pytest.raises(ConfigError):
            TlsConfig.from_env(Env(environ))
    missing = TlsConfig.from_env(
        Env(
            {
                "BOXOFFICE_TLS_CA_FILE": "/nope/ca.pem",
                "BOXOFFICE_TLS_CERT_FILE": "/nope/a.pem",
                "BOXOFFICE_TLS_KEY_FILE": "/nope/k.pem",
            }
        )
    )
    with pytest.raises(ConfigError, match=r"BOXOFFICE_TLS_CA_FILE='/nope/ca\.pem' cannot be read"):
        missing.require_files()
    assert not TlsConfig.from_env(Env({"BOXOFFICE_TLS": "off"})).enabled


def test_a_single_role_process_without_certificates_exits_2_with_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    environ = {"DATABASE_URL": "postgresql://127.0.0.1:1/none", "REDIS_URL": "redis://127.0.0.1:1/0"}
    assert cli.main(["queue-svc"], environ=environ) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "BOXOFFICE_TLS_CA_FILE" in err[0]


def test_the_local_ca_makes_every_role_and_reuses_what_is_still_good(tmp_path: Path) -> None:
    first = cli.up_pki(str(tmp_path), TRUST_DOMAIN)
    assert set(first) == set(access.ROLES)
    tls = tmp_path / "tls"
    for role, files in first.items():
        assert files.cert == tls / f"{role}.pem" and files.key == tls / f"{role}-key.pem" and files.ca == tls / "ca.pem"
        assert stat.S_IMODE(os.stat(files.key).st_mode) == 0o600
        cert = x509.load_pem_x509_certificate(files.cert.read_bytes())
        assert spiffe_ids_of(cert) == [access.spiffe_id(TRUST_DOMAIN, cli.UP_NAMESPACE, role)]
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        assert "localhost" in san.get_values_for_type(x509.DNSName)
        assert [str(ip) for ip in san.get_values_for_type(x509.IPAddress)] == ["127.0.0.1", "::1"]
    assert stat.S_IMODE(os.stat(tls / "ca-key.pem").st_mode) == 0o600
    before = {role: files.cert.read_bytes() for role, files in first.items()}
    again = cli.up_pki(str(tmp_path), TRUST_DOMAIN)
    assert {role: files.cert.read_bytes() for role, files in again.items()} == before
    # A certificate of another trust domain is not reused.
    other = local_pki(tls, {"edge": access.spiffe_id("other.example", cli.UP_NAMESPACE, "edge")})
    assert other["edge"].cert.read_bytes() != before["edge"]


@contextlib.asynccontextmanager
async def _served_by_runtime(stores: Stores, environ: dict[str, str] | None = None) -> AsyncIterator[str]:
    """A server of the test service whose callers are read as a process
    reads them (the Runtime's resolver), serving as the queue; its address."""
    rt = make_runtime(stores, role=access.QUEUE, environ=environ)
    service = _Service()
    registry = CollectorRegistry()
    server = GrpcServer(
        name="test",
        config=server_config(),
        metrics=GrpcServerMetrics.create(registry),
        services=[service.registration()],
        drain=Drain(),
        gate=Gate(rt.callers, Gate.refused_counter(registry), policy={**access.POLICY, **_ALLOW}),
        credentials=server_credentials(stores.pki.files(access.QUEUE)),
    )
    await server.start()
    try:
        yield server.address
    finally:
        await server.stop(0)


async def _role_seen(stores: Stores, address: str, files: CertFiles) -> str:
    async with grpc.aio.secure_channel(address, channel_credentials(files, files.ca)) as channel:
        try:
            return (await _who(channel)(b"", timeout=5)).decode().split("|")[1]
        except grpc.aio.AioRpcError as err:
            return from_rpc_error(err).reason


async def test_a_certificate_of_another_namespace_is_no_role_of_the_mesh(stores: Stores) -> None:
    """The CA signs for the whole trust domain; the mesh is one namespace of
    it. By default a process trusts its own certificate's namespace only."""
    ours = stores.pki.files(access.EDGE)
    theirs = stores.pki.issue(
        f"attacker-{uuid.uuid4().hex[:8]}", access.spiffe_id(TRUST_DOMAIN, "attacker", access.EDGE)
    )
    async with _served_by_runtime(stores) as address:
        assert await _role_seen(stores, address, ours) == access.EDGE
        assert await _role_seen(stores, address, theirs) == "CALLER_UNKNOWN"
    # Named namespaces are trusted, and only they.
    async with _served_by_runtime(stores, {"BOXOFFICE_TRUST_NAMESPACES": f"attacker, {NAMESPACE}"}) as address:
        assert await _role_seen(stores, address, ours) == access.EDGE
        assert await _role_seen(stores, address, theirs) == access.EDGE
    async with _served_by_runtime(stores, {"BOXOFFICE_TRUST_NAMESPACES": "elsewhere"}) as address:
        assert await _role_seen(stores, address, ours) == "CALLER_UNKNOWN"


def test_the_xfcc_identity_is_pinned_to_the_named_namespaces() -> None:
    pinned = CallerResolver("xfcc", TRUST_DOMAIN, namespaces=lambda: frozenset({NAMESPACE}))
    assert pinned.role_of(access.spiffe_id(TRUST_DOMAIN, NAMESPACE, access.OPERATOR)) == access.OPERATOR
    assert pinned.role_of(access.spiffe_id(TRUST_DOMAIN, "attacker", access.OPERATOR)) is None


@pytest.mark.parametrize("value", ["Upper", "a/b", "-lead", "x" * 64, "a..b", ","])
def test_trust_namespaces_are_namespace_names(value: str) -> None:
    with pytest.raises(ConfigError, match="BOXOFFICE_TRUST_NAMESPACES"):
        TlsConfig.from_env(Env({"BOXOFFICE_TRUST_NAMESPACES": value}))
