"""Who is on the other end of a call: the peer's SPIFFE ID, from its
certificate (TLS on) or from a trusted sidecar's XFCC header (TLS off)."""

from __future__ import annotations

import re
import urllib.parse
from collections.abc import Callable
from typing import Any

import grpc

from boxoffice import access
from boxoffice.caller import CUSTOMER_METADATA_KEY, EMAIL_METADATA_KEY, LANGUAGE_METADATA_KEY, NOBODY, Caller
from boxoffice.tls._xfcc import identity_from_xfcc

_XFCC = "x-forwarded-client-cert"
# A customer id is at most this many characters; its percent-encoded UTF-8
# (gRPC metadata is ASCII) at most 12 bytes a character.
_MAX_CUSTOMER_LENGTH = 128
_MAX_ENCODED_LENGTH = _MAX_CUSTOMER_LENGTH * 12
# Identities whose role a resolver remembers.
_MAX_IDENTITIES = 1024


class CallerResolver:
    """Reads a call's :class:`~boxoffice.caller.Caller`.

    ``source`` is ``"tls"`` (the ``peer_spiffe_id`` grpc puts in the auth
    context of a verified client certificate with one SPIFFE URI SAN),
    ``"xfcc"`` (the sidecar's header) or ``"none"`` (no caller has an
    identity). An ID of another trust domain, not of the
    ``/ns/<ns>/sa/<role>`` shape, or of a namespace ``namespaces`` does not
    name (it answers None for any namespace, an empty set for none yet),
    is no role of this mesh: the CA signs for the trust domain, the mesh
    is one namespace of it."""

    def __init__(
        self,
        source: str,
        trust_domain: str,
        *,
        namespaces: Callable[[], frozenset[str] | None] = lambda: None,
    ) -> None:
        if source not in ("tls", "xfcc", "none"):
            raise ValueError(f"unknown identity source {source!r}")
        self._source = source
        self._trust_domain = trust_domain
        self._namespaces = namespaces
        # The role of each identity seen (a mesh has a handful of them);
        # emptied if it ever grows past a bound.
        self._roles: dict[str, str | None] = {}

    def role_of(self, identity: str) -> str | None:
        """The mesh role of a SPIFFE ID, or None."""
        roles = self._roles
        if identity in roles:
            return roles[identity]
        namespaces = self._namespaces()
        role = access.role_of(identity, self._trust_domain, namespaces)
        if namespaces is not None and not namespaces:
            # Nothing is trusted yet (the process's own identity is not
            # known): answered, not remembered.
            return role
        if len(roles) >= _MAX_IDENTITIES:
            roles.clear()
        roles[identity] = role
        return role

    def _identity(self, context: grpc.aio.ServicerContext[Any, Any]) -> str | None:
        if self._source == "tls":
            ids = list(context.auth_context().get("peer_spiffe_id") or ())
            if len(ids) != 1:
                return None
            return ids[0].decode("utf-8", "replace")
        if self._source == "xfcc":
            for key, value in context.invocation_metadata() or ():
                if key == _XFCC:
                    return identity_from_xfcc(value if isinstance(value, str) else value.decode("latin-1"))
        return None

    def resolve(self, context: grpc.aio.ServicerContext[Any, Any]) -> Caller:
        identity = self._identity(context)
        if identity is None:
            return NOBODY
        role = self.role_of(identity)
        if role is None:
            return Caller(identity=identity, role=None)
        customer = email = language = None
        if role == access.EDGE:
            for key, value in context.invocation_metadata() or ():
                if not isinstance(value, str):
                    continue
                if key == CUSTOMER_METADATA_KEY and customer is None:
                    customer = _decoded(value)
                elif key == EMAIL_METADATA_KEY and email is None:
                    email = _email(value)
                elif key == LANGUAGE_METADATA_KEY and language is None:
                    language = value if value in _LANGUAGES else None
        return Caller(identity=identity, role=role, customer_id=customer, email=email, language=language)


_LANGUAGES = frozenset({"en", "vi", "pt-BR"})
_EMAIL = re.compile(r"[^@\s\x00-\x1f\x7f]{1,64}@[^@\s\x00-\x1f\x7f]{1,253}")


def _email(value: str) -> str | None:
    """An asserted address (percent-encoded UTF-8) of a plausible shape, or None."""
    address = _decoded(value)
    return address if address is not None and len(address) <= 254 and _EMAIL.fullmatch(address) else None


def _decoded(value: str) -> str | None:
    """The fan an assertion names (percent-encoded UTF-8), or None for one
    that is empty, too long or not UTF-8."""
    if not 0 < len(value) <= _MAX_ENCODED_LENGTH:
        return None
    try:
        customer = urllib.parse.unquote(value, errors="strict")
    except UnicodeDecodeError:
        return None
    return customer if 0 < len(customer) <= _MAX_CUSTOMER_LENGTH else None
