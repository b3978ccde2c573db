"""Who is calling: the mesh identity of the process on the other end, and the
fan the edge says it acts for.

The server's call wrapper learns the caller once per call (from the peer's
certificate, see :mod:`boxoffice.access`) and binds it here; handlers ask
:func:`current` instead of trusting anything in a request body. A fan is
never a mesh identity: the edge authenticates the fan and asserts them in
the ``x-boxoffice-customer`` metadata, which counts only when the caller's
identity is the edge.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from contextvars import ContextVar, Token
from dataclasses import dataclass

# The metadata key in which the edge names the fan it acts for.
CUSTOMER_METADATA_KEY = "x-boxoffice-customer"

# Where the edge says the fan's verified e-mail address is, and the language
# the fan uses (en, vi, pt-BR): for the tickets' e-mail, believed from the
# edge only, as the customer is.
EMAIL_METADATA_KEY = "x-boxoffice-email"
LANGUAGE_METADATA_KEY = "x-boxoffice-language"

# The role whose assertion of a customer is believed.
EDGE = "edge"


@dataclass(frozen=True, slots=True)
class Caller:
    """The caller of the current call.

    ``identity`` is the peer's SPIFFE ID (``spiffe://<domain>/ns/<ns>/sa/<role>``)
    and ``role`` its last segment; both are None for a peer that presented
    no certificate this mesh trusts. ``customer_id`` is the fan the edge
    asserts, decoded from the percent-encoded UTF-8 of the metadata (None
    unless the role is the edge and it named one).
    """

    identity: str | None
    role: str | None
    customer_id: str | None = None
    # The fan's verified e-mail address and language, as the edge asserts them.
    email: str | None = None
    language: str | None = None

    @property
    def authenticated(self) -> bool:
        return self.role is not None

    @property
    def is_edge(self) -> bool:
        return self.role == EDGE


# Outside any call (background jobs, start-up) there is no caller.
NOBODY = Caller(identity=None, role=None)

_CALLER: ContextVar[Caller] = ContextVar("boxoffice_caller", default=NOBODY)


def current() -> Caller:
    """The caller of the call being served (:data:`NOBODY` outside one)."""
    return _CALLER.get()


def enter(caller: Caller) -> Token[Caller]:
    """Serve what follows as ``caller`` until :func:`leave` (the call
    wrapper's path, without a context manager's generator)."""
    return _CALLER.set(caller)


def leave(token: Token[Caller]) -> None:
    _CALLER.reset(token)


@contextlib.contextmanager
def acting_as(caller: Caller) -> Iterator[None]:
    """Serve the enclosed work as ``caller`` (the call wrapper, and tests
    that drive a handler without a server)."""
    token = _CALLER.set(caller)
    try:
        yield
    finally:
        _CALLER.reset(token)
