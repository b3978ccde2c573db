"""The component schemas of the contract messages: the proto3 JSON mapping
as protobuf's ``json_format`` and grpc-gateway write it."""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from typing import Any

from google.protobuf.descriptor import Descriptor, EnumDescriptor, FieldDescriptor

from .contracts import is_map, oneof_members

Json = dict[str, Any]


_INT64_MIN = -(2**63)


_INT64_MAX = 2**63 - 1


_UINT64_MAX = 2**64 - 1


_INT32_MIN = -(2**31)


_INT32_MAX = 2**31 - 1


_UINT32_MAX = 2**32 - 1


SIGNED_64 = frozenset({FieldDescriptor.TYPE_INT64, FieldDescriptor.TYPE_SINT64, FieldDescriptor.TYPE_SFIXED64})


UNSIGNED_64 = frozenset({FieldDescriptor.TYPE_UINT64, FieldDescriptor.TYPE_FIXED64})


_SIGNED_32 = frozenset({FieldDescriptor.TYPE_INT32, FieldDescriptor.TYPE_SINT32, FieldDescriptor.TYPE_SFIXED32})


_UNSIGNED_32 = frozenset({FieldDescriptor.TYPE_UINT32, FieldDescriptor.TYPE_FIXED32})


TIMESTAMP = "google.protobuf.Timestamp"


DURATION = "google.protobuf.Duration"


_DURATION_PATTERN = r"^-?[0-9]+(\.[0-9]{1,9})?s$"


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
        for oneof, members in oneof_members(message):
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
        if kind in SIGNED_64 or kind in UNSIGNED_64:
            return _int64(unsigned=kind in UNSIGNED_64, request=request)
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
            if name == TIMESTAMP:
                return {"type": "string", "format": "date-time"}
            if name == DURATION:
                return {"type": "string", "pattern": _DURATION_PATTERN}
            if name.startswith("google.protobuf."):
                raise ValueError(f"{field.full_name}: no JSON schema for {name} yet")
            return self.message_ref(field.message_type, request=request)
        raise ValueError(f"{field.full_name}: unsupported field type {kind}")

    def field_schema(self, field: FieldDescriptor, *, request: bool) -> Json:
        if is_map(field) and field.message_type is not None:
            value = self.value_schema(field.message_type.fields_by_name["value"], request=request)
            schema: Json = {"type": "object", "additionalProperties": value}
        elif field.is_repeated:
            schema = {"type": "array", "items": self.value_schema(field, request=request)}
        else:
            schema = dict(self.value_schema(field, request=request))
        description = self.comment(field.full_name)
        if field.message_type is not None and field.message_type.full_name == DURATION:
            description = f"{description} A duration in seconds with an `s` suffix, e.g. `1.500s`.".strip()
        if description:
            schema["description"] = description
        if field.GetOptions().deprecated:
            schema["deprecated"] = True
        return schema
