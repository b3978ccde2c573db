"""Ports a process is about to listen on, checked before anything starts:
a port in use is a one-line error at once, not after the stores are
migrated and half the servers are up. Copies of one server role under
``BOXOFFICE_PROCESSES`` share their ports (``SO_REUSEPORT``); nothing else
does, so a second mesh started on the same ports is refused rather than
silently splitting the traffic with the first."""

from __future__ import annotations

import errno
import socket
from collections.abc import Iterable
from dataclasses import dataclass

from boxoffice.config import ConfigError


@dataclass(frozen=True)
class Listener:
    """A port a process listens on: what it serves, the setting that moves
    it, the host and the port (0: any free port, nothing to check)."""

    what: str
    setting: str
    host: str
    port: int


def ensure_free(listeners: Iterable[Listener]) -> None:
    """ConfigError (one line) naming the first listener whose port is taken."""
    for listener in listeners:
        if listener.port == 0:
            continue
        host = listener.host or "0.0.0.0"
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        with socket.socket(family, socket.SOCK_STREAM) as sock:
            # As the servers bind: a port left in TIME_WAIT is free, one with a listener is not.
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                sock.bind((host, listener.port))
            except OSError as err:
                place = f"[{host}]:{listener.port}" if ":" in host else f"{host}:{listener.port}"
                why = "the port is in use" if err.errno == errno.EADDRINUSE else (err.strerror or str(err))
                raise ConfigError(f"{listener.what} cannot listen on {place} ({listener.setting}): {why}") from None
