"""Configuration from the environment into typed, frozen dataclasses.

Each service declares its own dataclass and builds it with the readers of
:mod:`boxoffice.env` (:class:`Env`, whose bad values raise
:class:`ConfigError`: both are named here too, where every caller takes them).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from boxoffice import secrets
from boxoffice.clock import Clock
from boxoffice.env import ConfigError as ConfigError
from boxoffice.env import Env as Env
from boxoffice.secrets import SecretSource
from boxoffice.tokens import KeyRing, TokenSigner


@dataclass(frozen=True, slots=True)
class ServerConfig:
    """How a process serves gRPC and metrics, and how it shuts down."""

    grpc_host: str
    grpc_port: int
    metrics_port: int
    shutdown_grace_seconds: float
    # HTTP/2 streams one connection may have open at once.
    max_concurrent_streams: int
    max_pending_requests: int
    default_deadline_seconds: float
    # Server streams one process keeps open at once (each costs ~25 KB).
    max_open_streams: int
    # The largest request message a server takes.
    max_message_bytes: int
    # After SIGTERM: health answers NOT_SERVING for this long while calls are
    # still served, so that load balancers stop sending before the listener closes.
    drain_seconds: float = 0.0
    # A client connection is told to go away (GOAWAY) after this long, so
    # that clients balancing over a headless Service resolve it again and
    # new pods get calls (0: never); calls in flight then have the grace to
    # finish (0: as long as they take).
    max_connection_age_seconds: float = 0.0
    max_connection_age_grace_seconds: float = 0.0
    # Whether the listening ports are shared with the other copies of this
    # server role (SO_REUSEPORT): only a copy run under BOXOFFICE_PROCESSES,
    # which its supervisor marks with BOXOFFICE_PROCESS_INDEX. Anything else
    # finds a port in use an error, not a listener to split traffic with.
    reuse_port: bool = False

    @property
    def grpc_address(self) -> str:
        host = self.grpc_host
        return f"[{host}]:{self.grpc_port}" if ":" in host else f"{host}:{self.grpc_port}"

    @classmethod
    def from_env(cls, env: Env, *, default_grpc_port: int) -> ServerConfig:
        return cls(
            grpc_host=env.string("BOXOFFICE_GRPC_HOST", "127.0.0.1"),
            grpc_port=env.integer("BOXOFFICE_GRPC_PORT", default_grpc_port, minimum=0, maximum=65535),
            metrics_port=env.integer("BOXOFFICE_METRICS_PORT", 9464, minimum=0, maximum=65535),
            shutdown_grace_seconds=env.number("BOXOFFICE_SHUTDOWN_GRACE_SECONDS", 20.0, minimum=0.0, maximum=600.0),
            max_concurrent_streams=env.integer("BOXOFFICE_MAX_CONCURRENT_STREAMS", 10_000, minimum=1),
            max_pending_requests=env.integer("BOXOFFICE_MAX_PENDING_REQUESTS", 50_000, minimum=1),
            default_deadline_seconds=env.number("BOXOFFICE_DEFAULT_DEADLINE_SECONDS", 5.0, minimum=0.01, maximum=300.0),
            max_open_streams=env.integer("BOXOFFICE_MAX_OPEN_STREAMS", 40_000, minimum=1),
            max_message_bytes=env.integer("BOXOFFICE_MAX_MESSAGE_BYTES", 1 << 20, minimum=1024, maximum=64 << 20),
            drain_seconds=env.number("BOXOFFICE_DRAIN_SECONDS", 5.0, minimum=0.0, maximum=300.0),
            max_connection_age_seconds=_age(env, "BOXOFFICE_GRPC_MAX_CONNECTION_AGE_SECONDS", 300.0),
            max_connection_age_grace_seconds=_age(env, "BOXOFFICE_GRPC_MAX_CONNECTION_AGE_GRACE_SECONDS", 3600.0),
            reuse_port=env.raw("BOXOFFICE_PROCESS_INDEX") is not None,
        )


def _age(env: Env, name: str, default: float) -> float:
    """0 (off), or from one second to a day."""
    value = env.number(name, default, minimum=0.0, maximum=86_400.0)
    if 0 < value < 1:
        raise ConfigError(f"{name}={value} must be 0 (off) or at least 1 second")
    return value


_TRUST_DOMAIN = re.compile(r"^[a-z0-9]([a-z0-9.-]{0,253}[a-z0-9])?$")


@dataclass(frozen=True, slots=True)
class TlsConfig:
    """Mutual TLS between the processes of the mesh, and who a caller is.

    With TLS on (the default) a process serves and dials with the
    certificate and key in ``cert_file``/``key_file`` and trusts peers of
    the CA in ``ca_file``; the files are re-read when they change. With TLS
    off the sidecars of a service mesh do mTLS, and a caller has an identity
    only when ``mesh_identity`` says how to read it (``xfcc``: the SPIFFE
    URI of the ``x-forwarded-client-cert`` header the sidecar sets).
    ``health_port`` is a plaintext port serving only grpc.health.v1, for
    kubelet's probes (None: off).
    """

    enabled: bool
    ca_file: str | None
    cert_file: str | None
    key_file: str | None
    trust_domain: str
    mesh_identity: str | None
    health_port: int | None
    # The namespaces whose identities are the mesh's (BOXOFFICE_TRUST_NAMESPACES);
    # empty: the namespace of the process's own certificate.
    trust_namespaces: tuple[str, ...] = ()

    @property
    def has_files(self) -> bool:
        return self.ca_file is not None

    def require_files(self) -> None:
        """Raises ConfigError unless TLS is off or its three files are set
        and readable (a single-role process has no CA of its own)."""
        if not self.enabled:
            return
        if not self.has_files:
            raise ConfigError(
                "BOXOFFICE_TLS=on needs BOXOFFICE_TLS_CA_FILE, BOXOFFICE_TLS_CERT_FILE and "
                "BOXOFFICE_TLS_KEY_FILE (or BOXOFFICE_TLS=off behind a service mesh)"
            )
        for name, path in (
            ("BOXOFFICE_TLS_CA_FILE", self.ca_file),
            ("BOXOFFICE_TLS_CERT_FILE", self.cert_file),
            ("BOXOFFICE_TLS_KEY_FILE", self.key_file),
        ):
            try:
                with open(str(path), "rb"):
                    pass
            except OSError as err:
                raise ConfigError(f"{name}={path!r} cannot be read: {err.strerror}") from None

    @classmethod
    def from_env(cls, env: Env, *, default_health_port: int | None = None) -> TlsConfig:
        enabled = env.choice("BOXOFFICE_TLS", "on", ("on", "off")) == "on"
        files = [env.optional_str(name) for name in _TLS_FILES]
        if any(files) and not all(files):
            missing = [name for name, value in zip(_TLS_FILES, files, strict=True) if not value]
            raise ConfigError(f"{', '.join(missing)} must be set with the other BOXOFFICE_TLS_*_FILE settings")
        trust_domain = env.string("BOXOFFICE_TRUST_DOMAIN", "boxoffice.local")
        if not _TRUST_DOMAIN.match(trust_domain):
            raise ConfigError(f"BOXOFFICE_TRUST_DOMAIN={trust_domain!r} is not a trust domain (lower-case DNS name)")
        trust_namespaces = _namespaces(env.optional_str("BOXOFFICE_TRUST_NAMESPACES"))
        mesh_identity = env.optional_str("BOXOFFICE_TLS_MESH_IDENTITY")
        if mesh_identity is not None:
            if mesh_identity != "xfcc":
                raise ConfigError(f"BOXOFFICE_TLS_MESH_IDENTITY={mesh_identity!r} must be xfcc or unset")
            if enabled:
                raise ConfigError("BOXOFFICE_TLS_MESH_IDENTITY is for BOXOFFICE_TLS=off (a sidecar does mTLS)")
        health = env.optional_str("BOXOFFICE_HEALTH_PORT")
        health_port: int | None
        if health is not None and health.lower() == "off":
            health_port = None
        elif health is None:
            health_port = default_health_port
        else:
            health_port = env.integer("BOXOFFICE_HEALTH_PORT", 0, minimum=0, maximum=65535)
        return cls(
            enabled=enabled,
            ca_file=files[0],
            cert_file=files[1],
            key_file=files[2],
            trust_domain=trust_domain,
            mesh_identity=mesh_identity,
            health_port=health_port,
            trust_namespaces=trust_namespaces,
        )


# A Kubernetes namespace name (an RFC 1123 label).
_NAMESPACE = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")


def _namespaces(value: str | None) -> tuple[str, ...]:
    if value is None:
        return ()
    names = tuple(part.strip() for part in value.split(","))
    if not any(names):
        raise ConfigError("BOXOFFICE_TRUST_NAMESPACES names no namespace (unset it to trust the process's own)")
    for name in names:
        if not _NAMESPACE.match(name):
            raise ConfigError(f"BOXOFFICE_TRUST_NAMESPACES: {name!r} is not a namespace name (an RFC 1123 label)")
    return names


_TLS_FILES = ("BOXOFFICE_TLS_CA_FILE", "BOXOFFICE_TLS_CERT_FILE", "BOXOFFICE_TLS_KEY_FILE")


# Each role's Postgres pool (min, max) when BOXOFFICE_DB_POOL_MIN / _MAX
# are not set: one replica of every role holds at most the sum of the maxima
# plus the admitter's leader session (32 of a default Postgres's 100; 12
# while idle), and with a second replica of each server role (50) the mesh
# still fits in half of it. The key
# is ``<component>-<role>``; a process that runs every role (``boxoffice up``)
# or none named here takes DEFAULT_POOL_BUDGET.
POOL_BUDGETS: Mapping[str, tuple[int, int]] = {
    "queue-server": (1, 3),
    "queue-admitter": (1, 3),
    "booking-server": (2, 8),
    "booking-sweeper": (1, 2),
    "booking-relay": (1, 2),
    "payment-server": (2, 6),
    "payment-issuer": (1, 4),
    "mail-mailer": (1, 2),
    # The door: one short statement a scan (devices and events' settings
    # are kept for seconds), so one connection serves a venue's gates.
    "checkin-server": (1, 1),
}
DEFAULT_POOL_BUDGET = (2, 20)


@dataclass(frozen=True, slots=True)
class StoreConfig:
    """Where Postgres and Redis are; None means start the embedded ones.

    ``database_direct_url`` (``DATABASE_DIRECT_URL``, default
    ``DATABASE_URL``) reaches Postgres itself, or a session-mode pooler: the
    leader election's and the migrations' session advisory locks use it,
    since a transaction-mode PgBouncer hands a session to other clients
    between transactions. ``db_pool_min`` / ``db_pool_max`` are this
    process's pool, by default its role's budget (:data:`POOL_BUDGETS`)."""

    database_url: str | None
    redis_url: str | None
    data_dir: str
    db_pool_min: int
    db_pool_max: int
    db_prepared_statements: bool
    database_direct_url: str | None = None
    # The pool's connections' application_name in pg_stat_activity.
    db_application_name: str = "boxoffice"
    # How often the pool's idle connections are checked.
    db_check_seconds: float = 30.0

    @property
    def direct_url(self) -> str | None:
        """The URL for session locks: DATABASE_DIRECT_URL, else DATABASE_URL."""
        return self.database_direct_url or self.database_url

    @classmethod
    def from_env(cls, env: Env, *, role: str | None = None) -> StoreConfig:
        """``role`` (``<component>-<role>``, e.g. ``booking-sweeper``) picks
        the pool's default budget and names its connections."""
        default_min, default_max = POOL_BUDGETS.get(role or "", DEFAULT_POOL_BUDGET)
        pool_max = env.integer("BOXOFFICE_DB_POOL_MAX", default_max, minimum=1, maximum=500)
        pool_min = env.integer("BOXOFFICE_DB_POOL_MIN", min(default_min, pool_max), minimum=1, maximum=500)
        if pool_min > pool_max:
            raise ConfigError(f"BOXOFFICE_DB_POOL_MIN={pool_min} must be <= BOXOFFICE_DB_POOL_MAX ({pool_max})")
        database_url = _store_url(env, "DATABASE_URL", ("postgresql", "postgres"))
        direct_url = _store_url(env, "DATABASE_DIRECT_URL", ("postgresql", "postgres"))
        if direct_url is not None and database_url is None:
            raise ConfigError("DATABASE_DIRECT_URL is set without DATABASE_URL (the embedded Postgres needs neither)")
        return cls(
            database_url=database_url,
            redis_url=_store_url(env, "REDIS_URL", ("redis", "rediss", "unix")),
            data_dir=env.string("BOXOFFICE_DATA_DIR", ".boxoffice"),
            db_pool_min=pool_min,
            db_pool_max=pool_max,
            db_prepared_statements=env.flag("BOXOFFICE_DB_PREPARED_STATEMENTS", True),
            database_direct_url=direct_url,
            db_application_name=f"boxoffice-{role}" if role else "boxoffice",
            db_check_seconds=env.number("BOXOFFICE_DB_CHECK_SECONDS", 30.0, minimum=0.05, maximum=3600.0),
        )


def _store_url(env: Env, name: str, schemes: tuple[str, ...]) -> str | None:
    """A store's URL, checked for its shape before anything connects."""
    value = env.optional_str(name)
    if value is None:
        return None
    scheme, sep, rest = value.partition("://")
    if not sep or scheme not in schemes or not rest:
        shown = value if "@" not in value else f"{scheme}://...@{value.rsplit('@', 1)[1]}"
        raise ConfigError(f"{name}={shown!r} is not a URL like {schemes[0]}://host:port/...")
    return value


def key_ring(name: str, text: str, *, active_kid: str | None = None, active_variable: str = "") -> KeyRing:
    """Signing keys, one ``kid:secret`` per comma or line, as secret ``name``
    holds them: every key verifies; ``active_kid`` (named by
    ``active_variable``), else the first listed, signs."""
    entries = (entry.strip() for entry in text.replace("\n", ",").split(","))
    keys = Env({name: ",".join(entry for entry in entries if entry)}).keys(name)
    if not keys:
        raise ConfigError(f"{name} lists no key")
    kid = active_kid or next(iter(keys))
    if kid not in keys:
        raise ConfigError(f"{active_variable}={kid!r} is not in {name}")
    return KeyRing(keys, kid)


@dataclass(frozen=True, slots=True)
class TokenConfig:
    """Access-token signing keys: every listed key verifies, the active one
    signs. From ``BOXOFFICE_TOKEN_KEYS`` or the file ``BOXOFFICE_TOKEN_KEYS_FILE``
    names (re-read when it changes: rotate by putting the new key first and
    keeping the old one listed while its tokens live); the active key is
    ``BOXOFFICE_TOKEN_ACTIVE_KID``, else the first listed."""

    ring: SecretSource[KeyRing]

    @property
    def keys(self) -> Mapping[str, bytes]:
        return self.ring.get().keys

    @property
    def active_kid(self) -> str:
        return self.ring.get().active_kid

    def signer(self, clock: Clock) -> TokenSigner:
        """A signer that follows the key ring."""
        return TokenSigner.following(self.ring.get, clock)

    @classmethod
    def from_env(cls, env: Env) -> TokenConfig:
        # The keys, one `kid:secret` per comma or line.
        name = secrets.TOKEN_KEYS
        active = env.raw("BOXOFFICE_TOKEN_ACTIVE_KID")

        def ring(text: str) -> KeyRing:
            return key_ring(name, text, active_kid=active, active_variable="BOXOFFICE_TOKEN_ACTIVE_KID")

        # Unset: the development key, so that `boxoffice up` on a laptop needs
        # no setup; a process off the embedded stores refuses it
        # (boxoffice.secrets.refuse_development_secrets).
        default = f"{secrets.DEV_TOKEN_KID}:{secrets.DEV_TOKEN_KEY}"
        return cls(ring=secrets.read_secret(env, name, ring, default=default))
