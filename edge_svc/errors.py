"""Errors on HTTP: Google's JSON error shape with the status its canonical
code maps to, built in one place from a :class:`BoxofficeError` (the edge's
own, or a service's carried back by :func:`boxoffice.errors.from_rpc_error`).

``{"error": {"code": 400, "status": "FAILED_PRECONDITION", "message": "...",
"details": [{"@type": "type.googleapis.com/google.rpc.ErrorInfo", "reason":
"SEAT_UNAVAILABLE", "domain": "boxoffice", "metadata": {...}}]}}``
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping

import grpc

from boxoffice.errors import (
    ERROR_DOMAIN,
    BoxofficeError,
    InvalidArgument,
    NotFound,
    ResourceExhausted,
    Unauthenticated,
    Unavailable,
)

# The HTTP status of each canonical code (as google.rpc.Code documents it and
# grpc-gateway answers).
HTTP_STATUS: Mapping[grpc.StatusCode, int] = {
    grpc.StatusCode.OK: 200,
    grpc.StatusCode.CANCELLED: 499,
    grpc.StatusCode.UNKNOWN: 500,
    grpc.StatusCode.INVALID_ARGUMENT: 400,
    grpc.StatusCode.DEADLINE_EXCEEDED: 504,
    grpc.StatusCode.NOT_FOUND: 404,
    grpc.StatusCode.ALREADY_EXISTS: 409,
    grpc.StatusCode.PERMISSION_DENIED: 403,
    grpc.StatusCode.UNAUTHENTICATED: 401,
    grpc.StatusCode.RESOURCE_EXHAUSTED: 429,
    grpc.StatusCode.FAILED_PRECONDITION: 400,
    grpc.StatusCode.ABORTED: 409,
    grpc.StatusCode.OUT_OF_RANGE: 400,
    grpc.StatusCode.UNIMPLEMENTED: 501,
    grpc.StatusCode.INTERNAL: 500,
    grpc.StatusCode.UNAVAILABLE: 503,
    grpc.StatusCode.DATA_LOSS: 500,
}

# Retry-After for codes that ask the client to come back later, when the
# error does not say (seconds).
DEFAULT_RETRY_AFTER_SECONDS = 1
# RESOURCE_EXHAUSTED reasons that coming back later does not cure (the
# error catalogue, docs/errors.md: SOLD_OUT is not retried, NOT_ENOUGH_SEATS
# asks for fewer): answered without Retry-After.
NOT_RETRIED = frozenset({"SOLD_OUT", "NOT_ENOUGH_SEATS"})


class MethodNotAllowed(BoxofficeError):
    """The path exists, not with this method: HTTP 405 with ``Allow``."""

    code = grpc.StatusCode.UNIMPLEMENTED

    def __init__(self, allow: tuple[str, ...]) -> None:
        super().__init__(
            f"this path takes {', '.join(allow)}", reason="METHOD_NOT_ALLOWED", metadata={"allow": ", ".join(allow)}
        )
        self.allow = allow


def http_status(err: BoxofficeError) -> int:
    if isinstance(err, MethodNotAllowed):
        return 405
    return HTTP_STATUS.get(err.code, 500)


def render(err: BoxofficeError) -> tuple[int, bytes, dict[str, str]]:
    """Status, JSON body and extra headers of an error answer."""
    status = http_status(err)
    body = {
        "error": {
            "code": status,
            "status": err.code.name,
            "message": err.message,
            "details": [
                {
                    "@type": "type.googleapis.com/google.rpc.ErrorInfo",
                    "reason": err.reason,
                    "domain": ERROR_DOMAIN,
                    "metadata": dict(err.metadata),
                }
            ],
        }
    }
    headers: dict[str, str] = {}
    if err.code in (grpc.StatusCode.RESOURCE_EXHAUSTED, grpc.StatusCode.UNAVAILABLE) and err.reason not in NOT_RETRIED:
        headers["retry-after"] = str(retry_after_seconds(err))
    if isinstance(err, MethodNotAllowed):
        headers["allow"] = ", ".join(err.allow)
    return status, json.dumps(body, separators=(",", ":")).encode(), headers


def retry_after_seconds(err: BoxofficeError) -> int:
    """Whole seconds to wait: the error's own hint when it carries one."""
    for key in ("retry_after_seconds", "retry_after"):
        value = err.metadata.get(key)
        if value:
            try:
                return max(1, min(3600, math.ceil(float(value))))
            except (ValueError, OverflowError):
                break
    return DEFAULT_RETRY_AFTER_SECONDS


def not_found(resource: str) -> NotFound:
    """Another fan's thing, answered exactly as one that does not exist."""
    return NotFound(f"no such {resource}", reason="NOT_FOUND", metadata={"resource": resource})


def not_signed_in() -> Unauthenticated:
    return Unauthenticated("sign in first", reason="NOT_SIGNED_IN")


def malformed_json(detail: str) -> InvalidArgument:
    return InvalidArgument(
        "the body is not the JSON this route takes", reason="MALFORMED_JSON", metadata={"detail": detail[:200]}
    )


def too_many(scope: str, retry_after: float) -> ResourceExhausted:
    return ResourceExhausted(
        "too many requests; slow down",
        reason="TOO_MANY_REQUESTS",
        metadata={"scope": scope, "retry_after_seconds": str(max(1, math.ceil(retry_after)))},
    )


def draining() -> Unavailable:
    return Unavailable("the edge is shutting down; reconnect", reason="DRAINING")
