"""The edge's HTTP plumbing: routing by the route table, request ids and
trace context, deadlines, body limits, the client's address, cookies, error
answers, access logs and RED metrics. What each route does is in
:mod:`edge_svc.handlers`; this module is the same for all of them.

The app is a plain ASGI callable over Starlette's request and response
classes, run by uvicorn (httptools) in the same event loop as grpc.aio.
"""

from __future__ import annotations

import ipaddress
import logging
import os
import re
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from boxoffice import deadline
from boxoffice.errors import BoxofficeError, Internal, InvalidArgument, NotFound
from boxoffice.logs import LogBudget
from edge_svc import errors
from edge_svc.config import EdgeConfig, Network
from edge_svc.metrics import EdgeMetrics
from edge_svc.routes import ROUTES, Route

_log = logging.getLogger("boxoffice.edge.http")

_REQUEST_ID = re.compile(r"^[A-Za-z0-9._:-]{1,128}$")
# version-trace id-parent id-flags; a later version may add fields after a dash.
_TRACEPARENT = re.compile(r"^([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})(-.*)?$")
_PARAM = re.compile(r"\{([a-z_]+)\}")

PRIVATE = "private, no-store"


@dataclass(slots=True)
class Cookie:
    name: str
    value: str
    max_age: int | None
    path: str = "/"
    http_only: bool = True


@dataclass(slots=True)
class Ctx:
    """One request, as a handler sees it."""

    request: Request
    route: Route
    params: Mapping[str, str]
    request_id: str
    traceparent: str
    trace_id: str
    client_ip: str
    # The request's origin as the client sees it (scheme://host).
    origin: str
    cookies_out: list[Cookie] = field(default_factory=list)
    # Set by the handler once the fan is known, for logs.
    customer_id: str | None = None


Handler = Callable[[Ctx], Awaitable[Response]]


def _compile(template: str) -> re.Pattern[str]:
    pattern = ""
    last = 0
    for match in _PARAM.finditer(template):
        pattern += re.escape(template[last : match.start()]) + f"(?P<{match.group(1)}>[^/]+)"
        last = match.end()
    return re.compile("^" + pattern + re.escape(template[last:]) + "$")


class EdgeApp:
    """The ASGI application: every route of :data:`edge_svc.routes.ROUTES`."""

    def __init__(
        self,
        config: EdgeConfig,
        metrics: EdgeMetrics,
        handlers: Mapping[str, Handler],
        *,
        extra: Mapping[tuple[str, str], Handler] | None = None,
    ) -> None:
        self._config = config
        self._metrics = metrics
        self._paths: list[tuple[re.Pattern[str], dict[str, tuple[Route, Handler]]]] = []
        for route in ROUTES:
            handler = handlers[route.name]
            pattern = _compile(route.path)
            for compiled, methods in self._paths:
                if compiled.pattern == pattern.pattern:
                    methods[route.method] = (route, handler)
                    break
            else:
                self._paths.append((pattern, {route.method: (route, handler)}))
        self._log_budget = LogBudget(50)
        # Metric children, resolved once per label set (the hot path).
        self._durations: dict[tuple[str, str], Any] = {}
        self._counts: dict[tuple[str, str, int], Any] = {}

    def _match(self, method: str, path: str) -> tuple[Route, Handler, dict[str, str]]:
        for pattern, methods in self._paths:
            found = pattern.match(path)
            if found is None:
                continue
            entry = methods.get(method) or (methods.get("GET") if method == "HEAD" else None)
            if entry is None:
                # HEAD is answered wherever GET is.
                allowed = {*methods, "HEAD"} if "GET" in methods else set(methods)
                raise errors.MethodNotAllowed(tuple(sorted(allowed)))
            return entry[0], entry[1], found.groupdict()
        raise NotFound("no such route", reason="ROUTE_NOT_FOUND", metadata={"path": path[:200]})

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        started = time.perf_counter()
        status = 500
        metrics = self._metrics
        route_label = "unmatched"
        method = scope["method"]
        metrics.in_flight.inc()
        request = Request(scope, receive)
        # One read of the OS's randomness for the request id and trace ids.
        fresh = os.urandom(40).hex()
        request_id = _request_id(request, fresh[:32])
        traceparent, trace_id = _trace(request, fresh[32:64], fresh[64:])
        ctx: Ctx | None = None
        try:
            try:
                route, handler, params = self._match(method, scope["path"])
                route_label = route.path
                ctx = Ctx(
                    request=request,
                    route=route,
                    params=params,
                    request_id=request_id,
                    traceparent=traceparent,
                    trace_id=trace_id,
                    client_ip=client_ip(scope, request.headers, self._config.trusted_proxies),
                    origin=_origin(request, scope, self._config.trusted_proxies),
                )
                with deadline.scope(self._timeout(request)):
                    response = await handler(ctx)
                for cookie in ctx.cookies_out:
                    response.headers.append("set-cookie", self._set_cookie(cookie))
            except BoxofficeError as err:
                response = self._error(err, ctx, request_id, method, scope["path"])
            except Exception:
                _log.exception("request failed", extra={"request_id": request_id, "path": scope["path"]})
                response = self._error(
                    Internal("the edge failed unexpectedly", reason="INTERNAL"), ctx, request_id, method, scope["path"]
                )
            response.headers["x-request-id"] = request_id
            # The answer starts now (a stream's head goes first): its status
            # and duration are known without wrapping every message it sends.
            status = response.status_code
            self._duration(method, route_label).observe(time.perf_counter() - started)
            await response(scope, receive, send)
        finally:
            metrics.in_flight.dec()
            self._requests(method, route_label, status).inc()

    def _duration(self, method: str, route: str) -> Any:
        key = (method, route)
        child = self._durations.get(key)
        if child is None:
            child = self._durations[key] = self._metrics.duration.labels(method, route)
        return child

    def _requests(self, method: str, route: str, status: int) -> Any:
        key = (method, route, status)
        child = self._counts.get(key)
        if child is None:
            if len(self._counts) > 10_000:  # methods and statuses are the client's to choose
                self._counts.clear()
            child = self._counts[key] = self._metrics.requests.labels(method, route, str(status))
        return child

    def _set_cookie(self, cookie: Cookie) -> str:
        """A Set-Cookie header. Names and values are the edge's own (base64url
        and dots), so no quoting is needed."""
        parts = [f"{cookie.name}={cookie.value}", f"Path={cookie.path}", "SameSite=lax"]
        if cookie.max_age is not None:
            parts.append(f"Max-Age={cookie.max_age}")
            if cookie.max_age <= 0:
                parts.append("Expires=Thu, 01 Jan 1970 00:00:00 GMT")
        if cookie.http_only:
            parts.append("HttpOnly")
        if self._config.secure_cookies:
            parts.append("Secure")
        return "; ".join(parts)

    def _timeout(self, request: Request) -> float:
        limit = self._config.request_timeout_seconds
        stated = request.headers.get("x-server-timeout")
        if stated is None:
            return limit
        try:
            seconds = float(stated)
        except ValueError:
            seconds = -1.0
        if not seconds > 0 or seconds != seconds:
            raise InvalidArgument(
                "X-Server-Timeout must be a positive number of seconds",
                reason="INVALID_HEADER",
                metadata={"header": "X-Server-Timeout"},
            )
        return min(seconds, limit)

    def _error(self, err: BoxofficeError, ctx: Ctx | None, request_id: str, method: str, path: str) -> Response:
        status, body, headers = errors.render(err)
        if status >= 500 or (status not in (401, 404) and self._log_budget.allow()):
            _log.log(
                logging.ERROR if status >= 500 else logging.INFO,
                "request failed",
                extra={
                    "request_id": request_id,
                    "trace_id": None if ctx is None else ctx.trace_id,
                    "method": method,
                    "route": None if ctx is None else ctx.route.path,
                    "status": status,
                    "code": err.code.name,
                    "reason": err.reason,
                    "customer_id": None if ctx is None else ctx.customer_id,
                    **self._log_budget.left_out(),
                },
            )
        response = Response(body, status_code=status, media_type="application/json", headers=headers)
        response.headers["cache-control"] = PRIVATE
        return response


def _request_id(request: Request, fresh: str) -> str:
    given = request.headers.get("x-request-id")
    if given is not None and _REQUEST_ID.match(given):
        return given
    return fresh


def _trace(request: Request, fresh_trace: str, fresh_span: str) -> tuple[str, str]:
    """The traceparent to pass on (the caller's trace, a new span of ours)
    and the trace id for logs; a new trace when the caller sent none."""
    given = request.headers.get("traceparent", "")
    found = _TRACEPARENT.match(given)
    # Version 00 is exactly four fields; a later one is read for its first four
    # (W3C Trace Context, "versioning of traceparent"); ff is no version.
    if (
        found is not None
        and found.group(1) != "ff"
        and (found.group(1) != "00" or found.group(5) is None)
        and found.group(2) != "0" * 32
        and found.group(3) != "0" * 16
    ):
        # Passed on as version 00, whose only flag is "sampled".
        trace_id, flags = found.group(2), f"{int(found.group(4), 16) & 1:02x}"
    else:
        trace_id, flags = fresh_trace, "01"
    return f"00-{trace_id}-{fresh_span}-{flags}", trace_id


def _peer(scope: Scope) -> str:
    client = scope.get("client")
    return str(client[0]) if client else ""


def _trusted(address: str, proxies: tuple[Network, ...]) -> bool:
    if not proxies or not address:
        return False
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return False
    return any(ip in network for network in proxies)


def client_ip(scope: Scope, headers: Mapping[str, str], proxies: tuple[Network, ...]) -> str:
    """The client's address: the peer's, or, when the peer is a trusted
    proxy, the last address of X-Forwarded-For that is not a trusted proxy."""
    address = _peer(scope)
    if not _trusted(address, proxies):
        return address
    forwarded = headers.get("x-forwarded-for", "")
    for hop in reversed([part.strip() for part in forwarded.split(",") if part.strip()]):
        try:
            ipaddress.ip_address(hop)
        except ValueError:
            return address
        if not _trusted(hop, proxies):
            return hop
        address = hop
    return address


def _origin(request: Request, scope: Scope, proxies: tuple[Network, ...]) -> str:
    scheme = scope.get("scheme", "http")
    if _trusted(_peer(scope), proxies):
        scheme = request.headers.get("x-forwarded-proto", scheme).split(",")[0].strip() or scheme
    host = request.headers.get("host", "")
    return f"{scheme}://{host}"


async def read_body(request: Request, limit: int) -> bytes:
    """The body, refused (INVALID_ARGUMENT BODY_TOO_LARGE) past ``limit`` bytes."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise _too_large(limit)
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise _too_large(limit)
        chunks.append(chunk)
    return b"".join(chunks)


def _too_large(limit: int) -> InvalidArgument:
    return InvalidArgument(
        f"the body is larger than {limit} bytes", reason="BODY_TOO_LARGE", metadata={"limit_bytes": str(limit)}
    )


def json_response(body: bytes, *, cache_control: str = PRIVATE, headers: Mapping[str, str] | None = None) -> Response:
    response = Response(body, media_type="application/json", headers=dict(headers or {}))
    response.headers["cache-control"] = cache_control
    return response


def attrs(ctx: Ctx) -> dict[str, Any]:
    """Log fields of a request."""
    return {"request_id": ctx.request_id, "trace_id": ctx.trace_id, "route": ctx.route.path}
