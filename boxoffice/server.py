"""gRPC serving shared by every service: one wrapper around every method
handler for errors, deadlines and metrics; health and reflection; graceful
shutdown.

The wrapper (:class:`CallWrapper`, put around each handler once, as it is
registered, so that a call pays no interceptor chain) is the one place a
domain error becomes a status: every
failed call carries one ``google.rpc.ErrorInfo`` (an unexpected exception
answers ``INTERNAL`` with reason ``INTERNAL``), and a reason the service's
contract package does not publish goes out unchanged but raises
:class:`~boxoffice.errors.UnpublishedReasonWarning` (checked only on the error
path, against a set resolved once per method).

It is also where the authorization table is enforced: before a call does
anything, its caller (see :mod:`boxoffice.caller`) is read from the peer's
certificate and checked with :func:`boxoffice.access.allowed`; a refusal
answers PERMISSION_DENIED (``CALLER_UNKNOWN`` or ``CALLER_NOT_ALLOWED``),
counts in ``boxoffice_grpc_calls_refused_total`` and is logged at most once
a minute per method and role."""

from __future__ import annotations

import asyncio
import logging
import time
import warnings
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, cast

import grpc
from google.protobuf import descriptor_pool
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_health.v1.health import aio as health_aio
from grpc_reflection.v1alpha import reflection, reflection_pb2_grpc
from prometheus_client import CollectorRegistry, Counter, Histogram

from boxoffice import access, caller, deadline, lifecycle, wire
from boxoffice.caller import Caller, acting_as
from boxoffice.config import ConfigError, ServerConfig
from boxoffice.errors import (
    BoxofficeError,
    DeadlineExceeded,
    Internal,
    PermissionDenied,
    UnpublishedReasonWarning,
    package_of,
    published_reasons,
    to_status,
)
from boxoffice.logs import LogBudget
from boxoffice.metrics import GrpcServerMetrics
from boxoffice.tls import CallerResolver
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


def _split_method(full_method: str) -> tuple[str, str]:
    _, _, rest = full_method.partition("/")
    service, _, method = rest.partition("/")
    return service, method


def go_code_name(code: grpc.StatusCode) -> str:
    """A status code as Go's ``codes.Code.String()`` spells it ("OK",
    "InvalidArgument", "Canceled"), the ``grpc_code`` label value of
    go-grpc-prometheus that stock dashboards and alerts match on."""
    if code is grpc.StatusCode.CANCELLED:
        return "Canceled"
    if code is grpc.StatusCode.OK:
        return "OK"
    return "".join(part.capitalize() for part in code.name.split("_"))


def _internal_status() -> grpc.Status:
    return to_status(Internal("internal error", reason="INTERNAL"))


def _reason_check(service: str, method: str) -> Callable[[BoxofficeError], None]:
    """Warns of an error whose reason the service's package does not publish
    (no check for a package that publishes no ``ErrorReason``)."""
    published = published_reasons(package_of(service))

    def check(err: BoxofficeError) -> None:
        if published and err.reason not in published:
            warnings.warn(
                f"{service}/{method} answered {err.code.name} with reason {err.reason!r}, "
                f"which {package_of(service)}.ErrorReason does not publish",
                UnpublishedReasonWarning,
                stacklevel=1,
            )

    return check


# The ``role`` label of a caller with no identity of this mesh.
_NO_ROLE = "none"
_REFUSAL_LOG_INTERVAL_SECONDS = 60.0


class Gate:
    """The authorization table (``policy``: :data:`boxoffice.access.POLICY`
    but in tests of the runtime itself), enforced: who the caller is, and
    whether the table lets them make the call."""

    def __init__(
        self,
        resolver: CallerResolver,
        refused: Counter,
        *,
        policy: Mapping[str, frozenset[str]] = access.POLICY,
    ) -> None:
        self._resolver = resolver
        self._refused = refused
        self._policy = policy
        self._logged: dict[tuple[str, str], float] = {}

    @staticmethod
    def refused_counter(registry: CollectorRegistry) -> Counter:
        """``boxoffice_grpc_calls_refused_total``, once per registry."""
        return Counter(
            "boxoffice_grpc_calls_refused",
            "Calls refused by the authorization table before doing anything, by caller role "
            '("none": no identity of this mesh).',
            ("grpc_service", "grpc_method", "role"),
            registry=registry,
        )

    def label_services(self, service_names: Sequence[str]) -> None:
        """Creates the refusal series of every method of ``service_names``
        for every role, so that a rate over them exists before the first
        refusal."""
        pool = descriptor_pool.Default()
        for name in service_names:
            prefix = f"/{name}/"
            methods = {m[len(prefix) :] for m in self._policy if m.startswith(prefix)}
            try:
                methods.update(m.name for m in pool.FindServiceByName(name).methods)
            except KeyError:
                pass  # a service of generic handlers: the table's methods
            for method in sorted(methods):
                for role in (*access.ROLES, _NO_ROLE):
                    self._refused.labels(name, method, role)

    def open_to_anyone(self, full_method: str) -> bool:
        return access.ANYONE in self._policy.get(full_method, frozenset())

    def check(self, full_method: str) -> Callable[[grpc.aio.ServicerContext[Any, Any]], Caller]:
        """The check of ``full_method``'s calls: it answers the caller, or
        raises PermissionDenied (a method missing from the table answers
        nobody)."""
        roles = self._policy.get(full_method, frozenset())
        resolve = self._resolver.resolve
        if access.ANYONE in roles:
            return resolve
        service, method = _split_method(full_method)

        def check(context: grpc.aio.ServicerContext[Any, Any]) -> Caller:
            who = resolve(context)
            if who.role is not None and who.role in roles:
                return who
            raise self._refuse(full_method, service, method, who)

        return check

    def _refuse(self, full_method: str, service: str, method: str, who: Caller) -> PermissionDenied:
        role = who.role or _NO_ROLE
        self._refused.labels(service, method, role).inc()
        now = time.monotonic()
        key = (full_method, role)
        if now - self._logged.get(key, -_REFUSAL_LOG_INTERVAL_SECONDS) >= _REFUSAL_LOG_INTERVAL_SECONDS:
            self._logged[key] = now
            _log.warning(
                "call refused",
                extra={"grpc_service": service, "grpc_method": method, "role": role, "identity": who.identity},
            )
        if who.role is None:
            return PermissionDenied(
                f"{full_method} needs a caller identity of this mesh",
                reason="CALLER_UNKNOWN",
                metadata={"method": full_method},
            )
        return PermissionDenied(
            f"{full_method} is not allowed to role {who.role!r}",
            reason="CALLER_NOT_ALLOWED",
            metadata={"method": full_method, "role": who.role},
        )


def _guarded(
    handler: grpc.RpcMethodHandler[Any, Any], check: Callable[[grpc.aio.ServicerContext[Any, Any]], Caller]
) -> grpc.RpcMethodHandler[Any, Any]:
    """A handler of the runtime's own services (reflection) behind the gate,
    without figures."""

    async def admit(context: grpc.aio.ServicerContext[Any, Any]) -> Caller:
        try:
            return check(context)
        except BoxofficeError as err:
            await context.abort_with_status(to_status(err))
            raise  # abort_with_status raises; never reached

    def unary(inner: Any) -> Any:
        async def behavior(request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> Any:
            with acting_as(await admit(context)):
                return await inner(request, context)

        return behavior

    def streaming(inner: Any) -> Any:
        async def behavior(request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> None:
            with acting_as(await admit(context)):
                await serve_stream(inner(request, context), context)

        return behavior

    serializers = {
        "request_deserializer": handler.request_deserializer,
        "response_serializer": handler.response_serializer,
    }
    if handler.unary_unary is not None:
        return grpc.unary_unary_rpc_method_handler(unary(handler.unary_unary), **serializers)
    if handler.stream_unary is not None:
        return grpc.stream_unary_rpc_method_handler(unary(handler.stream_unary), **serializers)
    if handler.unary_stream is not None:
        return grpc.unary_stream_rpc_method_handler(streaming(handler.unary_stream), **serializers)
    return grpc.stream_stream_rpc_method_handler(streaming(handler.stream_stream), **serializers)


def _grpc_type(handler: grpc.RpcMethodHandler[Any, Any]) -> str:
    if handler.request_streaming and handler.response_streaming:
        return "bidi_stream"
    if handler.request_streaming:
        return "client_stream"
    if handler.response_streaming:
        return "server_stream"
    return "unary"


# Failures that say something is wrong on this side (logged as warnings);
# the others are the caller's (bad input, a seat taken, a token expired).
_SERVER_SIDE = frozenset(
    {
        grpc.StatusCode.UNAVAILABLE,
        grpc.StatusCode.DEADLINE_EXCEEDED,
        grpc.StatusCode.INTERNAL,
        grpc.StatusCode.UNKNOWN,
        grpc.StatusCode.DATA_LOSS,
    }
)


class FailedCalls:
    """Logs each failed call once, with its code, reason and the request id
    the caller sent (``x-request-id``), at most ``per_second`` lines a
    second: under a flood the next line says how many were left out."""

    def __init__(self, per_second: int = 20, monotonic: Callable[[], float] = time.monotonic) -> None:
        self._budget = LogBudget(per_second, monotonic)

    def record(
        self,
        labels: tuple[str, str, str],
        code: grpc.StatusCode,
        reason: str,
        context: grpc.aio.ServicerContext[Any, Any],
    ) -> None:
        if not self._budget.allow():
            return
        request_id = None
        for key, value in tuple(context.invocation_metadata() or ()):
            if key == "x-request-id":
                request_id = value if isinstance(value, str) else value.decode(errors="replace")
                break
        _log.log(
            logging.WARNING if code in _SERVER_SIDE else logging.INFO,
            "call failed",
            extra={
                "grpc_service": labels[1],
                "grpc_method": labels[2],
                "code": code.name,
                "reason": reason,
                "request_id": request_id,
                **self._budget.left_out(),
            },
        )


class _WrappedGeneric(grpc.GenericRpcHandler):
    """A generic handler whose handlers come out wrapped."""

    def __init__(
        self,
        inner: grpc.GenericRpcHandler,
        wrap: Callable[[grpc.RpcMethodHandler[Any, Any], str], grpc.RpcMethodHandler[Any, Any]],
    ) -> None:
        self._inner = inner
        self._wrap = wrap

    def service(self, handler_call_details: grpc.HandlerCallDetails) -> grpc.RpcMethodHandler[Any, Any] | None:
        handler = self._inner.service(handler_call_details)
        if handler is None:
            return None
        return self._wrap(handler, handler_call_details.method)


class _Registrar:
    """The two methods of a server that generated ``add_*_to_server``
    functions (and health and reflection) call, wrapping what they add."""

    def __init__(
        self,
        server: grpc.aio.Server,
        wrap: Callable[[grpc.RpcMethodHandler[Any, Any], str], grpc.RpcMethodHandler[Any, Any]],
    ) -> None:
        self._server = server
        self._wrap = wrap

    def add_generic_rpc_handlers(self, generic_rpc_handlers: Sequence[grpc.GenericRpcHandler]) -> None:
        self._server.add_generic_rpc_handlers(tuple(_WrappedGeneric(h, self._wrap) for h in generic_rpc_handlers))

    def add_registered_method_handlers(
        self, service_name: str, method_handlers: Mapping[str, grpc.RpcMethodHandler[Any, Any]]
    ) -> None:
        self._server.add_registered_method_handlers(
            service_name, {name: self._wrap(h, f"/{service_name}/{name}") for name, h in method_handlers.items()}
        )


class CallWrapper:
    """Admits each call's caller through the gate, maps domain errors to
    rich statuses, sets each unary call's deadline scope, records
    go-grpc-prometheus metrics, and handles each call in the caller's trace
    (a server span when ``tracing`` records).

    It wraps each method handler once, when the handler is registered
    (:meth:`registrar`), not per call as a server interceptor would: a
    grpc.aio interceptor costs every call a coroutine chain and a lookup."""

    def __init__(
        self,
        metrics: GrpcServerMetrics,
        default_deadline_seconds: float,
        gate: Gate,
        streams: StreamBudget | None = None,
        tracing: Tracing | None = None,
        component: str = "",
    ) -> None:
        self._metrics = metrics
        self._tracing = tracing or Tracing.off()
        self._component = component
        self._default_deadline = default_deadline_seconds
        self._gate = gate
        self._streams = streams or StreamBudget(1 << 62)
        self.failed_calls = FailedCalls()
        # Wrapped handlers by method, built once (a service registers its
        # handlers both as a generic handler and by name: one wrapper serves both).
        self._wrapped: dict[str, tuple[grpc.RpcMethodHandler[Any, Any], grpc.RpcMethodHandler[Any, Any]]] = {}

    def registrar(self, server: grpc.aio.Server) -> grpc.aio.Server:
        """What a service's ``add_*_to_server`` is given instead of the
        server: every handler it adds reaches ``server`` wrapped."""
        return cast(grpc.aio.Server, _Registrar(server, self.wrap))

    def wrap(self, handler: grpc.RpcMethodHandler[Any, Any], full_method: str) -> grpc.RpcMethodHandler[Any, Any]:
        cached = self._wrapped.get(full_method)
        if cached is not None and cached[0] is handler:
            return cached[1]
        wrapped = self._wrap(handler, full_method)
        self._wrapped[full_method] = (handler, wrapped)
        return wrapped

    def _wrap(self, handler: grpc.RpcMethodHandler[Any, Any], full_method: str) -> grpc.RpcMethodHandler[Any, Any]:
        service, method = _split_method(full_method)
        if service.startswith("grpc."):
            # Health and reflection stay out of the figures; health answers anyone.
            return (
                handler if self._gate.open_to_anyone(full_method) else _guarded(handler, self._gate.check(full_method))
            )
        labels = (_grpc_type(handler), service, method)
        check = self._gate.check(full_method)
        # A request that does not decode reaches the behaviour as a
        # wire.Malformed, which it answers INVALID_ARGUMENT (not UNKNOWN with
        # a traceback).
        deserializer = wire.total(handler.request_deserializer)
        if handler.unary_unary is not None:
            return grpc.unary_unary_rpc_method_handler(
                self._wrap_unary(cast(Any, handler.unary_unary), labels, check),
                request_deserializer=deserializer,
                response_serializer=handler.response_serializer,
            )
        if handler.unary_stream is not None:
            return grpc.unary_stream_rpc_method_handler(
                self._wrap_stream(cast(Any, handler.unary_stream), labels, check),
                request_deserializer=deserializer,
                response_serializer=handler.response_serializer,
            )
        # A method of a shape the contracts do not use: behind the gate all the same.
        return _guarded(handler, check)

    def _wrap_unary(
        self,
        inner: Callable[[Any, grpc.aio.ServicerContext[Any, Any]], Awaitable[Any]],
        labels: tuple[str, str, str],
        check: Callable[[grpc.aio.ServicerContext[Any, Any]], Caller],
    ) -> Callable[[Any, grpc.aio.ServicerContext[Any, Any]], Awaitable[Any]]:
        default_deadline = self._default_deadline
        started, handled, handling_seconds = self._children(labels)
        check_reason = _reason_check(labels[1], labels[2])
        failed = self.failed_calls.record
        enter, leave, span_name, span_attributes = self._spans(labels)
        finish = self._finisher(leave, handled, handling_seconds)

        async def behavior(request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> Any:
            started.inc()
            began = time.perf_counter()
            code = grpc.StatusCode.OK
            recorded = False
            span, token = enter(span_name, context.invocation_metadata(), span_attributes)
            try:
                who = check(context)
                wire.check(request)
                acting = caller.enter(who)
                bounded = deadline.enter(deadline.clamp(context.time_remaining(), default_deadline))
                try:
                    return await inner(request, context)
                finally:
                    deadline.leave(bounded)
                    caller.leave(acting)
            except BoxofficeError as err:
                code = err.code
                check_reason(err)
                failed(labels, code, err.reason, context)
                recorded = finish(span, token, code, began)
                await context.abort_with_status(to_status(err))
            except TimeoutError:
                code = grpc.StatusCode.DEADLINE_EXCEEDED
                failed(labels, code, "DEADLINE_EXCEEDED", context)
                recorded = finish(span, token, code, began)
                await context.abort_with_status(
                    to_status(DeadlineExceeded("deadline exceeded", reason="DEADLINE_EXCEEDED"))
                )
            except asyncio.CancelledError:
                code = grpc.StatusCode.CANCELLED
                raise
            except grpc.aio.AbortError:
                code = _aborted_code(context)
                raise
            except Exception:
                code = grpc.StatusCode.INTERNAL
                _log.exception("unhandled error", extra={"grpc_service": labels[1], "grpc_method": labels[2]})
                recorded = finish(span, token, code, began)
                await context.abort_with_status(_internal_status())
            finally:
                if not recorded:
                    finish(span, token, code, began)

        return behavior

    @staticmethod
    def _finisher(
        leave: Any, handled: Callable[[grpc.StatusCode], Counter], seconds: Histogram
    ) -> Callable[[Any, Any, grpc.StatusCode, float], bool]:
        """What ends one call of a method: its span ended (``leave``) and its
        figures recorded (before a failure's status goes out: the caller may
        read them once it has the status)."""

        def finish(span: Any, token: Any, code: grpc.StatusCode, began: float) -> bool:
            leave(span, token, None if code is grpc.StatusCode.OK else code.name)
            handled(code).inc()
            seconds.observe(time.perf_counter() - began)
            return True

        return finish

    def _spans(self, labels: tuple[str, str, str]) -> tuple[Any, Any, str, dict[str, str]]:
        """What a call of one method needs of the tracing, resolved once."""
        attributes = {"rpc.system": "grpc", "rpc.service": labels[1], "rpc.method": labels[2]}
        if self._component:
            attributes["boxoffice.component"] = self._component
        return self._tracing.enter_call, self._tracing.exit, f"{labels[1]}/{labels[2]}", attributes

    def _children(
        self, labels: tuple[str, str, str]
    ) -> tuple[Counter, Callable[[grpc.StatusCode], Counter], Histogram]:
        """The metric children of one method, resolved once (``handled`` per
        code on first use)."""
        metrics = self._metrics
        by_code: dict[grpc.StatusCode, Counter] = {}

        def handled(code: grpc.StatusCode) -> Counter:
            child = by_code.get(code)
            if child is None:
                child = by_code[code] = metrics.handled.labels(*labels, go_code_name(code))
            return child

        return metrics.started.labels(*labels), handled, metrics.handling_seconds.labels(*labels)

    def _wrap_stream(
        self,
        inner: Callable[[Any, grpc.aio.ServicerContext[Any, Any]], AsyncIterator[Any]],
        labels: tuple[str, str, str],
        check: Callable[[grpc.aio.ServicerContext[Any, Any]], Caller],
    ) -> Callable[[Any, grpc.aio.ServicerContext[Any, Any]], Awaitable[None]]:
        started, handled, handling_seconds = self._children(labels)
        sent = self._metrics.msg_sent.labels(*labels).inc
        streams = self._streams
        check_reason = _reason_check(labels[1], labels[2])
        failed = self.failed_calls.record
        enter, leave, span_name, span_attributes = self._spans(labels)
        finish = self._finisher(leave, handled, handling_seconds)

        async def behavior(request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> None:
            started.inc()
            began = time.perf_counter()
            code = grpc.StatusCode.OK
            recorded = False
            span, token = enter(span_name, context.invocation_metadata(), span_attributes)
            try:
                who = check(context)
                wire.check(request)
                with acting_as(who), streams.hold():
                    await serve_stream(inner(request, context), context, sent)
            except BoxofficeError as err:
                code = err.code
                check_reason(err)
                failed(labels, code, err.reason, context)
                recorded = finish(span, token, code, began)
                await context.abort_with_status(to_status(err))
            except asyncio.CancelledError:
                code = grpc.StatusCode.CANCELLED
                raise
            except grpc.aio.AbortError:
                code = _aborted_code(context)
                raise
            except Exception:
                code = grpc.StatusCode.INTERNAL
                _log.exception("unhandled error", extra={"grpc_service": labels[1], "grpc_method": labels[2]})
                recorded = finish(span, token, code, began)
                await context.abort_with_status(_internal_status())
            finally:
                if not recorded:
                    finish(span, token, code, began)

        return behavior


async def serve_stream(
    messages: AsyncIterator[Any] | Awaitable[None],
    context: grpc.aio.ServicerContext[Any, Any],
    sent: Callable[[], None] | None = None,
) -> None:
    """Write a streaming handler's messages from the call's own task.

    gRPC iterates an async-generator handler without closing it when the
    call ends between two messages (the client cancelled, the deadline
    passed), so its ``finally`` blocks (a stream budget's place, the
    caller's context variable, a subscription) would run late, in another
    task, or fail. Served as a coroutine that writes each message itself,
    the handler's generator is closed here (:func:`lifecycle.close_here`)
    however the call ends. A handler that writes for itself (returns an
    awaitable) is awaited."""
    if not isinstance(messages, AsyncIterator):
        await messages
        return
    try:
        async for message in messages:
            await context.write(message)
            if sent is not None:
                sent()
    finally:
        await lifecycle.close_here(messages)


def _aborted_code(context: grpc.aio.ServicerContext[Any, Any]) -> grpc.StatusCode:
    code = context.code()
    if isinstance(code, grpc.StatusCode):
        return code
    return grpc.StatusCode.UNKNOWN


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
