"""What the document is made from: the contracts' descriptors (every
generated ``gen.boxoffice.*.v1.*_pb2`` module), the reasons their
``ErrorReason`` enums publish, and the leading comments of proto/ (read with
protoc, which keeps them)."""

from __future__ import annotations

import importlib
import importlib.util
import pkgutil
import re
import subprocess
import sys
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path

from google.protobuf import descriptor_pb2, descriptor_pool
from google.protobuf.descriptor import Descriptor, EnumDescriptor, FieldDescriptor, MethodDescriptor

import gen.boxoffice

ROOT = Path(__file__).resolve().parents[2]
PROTO_ROOT = ROOT / "proto"


REASON_PREFIX = "ERROR_REASON_"


SHARED_REASONS_BELOW = 100


_PATH_PARAM = re.compile(r"\{([a-z_][a-z0-9_]*)\}")


# FileDescriptorProto / DescriptorProto / EnumDescriptorProto /
# ServiceDescriptorProto field numbers, for source locations.
_FILE_MESSAGE, _FILE_ENUM, _FILE_SERVICE = 4, 5, 6


_MESSAGE_FIELD, _MESSAGE_NESTED, _MESSAGE_ENUM, _MESSAGE_ONEOF = 2, 3, 4, 8


_ENUM_VALUE = 2


_SERVICE_METHOD = 2


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


def oneof_members(message: Descriptor) -> list[tuple[str, list[FieldDescriptor]]]:
    """The real oneofs (not proto3 ``optional``'s synthetic ones)."""
    return [
        (oneof.name, list(oneof.fields))
        for oneof in message.oneofs
        if not (len(oneof.fields) == 1 and oneof.name == f"_{oneof.fields[0].name}")
    ]


def is_map(field: FieldDescriptor) -> bool:
    return (
        field.type == FieldDescriptor.TYPE_MESSAGE
        and field.message_type is not None
        and field.message_type.GetOptions().map_entry
    )


def _message_fields(message: Descriptor) -> Iterator[Descriptor]:
    for field in message.fields:
        if field.type != FieldDescriptor.TYPE_MESSAGE or field.message_type is None:
            continue
        if is_map(field):
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
