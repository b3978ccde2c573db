"""gRPC serving shared by every service: one wrapper around every method
handler for errors, deadlines and metrics; health and reflection; graceful
shutdown.

The wrapper (:class:`CallWrapper`, put around each handler once, as it is
registered, so that a call pays no interceptor chain) is the one place a
domain error becomes a status: every
failed call carries one ``google.rpc.ErrorInfo`` (an unexpected exception
answers ``INTERNAL`` with reason ``INTERNAL``), and a reason the service's
contract package does not publish goes out unchanged but raises
:class:`~boxoffice.errors.UnpublishedReasonWarning` (checked only on the error
path, against a set resolved once per method).

It is also where the authorization table is enforced: before a call does
anything, its caller (see :mod:`boxoffice.caller`) is read from the peer's
certificate and checked with :func:`boxoffice.access.allowed`; a refusal
answers PERMISSION_DENIED (``CALLER_UNKNOWN`` or ``CALLER_NOT_ALLOWED``),
counts in ``boxoffice_grpc_calls_refused_total`` and is logged at most once
a minute per method and role."""

from boxoffice.server._calls import CallWrapper, FailedCalls, go_code_name, serve_stream
from boxoffice.server._gate import Gate
from boxoffice.server._server import Drain, GrpcServer, Registration, server_options

__all__ = [
    "CallWrapper",
    "Drain",
    "FailedCalls",
    "Gate",
    "GrpcServer",
    "Registration",
    "go_code_name",
    "serve_stream",
    "server_options",
]
