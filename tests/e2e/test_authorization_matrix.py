"""I11 against real servers: every RPC the queue, booking and payment
servers serve (each server as its own role, over mTLS) x every kind of
caller. What is allowed and what is refused is read from the one table
(:data:`boxoffice.access.POLICY`); a refused call answers PERMISSION_DENIED
(or, for a peer without a certificate of the mesh's CA, fails the
handshake) and leaves Postgres and Redis exactly as they were; an allowed
call may fail for its own reasons, never for its caller.

The requests are valid ones about a world made afresh for each caller (a
real event, holds, payments: tests/e2e/matrix_requests.py), and each that
changes something is seen to change the stores when an allowed role sends
it: so a refused call that still did its work would show in the snapshot.
(A gate that runs the call and then refuses it passes a matrix of empty
requests, and fails this one.)"""

from __future__ import annotations

import contextlib
import dataclasses
import socket
from collections.abc import AsyncIterator, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, cast

import grpc
import psycopg
import pytest
import redis.asyncio as aioredis
from google.protobuf import descriptor_pool, message_factory
from google.protobuf.message import Message
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from booking_svc import app as booking_app
from booking_svc.jobs.health import HEALTH_KEY
from boxoffice import access, caller, ticketcodes
from boxoffice.embedded import EmbeddedRedis
from boxoffice.errors import from_rpc_error
from boxoffice.lifecycle import Component
from boxoffice.runtime import Runtime
from checkin_svc import app as checkin_app
from gen.boxoffice.booking.v1 import booking_service_pb2_grpc as bpb_grpc
from gen.boxoffice.checkin.v1 import checkin_service_pb2_grpc as cpb_grpc
from gen.boxoffice.payment.v1 import payment_service_pb2_grpc as ppb_grpc
from gen.boxoffice.queue.v1 import queue_service_pb2_grpc as qpb_grpc
from payment_svc import app as payment_app
from payment_svc.adapters.sandbox import SandboxProvider
from payment_svc.adapters.tickets import PgTicketStore
from queue_svc.app import QueueApp
from tests.e2e.matrix_requests import REQUESTS, Call, Stubs, make_world
from tests.edge.asserting import as_fan
from tests.payment.harness import PAYMENT_ENV
from tests.support import Stores, channel_credentials, make_runtime, running

pytestmark = pytest.mark.slow

_CALLER_REASONS = {"CALLER_UNKNOWN", "CALLER_NOT_ALLOWED"}
# Callers: a role of the mesh, or a peer the mesh must refuse.
NO_CERTIFICATE = "no certificate"
FOREIGN_CA = "another CA"
OTHER_DOMAIN = "another trust domain"
CALLERS = (
    NO_CERTIFICATE,
    FOREIGN_CA,
    OTHER_DOMAIN,
    access.EDGE,
    access.QUEUE,
    access.BOOKING,
    access.PAYMENT,
    access.CHECKIN,
    access.OPERATOR,
)
# Which server serves a contract package.
# (PaymentService's process also serves the mailer's admin contract.)
_SERVERS = {
    "boxoffice.queue.v1": "queue",
    "boxoffice.booking.v1": "booking",
    "boxoffice.payment.v1": "payment",
    "boxoffice.mail.v1": "payment",
    "boxoffice.checkin.v1": "checkin",
}


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class Mesh:
    rt: Runtime
    addresses: dict[str, str]
    redis_url: str
    sandbox: SandboxProvider


@contextlib.contextmanager
def _private_redis(stores: Stores) -> Iterator[str]:
    """A Redis only these servers use, so that its snapshot moves only
    when they change it."""
    server = EmbeddedRedis(stores.tmp / f"redis-matrix-{_free_port()}")
    try:
        yield server.start()
    finally:
        server.stop()


@pytest.fixture
async def mesh(stores: Stores) -> AsyncIterator[Mesh]:
    """The four servers (no background jobs), each serving as its own role."""
    with _private_redis(stores) as redis_url:
        own = dataclasses.replace(stores, redis_url=redis_url)
        booking_port = _free_port()
        rt = make_runtime(own, environ={**PAYMENT_ENV, "BOXOFFICE_BOOKING_ADDR": f"127.0.0.1:{booking_port}"})
        rt.grpc_ports.update({"queue": 0, "booking": booking_port, "payment": 0, "checkin": 0})
        queue = QueueApp(rt)
        booking = booking_app.build_server(rt)
        payment = payment_app.compose_server(rt)
        checkin = checkin_app.compose_server(rt)
        components: list[Component] = [
            *queue.components("server"),
            *booking.components,
            payment.server,
            payment.clients,
            *checkin.components,
        ]
        async with running([*rt.infrastructure(), *components]):
            addresses = {
                "queue": queue.server.address,
                "booking": booking.grpc.address,
                "payment": payment.server.address,
                "checkin": checkin.server.address,
            }
            assert payment.sandbox is not None
            yield Mesh(rt, addresses, redis_url, payment.sandbox)


def _credentials(stores: Stores, who: str) -> grpc.ChannelCredentials:
    pki = stores.pki
    ca = pki.files(access.EDGE).ca
    files = {
        NO_CERTIFICATE: None,
        FOREIGN_CA: pki.foreign_ca,
        OTHER_DOMAIN: pki.other_domain,
    }.get(who, pki.files(who) if who in access.ROLES else None)
    return channel_credentials(files, ca)


async def _served(stores: Stores, address: str) -> list[str]:
    """The services a server says it serves (reflection, as an operator)."""
    async with grpc.aio.secure_channel(address, _credentials(stores, access.OPERATOR)) as channel:
        stub: Any = reflection_pb2_grpc.ServerReflectionStub(cast(Any, channel))
        names: list[str] = []
        request = reflection_pb2.ServerReflectionRequest(list_services="")
        async for answer in stub.ServerReflectionInfo(iter([request])):
            names.extend(s.name for s in answer.list_services_response.service)
    return [name for name in names if name.rsplit(".", 1)[0] in _SERVERS]


@dataclass(frozen=True)
class Rpc:
    full_method: str
    server: str
    request: type[Message]
    response: type[Message]
    server_streaming: bool
    client_streaming: bool


def _rpcs(services: list[str]) -> list[Rpc]:
    pool = descriptor_pool.Default()
    rpcs = []
    for name in services:
        for method in pool.FindServiceByName(name).methods:
            rpcs.append(
                Rpc(
                    full_method=f"/{name}/{method.name}",
                    server=_SERVERS[name.rsplit(".", 1)[0]],
                    request=message_factory.GetMessageClass(method.input_type),
                    response=message_factory.GetMessageClass(method.output_type),
                    server_streaming=method.server_streaming,
                    client_streaming=method.client_streaming,
                )
            )
    return rpcs


async def _call(channel: grpc.aio.Channel, rpc: Rpc, sent: Call) -> grpc.aio.AioRpcError | None:
    """Calls ``rpc`` with ``sent``'s request (a stream: its first message),
    the edge asserting ``sent``'s fan; the error it fails with, or None."""
    metadata = (*as_fan(sent.fan), *sent.metadata)
    request = sent.request
    try:
        if rpc.client_streaming or rpc.server_streaming:
            kinds = {(False, True): channel.unary_stream, (True, False): channel.stream_unary}
            make = kinds.get((rpc.client_streaming, rpc.server_streaming), channel.stream_stream)
            multicallable: Any = make(
                rpc.full_method,
                request_serializer=rpc.request.SerializeToString,
                response_deserializer=rpc.response.FromString,
            )
            call = multicallable(iter([request]) if rpc.client_streaming else request, metadata=metadata, timeout=3)
            if rpc.server_streaming:
                await call.read()
                call.cancel()
            else:
                await call
        else:
            unary = channel.unary_unary(
                rpc.full_method,
                request_serializer=rpc.request.SerializeToString,
                response_deserializer=rpc.response.FromString,
            )
            await unary(request, metadata=metadata, timeout=5)
    except grpc.aio.AioRpcError as err:
        return err
    return None


@dataclass(frozen=True)
class Snapshot:
    """Row counts and a checksum of every table; every Redis key's value,
    and whether it expires."""

    tables: tuple[Any, ...]
    keys: Mapping[bytes, tuple[bytes, bool]]

    def same(self, later: Snapshot) -> bool:
        """Whether nothing changed between this snapshot and ``later``,
        but for keys that expired meanwhile (rate-limit windows and the
        like run out whatever the calls do)."""
        if later.tables != self.tables:
            return False
        for key, (value, expires) in self.keys.items():
            if key not in later.keys:
                if not expires:
                    return False
            elif later.keys[key][0] != value:
                return False
        return set(later.keys) <= set(self.keys)


async def _snapshot(mesh: Mesh) -> Snapshot:
    async with await psycopg.AsyncConnection.connect(mesh.rt.database_url, autocommit=True) as conn:
        cur = await conn.execute("SELECT tablename FROM pg_tables WHERE schemaname = 'public' ORDER BY tablename")
        tables = [row[0] for row in await cur.fetchall()]
        rows = []
        for table in tables:
            cur = await conn.execute(
                f"SELECT count(*), md5(coalesce(string_agg(md5(t::text), '' ORDER BY md5(t::text)), '')) FROM \"{table}\" t".encode()
            )
            rows.append((table, *(await cur.fetchone() or ())))
    client = aioredis.Redis.from_url(mesh.redis_url)
    try:
        # Booking's health for the admitter is refreshed every few seconds
        # whatever the calls do, so not a change they made. SCAN may name a
        # key twice (while Redis rehashes): the keys are a set.
        names = sorted({k async for k in client.scan_iter(count=1000) if k != HEALTH_KEY.encode()})
        keys: dict[bytes, tuple[bytes, bool]] = {}
        for key in names:
            value = await client.dump(key)
            if value is not None:  # (expired since the scan)
                keys[key] = (value, await client.pttl(key) > 0)
    finally:
        await client.aclose()
    return Snapshot(tuple(rows), keys)


@contextlib.asynccontextmanager
async def _world_makers(stores: Stores, mesh: Mesh) -> AsyncIterator[Stubs]:
    """Stubs of the servers as the roles that make a world."""
    pool = mesh.rt.pool()
    keys = ticketcodes.read_keys(mesh.rt.env)
    tickets = PgTicketStore(pool, codes=ticketcodes.TicketCodeSigner(keys.get, mesh.rt.clock))

    async def claim_secret(transfer_id: str) -> str:
        async with pool.connection() as conn:
            cur = await conn.execute("SELECT claim_secret FROM ticket_transfers WHERE transfer_id = %s", (transfer_id,))
            row = await cur.fetchone()
        assert row is not None
        return str(row[0])

    async with contextlib.AsyncExitStack() as stack:

        async def channel(server: str, role: str) -> grpc.aio.Channel:
            made = grpc.aio.secure_channel(mesh.addresses[server], _credentials(stores, role))
            stack.push_async_callback(made.close)
            return made

        yield Stubs(
            queue=qpb_grpc.QueueServiceStub(await channel("queue", access.OPERATOR)),
            queue_as_edge=qpb_grpc.QueueServiceStub(await channel("queue", access.EDGE)),
            booking=bpb_grpc.BookingServiceStub(await channel("booking", access.OPERATOR)),
            booking_as_edge=bpb_grpc.BookingServiceStub(await channel("booking", access.EDGE)),
            payment_as_edge=ppb_grpc.PaymentServiceStub(await channel("payment", access.EDGE)),
            checkin_admin=cpb_grpc.CheckInAdminServiceStub(await channel("checkin", access.OPERATOR)),
            issue=lambda booking: tickets.issue("matrix", booking),
            claim_secret=claim_secret,
        )


def _refused_total(rt: Runtime) -> float:
    total = 0.0
    for metric in rt.registry.collect():
        if metric.name == "boxoffice_grpc_calls_refused":
            total += sum(s.value for s in metric.samples if s.name.endswith("_total"))
    return total


async def test_every_rpc_answers_only_the_roles_the_table_allows(stores: Stores, mesh: Mesh) -> None:
    services = [name for address in mesh.addresses.values() for name in await _served(stores, address)]
    assert {"boxoffice.queue.v1.QueueService", "boxoffice.booking.v1.BookingService"} <= set(services)
    assert "boxoffice.payment.v1.PaymentService" in services
    rpcs = _rpcs(services)
    assert sorted(REQUESTS) == sorted(rpc.full_method for rpc in rpcs), "tests/e2e/matrix_requests.py"
    refused_by_gate = 0
    refused_before = _refused_total(mesh.rt)
    checked: dict[str, int] = {"allowed": 0, "denied": 0}
    wrote: set[str] = set()
    async with _world_makers(stores, mesh) as makers:
        for who in CALLERS:
            role = who if who in access.ROLES else None
            channels = {
                server: grpc.aio.secure_channel(address, _credentials(stores, who))
                for server, address in mesh.addresses.items()
            }
            try:
                denied = [rpc for rpc in rpcs if not access.allowed(rpc.full_method, role)]
                allowed = [rpc for rpc in rpcs if access.allowed(rpc.full_method, role)]
                assert who in access.ROLES or not allowed
                world = await make_world(makers, mesh.rt.token_signer, mesh.sandbox)
                before = await _snapshot(mesh)
                for rpc in denied:
                    err = await _call(channels[rpc.server], rpc, REQUESTS[rpc.full_method](world))
                    assert err is not None, f"{who} called {rpc.full_method}"
                    if who in (NO_CERTIFICATE, FOREIGN_CA):
                        assert err.code() == grpc.StatusCode.UNAVAILABLE, (who, rpc.full_method, err)
                    else:
                        refused = from_rpc_error(err)
                        assert err.code() == grpc.StatusCode.PERMISSION_DENIED, (who, rpc.full_method, err)
                        assert refused.reason == ("CALLER_NOT_ALLOWED" if role else "CALLER_UNKNOWN")
                        assert refused.metadata["method"] == rpc.full_method
                        refused_by_gate += 1
                    checked["denied"] += 1
                assert before.same(await _snapshot(mesh)), f"a call refused to {who} changed the stores"
                for rpc in allowed:
                    call = REQUESTS[rpc.full_method](world)
                    unchanged = await _snapshot(mesh) if call.writes else None
                    err = await _call(channels[rpc.server], rpc, call)
                    if err is not None:
                        answered = from_rpc_error(err)
                        # Its own reason (a bad request, no token...), never the caller's.
                        assert answered.reason not in _CALLER_REASONS, (who, rpc.full_method, err)
                        assert answered.reason != "UPSTREAM_FAILED", (who, rpc.full_method, err)
                    if unchanged is not None:
                        # The request is one that does its work: refused, the
                        # snapshot above would have seen it done.
                        assert err is None, (who, rpc.full_method, err)
                        assert not unchanged.same(await _snapshot(mesh)), f"{rpc.full_method} as {who} changed nothing"
                        wrote.add(rpc.full_method)
                    checked["allowed"] += 1
            finally:
                for channel in channels.values():
                    await channel.close()
    assert _refused_total(mesh.rt) - refused_before == refused_by_gate
    # Every request marked as one that writes was seen writing.
    assert wrote == {method for method, make in REQUESTS.items() if make(world).writes}
    # Every RPC for every caller; the table allows each RPC to someone.
    assert checked["allowed"] + checked["denied"] == len(rpcs) * len(CALLERS)
    assert all(any(access.allowed(rpc.full_method, r) for r in access.ROLES) for rpc in rpcs)


def _first_string_field(message: type[Message]) -> int | None:
    for field in message.DESCRIPTOR.fields:
        if field.type == field.TYPE_STRING:
            return int(field.number)
    return None


def _undecodable(rpc: Rpc) -> list[bytes]:
    """Requests no decoder accepts: corrupt wire format, a message cut in
    the middle of a field, and (where the request has a string field) a
    string that is not UTF-8."""
    payloads = [b"\xff\xff\xff\xff", b"\x0a\x7f" + b"x" * 10]
    number = _first_string_field(rpc.request)
    if number is not None:
        payloads.append(bytes([(number << 3) | 2, 2]) + b"\xff\xfe")
    return payloads


def _over_the_limit(server: str) -> bytes:
    """A request twice the size a server takes (the default limit; the
    check-in server's, which takes large offline uploads)."""
    size = 2 * (checkin_app.MAX_REQUEST_BYTES if server == "checkin" else 1 << 20)
    length = bytearray()
    n = size
    while n >= 0x80:
        length.append((n & 0x7F) | 0x80)
        n >>= 7
    length.append(n)
    return b"\x0a" + bytes(length) + b"x" * size


async def _raw(channel: grpc.aio.Channel, rpc: Rpc, payload: bytes) -> grpc.aio.AioRpcError | None:
    """``payload`` sent as the request bytes of ``rpc``, as a fan's edge would."""
    metadata = ((caller.CUSTOMER_METADATA_KEY, "fan-fuzz"),)
    try:
        if rpc.server_streaming:
            stream: Any = channel.unary_stream(rpc.full_method)
            call: Any = stream(payload, metadata=metadata, timeout=3)
            await call.read()
            call.cancel()
        else:
            unary: Any = channel.unary_unary(rpc.full_method)
            await unary(payload, metadata=metadata, timeout=5)
    except grpc.aio.AioRpcError as err:
        return err
    return None


async def test_bad_input_to_every_rpc_answers_invalid_argument_without_a_traceback(
    stores: Stores, mesh: Mesh, caplog: pytest.LogCaptureFixture
) -> None:
    """Every RPC, called by a role the table allows, with requests that do
    not decode and with a request over the size limit: INVALID_ARGUMENT
    (MALFORMED_REQUEST) or RESOURCE_EXHAUSTED, never UNKNOWN or INTERNAL,
    nothing changed, and no error logged."""
    services = [name for address in mesh.addresses.values() for name in await _served(stores, address)]
    rpcs = [rpc for rpc in _rpcs(services) if not rpc.client_streaming]
    before = await _snapshot(mesh)
    channels: dict[tuple[str, str], grpc.aio.Channel] = {}
    caplog.set_level("ERROR")
    try:
        for rpc in rpcs:
            role = next(r for r in access.ROLES if access.allowed(rpc.full_method, r))
            key = (rpc.server, role)
            if key not in channels:
                channels[key] = grpc.aio.secure_channel(mesh.addresses[rpc.server], _credentials(stores, role))
            for payload in _undecodable(rpc):
                err = await _raw(channels[key], rpc, payload)
                assert err is not None and err.code() == grpc.StatusCode.INVALID_ARGUMENT, (rpc.full_method, err)
                assert from_rpc_error(err).reason == "MALFORMED_REQUEST", (rpc.full_method, err)
            err = await _raw(channels[key], rpc, _over_the_limit(rpc.server))
            assert err is not None and err.code() == grpc.StatusCode.RESOURCE_EXHAUSTED, (rpc.full_method, err)
    finally:
        for channel in channels.values():
            await channel.close()
    assert before.same(await _snapshot(mesh))
    assert not [r for r in caplog.records if r.levelname in ("ERROR", "CRITICAL")], [
        r.getMessage() for r in caplog.records
    ]
