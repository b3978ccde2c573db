"""One route's operation: its parameters, request body, answers and
headers, for a route that is the HTTP form of an RPC and for one of the
edge's own."""

from __future__ import annotations

import types
from collections.abc import Mapping
from typing import Final

from google.protobuf.descriptor import Descriptor, MethodDescriptor

from edge_svc.routes import Cache, Route, Who

from .components import json_content, ref
from .contracts import is_map, path_fields
from .schemas import DURATION, SIGNED_64, TIMESTAMP, UNSIGNED_64, Json, Schemas

V1 = "/v1/"


# The cookies a route's answer sets (HttpOnly, SameSite=Lax, Secure outside
# loopback): bo_session (the session), bo_access (the event's access token),
# bo_place (the fan's place, so that any replica answers their polls).
_SETS_COOKIES: Final[Mapping[str, str]] = types.MappingProxyType(
    {
        "CreateSession": "The session cookie `bo_session`.",
        "DeleteSession": "The cookies `bo_session`, `bo_access` and `bo_place`, cleared.",
        "JoinQueue": "While the fan waits: their place, in the cookie `bo_place`.",
        "GetQueuePosition": "Once admitted: the access token, in the cookie `bo_access` (a browser's answer then "
        "carries no token); while waiting: the place, in `bo_place`.",
        "LeaveQueue": "The cookies `bo_place` and `bo_access`, cleared.",
    }
)


# Where the edge takes the request fields it fills itself (Route.edge_fields).
_FILLED_FROM: Final[Mapping[str, str]] = types.MappingProxyType(
    {
        "customer_id": "the signed-in fan",
        "client_id": "the client's address",
        "access_token": "the access-token cookie or the Boxoffice-Access-Token header",
        "idempotency_key": "the Idempotency-Key header",
        "signature": "the Provider-Signature header",
        "body": "the raw request body",
    }
)


def common_parameters() -> list[Json]:
    return [ref("parameters", n) for n in ("XServerTimeout", "XRequestId", "Traceparent")]


def path_parameter(route: Route, name: str, request: Descriptor | None, schemas: Schemas) -> Json:
    field = request.fields_by_name.get(name) if request is not None else None
    if request is not None and field is None:
        raise ValueError(f"{route.name}: path field {name} is not a field of {request.full_name}")
    schema: Json = {"type": "string"}
    if field is not None and (field.type in SIGNED_64 or field.type in UNSIGNED_64):
        schema = {"type": "string", "format": "int64", "pattern": r"^[0-9]+$"}
    parameter: Json = {"name": name, "in": "path", "required": True, "schema": schema}
    description = schemas.comment(field.full_name) if field is not None else ""
    if description:
        parameter["description"] = description
    return parameter


def _query_parameters(message: Descriptor, exclude: frozenset[str], schemas: Schemas, prefix: str = "") -> list[Json]:
    parameters: list[Json] = []
    for field in message.fields:
        if field.name in exclude:
            continue
        name = f"{prefix}{field.json_name}"
        nested = field.message_type
        if (
            nested is not None
            and not is_map(field)
            and not field.is_repeated
            and nested.full_name not in (TIMESTAMP, DURATION)
        ):
            parameters += _query_parameters(nested, frozenset(), schemas, f"{name}.")
            continue
        if is_map(field):
            raise ValueError(f"{field.full_name}: a map cannot be a query parameter")
        schema = schemas.field_schema(field, request=True)
        description = schema.pop("description", "")
        parameter: Json = {"name": name, "in": "query", "required": False, "schema": schema}
        if field.is_repeated:
            parameter["style"] = "form"
            parameter["explode"] = True
        if description:
            parameter["description"] = description
        parameters.append(parameter)
    return parameters


def _filled_by_edge(route: Route, request: Descriptor) -> str:
    paths = set(path_fields(route.path))
    parts = []
    for name in route.edge_fields:
        field = request.fields_by_name.get(name)
        if field is None:
            raise ValueError(f"{route.name}: edge field {name} is not a field of {request.full_name}")
        source = "the path" if name in paths else _FILLED_FROM.get(name, "the edge")
        parts.append(f"`{field.json_name}` ({source})")
    return f"The edge fills {', '.join(parts)}; a request may not set them." if parts else ""


def success_headers(route: Route) -> Json:
    public = route.cache is Cache.PUBLIC
    headers: Json = {"Cache-Control": ref("headers", "CacheControlPublic" if public else "CacheControlPrivate")}
    if public:
        headers["ETag"] = ref("headers", "ETag")
    if route.path.startswith(V1):
        headers["X-Request-Id"] = ref("headers", "XRequestId")
    cookies = _SETS_COOKIES.get(route.name)
    if cookies is not None:
        headers["Set-Cookie"] = {
            "description": f"{cookies} Cookies are HttpOnly, SameSite=Lax, and Secure outside loopback.",
            "schema": {"type": "string"},
        }
    return headers


def error_responses(route: Route, has_path_params: bool) -> Json:
    responses: Json = {"default": ref("responses", "Error")}
    if not route.path.startswith(V1):
        return responses
    responses["400"] = ref("responses", "BadRequest")
    if route.who in (Who.FAN, Who.SHOPPER, Who.PROVIDER, Who.DEVICE):
        responses["401"] = ref("responses", "Unauthenticated")
    # Denied: a cookie-authenticated change from another site, a token of
    # another event or fan, a fan on a device's route, another event's device.
    if route.who in (Who.FAN, Who.SHOPPER, Who.DEVICE) or route.name == "CreateSession":
        responses["403"] = ref("responses", "PermissionDenied")
    if has_path_params or route.name == "CreateSession":
        responses["404"] = ref("responses", "NotFound")
    responses["429"] = ref("responses", "TooManyRequests")
    responses["503"] = ref("responses", "Unavailable")
    return responses


def edge_operation(route: Route) -> tuple[Json, Json | None, Json]:
    """The parameters-free parts of a route of the edge's own: (200 response,
    request body, extra responses)."""
    text: Json = {"text/plain": {"schema": {"type": "string"}}}
    session = json_content(ref("schemas", "Session"))
    if route.name == "CreateSession":
        body: Json = {"required": True, "content": json_content(ref("schemas", "CreateSessionRequest"))}
        return {"description": "Signed in: the session cookie is set.", "content": session}, body, {}
    if route.name == "GetSession":
        return {"description": "The signed-in fan.", "content": session}, None, {}
    if route.name == "DeleteSession":
        return {"description": "Signed out.", "content": json_content(ref("schemas", "Empty"))}, None, {}
    if route.name == "GetHealth":
        return {"description": "The process is alive.", "content": text}, None, {}
    if route.name == "GetReadiness":
        not_ready = {"description": "Starting or draining: send no traffic.", "content": text}
        return {"description": "Ready for traffic.", "content": text}, None, {"503": not_ready}
    if route.name == "GetMetrics":
        return (
            {"description": "The Prometheus text exposition format.", "content": text},
            None,
            {},
        )
    if route.name == "GetOpenApi":
        return {"description": "This document.", "content": json_content({"type": "object"})}, None, {}
    if route.name == "GetQueueChallenge":
        content = json_content(ref("schemas", "QueueChallenge"))
        return (
            {"description": "The challenge a join or a fan-draw registration must answer.", "content": content},
            None,
            {},
        )
    if route.name in ("GetIndexPage", "GetEventPage", "GetGatePage", "GetClaimPage"):
        html: Json = {"text/html": {"schema": {"type": "string"}}}
        return {"description": "The page (HTML; its scripts and styles are assets).", "content": html}, None, {}
    if route.name == "GetAsset":
        asset: Json = {"*/*": {"schema": {"type": "string"}}}
        missing = {"description": "No asset has this name.", "content": asset}
        return (
            {"description": "The asset, cacheable forever under its hashed name.", "content": asset},
            None,
            {"404": missing},
        )
    raise ValueError(f"{route.name}: a route of the edge's own that this generator does not know")


def edge_schemas() -> Json:
    return {
        "Session": {
            "type": "object",
            "description": "The signed-in fan.",
            "required": ["customerId", "expiresAt"],
            "additionalProperties": False,
            "properties": {
                "customerId": {"type": "string", "description": "The fan, as the services see them."},
                "expiresAt": {"type": "string", "format": "date-time", "description": "When the session ends."},
            },
        },
        "QueueChallenge": {
            "type": "object",
            "description": (
                "The challenge a join or a fan-draw registration must answer in its Boxoffice-Proof header. "
                "kind none: nothing to do. "
                "kind proof-of-work: find a nonce such that SHA-256(challenge + ':' + nonce) starts with "
                "difficultyBits zero bits and send challenge:nonce; each challenge is accepted once, for this "
                "fan and event, until expiresAt. kind external: the external challenge's token."
            ),
            "required": ["kind"],
            "additionalProperties": False,
            "properties": {
                "kind": {"type": "string", "enum": ["none", "proof-of-work", "external"]},
                "challenge": {"type": "string"},
                "difficultyBits": {"type": "integer", "minimum": 1, "maximum": 32},
                "expiresAt": {"type": "string", "format": "date-time"},
                "algorithm": {"type": "string", "enum": ["sha256-leading-zero-bits"]},
            },
        },
        "CreateSessionRequest": {
            "type": "object",
            "description": (
                "Development sign-in: the name becomes the fan's customer id; the optional email is where "
                "the fan's tickets are e-mailed (taken as verified)."
            ),
            "required": ["name"],
            "additionalProperties": False,
            "properties": {
                "name": {"type": "string", "minLength": 1, "maxLength": 64},
                "email": {"type": "string", "format": "email", "minLength": 3, "maxLength": 254},
            },
        },
        "Empty": {"type": "object", "additionalProperties": False, "properties": {}},
    }


def rpc_operation(
    route: Route, method: MethodDescriptor, schemas: Schemas
) -> tuple[Json, Json | None, list[Json], list[str]]:
    """(200 response, request body, query and header parameters, description) of an RPC's route."""
    request = method.input_type
    exclude = frozenset(route.edge_fields) | frozenset(path_fields(route.path))
    description = [schemas.comment(method.full_name), _filled_by_edge(route, request)]
    parameters: list[Json] = []
    body: Json | None = None
    if route.name == "HandleProviderWebhook":
        body = {
            "required": True,
            "description": "The provider's notification, passed on as received (any JSON).",
            "content": {"application/json": {"schema": {}}},
        }
        parameters.append(ref("parameters", "ProviderSignature"))
    elif route.method == "POST":
        body = {"required": False, "content": json_content(schemas.body_ref(request, exclude))}
        description.append("An absent body is the empty object.")
    else:
        parameters += _query_parameters(request, exclude, schemas)
    if "idempotency_key" in route.edge_fields:
        parameters.append(ref("parameters", "IdempotencyKey"))
    if route.sse:
        parameters.append(ref("parameters", "LastEventId"))
        ok: Json = {
            "description": "Server-Sent Events. The stream starts with a `retry:` hint; `event: position` carries a "
            f"`{method.output_type.full_name}` (its schema is a component) in the proto3 JSON mapping whenever the "
            "fan's state, place or the room's state changes, with an `id:` that Last-Event-ID resumes from; comment "
            "lines are heartbeats; `event: final` ends the stream once the fan is admitted or leaves the queue "
            "another way; `event: reconnect` ends it when the edge drains (reconnect, another replica answers).",
            "content": {
                "text/event-stream": {
                    "schema": {
                        "type": "object",
                        "description": "One event of the stream (its fields as an SSE parser reads them).",
                        "properties": {
                            "event": {"enum": ["position", "final", "reconnect", "error"]},
                            "id": {"type": "string"},
                            "retry": {"type": "integer"},
                            "data": {
                                "type": "string",
                                "contentMediaType": "application/json",
                                "contentSchema": {
                                    "oneOf": [
                                        schemas.message_ref(method.output_type, request=False),
                                        ref("schemas", "Error"),
                                    ]
                                },
                            },
                        },
                    }
                }
            },
        }
    elif route.ndjson:
        ok = {
            "description": "Newline-delimited JSON: each line one message of the stream, a "
            f"`{method.output_type.full_name}` (its schema is a component) in the proto3 JSON mapping; the last "
            "line carries the cursor. A failure after the first line is a last line in the `Error` shape, and the "
            "list is then incomplete.",
            "content": {
                "application/x-ndjson": {
                    "schema": {"type": "string", "description": "JSON values, one a line."},
                    "x-boxoffice-line-schema": {
                        "oneOf": [schemas.message_ref(method.output_type, request=False), ref("schemas", "Error")]
                    },
                }
            },
        }
    else:
        ok = {"description": "OK.", "content": json_content(schemas.message_ref(method.output_type, request=False))}
    return ok, body, parameters, description
