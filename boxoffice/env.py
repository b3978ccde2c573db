"""Typed reads of the environment: :class:`Env` and the one error a bad
value raises, :class:`ConfigError` (the command line reports it as one clear
line and exit code 2).

The ground floor of configuration: :mod:`boxoffice.secrets` and
:mod:`boxoffice.config` read through it.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Mapping

_NAME = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")


class ConfigError(ValueError):
    """A configuration value is missing or malformed."""


class Env:
    """Typed reads of an environment mapping (``os.environ`` or a test dict)."""

    def __init__(self, environ: Mapping[str, str]) -> None:
        self._environ = environ

    def overlay(self, values: Mapping[str, str]) -> Env:
        """This environment with ``values`` set over it."""
        return Env({**self._environ, **values})

    def raw(self, name: str) -> str | None:
        value = self._environ.get(name)
        if value is None or value.strip() == "":
            return None
        return value.strip()

    def string(self, name: str, default: str) -> str:
        value = self.raw(name)
        return default if value is None else value

    def optional_str(self, name: str) -> str | None:
        return self.raw(name)

    def integer(self, name: str, default: int, *, minimum: int | None = None, maximum: int | None = None) -> int:
        value = self.raw(name)
        if value is None:
            result = default
        else:
            try:
                result = int(value)
            except ValueError:
                raise ConfigError(f"{name}={value!r} is not an integer") from None
        if minimum is not None and result < minimum:
            raise ConfigError(f"{name}={result} must be >= {minimum}")
        if maximum is not None and result > maximum:
            raise ConfigError(f"{name}={result} must be <= {maximum}")
        return result

    def optional_integer(self, name: str, *, minimum: int | None = None, maximum: int | None = None) -> int | None:
        """:meth:`integer` for a setting that may be absent (None then)."""
        if self.raw(name) is None:
            return None
        return self.integer(name, 0, minimum=minimum, maximum=maximum)

    def number(self, name: str, default: float, *, minimum: float | None = None, maximum: float | None = None) -> float:
        value = self.raw(name)
        if value is None:
            result = default
        else:
            try:
                result = float(value)
            except ValueError:
                raise ConfigError(f"{name}={value!r} is not a number") from None
        if result != result:  # NaN
            raise ConfigError(f"{name} must be a number")
        if minimum is not None and result < minimum:
            raise ConfigError(f"{name}={result} must be >= {minimum}")
        if maximum is not None and result > maximum:
            raise ConfigError(f"{name}={result} must be <= {maximum}")
        return result

    def flag(self, name: str, default: bool) -> bool:
        value = self.raw(name)
        if value is None:
            return default
        lowered = value.lower()
        if lowered in ("1", "true", "yes", "on"):
            return True
        if lowered in ("0", "false", "no", "off"):
            return False
        raise ConfigError(f"{name}={value!r} is not a boolean (true/false)")

    def choice(self, name: str, default: str, choices: tuple[str, ...]) -> str:
        value = self.string(name, default)
        if value not in choices:
            raise ConfigError(f"{name}={value!r} must be one of {', '.join(choices)}")
        return value

    def grpc_target(self, name: str, default: str) -> str:
        """A gRPC target: ``host:port``, ``dns:///host:port`` (every address
        of the name, e.g. a headless Service's pods), ``dns://server/host:port``,
        ``ipv4:addr:port,addr:port...``, ``ipv6:[addr]:port,...`` or ``unix:path``."""
        value = self.string(name, default)
        if not _is_target(value):
            raise ConfigError(
                f"{name}={value!r} is not a gRPC target (host:port, dns:///host:port, "
                "ipv4:addr:port[,addr:port...], ipv6:[addr]:port[,...] or unix:path)"
            )
        return value

    def keys(self, name: str) -> dict[str, bytes]:
        """A ``kid:secret[,kid:secret...]`` list of signing keys."""
        value = self.raw(name)
        if value is None:
            return {}
        keys: dict[str, bytes] = {}
        for part in value.split(","):
            kid, sep, secret = part.strip().partition(":")
            if not sep or not _NAME.match(kid):
                raise ConfigError(f"{name}: entry {kid!r} must be kid:secret with kid of [A-Za-z0-9_.-]")
            if len(secret) < 16:
                raise ConfigError(f"{name}: secret of key {kid!r} must be at least 16 characters")
            if kid in keys:
                raise ConfigError(f"{name}: key id {kid!r} appears twice")
            keys[kid] = secret.encode()
        return keys


_HOST = re.compile(
    r"^(?=.{1,253}$)[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?(\.[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*\.?$"
)


def _host_port(text: str, *, ipv6_only: bool = False) -> bool:
    """``host:port`` or ``[ipv6]:port`` with a port of 1-65535."""
    host, sep, port = text.rpartition(":")
    if not sep or not port.isascii() or not port.isdigit() or not 0 < int(port) < 65536:
        return False
    if host.startswith("[") and host.endswith("]"):
        try:
            ipaddress.IPv6Address(host[1:-1])
        except ValueError:
            return False
        return True
    if ipv6_only:
        return False
    return bool(_HOST.match(host))


def _is_target(value: str) -> bool:
    if value.startswith("dns:"):
        rest = value[len("dns:") :]
        if rest.startswith("//"):
            authority, slash, rest = rest[2:].partition("/")
            if not slash or (authority and not _host_port(authority) and not _HOST.match(authority)):
                return False
        return _host_port(rest)
    if value.startswith("ipv4:"):
        parts = value[len("ipv4:") :].split(",")
        return all(_host_port(p) and _is_ipv4(p.rpartition(":")[0]) for p in parts)
    if value.startswith("ipv6:"):
        return all(_host_port(p, ipv6_only=True) for p in value[len("ipv6:") :].split(","))
    if value.startswith(("unix:", "unix-abstract:")):
        return len(value.partition(":")[2]) > 0
    return _host_port(value)


def _is_ipv4(text: str) -> bool:
    try:
        ipaddress.IPv4Address(text)
    except ValueError:
        return False
    return True
