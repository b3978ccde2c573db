"""Credentials that follow their files: a server that presents the new
certificate from the next handshake on, and a client channel that dials
with the new one, neither restarted.

Files change under a running process when cert-manager (or the SPIFFE CSI
driver) renews a mounted Secret, or when ``boxoffice up`` renews its own.
Both sides look at the files' modification times at most once a second,
and take a new certificate only once its key matches it: a renewal caught
between writing the certificate and writing the key keeps the old pair
until the new one is whole.
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import grpc
from cryptography import x509
from cryptography.hazmat.primitives import serialization

from boxoffice.tls._pki import CertFiles

_log = logging.getLogger("boxoffice.tls")

_CHECK_INTERVAL_SECONDS = 1.0
# How long a replaced client channel lets its calls in flight finish.
_OLD_CHANNEL_GRACE_SECONDS = 30.0

T = TypeVar("T")


class _Pair:
    """One reading of the three files."""

    def __init__(self, ca: bytes, cert: bytes, key: bytes) -> None:
        self.ca = ca
        self.cert = cert
        self.key = key


def _mtimes(files: CertFiles) -> tuple[int, int, int]:
    return (files.ca.stat().st_mtime_ns, files.cert.stat().st_mtime_ns, files.key.stat().st_mtime_ns)


def read_pair(files: CertFiles) -> _Pair:
    """Reads the files; ValueError when the key is not the certificate's or
    a file is not PEM of its kind."""
    ca, cert_pem, key_pem = files.ca.read_bytes(), files.cert.read_bytes(), files.key.read_bytes()
    cert = x509.load_pem_x509_certificate(cert_pem)
    key = serialization.load_pem_private_key(key_pem, password=None)
    x509.load_pem_x509_certificates(ca)
    if key.public_key() != cert.public_key():
        raise ValueError(f"{files.key} is not the key of {files.cert}")
    return _Pair(ca, cert_pem, key_pem)


class _Watch:
    """The files' latest good reading, re-read when their mtimes change."""

    def __init__(self, files: CertFiles) -> None:
        self.files = files
        self._lock = threading.Lock()
        self._stamp = _mtimes(files)
        self.pair = read_pair(files)
        self._checked = time.monotonic()

    def changed(self) -> _Pair | None:
        """A new good reading since the last call, or None."""
        now = time.monotonic()
        if now - self._checked < _CHECK_INTERVAL_SECONDS:
            return None
        with self._lock:
            if now - self._checked < _CHECK_INTERVAL_SECONDS:
                return None
            self._checked = now
            try:
                stamp = _mtimes(self.files)
                if stamp == self._stamp:
                    return None
                pair = read_pair(self.files)
            except (OSError, ValueError) as err:
                # Half-renewed or missing: keep what works, look again later.
                _log.warning("certificate files not reloaded", extra={"file": str(self.files.cert), "error": str(err)})
                return None
            self._stamp = stamp
            self.pair = pair
            _log.info("certificate reloaded", extra={"file": str(self.files.cert)})
            return pair


def _server_config(pair: _Pair) -> Any:
    return grpc.ssl_server_certificate_configuration([(pair.key, pair.cert)], root_certificates=pair.ca)


def server_credentials(files: CertFiles) -> grpc.ServerCredentials:
    """Server credentials that require a client certificate of the CA in
    ``files.ca`` and present the certificate in ``files.cert``, both re-read
    at the next handshake after the files change."""
    watch = _Watch(files)

    def fetch() -> Any:
        pair = watch.changed()
        return None if pair is None else _server_config(pair)

    return grpc.dynamic_ssl_server_credentials(_server_config(watch.pair), fetch, require_client_authentication=True)


# Calls spread over every address the target resolves to (a headless
# Service's pods with ``dns:///name:port``), not one connection to one pod.
ROUND_ROBIN = json.dumps({"loadBalancingConfig": [{"round_robin": {}}]})


class ClientChannel:
    """A channel to ``target`` as this process's identity (``files``; None:
    plaintext, for a mesh whose sidecars do mTLS).

    Calls are balanced round robin over the addresses the target resolves
    to: ``dns:///booking-svc-headless:50051`` reaches every pod of a
    headless Service (gRPC resolves the name again when a connection ends,
    as the servers' maximum connection age makes them). The server's
    certificate is verified against the target's host name (the name of
    ``dns:///name:port``, an IP SAN for ``127.0.0.1:port``), or against
    ``server_name`` when given (a target of several addresses, such as
    ``ipv4:10.0.0.1:50051,10.0.0.2:50051``, names no host).

    ``channel()`` answers the current channel; once the files change, the
    next ``channel()`` dials a new one with the new certificate and closes
    the old one after its calls in flight finish. Stubs made with
    :meth:`stub` follow the channel."""

    def __init__(
        self,
        target: str,
        files: CertFiles | None,
        *,
        options: Sequence[tuple[str, Any]] = (),
        server_name: str | None = None,
        interceptors: Sequence[grpc.aio.ClientInterceptor] = (),
        stub_channel: Callable[[grpc.aio.Channel], grpc.aio.Channel] | None = None,
    ) -> None:
        self.target = target
        self._options = list(options)
        # On every channel this one dials (the trace context's, say).
        self._interceptors = list(interceptors)
        # What stubs are made on (the channel, or one that adds to each call's metadata).
        self._stub_channel = stub_channel
        if not any(name == "grpc.service_config" for name, _ in self._options):
            self._options.append(("grpc.service_config", ROUND_ROBIN))
        if server_name is not None and files is not None:
            self._options.append(("grpc.ssl_target_name_override", server_name))
        self._watch = _Watch(files) if files is not None else None
        self._channel = self._dial(self._watch.pair if self._watch is not None else None)
        self._stubs: dict[Callable[[grpc.aio.Channel], Any], Any] = {}
        self._closing: set[asyncio.Task[None]] = set()

    def _dial(self, pair: _Pair | None) -> grpc.aio.Channel:
        if pair is None:
            return grpc.aio.insecure_channel(self.target, options=self._options, interceptors=self._interceptors)
        credentials = grpc.ssl_channel_credentials(
            root_certificates=pair.ca, private_key=pair.key, certificate_chain=pair.cert
        )
        return grpc.aio.secure_channel(self.target, credentials, options=self._options, interceptors=self._interceptors)

    def channel(self) -> grpc.aio.Channel:
        if self._watch is not None:
            pair = self._watch.changed()
            if pair is not None:
                old, self._channel = self._channel, self._dial(pair)
                self._stubs.clear()
                task = asyncio.get_running_loop().create_task(old.close(grace=_OLD_CHANNEL_GRACE_SECONDS))
                self._closing.add(task)
                task.add_done_callback(self._closing.discard)
        return self._channel

    def stub(self, factory: Callable[[grpc.aio.Channel], T]) -> T:
        """``factory(channel)`` (a generated ``...Stub`` class) on the
        current channel, made once per channel."""
        channel = self.channel()
        stub = self._stubs.get(factory)
        if stub is None:
            stub = self._stubs[factory] = factory(
                channel if self._stub_channel is None else self._stub_channel(channel)
            )
        return stub

    async def close(self, grace: float | None = None) -> None:
        await self._channel.close(grace)
        if self._closing:
            await asyncio.gather(*self._closing, return_exceptions=True)

    async def __aenter__(self) -> ClientChannel:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
