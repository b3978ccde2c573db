"""The edge's settings, read and checked from the environment at start."""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from boxoffice import secrets
from boxoffice.config import ConfigError, Env, key_ring
from boxoffice.secrets import SecretSource
from boxoffice.tokens import KeyRing

SESSION_KEYS = secrets.EDGE_SESSION_KEYS
# The development key of session cookies; refused off the embedded stores.
DEV_SESSION_KID = "dev"

Network = ipaddress.IPv4Network | ipaddress.IPv6Network


@dataclass(frozen=True, slots=True)
class OidcConfig:
    """OpenID Connect: whose bearer tokens the edge believes."""

    issuer: str
    audience: str
    # The issuer's keys: a JWKS document at a URL (fetched, cached, refetched
    # on an unknown key id) or in a file (re-read when it changes).
    jwks_url: str | None
    jwks_file: str | None
    # Accepted signature algorithms (fixed here, never taken from a token).
    algorithms: tuple[str, ...]
    # How long a fetched JWKS is trusted before it is fetched again.
    jwks_cache_seconds: float
    # Clock skew tolerated on exp / nbf / iat.
    leeway_seconds: float


@dataclass(frozen=True, slots=True)
class ChallengeConfig:
    """Bot defence at join."""

    # "none", "proof-of-work" or "external".
    kind: str
    # Proof-of-work difficulty (leading zero bits), and per event.
    pow_bits: int = 18
    pow_bits_by_event: tuple[tuple[int, int], ...] = ()
    # The external challenge service (siteverify kind) and its secret.
    url: str | None = None
    secret: SecretSource[str] | None = None


@dataclass(frozen=True, slots=True)
class EdgeConfig:
    """Everything the edge reads from the environment."""

    host: str
    port: int
    # The upstream services, each a gRPC target (checked at start: host:port,
    # [ipv6]:port, dns:///name:port, ipv4:/ipv6: lists or unix:path).
    queue_addr: str
    booking_addr: str
    payment_addr: str
    checkin_addr: str
    # Development sign-in (POST /v1/session with a name); never in production.
    dev_sign_in: bool
    session_keys: SecretSource[KeyRing]
    session_ttl_seconds: int
    oidc: OidcConfig | None
    # Peers whose X-Forwarded-For is believed (the load balancer, the ingress).
    trusted_proxies: tuple[Network, ...]
    # Origins allowed to send cookie-authenticated requests that change things
    # (besides the edge's own origin).
    origins: tuple[str, ...]
    # Cookies get Secure unless the edge serves plain HTTP on loopback.
    secure_cookies: bool
    max_body_bytes: int
    # The longest a request may take; a client's X-Server-Timeout is capped by it.
    request_timeout_seconds: float
    # Per client address and per account: requests per second, and the burst.
    ip_rate_per_second: float
    ip_burst: int
    account_rate_per_second: float
    account_burst: int
    # How long a limit check may wait for Redis before it lets the request
    # in (counted in boxoffice_edge_rate_limit_unavailable).
    rate_limit_timeout_seconds: float
    # Server-Sent Events: heartbeat interval and the reconnect hint.
    sse_heartbeat_seconds: float
    sse_retry_ms: int
    # The public progress document and seat map: how long a CDN may keep them.
    progress_max_age_seconds: int
    seatmap_max_age_seconds: int
    # The catalogue (GET /v1/events): how long the edge and a CDN keep an answer.
    catalogue_max_age_seconds: int
    # After SIGTERM: readiness fails, then this long later the listener closes.
    drain_seconds: float
    # The header the payment provider signs its webhooks in.
    webhook_signature_header: str
    # Fans whose queue score this process remembers (for answering positions
    # without asking QueueService).
    place_cache_size: int
    # How often the fans the edge served are reported to the waiting room as
    # present (a third of its presence grace at most).
    presence_report_seconds: float = 30.0
    # Bot defence at join.
    challenge: ChallengeConfig = field(default_factory=lambda: ChallengeConfig("none"))
    # Open Server-Sent Event streams at most per client address and per
    # account, across every edge process.
    sse_per_address: int = 20
    sse_per_account: int = 3
    # Provider webhooks per sending address: per second, and the burst.
    webhook_rate_per_second: float = 50.0
    webhook_burst: int = 200

    @classmethod
    def from_env(cls, env: Env) -> EdgeConfig:
        host = env.string("BOXOFFICE_EDGE_HOST", "127.0.0.1")
        loopback = _is_loopback(host)
        return cls(
            host=host,
            port=env.integer("BOXOFFICE_EDGE_PORT", 8080, minimum=0, maximum=65535),
            queue_addr=env.grpc_target("BOXOFFICE_QUEUE_ADDR", "127.0.0.1:50051"),
            booking_addr=env.grpc_target("BOXOFFICE_BOOKING_ADDR", "127.0.0.1:50052"),
            payment_addr=env.grpc_target("BOXOFFICE_PAYMENT_ADDR", "127.0.0.1:50053"),
            checkin_addr=env.grpc_target("BOXOFFICE_CHECKIN_ADDR", "127.0.0.1:50055"),
            dev_sign_in=env.flag(secrets.EDGE_DEV_SIGNIN, False),
            session_keys=_session_keys(env),
            session_ttl_seconds=env.integer("BOXOFFICE_EDGE_SESSION_TTL_SECONDS", 12 * 3600, minimum=60),
            oidc=_oidc(env),
            trusted_proxies=_networks(env, "BOXOFFICE_EDGE_TRUSTED_PROXIES"),
            origins=_origins(env),
            secure_cookies=env.flag("BOXOFFICE_EDGE_SECURE_COOKIES", not loopback),
            max_body_bytes=env.integer("BOXOFFICE_EDGE_MAX_BODY_BYTES", 64 * 1024, minimum=1024, maximum=16 << 20),
            request_timeout_seconds=env.number("BOXOFFICE_EDGE_REQUEST_TIMEOUT_SECONDS", 10.0, minimum=0.1),
            ip_rate_per_second=env.number("BOXOFFICE_EDGE_IP_RATE", 20.0, minimum=0.01),
            ip_burst=env.integer("BOXOFFICE_EDGE_IP_BURST", 60, minimum=1),
            account_rate_per_second=env.number("BOXOFFICE_EDGE_ACCOUNT_RATE", 5.0, minimum=0.01),
            account_burst=env.integer("BOXOFFICE_EDGE_ACCOUNT_BURST", 30, minimum=1),
            rate_limit_timeout_seconds=env.number(
                "BOXOFFICE_EDGE_RATE_LIMIT_TIMEOUT_SECONDS", 0.25, minimum=0.01, maximum=10.0
            ),
            sse_heartbeat_seconds=env.number("BOXOFFICE_EDGE_SSE_HEARTBEAT_SECONDS", 15.0, minimum=0.05),
            sse_retry_ms=env.integer("BOXOFFICE_EDGE_SSE_RETRY_MS", 3000, minimum=100),
            progress_max_age_seconds=env.integer("BOXOFFICE_EDGE_PROGRESS_MAX_AGE_SECONDS", 2, minimum=0, maximum=60),
            seatmap_max_age_seconds=env.integer("BOXOFFICE_EDGE_SEATMAP_MAX_AGE_SECONDS", 2, minimum=0, maximum=60),
            catalogue_max_age_seconds=env.integer(
                "BOXOFFICE_EDGE_CATALOGUE_MAX_AGE_SECONDS", 5, minimum=0, maximum=300
            ),
            drain_seconds=env.number("BOXOFFICE_EDGE_DRAIN_SECONDS", 5.0, minimum=0.0, maximum=300.0),
            webhook_signature_header=env.string("BOXOFFICE_EDGE_WEBHOOK_SIGNATURE_HEADER", "Provider-Signature"),
            place_cache_size=env.integer("BOXOFFICE_EDGE_PLACE_CACHE_SIZE", 1_000_000, minimum=1),
            presence_report_seconds=env.number(
                "BOXOFFICE_EDGE_PRESENCE_REPORT_SECONDS", 30.0, minimum=0.05, maximum=600.0
            ),
            challenge=_challenge(env),
            sse_per_address=env.integer("BOXOFFICE_EDGE_SSE_PER_ADDRESS", 20, minimum=1),
            sse_per_account=env.integer("BOXOFFICE_EDGE_SSE_PER_ACCOUNT", 3, minimum=1),
            webhook_rate_per_second=env.number("BOXOFFICE_EDGE_WEBHOOK_RATE", 50.0, minimum=0.01),
            webhook_burst=env.integer("BOXOFFICE_EDGE_WEBHOOK_BURST", 200, minimum=1),
        )


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _session_keys(env: Env) -> SecretSource[KeyRing]:
    def ring(text: str) -> KeyRing:
        return key_ring(SESSION_KEYS, text)

    return secrets.read_secret(env, SESSION_KEYS, ring, default=f"{DEV_SESSION_KID}:{secrets.DEV_EDGE_SESSION_KEY}")


def _oidc(env: Env) -> OidcConfig | None:
    issuer = env.raw("BOXOFFICE_OIDC_ISSUER")
    if issuer is None:
        for name in ("BOXOFFICE_OIDC_AUDIENCE", "BOXOFFICE_OIDC_JWKS_URL", "BOXOFFICE_OIDC_JWKS_FILE"):
            if env.raw(name) is not None:
                raise ConfigError(f"{name} is set but BOXOFFICE_OIDC_ISSUER is not")
        return None
    audience = env.raw("BOXOFFICE_OIDC_AUDIENCE")
    if audience is None:
        raise ConfigError("BOXOFFICE_OIDC_AUDIENCE must be set with BOXOFFICE_OIDC_ISSUER")
    url = env.raw("BOXOFFICE_OIDC_JWKS_URL")
    path = env.raw("BOXOFFICE_OIDC_JWKS_FILE")
    if (url is None) == (path is None):
        raise ConfigError("set exactly one of BOXOFFICE_OIDC_JWKS_URL and BOXOFFICE_OIDC_JWKS_FILE")
    if url is not None and urlsplit(url).scheme not in ("https", "http"):
        raise ConfigError(f"BOXOFFICE_OIDC_JWKS_URL={url!r} is not an http(s) URL")
    algorithms = tuple(a.strip() for a in env.string("BOXOFFICE_OIDC_ALGORITHMS", "RS256,ES256").split(","))
    for algorithm in algorithms:
        if algorithm not in ("RS256", "ES256"):
            raise ConfigError(f"BOXOFFICE_OIDC_ALGORITHMS: {algorithm!r} is not supported (RS256, ES256)")
    return OidcConfig(
        issuer=issuer,
        audience=audience,
        jwks_url=url,
        jwks_file=path,
        algorithms=algorithms,
        jwks_cache_seconds=env.number("BOXOFFICE_OIDC_JWKS_CACHE_SECONDS", 300.0, minimum=1.0),
        leeway_seconds=env.number("BOXOFFICE_OIDC_LEEWAY_SECONDS", 30.0, minimum=0.0, maximum=300.0),
    )


def _networks(env: Env, name: str) -> tuple[Network, ...]:
    value = env.raw(name)
    if value is None:
        return ()
    networks: list[Network] = []
    for part in value.split(","):
        part = part.strip()
        if not part:
            continue
        try:
            networks.append(ipaddress.ip_network(part, strict=False))
        except ValueError:
            raise ConfigError(f"{name}: {part!r} is not an IP address or CIDR") from None
    return tuple(networks)


def _origins(env: Env) -> tuple[str, ...]:
    value = env.raw("BOXOFFICE_EDGE_ORIGINS")
    if value is None:
        return ()
    origins: list[str] = []
    for part in value.split(","):
        part = part.strip().rstrip("/")
        if not part:
            continue
        parsed = urlsplit(part)
        if parsed.scheme not in ("https", "http") or not parsed.netloc or parsed.path:
            raise ConfigError(f"BOXOFFICE_EDGE_ORIGINS: {part!r} is not an origin like https://tickets.example.com")
        origins.append(f"{parsed.scheme}://{parsed.netloc}")
    return tuple(origins)


def _challenge(env: Env) -> ChallengeConfig:
    kind = env.choice("BOXOFFICE_EDGE_CHALLENGE", "none", ("none", "proof-of-work", "external"))
    by_event: list[tuple[int, int]] = []
    text = env.raw("BOXOFFICE_EDGE_POW_BITS_BY_EVENT") or ""
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        event, sep, bits = part.partition(":")
        if not sep or not _ascii_digits(event) or not _ascii_digits(bits) or not 0 <= int(bits) <= 32:
            raise ConfigError(f"BOXOFFICE_EDGE_POW_BITS_BY_EVENT: {part!r} is not event_id:bits (bits 0 to 32)")
        by_event.append((int(event), int(bits)))
    url = env.raw("BOXOFFICE_EDGE_CHALLENGE_URL")
    secret = None
    if kind == "external":
        if url is None or urlsplit(url).scheme not in ("https", "http"):
            raise ConfigError("BOXOFFICE_EDGE_CHALLENGE=external needs BOXOFFICE_EDGE_CHALLENGE_URL (an http(s) URL)")
        secret = secrets.read_secret(env, "BOXOFFICE_EDGE_CHALLENGE_SECRET", lambda text: text, default=None)
    return ChallengeConfig(
        kind=kind,
        pow_bits=env.integer("BOXOFFICE_EDGE_POW_BITS", 18, minimum=1, maximum=32),
        pow_bits_by_event=tuple(by_event),
        url=url,
        secret=secret,
    )


def _ascii_digits(text: str) -> bool:
    return bool(text) and text.isascii() and text.isdigit()
