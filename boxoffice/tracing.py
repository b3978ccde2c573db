"""OpenTelemetry traces across the mesh: W3C ``traceparent`` in, spans, and
``traceparent`` out on every gRPC call and outbox event.

A process has one :class:`Tracing`, made by its :class:`~boxoffice.runtime.Runtime`
from the environment (:meth:`TracingConfig.from_env`): with
``OTEL_EXPORTER_OTLP_ENDPOINT`` (or ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``)
set it records spans in an SDK tracer provider of its own (``service.name``
the process's component and role) and exports them over OTLP/gRPC in
batches; a test records into the SDK's in-memory exporter
(:meth:`Tracing.exporting_to`). Without an endpoint nothing is recorded:
the context a call came with is made current as it is (a non-recording
span of the caller's ids), so that the next hop and every log line carry the
same trace, and that is all a call pays.

Tracing never fails a call: a ``traceparent`` that does not parse is
ignored (the call starts a new trace when spans are recorded, none
otherwise). The request id (``x-request-id``) travels in the same context,
so that :class:`boxoffice.logs.JsonFormatter` writes both ids in every line
logged while a call or an HTTP request is handled.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import urllib.parse
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, cast

import grpc
from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor, SpanExporter
from opentelemetry.sdk.trace.sampling import ALWAYS_ON, ParentBased, Sampler, TraceIdRatioBased

from boxoffice.config import ConfigError, Env

TRACEPARENT = "traceparent"
REQUEST_ID = "x-request-id"

# The request id in the OpenTelemetry context (a key, not state: the value
# lives in each task's context).
_REQUEST_ID_KEY = otel_context.create_key("boxoffice-request-id")
_TRACEPARENT_RE = re.compile(r"^([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})(-.*)?$")
_SAMPLERS = ("always_on", "always_off", "traceidratio", "parentbased_always_on", "parentbased_always_off",
             "parentbased_traceidratio")  # fmt: skip


@dataclass(frozen=True, slots=True)
class TracingConfig:
    """Where spans go (None: nowhere, nothing recorded) and how many."""

    endpoint: str | None
    sampler: str
    ratio: float

    @classmethod
    def from_env(cls, env: Env) -> TracingConfig:
        endpoint = env.optional_str("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or env.optional_str(
            "OTEL_EXPORTER_OTLP_ENDPOINT"
        )
        if env.string("OTEL_SDK_DISABLED", "false").strip().lower() == "true":
            endpoint = None
        if endpoint is not None:
            parsed = urllib.parse.urlsplit(endpoint.strip())
            if parsed.scheme not in ("http", "https") or not parsed.hostname:
                raise ConfigError(
                    f"OTEL_EXPORTER_OTLP_ENDPOINT must be an http:// or https:// URL with a host, not {endpoint!r}"
                )
            try:
                parsed.port  # noqa: B018 - it raises on a port out of range
            except ValueError:
                raise ConfigError(f"OTEL_EXPORTER_OTLP_ENDPOINT has a bad port: {endpoint!r}") from None
            endpoint = endpoint.strip()
        sampler = env.string("OTEL_TRACES_SAMPLER", "parentbased_always_on").strip().lower()
        if sampler not in _SAMPLERS:
            raise ConfigError(f"OTEL_TRACES_SAMPLER must be one of {', '.join(_SAMPLERS)}, not {sampler!r}")
        raw_ratio = env.string("OTEL_TRACES_SAMPLER_ARG", "1.0")
        try:
            ratio = float(raw_ratio)
        except ValueError:
            ratio = -1.0
        if not 0.0 <= ratio <= 1.0:
            raise ConfigError(f"OTEL_TRACES_SAMPLER_ARG must be a number from 0 to 1, not {raw_ratio!r}")
        return cls(endpoint=endpoint, sampler=sampler, ratio=ratio)

    def make_sampler(self) -> Sampler:
        from opentelemetry.sdk.trace.sampling import ALWAYS_OFF

        root: Sampler = {
            "always_on": ALWAYS_ON,
            "always_off": ALWAYS_OFF,
            "traceidratio": TraceIdRatioBased(self.ratio),
        }.get(self.sampler.removeprefix("parentbased_"), ALWAYS_ON)
        return ParentBased(root) if self.sampler.startswith("parentbased_") else root


def span_context_of(traceparent: str | bytes | None) -> trace.SpanContext | None:
    """The remote span context a W3C ``traceparent`` names; None when it
    does not parse (or names the invalid trace or span)."""
    if traceparent is None:
        return None
    if isinstance(traceparent, bytes):
        traceparent = traceparent.decode("latin-1")
    found = _TRACEPARENT_RE.match(traceparent.strip())
    if found is None or found.group(1) == "ff" or (found.group(1) == "00" and found.group(5) is not None):
        return None
    trace_id, span_id = int(found.group(2), 16), int(found.group(3), 16)
    if trace_id == 0 or span_id == 0:
        return None
    return trace.SpanContext(
        trace_id, span_id, is_remote=True, trace_flags=trace.TraceFlags(int(found.group(4), 16) & 1)
    )


def traceparent_of(span_context: trace.SpanContext) -> str:
    return f"00-{span_context.trace_id:032x}-{span_context.span_id:016x}-{int(span_context.trace_flags) & 1:02x}"


def current_traceparent() -> str | None:
    """The ``traceparent`` of the current span (None: no trace)."""
    span_context = trace.get_current_span().get_span_context()
    return traceparent_of(span_context) if span_context.is_valid else None


def current_ids() -> tuple[str | None, str | None, str | None]:
    """(trace id, span id, request id) of what is being handled, for logs."""
    span_context = trace.get_current_span().get_span_context()
    request_id = otel_context.get_value(_REQUEST_ID_KEY)
    rid = request_id if isinstance(request_id, str) else None
    if not span_context.is_valid:
        return None, None, rid
    return f"{span_context.trace_id:032x}", f"{span_context.span_id:016x}", rid


def _context(parent: trace.SpanContext | None) -> otel_context.Context:
    empty = otel_context.Context()
    return empty if parent is None else trace.set_span_in_context(trace.NonRecordingSpan(parent), empty)


class Tracing:
    """The process's tracer (None: nothing recorded) and the spans of its
    calls, HTTP requests and outbox events."""

    def __init__(self, provider: TracerProvider | None) -> None:
        self.provider = provider
        self.tracer: trace.Tracer | None = None if provider is None else provider.get_tracer("boxoffice")

    @classmethod
    def off(cls) -> Tracing:
        return cls(None)

    @classmethod
    def from_config(cls, config: TracingConfig, service_name: str) -> Tracing:
        if config.endpoint is None:
            return cls.off()
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter

        exporter = OTLPSpanExporter(endpoint=config.endpoint, insecure=config.endpoint.startswith("http://"))
        return cls._with(BatchSpanProcessor(exporter), service_name, config.make_sampler())

    @classmethod
    def exporting_to(cls, exporter: SpanExporter, service_name: str) -> Tracing:
        """Every span, as it ends, to ``exporter`` (tests' in-memory one)."""
        return cls._with(SimpleSpanProcessor(exporter), service_name, ALWAYS_ON)

    @classmethod
    def _with(cls, processor: SpanProcessor, service_name: str, sampler: Sampler) -> Tracing:
        provider = TracerProvider(
            sampler=sampler, resource=Resource.create({"service.name": service_name}), shutdown_on_exit=False
        )
        provider.add_span_processor(processor)
        return cls(provider)

    @property
    def enabled(self) -> bool:
        return self.tracer is not None

    def shutdown(self) -> None:
        """Export what is left (at process stop)."""
        if self.provider is not None:
            self.provider.shutdown()

    # As a component of the process: started first, stopped last (what is
    # left goes out then, off the event loop).
    name = "tracing"

    async def start(self) -> None:
        return None

    async def stop(self, grace_seconds: float) -> None:
        if self.provider is not None:
            await asyncio.to_thread(self.provider.force_flush, int(max(grace_seconds, 1.0) * 1000))
            await asyncio.to_thread(self.provider.shutdown)

    # Server side -----------------------------------------------------------

    def enter_call(
        self, name: str, metadata: Iterable[tuple[str, str | bytes]] | None, attributes: Mapping[str, str]
    ) -> tuple[trace.Span | None, object]:
        """Start handling a gRPC call: its server span (None when nothing is
        recorded) as a child of the caller's ``traceparent``, made current
        with the caller's request id. Hand both back to :meth:`exit`."""
        traceparent: str | bytes | None = None
        request_id: str | bytes | None = None
        for key, value in metadata or ():
            if key == TRACEPARENT:
                traceparent = value
            elif key == REQUEST_ID:
                request_id = value
        parent = span_context_of(traceparent)
        span: trace.Span | None = None
        if self.tracer is not None:
            ctx = _context(parent)
            span = self.tracer.start_span(name, ctx, trace.SpanKind.SERVER, attributes)
            ctx = trace.set_span_in_context(span, ctx)
        elif parent is None and request_id is None:
            return None, None
        else:
            ctx = _context(parent)
        if request_id is not None:
            ctx = otel_context.set_value(
                _REQUEST_ID_KEY, request_id if isinstance(request_id, str) else request_id.decode("latin-1"), ctx
            )
        return span, otel_context.attach(ctx)

    def enter_request(
        self, name: str, given: str | None, traceparent: str, request_id: str, attributes: Mapping[str, str]
    ) -> tuple[trace.Span | None, object, str]:
        """Start handling an HTTP request at the edge: ``given`` is the
        client's ``traceparent`` header (the server span's parent when it
        parses), ``traceparent`` the one the edge made for the request. Answers
        the span, the token for :meth:`exit`, and the traceparent to pass on
        (the server span's, or the edge's own when nothing is recorded)."""
        if self.tracer is not None:
            ctx = _context(span_context_of(given))
            span: trace.Span | None = self.tracer.start_span(name, ctx, trace.SpanKind.SERVER, attributes)
            assert span is not None
            ctx = trace.set_span_in_context(span, ctx)
            if span.get_span_context().is_valid:
                traceparent = traceparent_of(span.get_span_context())
        else:
            span = None
            ctx = _context(span_context_of(traceparent))
        ctx = otel_context.set_value(_REQUEST_ID_KEY, request_id, ctx)
        return span, otel_context.attach(ctx), traceparent

    @staticmethod
    def exit(span: trace.Span | None, token: object, error: str | None = None) -> None:
        """End what :meth:`enter_call` or :meth:`enter_request` started;
        ``error`` (a status code's name) marks the span failed."""
        if span is not None:
            if error is not None:
                span.set_status(trace.Status(trace.StatusCode.ERROR, error))
            span.end()
        if token is not None:
            otel_context.detach(token)  # type: ignore[arg-type]

    # Outbox ----------------------------------------------------------------

    @contextlib.contextmanager
    def consuming(self, name: str, traceparent: str | None, attributes: Mapping[str, str]) -> Iterator[None]:
        """Handle a stream entry written with ``traceparent`` (its producer's
        context; None or malformed: a new trace) in a consumer span, child of
        the producer's span and linked to it. With nothing recorded, the
        producer's context is current all the same (its ids go in the logs)."""
        parent = span_context_of(traceparent)
        ctx = _context(parent)
        if self.tracer is None:
            if parent is None:
                yield
                return
            with self._within(None, ctx):
                yield
            return
        links = () if parent is None else (trace.Link(parent),)
        span = self.tracer.start_span(name, ctx, trace.SpanKind.CONSUMER, attributes, links)
        with self._within(span, trace.set_span_in_context(span, ctx)):
            yield

    # Work that follows from another trace --------------------------------

    @contextlib.contextmanager
    def linked(self, name: str, traceparent: str | None, attributes: Mapping[str, str]) -> Iterator[None]:
        """Do the enclosed work in a span of its own, child of the current
        one and linked to ``traceparent``'s (the call it follows from, in
        another trace: the StartPayment whose charge a provider's webhook
        reports; None, empty or malformed: no link). Nothing when nothing is
        recorded."""
        if self.tracer is None:
            yield
            return
        origin = span_context_of(traceparent)
        links = () if origin is None else (trace.Link(origin),)
        span = self.tracer.start_span(name, None, trace.SpanKind.INTERNAL, attributes, links)
        with self._within(span, trace.set_span_in_context(span)):
            yield

    @classmethod
    @contextlib.contextmanager
    def _within(cls, span: trace.Span | None, ctx: otel_context.Context) -> Iterator[None]:
        """The enclosed work with ``ctx`` current; ``span`` ended after it
        (failed, with the exception's name, when the work raised)."""
        token = otel_context.attach(ctx)
        error: str | None = None
        try:
            yield
        except BaseException as err:
            error = type(err).__name__
            raise
        finally:
            cls.exit(span, token, error)

    # Client side -----------------------------------------------------------

    def client_interceptors(self) -> list[grpc.aio.ClientInterceptor]:
        """What a client channel carries when spans are recorded: a client
        span of each call, whose context goes on with the request id. None
        otherwise: aio's interceptor machinery costs a task per call, and
        :meth:`stub_channel` passes the context on for much less."""
        return [_UnaryUnary(self), _UnaryStream(self)] if self.tracer is not None else []

    def stub_channel(self, channel: grpc.aio.Channel) -> grpc.aio.Channel:
        """The channel a stub is made on: when nothing is recorded, one whose
        calls carry the current trace context and request id as they are."""
        return channel if self.tracer is not None else cast(grpc.aio.Channel, _Propagating(channel))

    def outgoing(self, details: grpc.aio.ClientCallDetails) -> tuple[grpc.aio.ClientCallDetails, trace.Span | None]:
        span_context = trace.get_current_span().get_span_context()
        request_id = otel_context.get_value(_REQUEST_ID_KEY)
        items = list(details.metadata or ())
        given_tp: Any = next((value for key, value in items if key == TRACEPARENT), None)
        span: trace.Span | None = None
        if self.tracer is not None:
            parent = otel_context.get_current() if span_context.is_valid else _context(span_context_of(given_tp))
            method = details.method.decode() if isinstance(details.method, bytes) else str(details.method)
            span = self.tracer.start_span(method.lstrip("/"), parent, trace.SpanKind.CLIENT, {"rpc.system": "grpc"})
            span_context = span.get_span_context()
        if not span_context.is_valid and request_id is None:
            return details, span
        pairs = [(key, value) for key, value in items if key != TRACEPARENT or not span_context.is_valid]
        if span_context.is_valid:
            pairs.append((TRACEPARENT, traceparent_of(span_context)))
        if isinstance(request_id, str) and not any(key == REQUEST_ID for key, _ in pairs):
            pairs.append((REQUEST_ID, request_id))
        metadata = grpc.aio.Metadata(*pairs)
        return (
            grpc.aio.ClientCallDetails(
                details.method, details.timeout, metadata, details.credentials, details.wait_for_ready
            ),
            span,
        )


def outgoing_metadata(metadata: Any) -> Any:
    """``metadata`` with the current trace context (replacing a
    ``traceparent`` it has) and request id (unless it has one); itself when
    there is neither."""
    span_context = trace.get_current_span().get_span_context()
    request_id = otel_context.get_value(_REQUEST_ID_KEY)
    if not span_context.is_valid and request_id is None:
        return metadata
    items = [(k, v) for k, v in metadata or () if k != TRACEPARENT or not span_context.is_valid]
    if span_context.is_valid:
        items.append((TRACEPARENT, traceparent_of(span_context)))
    if isinstance(request_id, str) and not any(k == REQUEST_ID for k, _ in items):
        items.append((REQUEST_ID, request_id))
    return tuple(items)


class _Propagating:
    """A channel whose unary-unary and unary-stream calls pass the current
    context on (:func:`outgoing_metadata`); the rest is the channel's."""

    __slots__ = ("_channel",)

    def __init__(self, channel: grpc.aio.Channel) -> None:
        self._channel = channel

    def unary_unary(self, method: str, *args: Any, **kwargs: Any) -> Any:
        return _PropagatingCall(self._channel.unary_unary(method, *args, **kwargs))

    def unary_stream(self, method: str, *args: Any, **kwargs: Any) -> Any:
        return _PropagatingCall(self._channel.unary_stream(method, *args, **kwargs))

    def __getattr__(self, name: str) -> Any:
        return getattr(self._channel, name)


class _PropagatingCall:
    __slots__ = ("_inner",)

    def __init__(self, inner: Any) -> None:
        self._inner = inner

    def __call__(self, request: Any, *, metadata: Any = None, **kwargs: Any) -> Any:
        return self._inner(request, metadata=outgoing_metadata(metadata), **kwargs)


def _end(span: trace.Span, code: Any) -> None:
    if code is not None and code is not grpc.StatusCode.OK:
        span.set_status(trace.Status(trace.StatusCode.ERROR, getattr(code, "name", str(code))))
    span.end()


def _ender(span: trace.Span, finishing: set[asyncio.Task[None]]) -> Callable[[Any], None]:
    """A stream call's done callback: its span ends with its code (read
    once the call is done, which aio answers as a coroutine)."""

    def done(call: Any) -> None:
        async def finish() -> None:
            try:
                code = await call.code()
            except BaseException:
                code = None
            _end(span, code)

        task = asyncio.get_running_loop().create_task(finish())
        finishing.add(task)
        task.add_done_callback(finishing.discard)

    return done


class _UnaryUnary(grpc.aio.UnaryUnaryClientInterceptor):
    def __init__(self, tracing: Tracing) -> None:
        self._tracing = tracing

    async def intercept_unary_unary(
        self,
        continuation: Callable[[grpc.aio.ClientCallDetails, Any], Awaitable[Any]],
        client_call_details: grpc.aio.ClientCallDetails,
        request: Any,
    ) -> Any:
        details, span = self._tracing.outgoing(client_call_details)
        if span is None:
            return await continuation(details, request)
        code: Any = None
        try:
            call = await continuation(details, request)
            try:
                # The answer (or its error, raised again to the caller who awaits the call).
                await call
                code = grpc.StatusCode.OK
            except grpc.aio.AioRpcError as err:
                code = err.code()
        finally:
            _end(span, code)
        return call


class _UnaryStream(grpc.aio.UnaryStreamClientInterceptor):
    def __init__(self, tracing: Tracing) -> None:
        self._tracing = tracing
        # Tasks that end streams' spans, kept until done.
        self._finishing: set[asyncio.Task[None]] = set()

    async def intercept_unary_stream(
        self,
        continuation: Callable[[grpc.aio.ClientCallDetails, Any], Awaitable[Any]],
        client_call_details: grpc.aio.ClientCallDetails,
        request: Any,
    ) -> Any:
        details, span = self._tracing.outgoing(client_call_details)
        try:
            call = await continuation(details, request)
        except BaseException:
            if span is not None:
                span.end()
            raise
        if span is not None:
            call.add_done_callback(_ender(span, self._finishing))
        return call
