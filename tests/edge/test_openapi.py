"""The edge's OpenAPI document (edge_svc/openapi.json) is valid OpenAPI 3.1,
describes exactly the route table, agrees with the contracts' google.api.http
annotations, is what scripts/gen_openapi.py makes today, and its schemas
accept what protobuf's JSON mapping writes for every answer (and refuse what
it never writes)."""

from __future__ import annotations

import copy
import importlib
import json
import pkgutil
import subprocess
import sys
from collections.abc import Iterator, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, cast

import grpc
import pytest
from google.protobuf import descriptor_pool, json_format
from google.protobuf.descriptor import Descriptor, FieldDescriptor, MethodDescriptor, ServiceDescriptor
from google.protobuf.duration_pb2 import Duration
from google.protobuf.message import Message
from google.protobuf.message_factory import GetMessageClass
from google.protobuf.timestamp_pb2 import Timestamp
from openapi_schema_validator import OAS31Validator, oas31_format_checker
from openapi_spec_validator import validate as validate_spec
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT202012

import gen.boxoffice
from edge_svc.routes import ROUTES, Route, Who

ROOT = Path(__file__).resolve().parents[2]
DOCUMENT = ROOT / "edge_svc" / "openapi.json"
URI = "urn:boxoffice:edge:openapi"
BIG = 2**53 + 1  # beyond a double's exact integers: only a string keeps it
WHEN = datetime(2026, 6, 1, 18, 30, 15, 250000, tzinfo=UTC)
SCALARS: Mapping[int, object] = {
    FieldDescriptor.TYPE_INT64: -BIG,
    FieldDescriptor.TYPE_SINT64: -BIG,
    FieldDescriptor.TYPE_SFIXED64: -BIG,
    FieldDescriptor.TYPE_UINT64: BIG,
    FieldDescriptor.TYPE_FIXED64: BIG,
    FieldDescriptor.TYPE_INT32: -7,
    FieldDescriptor.TYPE_SINT32: -7,
    FieldDescriptor.TYPE_SFIXED32: -7,
    FieldDescriptor.TYPE_UINT32: 7,
    FieldDescriptor.TYPE_FIXED32: 7,
    FieldDescriptor.TYPE_DOUBLE: 1.25,
    FieldDescriptor.TYPE_FLOAT: 1.25,
    FieldDescriptor.TYPE_BOOL: True,
    FieldDescriptor.TYPE_STRING: "fan-42 ✓",
    FieldDescriptor.TYPE_BYTES: b"\x00\xfe\xff",
}
INT64 = frozenset(
    {
        FieldDescriptor.TYPE_INT64,
        FieldDescriptor.TYPE_SINT64,
        FieldDescriptor.TYPE_SFIXED64,
        FieldDescriptor.TYPE_UINT64,
        FieldDescriptor.TYPE_FIXED64,
    }
)
RPC_ROUTES = [route for route in ROUTES if route.rpc is not None]
Json = dict[str, Any]


@pytest.fixture(scope="module")
def document() -> Json:
    loaded: Json = json.loads(DOCUMENT.read_text(encoding="utf-8"))
    return loaded


@pytest.fixture(scope="module")
def pool() -> descriptor_pool.DescriptorPool:
    for info in pkgutil.walk_packages(gen.boxoffice.__path__, "gen.boxoffice."):
        if info.name.endswith("_pb2"):
            importlib.import_module(info.name)
    return descriptor_pool.Default()


def _services() -> Iterator[ServiceDescriptor]:
    for info in pkgutil.walk_packages(gen.boxoffice.__path__, "gen.boxoffice."):
        if info.name.endswith("_pb2"):
            yield from importlib.import_module(info.name).DESCRIPTOR.services_by_name.values()


def _method(pool: descriptor_pool.DescriptorPool, route: Route) -> MethodDescriptor:
    assert route.rpc is not None
    service, name = route.rpc.strip("/").split("/")
    return pool.FindMethodByName(f"{service}.{name}")


def _operations(document: Json) -> Iterator[tuple[str, str, Json]]:
    for path, item in document["paths"].items():
        for method, operation in item.items():
            yield path, method.upper(), operation


def _validator(document: Json, name: str) -> OAS31Validator:
    resource: Resource[Any] = Resource.from_contents(document, default_specification=DRAFT202012)
    registry: Registry[Any] = Registry().with_resource(URI, resource)
    return OAS31Validator(
        {"$ref": f"{URI}#/components/schemas/{name}"}, registry=registry, format_checker=oas31_format_checker
    )


def _errors(document: Json, name: str, instance: object) -> list[str]:
    return [f"{list(e.absolute_path)}: {e.message}" for e in _validator(document, name).iter_errors(instance)]


def _is_synthetic(field: FieldDescriptor) -> bool:
    oneof = field.containing_oneof
    return oneof is not None and len(oneof.fields) == 1 and oneof.name == f"_{field.name}"


def _value(field: FieldDescriptor) -> object:
    if field.type == FieldDescriptor.TYPE_ENUM:
        assert field.enum_type is not None
        return field.enum_type.values[-1].number
    return SCALARS[field.type]


def _fill(message: Message, *, variant: int = 0, depth: int = 0) -> Message:
    """Sets every field of ``message`` (one member of each oneof, the
    ``variant``-th), recursively, to a value unlike its default."""
    chosen: set[str] = set()
    for field in cast(Descriptor, message.DESCRIPTOR).fields:
        oneof = field.containing_oneof
        if oneof is not None and not _is_synthetic(field):
            members = list(oneof.fields)
            if oneof.name in chosen or field is not members[variant % len(members)]:
                continue
            chosen.add(oneof.name)
        _set(message, field, variant, depth)
    return message


def _set(message: Message, field: FieldDescriptor, variant: int, depth: int) -> None:
    target = getattr(message, field.name)
    nested = field.message_type
    if nested is not None and nested.GetOptions().map_entry:
        key, value = nested.fields_by_name["key"], nested.fields_by_name["value"]
        if value.message_type is not None:
            _fill(target[SCALARS[key.type]], variant=variant, depth=depth + 1)
        else:
            target[SCALARS[key.type]] = _value(value)
    elif nested is not None:
        items = [target.add(), target.add()] if field.is_repeated else [target]
        for item in items:
            if nested.full_name == Timestamp.DESCRIPTOR.full_name:
                item.FromDatetime(WHEN)
            elif nested.full_name == Duration.DESCRIPTOR.full_name:
                item.FromMilliseconds(1500)
            elif depth < 5:
                _fill(item, variant=variant, depth=depth + 1)
            else:
                item.SetInParent()
    elif field.is_repeated:
        target.extend([_value(field)] * 2)
    else:
        setattr(message, field.name, _value(field))


def _as_json(message: Message) -> Json:
    return json_format.MessageToDict(message, always_print_fields_with_no_presence=True)


def _response_messages(pool: descriptor_pool.DescriptorPool) -> list[Descriptor]:
    """Every contract message an answer of the edge may contain."""
    found: dict[str, Descriptor] = {}
    todo = [_method(pool, route).output_type for route in RPC_ROUTES]
    while todo:
        message = todo.pop()
        if message.full_name in found or message.full_name.startswith("google.protobuf."):
            continue
        found[message.full_name] = message
        for field in message.fields:
            nested = field.message_type
            if nested is not None and nested.GetOptions().map_entry:
                nested = nested.fields_by_name["value"].message_type
            if nested is not None:
                todo.append(nested)
    return sorted(found.values(), key=lambda m: m.full_name)


def test_the_document_is_valid_openapi_3_1(document: Json) -> None:
    assert document["openapi"].startswith("3.1.")
    validate_spec(document)


def test_the_document_has_every_route_and_nothing_else(document: Json) -> None:
    described = {(path, method, op["operationId"]) for path, method, op in _operations(document)}
    assert described == {(r.path, r.method, r.name) for r in ROUTES}
    for route in ROUTES:
        operation = document["paths"][route.path][route.method.lower()]
        assert operation["summary"] == route.summary
        assert operation["x-boxoffice-who"] == route.who.value
        assert operation["x-boxoffice-acting-as"] == route.acting_as
        assert operation.get("x-boxoffice-rpc") == route.rpc
        assert "default" in operation["responses"]


def test_each_route_of_an_rpc_is_its_google_api_http_annotation(pool: descriptor_pool.DescriptorPool) -> None:
    http = importlib.import_module("google.api.annotations_pb2").http
    for route in RPC_ROUTES:
        options = _method(pool, route).GetOptions()
        assert options.HasExtension(http), route.rpc
        rule = options.Extensions[http]
        verb = rule.WhichOneof("pattern")
        assert (verb, getattr(rule, verb)) == (route.method.lower(), route.path), route.rpc
        expected_body = "body" if route.name == "HandleProviderWebhook" else "*" if route.method == "POST" else ""
        assert rule.body == expected_body, route.rpc
    annotated = {
        f"/{service.full_name}/{method.name}"
        for service in _services()
        for method in service.methods
        if method.GetOptions().HasExtension(http)
    }
    assert annotated == {route.rpc for route in RPC_ROUTES}


def test_the_document_is_what_the_generator_makes() -> None:
    done = subprocess.run(
        [sys.executable, "scripts/gen_openapi.py", "--check"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_who_may_call_is_the_security_requirement(document: Json) -> None:
    fan: list[Json] = [{"session": []}, {"bearer": []}]
    for route in ROUTES:
        security = document["paths"][route.path][route.method.lower()]["security"]
        if route.who is Who.FAN:
            assert security == fan, route.name
        elif route.who is Who.SHOPPER:
            assert len(security) == 4, route.name
            for requirement in security:
                assert sorted(requirement) in (
                    ["accessTokenCookie", "session"],
                    ["accessTokenHeader", "session"],
                    ["accessTokenCookie", "bearer"],
                    ["accessTokenHeader", "bearer"],
                ), route.name
        elif route.who is Who.DEVICE:
            assert security == [{"deviceKey": []}], route.name
        else:
            assert security == [], route.name


def test_path_fields_and_edge_fields_are_never_in_a_request(
    document: Json, pool: descriptor_pool.DescriptorPool
) -> None:
    for route in RPC_ROUTES:
        operation = document["paths"][route.path][route.method.lower()]
        request = _method(pool, route).input_type
        hidden = {request.fields_by_name[name].json_name for name in route.edge_fields}
        query = {p["name"] for p in operation["parameters"] if p.get("in") == "query"}
        assert not query & hidden, route.name
        body = operation.get("requestBody", {}).get("content", {}).get("application/json", {}).get("schema", {})
        if "$ref" in body:
            name = body["$ref"].rsplit("/", 1)[1]
            properties = set(document["components"]["schemas"][name]["properties"])
            assert not properties & hidden, route.name
            assert properties == {f.json_name for f in request.fields} - hidden, route.name


def test_64_bit_integers_are_strings_in_answers(document: Json, pool: descriptor_pool.DescriptorPool) -> None:
    schemas = document["components"]["schemas"]
    checked = 0
    for message in _response_messages(pool):
        for field in message.fields:
            if field.type not in INT64:
                continue
            schema = schemas[message.full_name]["properties"][field.json_name]
            schema = schema["items"] if field.is_repeated else schema
            assert schema["type"] == "string", field.full_name
            assert schema["pattern"] in ("^-?[0-9]+$", "^[0-9]+$"), field.full_name
            checked += 1
    assert checked > 10


def test_every_answer_as_protobuf_writes_it_matches_its_schema(
    document: Json, pool: descriptor_pool.DescriptorPool
) -> None:
    messages = _response_messages(pool)
    assert {_method(pool, r).output_type.full_name for r in RPC_ROUTES} <= {m.full_name for m in messages}
    for message in messages:
        cls = GetMessageClass(message)
        for sample in (cls(), _fill(cls(), variant=0), _fill(cls(), variant=1)):
            answer = _as_json(sample)
            assert _errors(document, message.full_name, answer) == [], (message.full_name, answer)


def test_answer_schemas_refuse_what_protobuf_never_writes(document: Json) -> None:
    from gen.boxoffice.booking.v1 import booking_service_pb2 as booking

    answer = _as_json(_fill(booking.HoldSeatsResponse()))
    assert isinstance(answer["hold"]["eventId"], str)
    assert _errors(document, "boxoffice.booking.v1.HoldSeatsResponse", answer) == []
    wrong: list[Json] = [copy.deepcopy(answer) for _ in range(4)]
    wrong[0]["hold"]["eventId"] = int(answer["hold"]["eventId"])  # a 64-bit integer as a number
    wrong[1]["hold"]["event_id"] = wrong[1]["hold"].pop("eventId")  # the proto name, not the JSON name
    wrong[2]["hold"]["state"] = "HELD"  # not an enum value's name
    wrong[3]["hold"]["expiresAt"] = "yesterday"  # not RFC 3339
    for instance in wrong:
        assert _errors(document, "boxoffice.booking.v1.HoldSeatsResponse", instance), instance


def test_request_bodies_accept_what_protobuf_parses(document: Json, pool: descriptor_pool.DescriptorPool) -> None:
    for route in RPC_ROUTES:
        operation = document["paths"][route.path][route.method.lower()]
        schema = operation.get("requestBody", {}).get("content", {}).get("application/json", {}).get("schema", {})
        if "$ref" not in schema:
            continue
        name = schema["$ref"].rsplit("/", 1)[1]
        request = _method(pool, route).input_type
        cls = GetMessageClass(request)
        for variant in (0, 1):
            sent = _fill(cls(), variant=variant)
            for field in request.fields:
                if field.name in route.edge_fields or f"{{{field.name}}}" in route.path:
                    sent.ClearField(field.name)
            body = json_format.MessageToDict(sent)
            assert _errors(document, name, body) == [], (route.name, body)
            json_format.ParseDict(body, cls())
        assert _errors(document, name, {"noSuchField": 1}), route.name
    from gen.boxoffice.booking.v1 import booking_service_pb2 as booking

    as_numbers = {"seats": {"seatIds": [1, "2"]}, "requestId": "r-1"}
    json_format.ParseDict(as_numbers, booking.HoldSeatsRequest())
    assert _errors(document, "boxoffice.booking.v1.HoldSeatsRequest.Body", as_numbers) == []
    both = {"seats": {"seatIds": ["1"]}, "bestAvailable": {"sectionId": "A", "quantity": 2}}
    with pytest.raises(json_format.ParseError):
        json_format.ParseDict(both, booking.HoldSeatsRequest())
    assert _errors(document, "boxoffice.booking.v1.HoldSeatsRequest.Body", both)


def test_errors_are_googles_json_error_shape(document: Json) -> None:
    error = {
        "error": {
            "code": 400,
            "status": "FAILED_PRECONDITION",
            "message": "seat 12 is taken",
            "details": [
                {
                    "@type": "type.googleapis.com/google.rpc.ErrorInfo",
                    "reason": "SEAT_UNAVAILABLE",
                    "domain": "boxoffice",
                    "metadata": {"seat_ids": "12"},
                }
            ],
        }
    }
    assert _errors(document, "Error", error) == []
    unknown_status = copy.deepcopy(error)
    unknown_status["error"]["status"] = "OK"
    assert _errors(document, "Error", unknown_status)
    assert sorted(
        document["components"]["schemas"]["Error"]["properties"]["error"]["properties"]["status"]["enum"]
    ) == (sorted(code.name for code in grpc.StatusCode if code is not grpc.StatusCode.OK))
    reason = document["components"]["schemas"]["google.rpc.ErrorInfo"]["properties"]["reason"]
    assert "enum" not in reason and "SEAT_UNAVAILABLE" in reason["description"]
    for code in grpc.StatusCode:
        assert f"| `{code.name}` |" in document["info"]["description"], code


def test_mutations_and_streams_take_their_headers(document: Json) -> None:
    def headers(route: Route) -> dict[str, Json]:
        operation = document["paths"][route.path][route.method.lower()]
        found = {}
        for parameter in operation["parameters"]:
            if "$ref" in parameter:
                parameter = document["components"]["parameters"][parameter["$ref"].rsplit("/", 1)[1]]
            if parameter["in"] == "header":
                found[parameter["name"]] = parameter
        return found

    for route in ROUTES:
        found = headers(route)
        if route.path.startswith("/v1/"):
            assert {"X-Server-Timeout", "X-Request-Id", "traceparent"} <= set(found), route.name
        assert ("Idempotency-Key" in found) == (route.name in ("ConfirmPayment", "CancelBooking")), route.name
        assert ("Last-Event-ID" in found) == route.sse, route.name
    confirm = headers(next(r for r in ROUTES if r.name == "ConfirmPayment"))["Idempotency-Key"]
    assert confirm["required"] and confirm["schema"] == {"type": "string", "minLength": 1, "maxLength": 255}
    webhook = headers(next(r for r in ROUTES if r.name == "HandleProviderWebhook"))["Provider-Signature"]
    assert webhook["required"]
