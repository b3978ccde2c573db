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

The parts are made by the modules of ``scripts/openapi/`` (contracts,
schemas, components, operations); this script puts them together.

Usage: python scripts/gen_openapi.py [--check]
  (--check fails, printing the difference, when edge_svc/openapi.json would change)
"""

from __future__ import annotations

import argparse
import difflib
import json
import sys
import types
from collections.abc import Mapping
from pathlib import Path
from typing import Final

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from openapi.components import (  # noqa: E402
    components_headers,
    components_parameters,
    components_responses,
    error_schemas,
    info_description,
    ref,
    security,
    security_schemes,
)
from openapi.contracts import (  # noqa: E402
    load_contracts,
    path_fields,
    published_reasons,
    reachable,
    read_comments,
    rpc_method,
)
from openapi.operations import (  # noqa: E402
    V1,
    common_parameters,
    edge_operation,
    edge_schemas,
    error_responses,
    path_parameter,
    rpc_operation,
    success_headers,
)
from openapi.schemas import Json, Schemas  # noqa: E402

from edge_svc.routes import ROUTES, Cache  # noqa: E402

OUTPUT = ROOT / "edge_svc" / "openapi.json"


_TAGS: Final[Mapping[str, str]] = types.MappingProxyType(
    {
        "Session": "Development sign-in and the signed-in fan.",
        "Operations": "Liveness, readiness, metrics and this document; the Ingress routes only /openapi.json.",
    }
)


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
        parameters = [path_parameter(route, n, request, schemas) for n in names]
        if route.path.startswith(V1):
            parameters += common_parameters()
        extra: Json = {}
        if method is not None:
            ok, body, more, description = rpc_operation(route, method, schemas)
            parameters += more
            tag = method.containing_service.name
            tags[tag] = schemas.comment(method.containing_service.full_name)
        else:
            ok, body, extra = edge_operation(route)
            description = []
            tag = "Session" if route.path.startswith(V1) else "Operations"
            tags[tag] = _TAGS[tag]
        ok["headers"] = success_headers(route)
        responses: Json = {"200": ok, **error_responses(route, bool(names)), **extra}
        if route.cache is Cache.PUBLIC:
            parameters.append(ref("parameters", "IfNoneMatch"))
            responses["304"] = {
                "description": "Not modified: the If-None-Match ETag is current.",
                "headers": {"ETag": ref("headers", "ETag")},
            }
        operation: Json = {
            "operationId": route.name,
            "summary": route.summary,
            "tags": [tag],
            "parameters": parameters,
            "responses": responses,
            "security": security(route.who),
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
        "schemas": {**schemas.components, **error_schemas(published_reasons()), **edge_schemas()},
        "responses": components_responses(),
        "headers": components_headers(),
        "parameters": components_parameters(),
        "securitySchemes": security_schemes(),
    }
    return {
        "openapi": "3.1.0",
        "info": {"title": "boxoffice edge", "version": "v1", "description": info_description()},
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
