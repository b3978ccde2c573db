"""Domain errors and their one mapping to and from the gRPC wire.

Every service raises a :class:`BoxofficeError` subclass; the server interceptor
turns it into a canonical gRPC status carrying exactly one
``google.rpc.ErrorInfo`` (AIP-193). Clients turn a ``grpc.RpcError`` back into
the same class with :func:`from_rpc_error`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar

import grpc
from google.protobuf import any_pb2
from google.rpc import error_details_pb2, status_pb2
from grpc_status import rpc_status

ERROR_DOMAIN = "boxoffice"


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


def to_status(err: BoxofficeError) -> grpc.Status:
    """The rich gRPC status for a domain error (code, message, ErrorInfo)."""
    info = error_details_pb2.ErrorInfo(reason=err.reason, domain=ERROR_DOMAIN, metadata=err.metadata)
    detail = any_pb2.Any()
    detail.Pack(info)
    status = status_pb2.Status(code=err.code.value[0], message=err.message, details=[detail])
    return rpc_status.to_status(status)


def from_rpc_error(err: grpc.RpcError) -> BoxofficeError:
    """The domain error carried by a failed call (sync or grpc.aio)."""
    if not isinstance(err, grpc.Call) and not isinstance(err, grpc.aio.AioRpcError):
        return Internal(str(err), reason="INTERNAL")
    code = err.code()
    message = err.details() or ""
    reason = code.name
    metadata: dict[str, str] = {}
    for key, value in tuple(err.trailing_metadata() or ()):
        if key == "grpc-status-details-bin" and isinstance(value, bytes):
            status = status_pb2.Status.FromString(value)
            for detail in status.details:
                if detail.Is(error_details_pb2.ErrorInfo.DESCRIPTOR):
                    info = error_details_pb2.ErrorInfo()
                    detail.Unpack(info)
                    reason = info.reason
                    metadata = dict(info.metadata)
    return error_class_for_code(code)(message, reason=reason, metadata=metadata)


__all__ = [
    "ERROR_DOMAIN",
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
    "error_class_for_code",
    "from_rpc_error",
    "to_status",
]
