"""One checkout is one trace: every role of queue, booking and payment
records into the SDK's in-memory exporter, the test calls as the edge inside
a span of its own, and every span of the checkout (each gRPC hop's client
and server spans, payment's call to booking, and the ticket issuer's work on
the outbox event) shares the edge's trace id and has its parent in it."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import AsyncIterator, Sequence
from typing import Any, TypeAlias

import grpc
import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from boxoffice import access
from boxoffice.tracing import Tracing
from edge_svc import app as edge_app
from gen.boxoffice.booking.v1 import booking_service_pb2_grpc as bpb_grpc
from gen.boxoffice.payment.v1 import payment_service_pb2 as ppb
from gen.boxoffice.payment.v1 import payment_service_pb2_grpc as ppb_grpc
from gen.boxoffice.queue.v1 import queue_service_pb2_grpc as qpb_grpc
from tests.e2e.checkout import checkout_event, start_payment
from tests.e2e.harness import eventually, whole_mesh
from tests.edge.asserting import as_fan
from tests.edge.fans import signed_in
from tests.edge.harness import GENEROUS, EdgeStack
from tests.support import MeshClient, Stores, channel_credentials, make_runtime, running

FAN = "fan-traced"


Traced = tuple[InMemorySpanExporter, Tracing, dict[str, str]]


@contextlib.asynccontextmanager
async def _traced(stores: Stores, webhooks: str) -> AsyncIterator[Traced]:
    exporter = InMemorySpanExporter()
    tracing = Tracing.exporting_to(exporter, "boxoffice-e2e")
    async with whole_mesh(stores, f"ticket-issued-tracing-{webhooks}", tracing=tracing, webhooks=webhooks) as addresses:
        yield exporter, tracing, addresses


@pytest.fixture
async def traced(stores: Stores) -> AsyncIterator[Traced]:
    """The mesh with the sandbox's webhooks manual: its own delivery would
    otherwise race the test's ConfirmPayment to the hold and, when first,
    confirm it (and write the outbox row the issuer's span follows) in the
    webhook's trace."""
    async with _traced(stores, "manual") as found:
        yield found


@pytest.fixture
async def traced_webhooks(stores: Stores) -> AsyncIterator[Traced]:
    """The mesh with the sandbox delivering its webhooks, as a provider does."""
    async with _traced(stores, "auto") as found:
        yield found


# The stubs' async types exist in the generated stubs only (.pyi).
Stubs: TypeAlias = (
    "tuple[qpb_grpc.QueueServiceAsyncStub, bpb_grpc.BookingServiceAsyncStub, ppb_grpc.PaymentServiceAsyncStub]"
)


@contextlib.asynccontextmanager
async def _as_edge(stores: Stores, addresses: dict[str, str], tracing: Tracing) -> AsyncIterator[Stubs]:
    """Queue, booking and payment stubs on channels as the edge's, which
    carry the current trace as the edge's own channels do."""
    files = stores.pki.files(access.EDGE)
    channels = [
        grpc.aio.secure_channel(
            addresses[name], channel_credentials(files, files.ca), interceptors=tracing.client_interceptors()
        )
        for name in ("queue", "booking", "payment")
    ]
    try:
        yield (
            qpb_grpc.QueueServiceStub(channels[0]),
            bpb_grpc.BookingServiceStub(channels[1]),
            ppb_grpc.PaymentServiceStub(channels[2]),
        )
    finally:
        for channel in channels:
            await channel.close()


def _named(spans: Sequence[ReadableSpan], name: str, kind: trace.SpanKind) -> ReadableSpan:
    found = [s for s in spans if s.name == name and s.kind is kind]
    assert len(found) == 1, (name, kind, [(s.name, s.kind) for s in spans])
    return found[0]


def _parent_of(span: ReadableSpan, spans: Sequence[ReadableSpan]) -> ReadableSpan:
    assert span.parent is not None, span.name
    parents = [s for s in spans if s.context is not None and s.context.span_id == span.parent.span_id]
    assert len(parents) == 1, f"{span.name}'s parent is not in the trace"
    return parents[0]


async def test_one_checkout_is_one_connected_trace_through_every_hop_and_the_outbox(
    stores: Stores, traced: Traced
) -> None:
    exporter, tracing, addresses = traced
    event_id = await checkout_event(addresses, stores)
    assert tracing.tracer is not None
    fan: Any = as_fan(FAN)
    async with _as_edge(stores, addresses, tracing) as (queue, booking, payment):
        with tracing.tracer.start_as_current_span("checkout", kind=trace.SpanKind.SERVER) as root:
            started = await start_payment(queue, booking, payment, event_id, FAN)
            confirmed = await payment.ConfirmPayment(
                ppb.ConfirmPaymentRequest(
                    payment_id=started.payment.payment_id, idempotency_key=f"traced-{started.payment.hold_id}"
                ),
                metadata=fan,
            )
            assert confirmed.payment.state == ppb.PAYMENT_STATE_SUCCEEDED
        trace_id = root.get_span_context().trace_id

        async def issued() -> list[ReadableSpan] | None:
            spans = [s for s in exporter.get_finished_spans() if s.context and s.context.trace_id == trace_id]
            return spans if any(s.kind is trace.SpanKind.CONSUMER for s in spans) else None

        spans = await eventually(issued, "the issuer's span in the checkout's trace")

    # Every span but the edge's own has its parent in the trace: one tree.
    for span in spans:
        if span is not _named(spans, "checkout", trace.SpanKind.SERVER):
            _parent_of(span, spans)
    # Each hop crossed gRPC with its context: a server span's parent is the
    # caller's client span of the same method.
    servers = [s for s in spans if s.kind is trace.SpanKind.SERVER and s.name != "checkout"]
    for server in servers:
        client = _parent_of(server, spans)
        assert client.kind is trace.SpanKind.CLIENT and client.name == server.name, server.name
    names = {s.name for s in servers}
    for method in (
        "boxoffice.queue.v1.QueueService/JoinQueue",
        "boxoffice.booking.v1.BookingService/HoldSeats",
        "boxoffice.payment.v1.PaymentService/StartPayment",
        "boxoffice.payment.v1.PaymentService/ConfirmPayment",
        "boxoffice.booking.v1.BookingService/ConfirmHold",
    ):
        assert method in names, (method, sorted(names))
    # Payment's call to booking is under the fan's ConfirmPayment.
    confirm_hold = _named(spans, "boxoffice.booking.v1.BookingService/ConfirmHold", trace.SpanKind.SERVER)
    payment_client = _parent_of(confirm_hold, spans)
    assert _parent_of(payment_client, spans).name == "boxoffice.payment.v1.PaymentService/ConfirmPayment"
    # The ticket's issuance is the child of, and linked to, the confirm that
    # wrote the outbox row.
    issue = _named(spans, "issue BookingConfirmed", trace.SpanKind.CONSUMER)
    assert _parent_of(issue, spans) is confirm_hold
    assert [link.context.span_id for link in issue.links] == [confirm_hold.context.span_id]


async def test_a_payment_the_providers_webhook_settles_is_linked_to_the_fans_start_payment(
    stores: Stores, traced_webhooks: Traced
) -> None:
    """Here the provider's webhook, not the fan, settles the payment: its
    handling is a trace of its own (the webhook's call), and the span that
    applies it is linked to the StartPayment that made the charge, so the
    ticket's issuance, in the webhook's trace, leads back to the checkout."""
    exporter, tracing, addresses = traced_webhooks
    event_id = await checkout_event(addresses, stores)
    assert tracing.tracer is not None
    async with _as_edge(stores, addresses, tracing) as (queue, booking, payment):
        with tracing.tracer.start_as_current_span("checkout", kind=trace.SpanKind.SERVER) as root:
            await start_payment(queue, booking, payment, event_id, FAN)
    checkout = root.get_span_context().trace_id

    def in_trace(trace_id: int) -> list[ReadableSpan]:
        return [s for s in exporter.get_finished_spans() if s.context is not None and s.context.trace_id == trace_id]

    start = _named(in_trace(checkout), "boxoffice.payment.v1.PaymentService/StartPayment", trace.SpanKind.SERVER)
    assert start.context is not None

    async def applied() -> ReadableSpan | None:
        linked = [
            s
            for s in exporter.get_finished_spans()
            if s.name == "apply charge.succeeded"
            and any(link.context.span_id == start.context.span_id for link in s.links)
        ]
        if not linked:
            return None
        (span,) = linked
        assert span.context is not None
        issued = any(s.kind is trace.SpanKind.CONSUMER for s in in_trace(span.context.trace_id))
        return span if issued else None

    apply = await eventually(applied, "the webhook applied, linked to StartPayment, and the ticket issued")
    assert apply.context is not None and apply.context.trace_id != checkout
    spans = in_trace(apply.context.trace_id)
    ((link_trace, link_span),) = [(link.context.trace_id, link.context.span_id) for link in apply.links]
    assert (link_trace, link_span) == (checkout, start.context.span_id)
    webhook = _parent_of(apply, spans)
    assert webhook.kind is trace.SpanKind.SERVER
    assert webhook.name == "boxoffice.payment.v1.PaymentService/HandleProviderWebhook"
    # The hold's confirmation is under the applying span, and the ticket's
    # issuance under the confirmation.
    confirm_hold = _named(spans, "boxoffice.booking.v1.BookingService/ConfirmHold", trace.SpanKind.SERVER)
    above = confirm_hold
    while above is not apply:
        above = _parent_of(above, spans)
    issue = _named(spans, "issue BookingConfirmed", trace.SpanKind.CONSUMER)
    assert _parent_of(issue, spans) is confirm_hold


async def test_the_edges_span_is_the_child_of_the_clients_traceparent_and_the_parent_of_the_mesh(
    stores: Stores, traced: Traced
) -> None:
    exporter, tracing, addresses = traced
    rt = make_runtime(stores)
    rt.tracing = tracing
    edge = edge_app.compose(
        rt,
        edge_app.Overrides(
            settings={
                "host": "127.0.0.1",
                "port": 0,
                "queue_addr": addresses["queue"],
                "booking_addr": addresses["booking"],
                "payment_addr": addresses["payment"],
                "dev_sign_in": True,
                "drain_seconds": 0.0,
                **GENEROUS,
            }
        ),
    )
    operators = {name: MeshClient(stores, addresses[name]) for name in ("queue", "booking", "payment")}
    trace_id, parent_id = uuid.uuid4().hex, uuid.uuid4().hex[:16]
    try:
        async with running([*edge.components]):
            stack = EdgeStack(edge=edge, url=edge.server.url, addresses=addresses, operators=operators)
            event_id = await stack.event(seats=4, max_active=10)
            async with signed_in(stack) as client:
                joined = await client.post(
                    f"/v1/events/{event_id}/queue:join",
                    json={},
                    headers={"traceparent": f"00-{trace_id}-{parent_id}-01", "X-Request-Id": "join-1"},
                )
                assert joined.status_code == 200, joined.text
                # A malformed traceparent: a new trace, the request served all the same.
                again = await client.get(f"/v1/events/{event_id}/queue/position", headers={"traceparent": "00-zz-01"})
                assert again.status_code == 200, again.text
    finally:
        for operator in operators.values():
            await operator.close()

    spans = exporter.get_finished_spans()
    in_trace = [s for s in spans if s.context is not None and f"{s.context.trace_id:032x}" == trace_id]
    edge_span = _named(in_trace, "POST /v1/events/{event_id}/queue:join", trace.SpanKind.SERVER)
    assert edge_span.parent is not None and f"{edge_span.parent.span_id:016x}" == parent_id
    join = _named(in_trace, "boxoffice.queue.v1.QueueService/JoinQueue", trace.SpanKind.SERVER)
    assert _parent_of(_parent_of(join, in_trace), in_trace) is edge_span
    position = _named(spans, "GET /v1/events/{event_id}/queue/position", trace.SpanKind.SERVER)
    assert position.parent is None and position.context is not None
    assert f"{position.context.trace_id:032x}" != trace_id
