"""The one wrapper put around every method handler as it is registered:
the gate, the request's check, the caller's and the deadline's scope, the
domain error as a rich status, go-grpc-prometheus figures, the call's span,
and a failed call's log line."""

from __future__ import annotations

import asyncio
import logging
import time
import warnings
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from typing import Any, cast

import grpc
from prometheus_client import Counter, Histogram

from boxoffice import caller, deadline, lifecycle, wire
from boxoffice.caller import Caller, acting_as
from boxoffice.errors import (
    BoxofficeError,
    DeadlineExceeded,
    Internal,
    UnpublishedReasonWarning,
    package_of,
    published_reasons,
    to_status,
)
from boxoffice.logs import LogBudget
from boxoffice.metrics import GrpcServerMetrics
from boxoffice.server._gate import Gate, split_method
from boxoffice.tracing import Tracing
from boxoffice.wire import StreamBudget

_log = logging.getLogger("boxoffice.server")


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
        service, method = split_method(full_method)
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
                self._wrap_call(cast(Any, handler.unary_unary), labels, check, streaming=False),
                request_deserializer=deserializer,
                response_serializer=handler.response_serializer,
            )
        if handler.unary_stream is not None:
            return grpc.unary_stream_rpc_method_handler(
                self._wrap_call(cast(Any, handler.unary_stream), labels, check, streaming=True),
                request_deserializer=deserializer,
                response_serializer=handler.response_serializer,
            )
        # A method of a shape the contracts do not use: behind the gate all the same.
        return _guarded(handler, check)

    def _wrap_call(
        self,
        inner: Callable[[Any, grpc.aio.ServicerContext[Any, Any]], Any],
        labels: tuple[str, str, str],
        check: Callable[[grpc.aio.ServicerContext[Any, Any]], Caller],
        *,
        streaming: bool,
    ) -> Callable[[Any, grpc.aio.ServicerContext[Any, Any]], Awaitable[Any]]:
        """The behaviour of one method's calls, unary or server-streaming:
        the caller admitted and the request checked, then every way the call
        ends (a domain error's status, an unexpected exception's INTERNAL, a
        cancel, an abort) traced, counted and logged once. A unary call runs
        as its caller within its deadline, a TimeoutError answering
        DEADLINE_EXCEEDED; a stream runs as its caller holding a place of
        the stream budget, each message counted."""
        default_deadline = self._default_deadline
        started, handled, handling_seconds = self._children(labels)
        sent = self._metrics.msg_sent.labels(*labels).inc if streaming else None
        streams = self._streams
        # A stream has no deadline scope: a TimeoutError there is unexpected.
        deadline_errors: tuple[type[Exception], ...] = () if streaming else (TimeoutError,)
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
                if streaming:
                    with acting_as(who), streams.hold():
                        await serve_stream(inner(request, context), context, sent)
                    return None
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
            except deadline_errors:
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
