"""Domain errors, the one registry of codes and reasons, and their one
mapping to and from the gRPC wire.

Every service raises a :class:`BoxofficeError` subclass; the server's call wrapper
turns it into a canonical gRPC status carrying exactly one
``google.rpc.ErrorInfo`` (AIP-193). Clients turn a ``grpc.RpcError`` back into
the same class with :func:`from_rpc_error`.

The registry has two tables. :func:`error_class_for_code` goes from a
canonical code to its exception class. :func:`published_reasons` gives the
reasons a contract package publishes in its ``ErrorReason`` enum
(``proto/boxoffice/<service>/v1/error_reason.proto``); the wire reason is the
value's name without ``ERROR_REASON_``. The enums are read from the generated
descriptors in ``gen`` (the contract), never from a service package. Values
below :data:`SERVICE_REASONS_START` are the reasons every service shares
(:data:`SHARED_REASONS`: validation, tokens, deadlines, stores, upstream
calls); the test suite proves that the code raises no reason its package does
not publish, and the call wrapper reports one that slips through at run time
with :class:`UnpublishedReasonWarning`.
"""

from __future__ import annotations

import types
from collections.abc import Mapping
from typing import ClassVar

import grpc
from google.protobuf import any_pb2
from google.protobuf.descriptor import EnumDescriptor
from google.rpc import error_details_pb2, status_pb2
from grpc_status import rpc_status

from gen.boxoffice.booking.v1 import error_reason_pb2 as _booking_reasons
from gen.boxoffice.checkin.v1 import error_reason_pb2 as _checkin_reasons
from gen.boxoffice.edge.v1 import error_reason_pb2 as _edge_reasons
from gen.boxoffice.mail.v1 import error_reason_pb2 as _mail_reasons
from gen.boxoffice.payment.v1 import error_reason_pb2 as _payment_reasons
from gen.boxoffice.queue.v1 import error_reason_pb2 as _queue_reasons

ERROR_DOMAIN = "boxoffice"

REASON_PREFIX = "ERROR_REASON_"
"""The prefix buf's lint puts on every ``ErrorReason`` value; the wire reason
drops it (``ERROR_REASON_SEAT_UNAVAILABLE`` is sent as ``SEAT_UNAVAILABLE``)."""

SERVICE_REASONS_START = 100
"""``ErrorReason`` numbers below this are the shared reasons (the same name
and number in every package); from it on, a service's own."""


class BoxofficeError(Exception):
    """An error that is a value on the wire: a code, a reason, metadata."""

    code: ClassVar[grpc.StatusCode] = grpc.StatusCode.UNKNOWN

    def __init__(
        self,
        message: str,
        *,
        reason: str,
        metadata: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.reason = reason
        self.metadata: dict[str, str] = dict(metadata or {})

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.message!r}, reason={self.reason!r}, metadata={self.metadata!r})"


class InvalidArgument(BoxofficeError):
    code = grpc.StatusCode.INVALID_ARGUMENT


class NotFound(BoxofficeError):
    code = grpc.StatusCode.NOT_FOUND


class AlreadyExists(BoxofficeError):
    code = grpc.StatusCode.ALREADY_EXISTS


class FailedPrecondition(BoxofficeError):
    code = grpc.StatusCode.FAILED_PRECONDITION


class Aborted(BoxofficeError):
    code = grpc.StatusCode.ABORTED


class ResourceExhausted(BoxofficeError):
    code = grpc.StatusCode.RESOURCE_EXHAUSTED


class Unauthenticated(BoxofficeError):
    code = grpc.StatusCode.UNAUTHENTICATED


class PermissionDenied(BoxofficeError):
    code = grpc.StatusCode.PERMISSION_DENIED


class Unavailable(BoxofficeError):
    code = grpc.StatusCode.UNAVAILABLE


class DeadlineExceeded(BoxofficeError):
    code = grpc.StatusCode.DEADLINE_EXCEEDED


class Internal(BoxofficeError):
    code = grpc.StatusCode.INTERNAL


_BY_CODE: dict[grpc.StatusCode, type[BoxofficeError]] = {
    cls.code: cls
    for cls in (
        InvalidArgument,
        NotFound,
        AlreadyExists,
        FailedPrecondition,
        Aborted,
        ResourceExhausted,
        Unauthenticated,
        PermissionDenied,
        Unavailable,
        DeadlineExceeded,
        Internal,
    )
}


_BY_NAME: dict[str, type[BoxofficeError]] = {code.name: cls for code, cls in _BY_CODE.items()}


def error_class_for_code(code: grpc.StatusCode | str) -> type[BoxofficeError]:
    """The one table from a canonical code (or its name, e.g. ``"NOT_FOUND"``)
    to its exception class; :class:`Internal` for a code with none."""
    if isinstance(code, str):
        return _BY_NAME.get(code, Internal)
    return _BY_CODE.get(code, Internal)


def wire_reason(value_name: str) -> str:
    """The ErrorInfo reason of an ``ErrorReason`` value's name
    (``"ERROR_REASON_SOLD_OUT"`` -> ``"SOLD_OUT"``)."""
    if not value_name.startswith(REASON_PREFIX):
        raise ValueError(f"{value_name!r} is not an ErrorReason value name")
    return value_name.removeprefix(REASON_PREFIX)


def _reasons(enum: EnumDescriptor, *, shared: bool | None = None) -> frozenset[str]:
    return frozenset(
        wire_reason(value.name)
        for value in enum.values
        if value.number != 0 and (shared is None or (value.number < SERVICE_REASONS_START) == shared)
    )


_ENUMS: Mapping[str, EnumDescriptor] = types.MappingProxyType(
    {
        module.DESCRIPTOR.package: module.ErrorReason.DESCRIPTOR
        for module in (
            _queue_reasons,
            _booking_reasons,
            _payment_reasons,
            _edge_reasons,
            _checkin_reasons,
            _mail_reasons,
        )
    }
)

_PUBLISHED: Mapping[str, frozenset[str]] = types.MappingProxyType(
    {package: _reasons(enum) for package, enum in _ENUMS.items()}
)

PUBLISHED_PACKAGES: tuple[str, ...] = tuple(sorted(_ENUMS))
"""The contract packages that publish an ``ErrorReason`` enum."""

SHARED_REASONS: frozenset[str] = frozenset.intersection(*(_reasons(enum, shared=True) for enum in _ENUMS.values()))
"""The reasons every package publishes (numbers below
:data:`SERVICE_REASONS_START`): the ones the runtime package raises."""


def published_reasons(package: str) -> frozenset[str]:
    """The wire reasons a contract package (``"boxoffice.booking.v1"``)
    publishes; empty for a package that publishes none."""
    return _PUBLISHED.get(package, frozenset())


def reason_enum(package: str) -> EnumDescriptor:
    """The ``ErrorReason`` enum of a contract package (``KeyError`` when it
    has none)."""
    return _ENUMS[package]


def package_of(service: str) -> str:
    """The contract package of a full service name
    (``"boxoffice.queue.v1.QueueService"`` -> ``"boxoffice.queue.v1"``)."""
    return service.rpartition(".")[0]


class UnpublishedReasonWarning(RuntimeWarning):
    """A service answered a reason its package's ``ErrorReason`` enum does not
    publish. The error still goes out as raised; the warning makes it visible
    (once per service, method and reason with Python's default filter; as an
    error where the test configuration asks for one)."""


def to_status(err: BoxofficeError) -> grpc.Status:
    """The rich gRPC status for a domain error (code, message, ErrorInfo)."""
    info = error_details_pb2.ErrorInfo(reason=err.reason, domain=ERROR_DOMAIN, metadata=err.metadata)
    detail = any_pb2.Any()
    detail.Pack(info)
    status = status_pb2.Status(code=err.code.value[0], message=err.message, details=[detail])
    return rpc_status.to_status(status)


def from_rpc_error(err: grpc.RpcError) -> BoxofficeError:
    """The domain error carried by a failed call (sync or grpc.aio).

    A status without an ErrorInfo (a peer that could not be reached, or that
    answered a bare code) becomes ``DEADLINE_EXCEEDED`` for a deadline and
    ``UPSTREAM_FAILED`` (metadata ``upstream_code``) for any other code, so
    that a service passing it on answers a published reason."""
    if not isinstance(err, grpc.Call) and not isinstance(err, grpc.aio.AioRpcError):
        return Internal(str(err), reason="INTERNAL")
    code = err.code()
    reason = "DEADLINE_EXCEEDED" if code is grpc.StatusCode.DEADLINE_EXCEEDED else "UPSTREAM_FAILED"
    metadata: dict[str, str] = {} if reason == "DEADLINE_EXCEEDED" else {"upstream_code": code.name}
    # Without an ErrorInfo the words are gRPC's own, which name internal
    # addresses ("ipv4:10.0.3.7:50052: connection refused"): not for callers.
    message = (
        "the call's deadline passed while a service it needs answered"
        if reason == "DEADLINE_EXCEEDED"
        else f"a service this call needs failed ({code.name})"
    )
    for key, value in tuple(err.trailing_metadata() or ()):
        if key == "grpc-status-details-bin" and isinstance(value, bytes):
            status = status_pb2.Status.FromString(value)
            for detail in status.details:
                if detail.Is(error_details_pb2.ErrorInfo.DESCRIPTOR):
                    info = error_details_pb2.ErrorInfo()
                    detail.Unpack(info)
                    reason = info.reason
                    metadata = dict(info.metadata)
                    message = err.details() or ""
    return error_class_for_code(code)(message, reason=reason, metadata=metadata)


__all__ = [
    "ERROR_DOMAIN",
    "PUBLISHED_PACKAGES",
    "REASON_PREFIX",
    "SERVICE_REASONS_START",
    "SHARED_REASONS",
    "Aborted",
    "AlreadyExists",
    "BoxofficeError",
    "DeadlineExceeded",
    "FailedPrecondition",
    "Internal",
    "InvalidArgument",
    "NotFound",
    "PermissionDenied",
    "ResourceExhausted",
    "Unauthenticated",
    "Unavailable",
    "UnpublishedReasonWarning",
    "error_class_for_code",
    "from_rpc_error",
    "package_of",
    "published_reasons",
    "reason_enum",
    "to_status",
    "wire_reason",
]
