"""Traces through the shared gRPC runtime on a real loopback server: a call
is handled in its caller's trace, a hop through a Runtime's client channel
carries it on (with the request id), log lines carry both ids, a bad
traceparent starts a new trace and fails nothing, and with no exporter the
caller's context is passed on as it came. Plus the settings."""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import UTC, datetime

import grpc
import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from prometheus_client import CollectorRegistry

from booking_svc.jobs.relay import OutboxRow
from boxoffice import access
from boxoffice.config import ConfigError, Env
from boxoffice.errors import FailedPrecondition
from boxoffice.logs import JsonFormatter
from boxoffice.metrics import GrpcServerMetrics
from boxoffice.server import Drain, Gate, GrpcServer, Registration
from boxoffice.streams import StreamEntry
from boxoffice.tls import CallerResolver, ClientChannel, server_credentials
from boxoffice.tracing import Tracing, TracingConfig, current_ids, span_context_of
from tests.runtime.test_config import _one_line, _run
from tests.support import TRUST_DOMAIN, Stores, client_channel, server_config

SERVICE = "boxoffice.test.v1.TraceService"
TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT_ID = "00f067aa0ba902b7"
TRACEPARENT = f"00-{TRACE_ID}-{PARENT_ID}-01"
_log = logging.getLogger("tests.tracing")


def _identity(data: bytes) -> bytes:
    return data


def _leaf_of(channel: grpc.aio.Channel) -> grpc.aio.UnaryUnaryMultiCallable[bytes, bytes]:
    """A stub of Leaf alone."""
    return channel.unary_unary(f"/{SERVICE}/Leaf", request_serializer=_identity, response_deserializer=_identity)


@dataclass
class _Service:
    """Hop calls Leaf through a client channel as a Runtime makes them;
    Leaf notes what it was sent and logs a line."""

    hop: ClientChannel | None = None
    sent: list[dict[str, str]] = field(default_factory=list)

    async def do_hop(self, request: bytes, context: grpc.aio.ServicerContext[bytes, bytes]) -> bytes:
        assert self.hop is not None
        _log.warning("hop reached")
        return bytes(await self.hop.stub(_leaf_of)(request))

    async def leaf(self, request: bytes, context: grpc.aio.ServicerContext[bytes, bytes]) -> bytes:
        self.sent.append({key: str(value) for key, value in context.invocation_metadata() or ()})
        _log.warning("leaf reached")
        return b"ok"

    async def fail(self, request: bytes, context: grpc.aio.ServicerContext[bytes, bytes]) -> bytes:
        raise FailedPrecondition("seats taken", reason="SEAT_UNAVAILABLE")

    def registration(self) -> Registration:
        handler = grpc.method_handlers_generic_handler(
            SERVICE,
            {
                "Hop": grpc.unary_unary_rpc_method_handler(self.do_hop, _identity, _identity),
                "Leaf": grpc.unary_unary_rpc_method_handler(self.leaf, _identity, _identity),
                "Fail": grpc.unary_unary_rpc_method_handler(self.fail, _identity, _identity),
            },
        )
        return Registration(SERVICE, lambda server: server.add_generic_rpc_handlers((handler,)))


class _Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.setFormatter(JsonFormatter())
        self.lines: list[dict[str, object]] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(json.loads(self.format(record)))


@dataclass
class Served:
    service: _Service
    channel: grpc.aio.Channel
    lines: _Lines


async def _served(stores: Stores, tracing: Tracing) -> AsyncIterator[Served]:
    registry = CollectorRegistry()
    service = _Service()
    gate = Gate(
        CallerResolver("tls", TRUST_DOMAIN),
        Gate.refused_counter(registry),
        policy={**access.POLICY, **{f"/{SERVICE}/{m}": frozenset({access.EDGE}) for m in ("Hop", "Leaf", "Fail")}},
    )
    server = GrpcServer(
        name="traced",
        config=server_config(),
        metrics=GrpcServerMetrics.create(registry),
        services=[service.registration()],
        drain=Drain(),
        gate=gate,
        credentials=server_credentials(stores.pki.files(access.QUEUE)),
        tracing=tracing,
    )
    await server.start()
    service.hop = ClientChannel(
        server.address,
        stores.pki.files(access.EDGE),
        interceptors=tracing.client_interceptors(),
        stub_channel=tracing.stub_channel,
    )
    channel = client_channel(stores, server.address, access.EDGE)
    lines = _Lines()
    _log.addHandler(lines)
    try:
        yield Served(service, channel, lines)
    finally:
        _log.removeHandler(lines)
        await channel.close()
        await service.hop.close()
        await server.stop(0)


@pytest.fixture
def exporter() -> InMemorySpanExporter:
    return InMemorySpanExporter()


@pytest.fixture
async def recording(stores: Stores, exporter: InMemorySpanExporter) -> AsyncIterator[Served]:
    async for served in _served(stores, Tracing.exporting_to(exporter, "test-server")):
        yield served


@pytest.fixture
async def off(stores: Stores) -> AsyncIterator[Served]:
    async for served in _served(stores, Tracing.off()):
        yield served


def _call(served: Served, method: str) -> grpc.aio.UnaryUnaryMultiCallable[bytes, bytes]:
    return served.channel.unary_unary(
        f"/{SERVICE}/{method}", request_serializer=_identity, response_deserializer=_identity
    )


async def test_a_hop_is_handled_in_the_callers_trace_and_passes_it_on(
    recording: Served, exporter: InMemorySpanExporter
) -> None:
    metadata = (("traceparent", TRACEPARENT), ("x-request-id", "req-42"))
    assert await _call(recording, "Hop")(b"x", metadata=metadata) == b"ok"
    spans = {(s.name, s.kind): s for s in exporter.get_finished_spans()}
    hop = spans[(f"{SERVICE}/Hop", trace.SpanKind.SERVER)]
    client = spans[(f"{SERVICE}/Leaf", trace.SpanKind.CLIENT)]
    leaf = spans[(f"{SERVICE}/Leaf", trace.SpanKind.SERVER)]
    assert len(exporter.get_finished_spans()) == 3
    assert {f"{s.context.trace_id:032x}" for s in spans.values() if s.context} == {TRACE_ID}
    assert hop.parent is not None and f"{hop.parent.span_id:016x}" == PARENT_ID and hop.parent.is_remote
    assert client.parent is not None and hop.context is not None and client.parent.span_id == hop.context.span_id
    assert leaf.parent is not None and client.context is not None and leaf.parent.span_id == client.context.span_id
    assert leaf.attributes is not None and leaf.attributes["boxoffice.component"] == "traced"
    # The hop sent its own client span's context on, and the caller's request id.
    assert leaf.context is not None
    (sent,) = recording.service.sent
    assert sent["traceparent"] == f"00-{TRACE_ID}-{client.context.span_id:016x}-01"
    assert sent["x-request-id"] == "req-42"
    ids = [(line["msg"], line["trace_id"], line["span_id"], line["request_id"]) for line in recording.lines.lines]
    assert ids == [
        ("hop reached", TRACE_ID, f"{hop.context.span_id:016x}", "req-42"),
        ("leaf reached", TRACE_ID, f"{leaf.context.span_id:016x}", "req-42"),
    ]


async def test_a_failed_call_is_a_failed_span(recording: Served, exporter: InMemorySpanExporter) -> None:
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await _call(recording, "Fail")(b"", metadata=(("traceparent", TRACEPARENT),))
    assert caught.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    (span,) = exporter.get_finished_spans()
    assert span.status.status_code is trace.StatusCode.ERROR
    assert span.status.description == "FAILED_PRECONDITION"


@pytest.mark.parametrize(
    "bad",
    [
        "garbage",
        f"00-{TRACE_ID}-{PARENT_ID}",
        f"00-{'0' * 32}-{PARENT_ID}-01",
        f"00-{TRACE_ID}-{'0' * 16}-01",
        f"ff-{TRACE_ID}-{PARENT_ID}-01",
        f"00-{TRACE_ID.upper()}-{PARENT_ID}-01",
        f"00-{TRACE_ID}-{PARENT_ID}-01-extra",
    ],
)
async def test_a_bad_traceparent_starts_a_new_trace_and_fails_nothing(
    recording: Served, exporter: InMemorySpanExporter, bad: str
) -> None:
    assert await _call(recording, "Hop")(b"x", metadata=(("traceparent", bad),)) == b"ok"
    spans = exporter.get_finished_spans()
    hop = next(s for s in spans if s.name == f"{SERVICE}/Hop")
    assert hop.parent is None
    assert hop.context is not None and f"{hop.context.trace_id:032x}" != TRACE_ID
    assert len({s.context.trace_id for s in spans if s.context}) == 1


async def test_with_no_exporter_the_callers_context_goes_on_as_it_came(off: Served) -> None:
    metadata = (("traceparent", TRACEPARENT), ("x-request-id", "req-7"))
    assert await _call(off, "Hop")(b"x", metadata=metadata) == b"ok"
    (sent,) = off.service.sent
    assert sent["traceparent"] == TRACEPARENT
    assert sent["x-request-id"] == "req-7"
    # Both hops log the caller's ids: nothing of their own is recorded.
    ids = [(line["trace_id"], line["span_id"], line["request_id"]) for line in off.lines.lines]
    assert ids == [(TRACE_ID, PARENT_ID, "req-7")] * 2


async def test_with_no_exporter_and_no_context_nothing_is_added(off: Served) -> None:
    assert await _call(off, "Hop")(b"x") == b"ok"
    (sent,) = off.service.sent
    assert "traceparent" not in sent and "x-request-id" not in sent
    assert len(off.lines.lines) == 2
    assert all("trace_id" not in line and "request_id" not in line for line in off.lines.lines)


def test_an_outbox_entry_carries_its_writers_trace_to_the_consumers_span(exporter: InMemorySpanExporter) -> None:
    row = OutboxRow("e-1", "booking", "h-1", "BookingConfirmed", "{}", datetime.now(UTC), 1, TRACEPARENT)
    fields = {key.encode(): value.encode() for key, value in row.fields().items()}
    entry = StreamEntry.parse(b"1-1", fields)
    assert entry.traceparent == TRACEPARENT
    untraced = OutboxRow("e-2", "booking", "h-2", "BookingConfirmed", "{}", datetime.now(UTC), 2)
    assert "traceparent" not in untraced.fields()
    tracing = Tracing.exporting_to(exporter, "test-issuer")
    with tracing.consuming("issue", entry.traceparent, {}):
        pass
    (done,) = exporter.get_finished_spans()
    assert done.kind is trace.SpanKind.CONSUMER
    assert done.parent is not None and f"{done.parent.span_id:016x}" == PARENT_ID
    assert [f"{link.context.span_id:016x}" for link in done.links] == [PARENT_ID]
    assert done.status.status_code is trace.StatusCode.UNSET
    # A malformed one: a trace of its own, no link.
    with tracing.consuming("issue", "00-nope", {}):
        pass
    assert exporter.get_finished_spans()[-1].parent is None
    # An entry whose handling fails: its span is marked failed, the error goes on.
    with pytest.raises(ValueError), tracing.consuming("issue", entry.traceparent, {}):
        raise ValueError("malformed")
    failed = exporter.get_finished_spans()[-1]
    assert failed.status.status_code is trace.StatusCode.ERROR and failed.status.description == "ValueError"
    # With nothing recorded, the producer's trace is current while the entry is handled.
    with Tracing.off().consuming("issue", entry.traceparent, {}):
        assert current_ids()[0] == TRACE_ID
    assert current_ids()[0] is None


def test_span_context_of_reads_only_valid_traceparents() -> None:
    parsed = span_context_of(TRACEPARENT)
    assert parsed is not None and parsed.is_remote and parsed.trace_flags.sampled
    assert span_context_of(f"00-{TRACE_ID}-{PARENT_ID}-00") is not None
    assert span_context_of(f"01-{TRACE_ID}-{PARENT_ID}-01-future") is not None  # a later version's fields
    assert span_context_of(None) is None
    assert span_context_of("") is None


def test_settings() -> None:
    off = TracingConfig.from_env(Env({}))
    assert off.endpoint is None and not Tracing.from_config(off, "x").enabled
    on = TracingConfig.from_env(Env({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4317"}))
    assert on.endpoint == "http://collector:4317"
    tracing = Tracing.from_config(on, "booking-server")
    assert tracing.enabled and tracing.provider is not None
    assert tracing.provider.resource.attributes["service.name"] == "booking-server"
    tracing.shutdown()
    disabled = {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4317", "OTEL_SDK_DISABLED": "true"}
    assert TracingConfig.from_env(Env(disabled)).endpoint is None
    for bad in (
        {"OTEL_EXPORTER_OTLP_ENDPOINT": "collector:4317"},
        {"OTEL_EXPORTER_OTLP_ENDPOINT": "ftp://collector"},
        {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:99999"},
        {"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://"},
        {"OTEL_TRACES_SAMPLER": "sometimes"},
        {"OTEL_TRACES_SAMPLER_ARG": "2"},
        {"OTEL_TRACES_SAMPLER_ARG": "half"},
    ):
        with pytest.raises(ConfigError):
            TracingConfig.from_env(Env(bad))


def test_a_bad_endpoint_is_one_line_and_exit_2() -> None:
    line = _one_line(_run(["up"], OTEL_EXPORTER_OTLP_ENDPOINT="collector:4317"))
    assert "OTEL_EXPORTER_OTLP_ENDPOINT" in line
