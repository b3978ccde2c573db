"""Mutual TLS for the mesh: who a process is, and who called it.

- :class:`Authority`, :func:`local_pki`, :func:`write_identity`: a CA and
  per-role certificates (ECDSA P-256, a SPIFFE URI SAN, loopback SANs,
  server and client use) written as ``ca.pem``, ``<role>.pem`` and
  ``<role>-key.pem``; what ``boxoffice up`` and the tests use.
- :func:`server_credentials`: a server that requires a client certificate
  of the mesh's CA and re-reads its own certificate when its files change.
- :class:`ClientChannel`: a channel as this process's identity that
  follows its certificate files the same way.
- :class:`CallerResolver`: the caller of a call, from the peer's
  certificate or a trusted sidecar's header.
- :func:`identity_from_xfcc`: the SPIFFE ID a sidecar forwards when the mesh,
  not this process, terminates TLS.
"""

from boxoffice.tls._callers import CallerResolver
from boxoffice.tls._pki import (
    CA_VALIDITY,
    LEAF_VALIDITY,
    Authority,
    CertFiles,
    local_pki,
    namespaces_of,
    spiffe_ids_of,
    write_identity,
)
from boxoffice.tls._reload import ClientChannel, read_pair, server_credentials
from boxoffice.tls._xfcc import identity_from_xfcc

__all__ = [
    "CA_VALIDITY",
    "LEAF_VALIDITY",
    "Authority",
    "CallerResolver",
    "CertFiles",
    "ClientChannel",
    "identity_from_xfcc",
    "local_pki",
    "namespaces_of",
    "read_pair",
    "server_credentials",
    "spiffe_ids_of",
    "write_identity",
]
