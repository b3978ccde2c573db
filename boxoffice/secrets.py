"""Secrets: read from the environment or from a mounted file, re-read when
the file changes, and never the development ones outside a laptop.

A secret ``NAME`` comes from the variable ``NAME`` or from the file that
``NAME_FILE`` names (a Kubernetes Secret mounted as a volume), never both.
A file is re-read when its modification time or size changes, looked at no
more than once per ``check_interval_seconds``, so rotating a key is an edit
of the Secret, not a restart. A file that cannot be read or parsed at start
is a :class:`~boxoffice.env.ConfigError` naming ``NAME_FILE``; later, a
bad version (a half-written file, say) is logged and the last good value
kept.

The development secrets (the token key and the webhook secret a process
falls back on when none is configured) make ``boxoffice up`` work with no
setup. :func:`refuse_development_secrets` refuses them to a process that is
not on the embedded stores: the command line calls it before it connects to
anything, and reports the variable to set.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass
from typing import Generic, TypeVar

from boxoffice.env import ConfigError, Env

_log = logging.getLogger("boxoffice.secrets")

T = TypeVar("T")

# The development token key (key id "dev") and webhook secret.
DEV_TOKEN_KID = "dev"
DEV_TOKEN_KEY = "boxoffice-development-signing-key"
DEV_WEBHOOK_SECRET = "whsec_boxoffice_development_secret"

TOKEN_KEYS = "BOXOFFICE_TOKEN_KEYS"
WEBHOOK_SECRETS = "BOXOFFICE_WEBHOOK_SECRETS"
SANDBOX_WEBHOOK_SECRET = "BOXOFFICE_SANDBOX_WEBHOOK_SECRET"
EDGE_SESSION_KEYS = "BOXOFFICE_EDGE_SESSION_KEYS"
DEV_EDGE_SESSION_KEY = "boxoffice-development-session-key"
# The development check-in key: an Ed25519 seed (64 hex digits) everyone knows.
CHECKIN_KEYS = "BOXOFFICE_CHECKIN_KEYS"
DEV_CHECKIN_KID = "dev"
DEV_CHECKIN_SEED = "626f786f66666963652d646576656c6f706d656e742d636865636b696e2d6b79"
# Development switches: on, they let anyone in as anyone.
EDGE_DEV_SIGNIN = "BOXOFFICE_EDGE_DEV_SIGNIN"

_MAX_FILE_BYTES = 64 * 1024


def file_variable(name: str) -> str:
    """The variable naming the file that holds secret ``name``."""
    return f"{name}_FILE"


class SecretSource(Generic[T]):
    """The current value of one secret: fixed, or a file's contents parsed
    and re-read when the file changes (see the module docstring)."""

    def __init__(
        self,
        name: str,
        value: T,
        *,
        path: str | None = None,
        parse: Callable[[str], T] | None = None,
        check_interval_seconds: float = 1.0,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        if path is not None and parse is None:
            raise ValueError("a secret read from a file needs its parser")
        self.name = name
        self.path = path
        self._value = value
        self._parse = parse
        self._interval = check_interval_seconds
        self._monotonic = monotonic
        self._next_check = monotonic() + check_interval_seconds
        self._stamp = _stamp(path) if path is not None else None
        # The version of the file that failed to read or parse, said once.
        self._bad: object = None
        self._lock = threading.Lock()

    @classmethod
    def fixed(cls, name: str, value: T) -> SecretSource[T]:
        return cls(name, value)

    @classmethod
    def from_file(
        cls, name: str, path: str, parse: Callable[[str], T], *, check_interval_seconds: float = 1.0
    ) -> SecretSource[T]:
        """The secret in ``path``; ConfigError naming ``name``'s file variable
        when it cannot be read or parsed."""
        variable = file_variable(name)
        try:
            value = parse(_read(path))
        except OSError as err:
            raise ConfigError(f"{variable}={path!r} cannot be read: {err.strerror or err}") from None
        except ConfigError as err:
            raise ConfigError(f"{variable}={path!r}: {err}") from None
        return cls(name, value, path=path, parse=parse, check_interval_seconds=check_interval_seconds)

    def get(self) -> T:
        """The value now (the file is looked at once per check interval)."""
        if self.path is None or self._monotonic() < self._next_check:
            return self._value
        with self._lock:
            if self._monotonic() >= self._next_check:
                self._next_check = self._monotonic() + self._interval
                self._reload()
        return self._value

    def _reload(self) -> None:
        assert self.path is not None and self._parse is not None
        stamp: object = None
        try:
            stamp = _stamp(self.path)
            if stamp in (self._stamp, self._bad):
                return
            value = self._parse(_read(self.path))
        except (OSError, ConfigError) as err:
            # Keep serving with the last good value; say so once per version.
            failure = stamp if stamp is not None else str(err)
            if failure != self._bad:
                self._bad = failure
                _log.warning(
                    "secret file not re-read; keeping the last good value",
                    extra={"secret": self.name, "error": str(err)},
                )
            return
        self._value, self._stamp, self._bad = value, stamp, None
        _log.info("secret file re-read", extra={"secret": self.name})


def _stamp(path: str) -> tuple[int, int, int]:
    info = os.stat(path)
    return info.st_mtime_ns, info.st_size, info.st_ino


def _read(path: str) -> str:
    with open(path, encoding="utf-8") as handle:
        text = handle.read(_MAX_FILE_BYTES + 1)
    if len(text) > _MAX_FILE_BYTES:
        raise ConfigError("the file is larger than 64 KiB")
    return text.strip()


def read_secret(env: Env, name: str, parse: Callable[[str], T], *, default: str | None) -> SecretSource[T]:
    """Secret ``name`` from ``NAME`` or ``NAME_FILE``; ``default`` (parsed)
    when neither is set, ConfigError when there is no default or both are set."""
    value = env.raw(name)
    path = env.raw(file_variable(name))
    if value is not None and path is not None:
        raise ConfigError(f"{name} and {file_variable(name)} are both set; set one")
    if path is not None:
        return SecretSource.from_file(name, path, parse)
    if value is None:
        if default is None:
            raise ConfigError(f"{name} (or {file_variable(name)}) must be set")
        value = default
    return SecretSource.fixed(name, parse(value))


@dataclass(frozen=True, slots=True)
class DevelopmentSecret:
    """A secret with a development fallback, and the components that read it."""

    variable: str
    # The development value; a configured value containing it is refused too.
    value: str
    # True: leaving the variable unset means using the development value.
    unset_is_development: bool
    # The components (service packages' COMPONENT) whose processes read it.
    components: frozenset[str]


DEVELOPMENT_SECRETS: tuple[DevelopmentSecret, ...] = (
    DevelopmentSecret(TOKEN_KEYS, DEV_TOKEN_KEY, True, frozenset({"queue", "booking", "payment"})),
    DevelopmentSecret(WEBHOOK_SECRETS, DEV_WEBHOOK_SECRET, True, frozenset({"payment"})),
    DevelopmentSecret(SANDBOX_WEBHOOK_SECRET, DEV_WEBHOOK_SECRET, False, frozenset({"payment"})),
    DevelopmentSecret(EDGE_SESSION_KEYS, DEV_EDGE_SESSION_KEY, True, frozenset({"edge"})),
    # The ticket issuer (a payment role) signs ticket codes; check-in verifies them.
    DevelopmentSecret(CHECKIN_KEYS, DEV_CHECKIN_SEED, True, frozenset({"payment", "checkin"})),
)

# The payment provider: unset, the sandbox, which takes no money. A process
# off the embedded stores must name it (BOXOFFICE_PAYMENT_PROVIDER=stripe, or
# =sandbox for a staging mesh, whose tickets then say so).
PAYMENT_PROVIDER = "BOXOFFICE_PAYMENT_PROVIDER"

# Switches that only a process on the embedded stores may turn on, and the
# components that read them.
DEVELOPMENT_SWITCHES: tuple[tuple[str, frozenset[str]], ...] = ((EDGE_DEV_SIGNIN, frozenset({"edge"})),)


def _configured(env: Env, variable: str) -> str | None:
    """What the variable or its file says now (None: neither is set)."""
    value = env.raw(variable)
    if value is not None:
        return value
    path = env.raw(file_variable(variable))
    if path is None:
        return None
    try:
        return _read(path)
    except OSError as err:
        raise ConfigError(f"{file_variable(variable)}={path!r} cannot be read: {err.strerror or err}") from None


def development_secrets_in_use(env: Env, components: Collection[str] | None = None) -> list[str]:
    """The variables whose development value a process of ``components``
    (None: every component) would use."""
    found: list[str] = []
    for secret in DEVELOPMENT_SECRETS:
        if components is not None and not secret.components.intersection(components):
            continue
        configured = _configured(env, secret.variable)
        if (configured is None and secret.unset_is_development) or (
            configured is not None and secret.value in configured
        ):
            found.append(secret.variable)
    return found


def refuse_development_secrets(
    env: Env, *, on_embedded_stores: bool, components: Collection[str] | None = None
) -> None:
    """ConfigError naming the first variable whose development value a
    process not on the embedded stores would use (``components``: the
    components the process runs, None for all); nothing on embedded stores."""
    if on_embedded_stores:
        return
    for switch, readers in DEVELOPMENT_SWITCHES:
        if (components is None or readers.intersection(components)) and env.flag(switch, False):
            raise ConfigError(f"{switch} is on, which only a process on the embedded stores may be; turn it off")
    in_use = development_secrets_in_use(env, components)
    if in_use:
        variable = in_use[0]
        raise ConfigError(
            f"{variable} is unset or holds the development secret, which only a process on the embedded "
            f"stores may use; set {variable} (or {file_variable(variable)}) from a Secret"
        )
    if (components is None or "payment" in components) and env.raw(PAYMENT_PROVIDER) is None:
        raise ConfigError(
            f"{PAYMENT_PROVIDER} is unset, and the sandbox provider it defaults to takes no money, which only a "
            f"process on the embedded stores may do; set it to stripe (or to sandbox for a staging mesh, whose "
            f"tickets then say sandbox)"
        )
