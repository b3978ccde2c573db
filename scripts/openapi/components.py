"""The document's shared parts: the error shape and its responses, the
headers and parameters routes refer to, the security schemes, and the
introduction."""

from __future__ import annotations

import types
from collections.abc import Mapping, Sequence
from typing import Final

from edge_svc.routes import Who

from .schemas import Json

# The HTTP status of each canonical gRPC code (google.rpc.Code, as
# grpc-gateway and Google's front ends answer it).
HTTP_STATUS: Final[Mapping[str, int]] = types.MappingProxyType(
    {
        "OK": 200,
        "CANCELLED": 499,
        "UNKNOWN": 500,
        "INVALID_ARGUMENT": 400,
        "DEADLINE_EXCEEDED": 504,
        "NOT_FOUND": 404,
        "ALREADY_EXISTS": 409,
        "PERMISSION_DENIED": 403,
        "UNAUTHENTICATED": 401,
        "RESOURCE_EXHAUSTED": 429,
        "FAILED_PRECONDITION": 400,
        "ABORTED": 409,
        "OUT_OF_RANGE": 400,
        "UNIMPLEMENTED": 501,
        "INTERNAL": 500,
        "UNAVAILABLE": 503,
        "DATA_LOSS": 500,
    }
)


def ref(kind: str, name: str) -> Json:
    return {"$ref": f"#/components/{kind}/{name}"}


def json_content(schema: Json) -> Json:
    return {"application/json": {"schema": schema}}


def _error_response(description: str, *, retry_after: bool = False, allow: bool = False) -> Json:
    response: Json = {"description": description, "content": json_content(ref("schemas", "Error"))}
    headers: Json = {}
    if retry_after:
        headers["Retry-After"] = ref("headers", "RetryAfter")
    if allow:
        headers["Allow"] = ref("headers", "Allow")
    if headers:
        response["headers"] = headers
    return response


def components_responses() -> Json:
    return {
        "BadRequest": _error_response(
            "INVALID_ARGUMENT, FAILED_PRECONDITION or OUT_OF_RANGE: the request is malformed (the reason and "
            "`metadata.field` say what), or the state forbids it."
        ),
        "Unauthenticated": _error_response(
            "UNAUTHENTICATED: no valid credentials (session, bearer token, access token or signature)."
        ),
        "PermissionDenied": _error_response(
            "PERMISSION_DENIED: the caller may not do this (a cross-site request authenticated by cookie, an access "
            "token of another event or fan)."
        ),
        "NotFound": _error_response(
            "NOT_FOUND: it does not exist, or it is another fan's (answered alike); for POST /v1/session, "
            "development sign-in is off."
        ),
        "MethodNotAllowed": _error_response(
            "The path exists, not with this method (status UNIMPLEMENTED); `Allow` lists its methods.", allow=True
        ),
        "TooManyRequests": _error_response(
            "RESOURCE_EXHAUSTED: a rate limit, or seats sold out; `Retry-After` says when to try again.",
            retry_after=True,
        ),
        "Unavailable": _error_response(
            "UNAVAILABLE: a service or store is down, or the edge is draining; retry after `Retry-After` with "
            "backoff (a mutation with its idempotency key).",
            retry_after=True,
        ),
        "Error": _error_response("Any other error, with the HTTP status of its canonical code (see above)."),
    }


def components_headers() -> Json:
    return {
        "RetryAfter": {
            "description": "Whole seconds to wait before trying again.",
            "required": True,
            "schema": {"type": "integer", "minimum": 1},
        },
        "Allow": {
            "description": "The methods the path takes, comma-separated.",
            "required": True,
            "schema": {"type": "string"},
        },
        "CacheControlPublic": {
            "description": "`public` with a short `max-age` (and `stale-while-revalidate`): the same answer for "
            "everybody, which a CDN may keep.",
            "schema": {"type": "string"},
        },
        "CacheControlPrivate": {
            "description": "`private, no-store`: the caller's own answer.",
            "schema": {"type": "string"},
        },
        "ETag": {"description": "The version of the answer, for `If-None-Match`.", "schema": {"type": "string"}},
        "XRequestId": {
            "description": "The request's id: the caller's when it was well formed, else one the edge made.",
            "schema": {"type": "string"},
        },
    }


def components_parameters() -> Json:
    def header(name: str, description: str, schema: Json, *, required: bool = False) -> Json:
        return {"name": name, "in": "header", "required": required, "description": description, "schema": schema}

    return {
        "XServerTimeout": header(
            "X-Server-Timeout",
            "The caller's deadline in seconds (a positive decimal number), capped by the edge's own limit and carried into "
            "every gRPC call the request makes.",
            {"type": "string", "pattern": r"^([0-9]*[1-9][0-9]*(\.[0-9]*)?|[0-9]*\.[0-9]*[1-9][0-9]*)$"},
        ),
        "XRequestId": header(
            "X-Request-Id",
            "The request's id, in the logs, passed on and answered; the edge makes one when it is absent or malformed.",
            {"type": "string"},
        ),
        "Traceparent": header(
            "traceparent", "W3C Trace Context: the caller's trace, continued and passed on.", {"type": "string"}
        ),
        "IdempotencyKey": header(
            "Idempotency-Key",
            "The request's idempotency key (a confirmation's, a cancellation's), scoped to the fan: a replay returns "
            "the first answer.",
            {"type": "string", "minLength": 1, "maxLength": 255},
            required=True,
        ),
        "LastEventId": header(
            "Last-Event-ID", "The id of the last event received: the stream resumes after it.", {"type": "string"}
        ),
        "ProviderSignature": header(
            "Provider-Signature",
            'The provider\'s signature, passed on untouched: "t=<unix seconds>,v1=<hex hmac-sha256 of t.body>" '
            "(the header's name is configurable, BOXOFFICE_EDGE_WEBHOOK_SIGNATURE_HEADER).",
            {"type": "string"},
            required=True,
        ),
        "IfNoneMatch": header(
            "If-None-Match", "An ETag of an earlier answer: 304 when it is still current.", {"type": "string"}
        ),
    }


def security_schemes() -> Json:
    return {
        "session": {
            "type": "apiKey",
            "in": "cookie",
            "name": "bo_session",
            "description": "The browser's session cookie (set by sign-in).",
        },
        "bearer": {
            "type": "http",
            "scheme": "bearer",
            "bearerFormat": "JWT",
            "description": "An app's OpenID Connect ID or access token; the fan is its subject.",
        },
        "accessTokenCookie": {
            "type": "apiKey",
            "in": "cookie",
            "name": "bo_access",
            "description": "The event's access token, in the HttpOnly cookie set on admission.",
        },
        "deviceKey": {
            "type": "apiKey",
            "in": "header",
            "name": "Authorization",
            "description": "A gate device's key, as `Device <key>` (made by `boxoffice admin gate-device create`); "
            "the edge passes it on untouched and CheckInService decides.",
        },
        "accessTokenHeader": {
            "type": "apiKey",
            "in": "header",
            "name": "Boxoffice-Access-Token",
            "description": "The event's access token an app got on admission.",
        },
    }


def security(who: Who) -> list[Json]:
    fan: list[Json] = [{"session": []}, {"bearer": []}]
    if who is Who.FAN:
        return fan
    if who is Who.SHOPPER:
        tokens: list[Json] = [{"accessTokenCookie": []}, {"accessTokenHeader": []}]
        return [{**f, **t} for f in fan for t in tokens]
    if who is Who.DEVICE:
        return [{"deviceKey": []}]
    return []


def error_schemas(reasons: Mapping[str, Sequence[str]]) -> Json:
    names = [code for code in HTTP_STATUS if code != "OK"]
    listed = "; ".join(f"{package}: {', '.join(rs)}" for package, rs in reasons.items())
    return {
        "Error": {
            "type": "object",
            "description": "Google's JSON error shape.",
            "required": ["error"],
            "additionalProperties": False,
            "properties": {
                "error": {
                    "type": "object",
                    "required": ["code", "status", "message", "details"],
                    "additionalProperties": False,
                    "properties": {
                        "code": {
                            "type": "integer",
                            "minimum": 400,
                            "maximum": 599,
                            "description": "The HTTP status of the answer.",
                        },
                        "status": {
                            "type": "string",
                            "enum": sorted(names),
                            "description": "The canonical gRPC code's name.",
                        },
                        "message": {"type": "string", "description": "For people; may change."},
                        "details": {
                            "type": "array",
                            "minItems": 1,
                            "items": ref("schemas", "google.rpc.ErrorInfo"),
                        },
                    },
                }
            },
        },
        "google.rpc.ErrorInfo": {
            "type": "object",
            "description": "Why the call failed, for programs (AIP-193).",
            "required": ["@type", "reason", "domain"],
            "additionalProperties": False,
            "properties": {
                "@type": {"type": "string", "const": "type.googleapis.com/google.rpc.ErrorInfo"},
                "reason": {
                    "type": "string",
                    "description": "The reason, an ErrorReason value's name without its `ERROR_REASON_` prefix. "
                    "Branch on it after the status; a new reason may be added at any time, so treat an unknown "
                    f"one as its status says. Published reasons (docs/errors.md says when each is answered): {listed}.",
                },
                "domain": {"type": "string", "const": "boxoffice"},
                "metadata": {
                    "type": "object",
                    "additionalProperties": {"type": "string"},
                    "description": "The values the message mentions, under the keys each reason lists.",
                },
            },
        },
    }


def info_description() -> str:
    rows = "\n".join(f"| `{code}` | {status} |" for code, status in HTTP_STATUS.items())
    return f"""\
The HTTP/JSON front door of boxoffice for browsers and apps. Bodies are the proto3 JSON mapping of the
contracts' messages (lowerCamelCase names; 64-bit integers as decimal strings, which requests may also send as
numbers; enums by name; timestamps in RFC 3339; durations like `"1.500s"`); answers include fields at their
default values. Each route that is the HTTP form of an RPC says which (`x-boxoffice-rpc`), and the RPC carries
the same method and path in its `google.api.http` annotation. Fields the edge fills itself (the fan, the access
token, path values, the idempotency key) may not be sent in a body.

Who may call a route is `x-boxoffice-who` (public, fan, shopper, provider, device, operations) and its security
requirement; whom the services see the call acting for is `x-boxoffice-acting-as`. A fan's hold, payment or
tickets answer 404 to another fan, exactly as ones that do not exist. A mutating request authenticated by cookie
must come from the edge's own site (Origin / Sec-Fetch-Site), else 403. An unsupported method on a known path
answers 405 with `Allow`.

Errors are Google's JSON error shape (`Error`) with the HTTP status of the canonical code:

| code | HTTP status |
| --- | --- |
{rows}

RESOURCE_EXHAUSTED and UNAVAILABLE answers carry `Retry-After`."""
