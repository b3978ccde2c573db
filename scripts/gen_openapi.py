"""Writes edge_svc/openapi.json, the OpenAPI 3.1 document of the edge.

The document is made from two sources and nothing else: the edge's route
table (:data:`edge_svc.routes.ROUTES`: method, path, who may call, acting as
whom, cache policy, the RPC a route is the HTTP form of, and the request
fields the edge fills itself) and the descriptors of the generated contract
modules (``gen.boxoffice.*.v1.*_pb2``). Every message schema is the proto3
JSON mapping of a contract message, as protobuf's ``json_format`` and
grpc-gateway write it: lowerCamelCase names, 64-bit integers as decimal
strings, enums by name, Timestamp as RFC 3339, Duration as ``"1.500s"``.
The comments of the .proto files (read with protoc, which keeps them) become
descriptions.

Usage: python scripts/gen_openapi.py [--check]
  (--check fails, printing the difference, when edge_svc/openapi.json would change)
"""

from __future__ import annotations

import argparse
import difflib
import importlib
import importlib.util
import itertools
import json
import pkgutil
import re
import subprocess
import sys
import tempfile
import types
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Final

from google.protobuf import descriptor_pb2, descriptor_pool
from google.protobuf.descriptor import Descriptor, EnumDescriptor, FieldDescriptor, MethodDescriptor

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import gen.boxoffice  # noqa: E402
from edge_svc.routes import ROUTES, Cache, Route, Who  # noqa: E402

OUTPUT = ROOT / "edge_svc" / "openapi.json"
PROTO_ROOT = ROOT / "proto"

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

REASON_PREFIX = "ERROR_REASON_"
SHARED_REASONS_BELOW = 100

Json = dict[str, Any]

_INT64_MIN = -(2**63)
_INT64_MAX = 2**63 - 1
_UINT64_MAX = 2**64 - 1
_INT32_MIN = -(2**31)
_INT32_MAX = 2**31 - 1
_UINT32_MAX = 2**32 - 1
_SIGNED_64 = frozenset({FieldDescriptor.TYPE_INT64, FieldDescriptor.TYPE_SINT64, FieldDescriptor.TYPE_SFIXED64})
_UNSIGNED_64 = frozenset({FieldDescriptor.TYPE_UINT64, FieldDescriptor.TYPE_FIXED64})
_SIGNED_32 = frozenset({FieldDescriptor.TYPE_INT32, FieldDescriptor.TYPE_SINT32, FieldDescriptor.TYPE_SFIXED32})
_UNSIGNED_32 = frozenset({FieldDescriptor.TYPE_UINT32, FieldDescriptor.TYPE_FIXED32})
_TIMESTAMP = "google.protobuf.Timestamp"
_DURATION = "google.protobuf.Duration"
_DURATION_PATTERN = r"^-?[0-9]+(\.[0-9]{1,9})?s$"
_PATH_PARAM = re.compile(r"\{([a-z_][a-z0-9_]*)\}")
_V1 = "/v1/"

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

_TAGS: Final[Mapping[str, str]] = types.MappingProxyType(
    {
        "Session": "Development sign-in and the signed-in fan.",
        "Operations": "Liveness, readiness, metrics and this document; the Ingress routes only /openapi.json.",
    }
)

# FileDescriptorProto / DescriptorProto / EnumDescriptorProto /
# ServiceDescriptorProto field numbers, for source locations.
_FILE_MESSAGE, _FILE_ENUM, _FILE_SERVICE = 4, 5, 6
_MESSAGE_FIELD, _MESSAGE_NESTED, _MESSAGE_ENUM, _MESSAGE_ONEOF = 2, 3, 4, 8
_ENUM_VALUE = 2
_SERVICE_METHOD = 2


# ---------------------------------------------------------------- comments


def _clean(text: str) -> str:
    paragraphs = re.split(r"\n\s*\n", text.strip())
    return "\n\n".join(" ".join(line.strip() for line in p.splitlines()) for p in paragraphs if p.strip())


def _message_paths(
    prefix: str, messages: Iterable[descriptor_pb2.DescriptorProto], path: tuple[int, ...]
) -> Iterator[tuple[str, tuple[int, ...]]]:
    for i, message in enumerate(messages):
        name, here = f"{prefix}.{message.name}", (*path, i)
        yield name, here
        for j, field in enumerate(message.field):
            yield f"{name}.{field.name}", (*here, _MESSAGE_FIELD, j)
        for j, oneof in enumerate(message.oneof_decl):
            yield f"{name}.{oneof.name}", (*here, _MESSAGE_ONEOF, j)
        yield from _message_paths(name, message.nested_type, (*here, _MESSAGE_NESTED))
        yield from _enum_paths(name, message.enum_type, (*here, _MESSAGE_ENUM))


def _enum_paths(
    prefix: str, enums: Iterable[descriptor_pb2.EnumDescriptorProto], path: tuple[int, ...]
) -> Iterator[tuple[str, tuple[int, ...]]]:
    for i, enum in enumerate(enums):
        name, here = f"{prefix}.{enum.name}", (*path, i)
        yield name, here
        for j, value in enumerate(enum.value):
            yield f"{name}.{value.name}", (*here, _ENUM_VALUE, j)


def _file_paths(file: descriptor_pb2.FileDescriptorProto) -> Iterator[tuple[str, tuple[int, ...]]]:
    yield from _message_paths(file.package, file.message_type, (_FILE_MESSAGE,))
    yield from _enum_paths(file.package, file.enum_type, (_FILE_ENUM,))
    for i, service in enumerate(file.service):
        name = f"{file.package}.{service.name}"
        yield name, (_FILE_SERVICE, i)
        for j, method in enumerate(service.method):
            yield f"{name}.{method.name}", (_FILE_SERVICE, i, _SERVICE_METHOD, j)


def _googleapis_include() -> Path:
    """The folder of the installed googleapis-common-protos, whose
    google/api/annotations.proto the contracts import."""
    spec = importlib.util.find_spec("google.api.annotations_pb2")
    if spec is None or spec.origin is None:
        raise SystemExit("google.api.annotations_pb2 is not installed: install googleapis-common-protos")
    return Path(spec.origin).resolve().parents[2]


def read_comments() -> dict[str, str]:
    """The leading comment of every element of proto/, by full name
    (``boxoffice.queue.v1.JoinQueueRequest.event_id``)."""
    files = sorted(p.relative_to(PROTO_ROOT).as_posix() for p in PROTO_ROOT.rglob("*.proto"))
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "set.pb"
        args = [
            sys.executable,
            "-m",
            "grpc_tools.protoc",
            f"-I{PROTO_ROOT}",
            f"-I{_googleapis_include()}",
            "--include_source_info",
            f"--descriptor_set_out={out}",
            *files,
        ]
        subprocess.run(args, check=True, cwd=ROOT)
        descriptor_set = descriptor_pb2.FileDescriptorSet.FromString(out.read_bytes())
    comments: dict[str, str] = {}
    for file in descriptor_set.file:
        by_path = {tuple(loc.path): loc.leading_comments for loc in file.source_code_info.location}
        for name, path in _file_paths(file):
            text = _clean(by_path.get(path, ""))
            if text:
                comments[name] = text
    return comments


# ---------------------------------------------------------------- contracts


def load_contracts() -> descriptor_pool.DescriptorPool:
    """Imports every generated module, so their descriptors are in the pool."""
    for info in pkgutil.walk_packages(gen.boxoffice.__path__, "gen.boxoffice."):
        if info.name.endswith("_pb2"):
            importlib.import_module(info.name)
    return descriptor_pool.Default()


def published_reasons() -> dict[str, list[str]]:
    """The wire reasons of every package's ErrorReason enum: ``"shared"``
    (numbered below 100, the same in every package), then each package's own."""
    shared: dict[int, str] = {}
    own: dict[str, list[str]] = {}
    for info in pkgutil.walk_packages(gen.boxoffice.__path__, "gen.boxoffice."):
        if not info.name.endswith(".error_reason_pb2"):
            continue
        module = importlib.import_module(info.name)
        enum: EnumDescriptor = module.DESCRIPTOR.enum_types_by_name["ErrorReason"]
        own[enum.file.package] = []
        for value in enum.values:
            if value.number == 0:
                continue
            wire = value.name.removeprefix(REASON_PREFIX)
            if value.number < SHARED_REASONS_BELOW:
                shared[value.number] = wire
            else:
                own[enum.file.package].append(wire)
    return {"shared": [shared[n] for n in sorted(shared)], **{p: own[p] for p in sorted(own)}}


def rpc_method(pool: descriptor_pool.DescriptorPool, rpc: str) -> MethodDescriptor:
    """The method of a full gRPC method name (``/pkg.Service/Method``)."""
    service, method = rpc.strip("/").split("/")
    return pool.FindMethodByName(f"{service}.{method}")


def path_fields(path: str) -> list[str]:
    return _PATH_PARAM.findall(path)


def _oneof_members(message: Descriptor) -> list[tuple[str, list[FieldDescriptor]]]:
    """The real oneofs (not proto3 ``optional``'s synthetic ones)."""
    return [
        (oneof.name, list(oneof.fields))
        for oneof in message.oneofs
        if not (len(oneof.fields) == 1 and oneof.name == f"_{oneof.fields[0].name}")
    ]


def _is_map(field: FieldDescriptor) -> bool:
    return (
        field.type == FieldDescriptor.TYPE_MESSAGE
        and field.message_type is not None
        and field.message_type.GetOptions().map_entry
    )


def _message_fields(message: Descriptor) -> Iterator[Descriptor]:
    for field in message.fields:
        if field.type != FieldDescriptor.TYPE_MESSAGE or field.message_type is None:
            continue
        if _is_map(field):
            value = field.message_type.fields_by_name["value"]
            if value.type == FieldDescriptor.TYPE_MESSAGE and value.message_type is not None:
                yield value.message_type
        else:
            yield field.message_type


def reachable(messages: Iterable[Descriptor]) -> set[str]:
    """Full names of the messages reachable from ``messages`` (themselves included)."""
    seen: set[str] = set()
    todo = list(messages)
    while todo:
        message = todo.pop()
        if message.full_name in seen:
            continue
        seen.add(message.full_name)
        todo.extend(_message_fields(message))
    return seen


# ---------------------------------------------------------------- schemas


def _int64(*, unsigned: bool, request: bool) -> Json:
    text: Json = {"type": "string", "format": "uint64" if unsigned else "int64"}
    text["pattern"] = r"^[0-9]+$" if unsigned else r"^-?[0-9]+$"
    if not request:
        return text
    number: Json = {
        "type": "integer",
        "format": "uint64" if unsigned else "int64",
        "minimum": 0 if unsigned else _INT64_MIN,
        "maximum": _UINT64_MAX if unsigned else _INT64_MAX,
    }
    return {"oneOf": [text, number]}


class Schemas:
    """The component schemas of the contract messages, built on demand in
    the direction they are used: a response's 64-bit integers are strings; a
    request's may be strings or numbers. A message used both ways has its
    request form under ``<full name>.Input``."""

    def __init__(self, comments: Mapping[str, str], output_messages: set[str]) -> None:
        self._comments = comments
        self._output = output_messages
        self.components: dict[str, Json] = {}

    def comment(self, name: str) -> str:
        return self._comments.get(name, "")

    def _add(self, name: str, build: Any) -> None:
        if name in self.components:
            return
        self.components[name] = {}  # a placeholder, for recursive messages
        self.components[name] = build()

    def name_of(self, message: Descriptor, *, request: bool) -> str:
        if request and message.full_name in self._output:
            return f"{message.full_name}.Input"
        if not request and message.full_name not in self._output:
            raise ValueError(f"{message.full_name} is not reachable from a response")
        return message.full_name

    def message_ref(self, message: Descriptor, *, request: bool) -> Json:
        name = self.name_of(message, request=request)
        self._add(name, lambda: self.message_schema(message, request=request))
        return {"$ref": f"#/components/schemas/{name}"}

    def enum_ref(self, enum: EnumDescriptor) -> Json:
        def build() -> Json:
            lines = [self.comment(enum.full_name)]
            lines += [f"- `{v.name}`: {self.comment(f'{enum.full_name}.{v.name}')}" for v in enum.values]
            return {
                "type": "string",
                "enum": [v.name for v in enum.values],
                "description": "\n\n".join([lines[0], "\n".join(lines[1:])]).strip(),
            }

        self._add(enum.full_name, build)
        return {"$ref": f"#/components/schemas/{enum.full_name}"}

    def body_ref(self, message: Descriptor, exclude: frozenset[str]) -> Json:
        name = f"{message.full_name}.Body"
        self._add(name, lambda: self.message_schema(message, request=True, exclude=exclude, body=True))
        return {"$ref": f"#/components/schemas/{name}"}

    def message_schema(
        self, message: Descriptor, *, request: bool, exclude: frozenset[str] = frozenset(), body: bool = False
    ) -> Json:
        properties: Json = {}
        for field in message.fields:
            if field.name not in exclude:
                properties[field.json_name] = self.field_schema(field, request=request)
        description = [self.comment(message.full_name)]
        if body:
            description.append(f"The body of {message.name}: the fields the client sends.")
        constraints: list[Json] = []
        for oneof, members in _oneof_members(message):
            names = [f.json_name for f in members if f.name not in exclude]
            if len(names) < 2:
                continue
            listed = ", ".join(f"`{n}`" for n in names)
            what = self.comment(f"{message.full_name}.{oneof}").rstrip(".")
            description.append(f"At most one of {listed} is set (oneof `{oneof}`{': ' + what if what else ''}).")
            constraints += [{"required": [a, b]} for a, b in itertools.combinations(names, 2)]
        schema: Json = {"type": "object", "properties": properties, "additionalProperties": False}
        if constraints:
            schema["not"] = {"anyOf": constraints}
        text = "\n\n".join(d for d in description if d)
        if text:
            schema["description"] = text
        return schema

    def value_schema(self, field: FieldDescriptor, *, request: bool) -> Json:
        """The schema of one value of ``field`` (an item, when repeated)."""
        kind = field.type
        if kind in _SIGNED_64 or kind in _UNSIGNED_64:
            return _int64(unsigned=kind in _UNSIGNED_64, request=request)
        if kind in _SIGNED_32:
            return {"type": "integer", "format": "int32", "minimum": _INT32_MIN, "maximum": _INT32_MAX}
        if kind in _UNSIGNED_32:
            return {"type": "integer", "minimum": 0, "maximum": _UINT32_MAX}
        if kind == FieldDescriptor.TYPE_DOUBLE:
            return {"type": "number", "format": "double"}
        if kind == FieldDescriptor.TYPE_FLOAT:
            return {"type": "number", "format": "float"}
        if kind == FieldDescriptor.TYPE_BOOL:
            return {"type": "boolean"}
        if kind == FieldDescriptor.TYPE_STRING:
            return {"type": "string"}
        if kind == FieldDescriptor.TYPE_BYTES:
            return {"type": "string", "format": "byte", "contentEncoding": "base64"}
        if kind == FieldDescriptor.TYPE_ENUM and field.enum_type is not None:
            return self.enum_ref(field.enum_type)
        if kind == FieldDescriptor.TYPE_MESSAGE and field.message_type is not None:
            name = field.message_type.full_name
            if name == _TIMESTAMP:
                return {"type": "string", "format": "date-time"}
            if name == _DURATION:
                return {"type": "string", "pattern": _DURATION_PATTERN}
            if name.startswith("google.protobuf."):
                raise ValueError(f"{field.full_name}: no JSON schema for {name} yet")
            return self.message_ref(field.message_type, request=request)
        raise ValueError(f"{field.full_name}: unsupported field type {kind}")

    def field_schema(self, field: FieldDescriptor, *, request: bool) -> Json:
        if _is_map(field) and field.message_type is not None:
            value = self.value_schema(field.message_type.fields_by_name["value"], request=request)
            schema: Json = {"type": "object", "additionalProperties": value}
        elif field.is_repeated:
            schema = {"type": "array", "items": self.value_schema(field, request=request)}
        else:
            schema = dict(self.value_schema(field, request=request))
        description = self.comment(field.full_name)
        if field.message_type is not None and field.message_type.full_name == _DURATION:
            description = f"{description} A duration in seconds with an `s` suffix, e.g. `1.500s`.".strip()
        if description:
            schema["description"] = description
        if field.GetOptions().deprecated:
            schema["deprecated"] = True
        return schema


# ---------------------------------------------------------------- the document


def _ref(kind: str, name: str) -> Json:
    return {"$ref": f"#/components/{kind}/{name}"}


def _json_content(schema: Json) -> Json:
    return {"application/json": {"schema": schema}}


def _error_response(description: str, *, retry_after: bool = False, allow: bool = False) -> Json:
    response: Json = {"description": description, "content": _json_content(_ref("schemas", "Error"))}
    headers: Json = {}
    if retry_after:
        headers["Retry-After"] = _ref("headers", "RetryAfter")
    if allow:
        headers["Allow"] = _ref("headers", "Allow")
    if headers:
        response["headers"] = headers
    return response


def _components_responses() -> Json:
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


def _components_headers() -> Json:
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


def _components_parameters() -> Json:
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
            "The confirmation's idempotency key: a replay returns the first answer.",
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


def _security_schemes() -> Json:
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
        "accessTokenHeader": {
            "type": "apiKey",
            "in": "header",
            "name": "Boxoffice-Access-Token",
            "description": "The event's access token an app got on admission.",
        },
    }


def _security(who: Who) -> list[Json]:
    fan: list[Json] = [{"session": []}, {"bearer": []}]
    if who is Who.FAN:
        return fan
    if who is Who.SHOPPER:
        tokens: list[Json] = [{"accessTokenCookie": []}, {"accessTokenHeader": []}]
        return [{**f, **t} for f in fan for t in tokens]
    return []


def _error_schemas(reasons: Mapping[str, Sequence[str]]) -> Json:
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
                            "items": _ref("schemas", "google.rpc.ErrorInfo"),
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


def _info_description() -> str:
    rows = "\n".join(f"| `{code}` | {status} |" for code, status in HTTP_STATUS.items())
    return f"""\
The HTTP/JSON front door of boxoffice for browsers and apps. Bodies are the proto3 JSON mapping of the
contracts' messages (lowerCamelCase names; 64-bit integers as decimal strings, which requests may also send as
numbers; enums by name; timestamps in RFC 3339; durations like `"1.500s"`); answers include fields at their
default values. Each route that is the HTTP form of an RPC says which (`x-boxoffice-rpc`), and the RPC carries
the same method and path in its `google.api.http` annotation. Fields the edge fills itself (the fan, the access
token, path values, the idempotency key) may not be sent in a body.

Who may call a route is `x-boxoffice-who` (public, fan, shopper, provider, operations) and its security
requirement; whom the services see the call acting for is `x-boxoffice-acting-as`. A fan's hold, payment or
tickets answer 404 to another fan, exactly as ones that do not exist. A mutating request authenticated by cookie
must come from the edge's own site (Origin / Sec-Fetch-Site), else 403. An unsupported method on a known path
answers 405 with `Allow`.

Errors are Google's JSON error shape (`Error`) with the HTTP status of the canonical code:

| code | HTTP status |
| --- | --- |
{rows}

RESOURCE_EXHAUSTED and UNAVAILABLE answers carry `Retry-After`."""


def _common_parameters() -> list[Json]:
    return [_ref("parameters", n) for n in ("XServerTimeout", "XRequestId", "Traceparent")]


def _path_parameter(route: Route, name: str, request: Descriptor | None, schemas: Schemas) -> Json:
    field = request.fields_by_name.get(name) if request is not None else None
    if request is not None and field is None:
        raise ValueError(f"{route.name}: path field {name} is not a field of {request.full_name}")
    schema: Json = {"type": "string"}
    if field is not None and (field.type in _SIGNED_64 or field.type in _UNSIGNED_64):
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
            and not _is_map(field)
            and not field.is_repeated
            and nested.full_name not in (_TIMESTAMP, _DURATION)
        ):
            parameters += _query_parameters(nested, frozenset(), schemas, f"{name}.")
            continue
        if _is_map(field):
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


def _success_headers(route: Route) -> Json:
    public = route.cache is Cache.PUBLIC
    headers: Json = {"Cache-Control": _ref("headers", "CacheControlPublic" if public else "CacheControlPrivate")}
    if public:
        headers["ETag"] = _ref("headers", "ETag")
    if route.path.startswith(_V1):
        headers["X-Request-Id"] = _ref("headers", "XRequestId")
    cookies = _SETS_COOKIES.get(route.name)
    if cookies is not None:
        headers["Set-Cookie"] = {
            "description": f"{cookies} Cookies are HttpOnly, SameSite=Lax, and Secure outside loopback.",
            "schema": {"type": "string"},
        }
    return headers


def _error_responses(route: Route, has_path_params: bool) -> Json:
    responses: Json = {"default": _ref("responses", "Error")}
    if not route.path.startswith(_V1):
        return responses
    responses["400"] = _ref("responses", "BadRequest")
    if route.who in (Who.FAN, Who.SHOPPER, Who.PROVIDER):
        responses["401"] = _ref("responses", "Unauthenticated")
    # Denied: a cookie-authenticated change from another site, a token of another event or fan.
    if route.who in (Who.FAN, Who.SHOPPER) or route.name == "CreateSession":
        responses["403"] = _ref("responses", "PermissionDenied")
    if has_path_params or route.name == "CreateSession":
        responses["404"] = _ref("responses", "NotFound")
    responses["429"] = _ref("responses", "TooManyRequests")
    responses["503"] = _ref("responses", "Unavailable")
    return responses


def _edge_operation(route: Route) -> tuple[Json, Json | None, Json]:
    """The parameters-free parts of a route of the edge's own: (200 response,
    request body, extra responses)."""
    text: Json = {"text/plain": {"schema": {"type": "string"}}}
    session = _json_content(_ref("schemas", "Session"))
    if route.name == "CreateSession":
        body: Json = {"required": True, "content": _json_content(_ref("schemas", "CreateSessionRequest"))}
        return {"description": "Signed in: the session cookie is set.", "content": session}, body, {}
    if route.name == "GetSession":
        return {"description": "The signed-in fan.", "content": session}, None, {}
    if route.name == "DeleteSession":
        return {"description": "Signed out.", "content": _json_content(_ref("schemas", "Empty"))}, None, {}
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
        return {"description": "This document.", "content": _json_content({"type": "object"})}, None, {}
    if route.name == "GetQueueChallenge":
        content = _json_content(_ref("schemas", "QueueChallenge"))
        return {"description": "The challenge a join must answer.", "content": content}, None, {}
    if route.name in ("GetIndexPage", "GetEventPage"):
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


def _edge_schemas() -> Json:
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
                "The challenge a join must answer in its Boxoffice-Proof header. kind none: nothing to do. "
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
            "description": "Development sign-in: the name becomes the fan's customer id.",
            "required": ["name"],
            "additionalProperties": False,
            "properties": {"name": {"type": "string", "minLength": 1, "maxLength": 64}},
        },
        "Empty": {"type": "object", "additionalProperties": False, "properties": {}},
    }


def _rpc_operation(
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
        parameters.append(_ref("parameters", "ProviderSignature"))
    elif route.method == "POST":
        body = {"required": False, "content": _json_content(schemas.body_ref(request, exclude))}
        description.append("An absent body is the empty object.")
    else:
        parameters += _query_parameters(request, exclude, schemas)
    if "idempotency_key" in route.edge_fields:
        parameters.append(_ref("parameters", "IdempotencyKey"))
    if route.sse:
        parameters.append(_ref("parameters", "LastEventId"))
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
                                        _ref("schemas", "Error"),
                                    ]
                                },
                            },
                        },
                    }
                }
            },
        }
    else:
        ok = {"description": "OK.", "content": _json_content(schemas.message_ref(method.output_type, request=False))}
    return ok, body, parameters, description


def build(comments: Mapping[str, str]) -> Json:
    """The OpenAPI document of the edge."""
    pool = load_contracts()
    methods = {route.name: rpc_method(pool, route.rpc) for route in ROUTES if route.rpc is not None}
    schemas = Schemas(comments, reachable(m.output_type for m in methods.values()))
    for m in methods.values():
        # Every answer's message is a component, also a stream's (its events' data).
        schemas.message_ref(m.output_type, request=False)
    paths: Json = {}
    tags: dict[str, str] = {}
    for route in ROUTES:
        method = methods.get(route.name)
        request = method.input_type if method is not None else None
        names = path_fields(route.path)
        parameters = [_path_parameter(route, n, request, schemas) for n in names]
        if route.path.startswith(_V1):
            parameters += _common_parameters()
        extra: Json = {}
        if method is not None:
            ok, body, more, description = _rpc_operation(route, method, schemas)
            parameters += more
            tag = method.containing_service.name
            tags[tag] = schemas.comment(method.containing_service.full_name)
        else:
            ok, body, extra = _edge_operation(route)
            description = []
            tag = "Session" if route.path.startswith(_V1) else "Operations"
            tags[tag] = _TAGS[tag]
        ok["headers"] = _success_headers(route)
        responses: Json = {"200": ok, **_error_responses(route, bool(names)), **extra}
        if route.cache is Cache.PUBLIC:
            parameters.append(_ref("parameters", "IfNoneMatch"))
            responses["304"] = {
                "description": "Not modified: the If-None-Match ETag is current.",
                "headers": {"ETag": _ref("headers", "ETag")},
            }
        operation: Json = {
            "operationId": route.name,
            "summary": route.summary,
            "tags": [tag],
            "parameters": parameters,
            "responses": responses,
            "security": _security(route.who),
            "x-boxoffice-who": route.who.value,
            "x-boxoffice-acting-as": route.acting_as,
            "x-boxoffice-cache": route.cache.value,
        }
        if method is not None:
            operation["x-boxoffice-rpc"] = route.rpc
        text = "\n\n".join(d for d in description if d)
        if text:
            operation["description"] = text
        if body is not None:
            operation["requestBody"] = body
        paths.setdefault(route.path, {})[route.method.lower()] = operation
    components: Json = {
        "schemas": {**schemas.components, **_error_schemas(published_reasons()), **_edge_schemas()},
        "responses": _components_responses(),
        "headers": _components_headers(),
        "parameters": _components_parameters(),
        "securitySchemes": _security_schemes(),
    }
    return {
        "openapi": "3.1.0",
        "info": {"title": "boxoffice edge", "version": "v1", "description": _info_description()},
        "tags": [{"name": name, "description": text} for name, text in sorted(tags.items())],
        "paths": paths,
        "components": components,
    }


def render(document: Json) -> str:
    return json.dumps(document, indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--check", action="store_true", help="fail when edge_svc/openapi.json would change")
    args = parser.parse_args()
    text = render(build(read_comments()))
    if args.check:
        current = OUTPUT.read_text(encoding="utf-8") if OUTPUT.exists() else ""
        if current != text:
            sys.stdout.writelines(
                difflib.unified_diff(
                    current.splitlines(keepends=True),
                    text.splitlines(keepends=True),
                    "edge_svc/openapi.json",
                    "generated",
                )
            )
            print(
                "edge_svc/openapi.json is out of date with the routes or the protos: run scripts/gen_openapi.py "
                "and commit",
                file=sys.stderr,
            )
            return 1
        print("edge_svc/openapi.json matches the routes and the protos")
        return 0
    OUTPUT.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
