"""Who the fan is: a signed session cookie (browsers) or an OpenID Connect
bearer token (apps).

The session cookie is ``v1.<kid>.<payload>.<signature>``: the payload the
base64url JSON ``{"c": customer, "iat": ..., "exp": ..., "n": nonce}``, the signature an
HMAC-SHA256 with the key ``kid`` of the edge's session key ring (every key
verifies, the first signs: rotate by putting a new key first). Development
sign-in hands one out for a name; in production the customer is the subject
of a verified OpenID Connect token.

Bearer tokens are JWTs verified with PyJWT against the issuer's JWKS: the
algorithms are fixed by configuration (RS256 / ES256), never taken from the
token; the key is found by ``kid`` (the JWKS is fetched again when a token
names a key it does not have, at most once per ``_REFETCH_SECONDS``); a
header with ``crit`` or a ``kid`` that is no plain name is refused before any
key is looked up; issuer, audience and subject are checked by PyJWT, expiry
and not-before on the process's clock with a small leeway.

Whatever a client sends is read within bounds (:mod:`boxoffice.boundedjson`):
a token's header and claims, and a cookie's payload, past their size or
nesting depth are refused (401) before any parser recurses into them.
"""

from __future__ import annotations

import asyncio
import binascii
import logging
import math
import os
import re
import time
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

import jwt
from cryptography.hazmat.primitives.asymmetric import ec, rsa

from boxoffice import boundedjson
from boxoffice.clock import Clock
from boxoffice.config import ConfigError
from boxoffice.errors import Unauthenticated
from boxoffice.secrets import SecretSource
from boxoffice.tokens import KeyRing
from edge_svc.config import OidcConfig
from edge_svc.sealed import Sealer, Unsealed, unb64

_log = logging.getLogger("boxoffice.edge.identity")

_MAX_COOKIE = 1024
_MAX_JWT = 8192
# How deep a token's header and claims may nest (an ID token's claims are
# flat but for a few objects such as ``address``).
_MAX_JWT_DEPTH = 8
# A key id is a plain name: no path, no query, no control characters.
_KID = re.compile(r"[A-Za-z0-9_.+=-]{1,256}")
# The longest a customer id (a development name or a token subject) may be:
# the longest fan the services take in an assertion (boxoffice.tls, in
# characters once decoded).
MAX_CUSTOMER_ID = 128
# Characters no customer id may hold (the services refuse them).
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
# A JWKS is fetched again for an unknown key id at most this often.
_REFETCH_SECONDS = 30.0


@dataclass(frozen=True, slots=True)
class Session:
    """A verified fan."""

    customer_id: str
    expires_at: int
    # "cookie" or "bearer": how the fan authenticated (cookies need CSRF checks).
    via: str
    # The fan's verified e-mail address (None: none known), for their tickets.
    email: str | None = None


# A plausible address (the relay is the judge of the rest).
_EMAIL = re.compile(r"[^@\s\x00-\x1f\x7f]{1,64}@[^@\s\x00-\x1f\x7f]{1,253}")


def verified_email(value: object) -> str | None:
    """``value`` when it is an address of a plausible shape (at most 254
    characters), else None."""
    if isinstance(value, str) and len(value) <= 254 and _EMAIL.fullmatch(value):
        return value
    return None


def _session_invalid(message: str) -> Unauthenticated:
    return Unauthenticated(message, reason="SESSION_INVALID")


class SessionCookies:
    """Signs and verifies session cookies with the edge's key ring."""

    def __init__(self, keys: SecretSource[KeyRing], clock: Clock, *, ttl_seconds: int) -> None:
        self._sealer = Sealer(keys, "v1")
        self._clock = clock
        self.ttl_seconds = ttl_seconds

    def issue(self, customer_id: str, email: str | None = None) -> tuple[str, Session]:
        now = int(self._clock.now())
        session = Session(customer_id, now + self.ttl_seconds, "cookie", email)
        # A nonce: two sign-ins of one fan in one second are two cookies
        # (one signed out, the other still works).
        body: dict[str, object] = {"c": customer_id, "iat": now, "exp": session.expires_at, "n": os.urandom(9).hex()}
        if email is not None:
            body["e"] = email
        return self._sealer.seal(body), session

    def verify(self, cookie: str) -> Session:
        if len(cookie) > _MAX_COOKIE:
            raise _session_invalid("the session cookie is too long")
        try:
            body = self._sealer.open(cookie)
        except Unsealed as err:
            raise _session_invalid(_UNSEALED[err.check]) from None
        # Signed by a key of ours, still read as a stranger's: a customer id
        # the services take and an expiry that is a time (not NaN, infinite
        # or past year 9999, which no clock or date can hold).
        customer_id = body.get("c") if isinstance(body, dict) else None
        expires_at = _instant(body.get("exp")) if isinstance(body, dict) else None
        if not is_customer_id(customer_id) or expires_at is None:
            raise _session_invalid("the session cookie is malformed")
        assert isinstance(customer_id, str)
        if expires_at < self._clock.now():
            raise _session_invalid("the session has expired; sign in again")
        return Session(customer_id, int(expires_at), "cookie", verified_email(body.get("e")))


_UNSEALED = {
    "format": "the session cookie is malformed",
    "key": "the session cookie is signed with a retired key; sign in again",
    "signature": "the session cookie does not verify",
}


def _bearer_invalid(check: str, message: str) -> Unauthenticated:
    return Unauthenticated(message, reason="BEARER_INVALID", metadata={"check": check})


PublicKey = rsa.RSAPublicKey | ec.EllipticCurvePublicKey
# The algorithm the edge verifies each key type with (JWKS "kty", and "crv" for EC).
_FAMILY: dict[tuple[object, object], str] = {("RSA", None): "RS256", ("EC", "P-256"): "ES256"}


def parse_jwks(text: str) -> dict[str, tuple[str, PublicKey]]:
    """The keys of a JWKS document by kid: (algorithm, key), read by PyJWT.
    Keys of a type or curve the edge does not verify with are skipped."""
    try:
        document = boundedjson.loads(text, max_bytes=1 << 20)
        entries = document["keys"]
        if not isinstance(entries, list):
            raise TypeError("keys is not a list")
    except (ValueError, KeyError, TypeError) as err:
        raise ConfigError(f"not a JWKS document: {err}") from None
    keys: dict[str, tuple[str, PublicKey]] = {}
    for entry in entries:
        if not isinstance(entry, dict) or entry.get("use", "sig") != "sig":
            continue
        kid = str(entry.get("kid", ""))
        algorithm = _FAMILY.get((entry.get("kty"), entry.get("crv") if entry.get("kty") == "EC" else None))
        if algorithm is None:
            continue
        try:
            key = jwt.PyJWK(entry, algorithm=algorithm).key
        except (jwt.PyJWTError, KeyError, ValueError, TypeError):
            _log.warning("JWKS key skipped: malformed", extra={"kid": kid[:64]})
            continue
        if isinstance(key, rsa.RSAPublicKey | ec.EllipticCurvePublicKey):
            keys[kid] = (algorithm, key)
    return keys


class KeySource(Protocol):
    """Where the issuer's keys come from."""

    async def keys(self, *, refresh: bool) -> Mapping[str, tuple[str, PublicKey]]:
        """The keys by kid; ``refresh`` asks for a fresh copy (an unknown kid)."""


class FileKeys:
    """A JWKS file, re-read when it changes (a mounted ConfigMap)."""

    def __init__(self, path: str) -> None:
        self._source = SecretSource.from_file("BOXOFFICE_OIDC_JWKS", path, parse_jwks)

    async def keys(self, *, refresh: bool) -> Mapping[str, tuple[str, PublicKey]]:
        return self._source.get()


class UrlKeys:
    """A JWKS URL, fetched at first use, then again after ``cache_seconds``
    or for an unknown kid (at most once per ``_REFETCH_SECONDS``). A failed
    fetch keeps the last good keys."""

    def __init__(
        self,
        url: str,
        *,
        cache_seconds: float,
        fetch: Callable[[str], str] | None = None,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self._url = url
        self._cache_seconds = cache_seconds
        self._fetch = fetch or _http_get
        self._monotonic = monotonic
        self._keys: dict[str, tuple[str, PublicKey]] = {}
        self._fetched_at: float | None = None
        self._lock = asyncio.Lock()

    async def keys(self, *, refresh: bool) -> Mapping[str, tuple[str, PublicKey]]:
        now = self._monotonic()
        stale = self._fetched_at is None or now - self._fetched_at > self._cache_seconds
        may_refresh = self._fetched_at is None or now - self._fetched_at > _REFETCH_SECONDS
        if stale or (refresh and may_refresh):
            async with self._lock:
                if self._fetched_at is None or self._monotonic() - self._fetched_at > min(
                    _REFETCH_SECONDS, self._cache_seconds
                ):
                    try:
                        text = await asyncio.to_thread(self._fetch, self._url)
                        self._keys = parse_jwks(text)
                    except (OSError, ConfigError) as err:
                        _log.warning("JWKS fetch failed; keeping the last keys", extra={"error": str(err)})
                    self._fetched_at = self._monotonic()
        return self._keys


def _http_get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=5) as response:
        data: bytes = response.read(1 << 20)
    return data.decode()


class OidcVerifier:
    """Verifies OpenID Connect bearer tokens (JWTs) of one issuer and audience."""

    def __init__(self, config: OidcConfig, keys: KeySource, clock: Clock) -> None:
        self._config = config
        self._keys = keys
        self._clock = clock
        # The checks PyJWT makes: the signature with the one algorithm the
        # key is for, issuer, audience, the claims every ID token carries,
        # a subject that is a string. Times are checked on our clock.
        self._jwt = jwt.PyJWT(
            options={
                "require": ["iss", "aud", "sub", "exp"],
                "verify_exp": False,
                "verify_nbf": False,
                "verify_iat": False,
            }
        )

    async def verify(self, token: str) -> Session:
        if len(token) > _MAX_JWT:
            raise _bearer_invalid("format", "the bearer token is too long")
        parts = token.split(".")
        if len(parts) != 3:
            raise _bearer_invalid("format", "the bearer token is not a JWT")
        # Read within bounds before PyJWT parses them again.
        try:
            header = boundedjson.loads(unb64(parts[0]), max_bytes=_MAX_JWT, max_depth=_MAX_JWT_DEPTH)
            claims = boundedjson.loads(unb64(parts[1]), max_bytes=_MAX_JWT, max_depth=_MAX_JWT_DEPTH)
            if not isinstance(header, dict) or not isinstance(claims, dict):
                raise TypeError("not objects")
        except (ValueError, TypeError, binascii.Error):
            raise _bearer_invalid("format", "the bearer token is not a JWT") from None
        if "crit" in header or "b64" in header:
            # No extension of JWS is understood here (RFC 7515, 4.1.11).
            raise _bearer_invalid("format", "the bearer token names a critical header this service does not know")
        algorithm = header.get("alg")
        if algorithm not in self._config.algorithms:
            raise _bearer_invalid("key", "the bearer token's algorithm is not accepted")
        kid = header.get("kid", "")
        if not isinstance(kid, str) or (kid and (not _KID.fullmatch(kid) or ".." in kid)):
            # Refused before the key source is asked (no JWKS fetch for it).
            raise _bearer_invalid("key", "the bearer token names no key the issuer could publish")
        keys = await self._keys.keys(refresh=False)
        if kid not in keys:
            keys = await self._keys.keys(refresh=True)
        found = keys.get(kid)
        if found is None or found[0] != algorithm:
            raise _bearer_invalid("key", "the bearer token is signed with a key the issuer does not publish")
        config = self._config
        try:
            self._jwt.decode(
                token,
                key=found[1],
                algorithms=[found[0]],
                audience=config.audience,
                issuer=config.issuer,
            )
        except jwt.InvalidSignatureError:
            raise _bearer_invalid("signature", "the bearer token's signature does not verify") from None
        except jwt.InvalidIssuerError:
            raise _bearer_invalid("issuer", "the bearer token is from another issuer") from None
        except jwt.InvalidAudienceError:
            raise _bearer_invalid("audience", "the bearer token is for another audience") from None
        except jwt.exceptions.InvalidSubjectError:
            raise _bearer_invalid("subject", _NO_SUBJECT) from None
        except jwt.MissingRequiredClaimError as err:
            check = _MISSING.get(err.claim, "format")
            raise _bearer_invalid(check, f"the bearer token has no {err.claim[:16]} claim") from None
        except jwt.InvalidAlgorithmError:
            raise _bearer_invalid("key", "the bearer token's algorithm is not accepted") from None
        except jwt.PyJWTError:
            raise _bearer_invalid("format", "the bearer token is not a JWT this service reads") from None
        return self._times(claims)

    def _times(self, claims: dict[str, Any]) -> Session:
        """The session of verified claims: expiry and not-before on the
        process's clock, and a subject the services can serve."""
        leeway = self._config.leeway_seconds
        now = self._clock.now()
        expires = _instant(claims.get("exp"))
        if expires is None or expires + leeway < now:
            raise _bearer_invalid("expiry", "the bearer token has expired")
        not_before = claims.get("nbf")
        if not_before is not None and ((instant := _instant(not_before)) is None or instant - leeway > now):
            raise _bearer_invalid("expiry", "the bearer token is not valid yet")
        subject = claims.get("sub")
        if not is_customer_id(subject):
            raise _bearer_invalid("subject", _NO_SUBJECT)
        assert isinstance(subject, str)
        # The address only when the issuer says it verified it.
        email = verified_email(claims.get("email")) if claims.get("email_verified") is True else None
        return Session(subject, int(expires), "bearer", email)


_NO_SUBJECT = "the bearer token names no subject this service can serve"
# The check a missing required claim fails.
_MISSING = {"iss": "issuer", "aud": "audience", "sub": "subject", "exp": "expiry"}


def is_customer_id(subject: object) -> bool:
    """Whether ``subject`` is a customer id the services take: 1 to 128
    characters of UTF-8 (a lone surrogate, which JSON can spell, is none),
    no control characters."""
    if not isinstance(subject, str) or not 0 < len(subject) <= MAX_CUSTOMER_ID or _CONTROL.search(subject):
        return False
    try:
        subject.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


# The last second of year 9999: no session ends later.
_LAST_INSTANT = 253_402_300_799


def _instant(value: object) -> float | None:
    """A NumericDate claim as seconds, or None when it is no time: not a
    number (booleans included), NaN (every comparison with it is false, so
    it would pass as unexpired), infinite, negative or past year 9999."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    if not math.isfinite(value) or not 0 <= value <= _LAST_INSTANT:
        return None
    return float(value)


def key_source(config: OidcConfig) -> KeySource:
    if config.jwks_file is not None:
        return FileKeys(config.jwks_file)
    assert config.jwks_url is not None
    return UrlKeys(config.jwks_url, cache_seconds=config.jwks_cache_seconds)
