"""The edge's HTTP plumbing: routing by the route table, request ids and
trace context, deadlines, body limits, the client's address, cookies, error
answers, access logs and RED metrics. What each route does is in
:mod:`edge_svc.endpoints`; this module is the same for all of them.

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
from types import MappingProxyType
from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from boxoffice import deadline
from boxoffice.errors import BoxofficeError, Internal, InvalidArgument, NotFound
from boxoffice.logs import LogBudget
from boxoffice.tracing import Tracing
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
    # The request's If-None-Match header, if it has one.
    if_none_match: str | None = None
    # Set by the handler once the fan is known, for logs.
    customer_id: str | None = None
    # Whether the request met the per-address limit (an error answer to one
    # that did not is counted against it all the same).
    limited: bool = False


Handler = Callable[[Ctx], Awaitable[Response]]
# Counts a request answered with an error against its client address's
# limit (RESOURCE_EXHAUSTED when the address is over it).
Refused = Callable[[str], Awaitable[None]]


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
        tracing: Tracing | None = None,
        on_refused: Refused | None = None,
    ) -> None:
        self._config = config
        self._on_refused = on_refused
        self._metrics = metrics
        self._tracing = tracing or Tracing.off()
        self._paths: list[tuple[re.Pattern[str], dict[str, tuple[Route, Handler]]]] = []
        templates: list[str] = []
        for route in ROUTES:
            handler = handlers[route.name]
            pattern = _compile(route.path)
            for compiled, methods in self._paths:
                if compiled.pattern == pattern.pattern:
                    methods[route.method] = (route, handler)
                    break
            else:
                self._paths.append((pattern, {route.method: (route, handler)}))
                templates.append(route.path)
        # Candidate paths by (segment count, first segments): a request's
        # path is matched only against the templates that can match it, in
        # the route table's order.
        self._buckets: dict[tuple[int, str, str], list[int]] = {}
        self._open: list[int] = []
        for index, template in enumerate(templates):
            key = _bucket_key(template)
            (self._open if key is None else self._buckets.setdefault(key, [])).append(index)
        for key, bucket in self._buckets.items():
            self._buckets[key] = sorted([*bucket, *self._open])
        self._seen: dict[tuple[str, str], tuple[Route, Handler, Mapping[str, str]]] = {}
        # Requests in flight, counted on the event loop's thread and read by
        # the gauge when scraped (no lock taken twice per request).
        self._in_flight = 0
        metrics.in_flight.set_function(lambda: self._in_flight)
        self._log_budget = LogBudget(50)
        self._randomness = _Randomness()
        # Metric children, resolved once per label set (the hot path).
        self._durations: dict[tuple[str, str], Any] = {}
        self._counts: dict[tuple[str, str, int], Any] = {}

    def _candidates(self, path: str) -> list[int]:
        key = _bucket_key(path)
        bucket = self._buckets.get(key) if key is not None else None
        return self._open if bucket is None else bucket

    def _match(self, method: str, path: str) -> tuple[Route, Handler, Mapping[str, str]]:
        """The route, its handler and the path's parameters; the answers of
        the most recent paths are remembered (the progress document's path
        is asked a million times)."""
        key = (method, path)
        seen = self._seen.get(key)
        if seen is None:
            seen = self._find(method, path)
            if len(self._seen) >= 4096:
                self._seen.clear()
            self._seen[key] = seen
        return seen

    def _find(self, method: str, path: str) -> tuple[Route, Handler, Mapping[str, str]]:
        paths = self._paths
        for index in self._candidates(path):
            pattern, methods = paths[index]
            found = pattern.match(path)
            if found is None:
                continue
            entry = methods.get(method) or (methods.get("GET") if method == "HEAD" else None)
            if entry is None:
                # HEAD is answered wherever GET is.
                allowed = {*methods, "HEAD"} if "GET" in methods else set(methods)
                raise errors.MethodNotAllowed(tuple(sorted(allowed)))
            # Read-only: one answer serves every request of the path.
            return entry[0], entry[1], MappingProxyType(found.groupdict())
        raise NotFound("no such route", reason="ROUTE_NOT_FOUND", metadata={"path": path[:200]})

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        started = time.perf_counter()
        status = 500
        route_label = "unmatched"
        method = scope["method"]
        self._in_flight += 1
        request = Request(scope, receive)
        # The request id and trace ids from the OS's randomness, read in
        # batches (one read per 256 requests).
        fresh = self._randomness.hex40()
        # The headers every request reads, in one pass over the raw list
        # (the first of each, as Starlette's Headers.get answers).
        heads = _heads(scope)
        request_id = _request_id(heads.get(b"x-request-id"), fresh[:32])
        traceparent, trace_id = _trace(heads.get(b"traceparent", ""), fresh[32:64], fresh[64:])
        # The request's trace, current while it is handled (for the calls it
        # makes and its log lines): a server span, child of the client's
        # traceparent, when spans are recorded.
        span, token, traceparent = self._tracing.enter_request(
            method, heads.get(b"traceparent"), traceparent, request_id, {"http.request.method": method}
        )
        trace_id = traceparent[3:35]
        ctx: Ctx | None = None
        proxies = self._config.trusted_proxies
        # The headers are read for X-Forwarded-For only through trusted proxies.
        address = client_ip(scope, request.headers if proxies else _NO_HEADERS, proxies)
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
                    client_ip=address,
                    origin=_origin(request, scope, heads.get(b"host", ""), proxies),
                    if_none_match=heads.get(b"if-none-match"),
                )
                with deadline.scope(self._timeout(heads.get(b"x-server-timeout"))):
                    response = await handler(ctx)
                for cookie in ctx.cookies_out:
                    response.headers.append("set-cookie", self._set_cookie(cookie))
                ctx.cookies_out.clear()
            except BoxofficeError as err:
                answered = await self._counted(err, ctx, address)
                response = self._error(answered, ctx, request_id, method, scope["path"])
            except Exception:
                _log.exception("request failed", extra={"request_id": request_id, "path": scope["path"]})
                failed = Internal("the edge failed unexpectedly", reason="INTERNAL")
                response = self._error(
                    await self._counted(failed, ctx, address), ctx, request_id, method, scope["path"]
                )
            # Appended as is: no handler sets it, so there is none to replace.
            response.raw_headers.append((b"x-request-id", request_id.encode("latin-1")))
            # The answer starts now (a stream's head goes first): its status
            # and duration are known without wrapping every message it sends.
            status = response.status_code
            self._duration(method, route_label).observe(time.perf_counter() - started)
            # What a stream need not keep while it lasts.
            del request, heads, fresh, traceparent, ctx
            await response(scope, receive, send)
        finally:
            self._in_flight -= 1
            self._requests(method, route_label, status).inc()
            if span is not None:
                span.update_name(f"{method} {route_label}")
                span.set_attribute("http.response.status_code", status)
            self._tracing.exit(span, token, None if status < 500 else str(status))

    async def _counted(self, err: BoxofficeError, ctx: Ctx | None, address: str) -> BoxofficeError:
        """An error answer spends the address's limit like any request (a
        flood of unreadable requests meets it); the limit's own refusal
        when the address is over it."""
        if self._on_refused is None or (ctx is not None and ctx.limited):
            return err
        try:
            await self._on_refused(address)
        except BoxofficeError as limited:
            return limited
        except Exception:
            _log.exception("counting a refused request failed")
        return err

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

    def _timeout(self, stated: str | None) -> float:
        limit = self._config.request_timeout_seconds
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


class _Randomness:
    """Bytes of the OS's randomness for request and trace ids, read 10 KB
    at a time instead of one system call per request."""

    _CHUNK = 40 * 256

    def __init__(self) -> None:
        self._buffer = b""
        self._at = 0

    def hex40(self) -> str:
        """80 hex digits from 40 fresh random bytes."""
        at = self._at
        if at + 40 > len(self._buffer):
            self._buffer, at = os.urandom(self._CHUNK), 0
        self._at = at + 40
        return self._buffer[at : at + 40].hex()


def _bucket_key(path: str) -> tuple[int, str, str] | None:
    """A path's (segment count, second and third segments), None when a
    template's own first segments hold a parameter."""
    segments = path.split("/", 3)
    count = path.count("/")
    first = segments[1] if len(segments) > 1 else ""
    second = segments[2] if len(segments) > 2 else ""
    if "{" in first or "{" in second:
        return None
    return count, first, second


_HEADS = frozenset({b"x-request-id", b"traceparent", b"x-server-timeout", b"host", b"if-none-match"})
_NO_HEADERS: Mapping[str, str] = {}


def _heads(scope: Scope) -> dict[bytes, str]:
    found: dict[bytes, str] = {}
    for name, value in scope["headers"]:
        if name in _HEADS and name not in found:
            found[name] = value.decode("latin-1")
    return found


def _request_id(given: str | None, fresh: str) -> str:
    if given is not None and _REQUEST_ID.match(given):
        return given
    return fresh


def _trace(given: str, fresh_trace: str, fresh_span: str) -> tuple[str, str]:
    """The traceparent to pass on (the caller's trace, a new span of ours)
    and the trace id for logs; a new trace when the caller sent none."""
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


def _origin(request: Request, scope: Scope, host: str, proxies: tuple[Network, ...]) -> str:
    scheme = scope.get("scheme", "http")
    if _trusted(_peer(scope), proxies):
        scheme = request.headers.get("x-forwarded-proto", scheme).split(",")[0].strip() or scheme
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
