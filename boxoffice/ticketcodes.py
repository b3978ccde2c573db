"""Ticket codes: a compact JWS (EdDSA over Ed25519) that a gate verifies
with nothing but the public keys.

A code is ``<header>.<payload>.<signature>`` with the header ``{"alg":
"EdDSA", "kid": ..., "typ": "ticket"}`` and the payload ``{"sub": ticket id,
"ev": event id, "sec": section id, "seat": seat label, "iat": issue time}``
(compact JSON, so that the QR code stays small). Any JOSE library verifies
it; the algorithm is fixed here, never taken from the code's header.

The keys come from ``BOXOFFICE_CHECKIN_KEYS`` or the file
``BOXOFFICE_CHECKIN_KEYS_FILE`` names: ``kid:<32-byte seed as 64 hex
digits>`` separated by commas or lines; the first listed signs and every
listed key verifies (rotate by putting the new key first and keeping the old
ones while their tickets are valid). Unset, the development key, which a
process off the embedded stores refuses (:mod:`boxoffice.secrets`).

Codes issued before signed codes (``TKT-...``) are not JWS; the check-in
service looks them up instead (:func:`looks_signed` tells them apart).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import jwt
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from boxoffice import secrets
from boxoffice.clock import Clock
from boxoffice.env import ConfigError, Env

ALGORITHM = "EdDSA"
CODE_TYPE = "ticket"
# Longer than any code this module writes (about 250 characters), so a
# scanned blob of junk is refused before it is parsed.
MAX_CODE_LENGTH = 1024
# Tolerated clock skew between the issuer and a verifier.
_LEEWAY_SECONDS = 60
_KID = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")
_SEED = re.compile(r"^[0-9a-fA-F]{64}$")
_JWS = re.compile(r"^[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+$")


@dataclass(frozen=True, slots=True)
class TicketClaims:
    """What a ticket's code says of it."""

    ticket_id: str
    event_id: int
    section_id: str
    seat_label: str
    issued_at: int


@dataclass(frozen=True, slots=True)
class CheckInKeys:
    """The check-in key ring: every key verifies, ``active_kid`` signs."""

    keys: Mapping[str, Ed25519PrivateKey]
    active_kid: str

    def public(self) -> dict[str, Ed25519PublicKey]:
        return {kid: key.public_key() for kid, key in self.keys.items()}


class InvalidCode(Exception):
    """A code that is not a ticket code this mesh signed (bad shape, unknown
    key, bad signature, missing or wrong claims)."""


def parse_keys(text: str) -> CheckInKeys:
    """The ring ``kid:<64 hex digits>[,...]`` (commas or lines) describes;
    ConfigError naming the variable otherwise."""
    name = secrets.CHECKIN_KEYS
    keys: dict[str, Ed25519PrivateKey] = {}
    for entry in (part.strip() for part in text.replace("\n", ",").split(",")):
        if not entry:
            continue
        kid, sep, seed = entry.partition(":")
        if not sep or not _KID.match(kid):
            raise ConfigError(f"{name}: entry {kid!r} must be kid:<64 hex digits> with kid of [A-Za-z0-9_.-]")
        if not _SEED.match(seed):
            raise ConfigError(f"{name}: the seed of key {kid!r} must be 64 hex digits (32 bytes)")
        if kid in keys:
            raise ConfigError(f"{name}: key id {kid!r} appears twice")
        keys[kid] = Ed25519PrivateKey.from_private_bytes(bytes.fromhex(seed))
    if not keys:
        raise ConfigError(f"{name} lists no key")
    return CheckInKeys(keys, next(iter(keys)))


def read_keys(env: Env) -> secrets.SecretSource[CheckInKeys]:
    """The check-in keys the environment names (see the module docstring)."""
    default = f"{secrets.DEV_CHECKIN_KID}:{secrets.DEV_CHECKIN_SEED}"
    return secrets.read_secret(env, secrets.CHECKIN_KEYS, parse_keys, default=default)


def looks_signed(code: str) -> bool:
    """True when ``code`` has the shape of a JWS (three base64url parts)."""
    return len(code) <= MAX_CODE_LENGTH and _JWS.match(code) is not None


class TicketCodeSigner:
    """Signs ticket codes with the active key of a ring that may change."""

    def __init__(self, keys: Callable[[], CheckInKeys], clock: Clock) -> None:
        self._keys = keys
        self._clock = clock

    def now(self) -> int:
        return int(self._clock.now())

    def sign(self, claims: TicketClaims) -> str:
        ring = self._keys()
        payload = {
            "sub": claims.ticket_id,
            "ev": claims.event_id,
            "sec": claims.section_id,
            "seat": claims.seat_label,
            "iat": claims.issued_at,
        }
        headers = {"kid": ring.active_kid, "typ": CODE_TYPE}
        return jwt.encode(payload, ring.keys[ring.active_kid], algorithm=ALGORITHM, headers=headers)


class TicketCodeVerifier:
    """Verifies ticket codes against every key of a ring that may change;
    no I/O, so a bad code is refused before anything else is asked."""

    def __init__(self, keys: Callable[[], Mapping[str, Ed25519PublicKey]], clock: Clock) -> None:
        self._keys = keys
        self._clock = clock

    def verify(self, code: str) -> TicketClaims:
        """The claims of a valid code; :class:`InvalidCode` otherwise."""
        if not looks_signed(code):
            raise InvalidCode("not a signed ticket code")
        try:
            header = jwt.get_unverified_header(code)
        except jwt.PyJWTError as err:
            raise InvalidCode("the code's header cannot be read") from err
        kid = header.get("kid")
        key = self._keys().get(kid) if isinstance(kid, str) else None
        if key is None or header.get("alg") != ALGORITHM or header.get("typ") != CODE_TYPE:
            raise InvalidCode("the code is not signed with a check-in key")
        try:
            payload: dict[str, Any] = jwt.decode(
                code,
                key,
                algorithms=[ALGORITHM],
                options={"require": ["sub", "ev", "iat"], "verify_iat": False},
            )
        except jwt.PyJWTError as err:
            raise InvalidCode("the code's signature or claims are not valid") from err
        claims = _claims(payload)
        if claims.issued_at > self._clock.now() + _LEEWAY_SECONDS:
            raise InvalidCode("the code was issued in the future")
        return claims


def _claims(payload: Mapping[str, Any]) -> TicketClaims:
    ticket_id, event_id, issued = payload.get("sub"), payload.get("ev"), payload.get("iat")
    section, seat = payload.get("sec", ""), payload.get("seat", "")
    if not isinstance(ticket_id, str) or not ticket_id:
        raise InvalidCode("the code names no ticket")
    if isinstance(event_id, bool) or not isinstance(event_id, int) or event_id <= 0:
        raise InvalidCode("the code names no event")
    if isinstance(issued, bool) or not isinstance(issued, int):
        raise InvalidCode("the code has no issue time")
    if not isinstance(section, str) or not isinstance(seat, str):
        raise InvalidCode("the code's seat is not text")
    return TicketClaims(ticket_id, event_id, section, seat, issued)


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def jwks(keys: Mapping[str, Ed25519PublicKey]) -> dict[str, list[dict[str, str]]]:
    """The public keys as a JWK Set (RFC 8037 ``OKP`` keys, curve Ed25519)."""
    return {
        "keys": [
            {
                "kty": "OKP",
                "crv": "Ed25519",
                "kid": kid,
                "alg": ALGORITHM,
                "use": "sig",
                "x": _b64(key.public_bytes(Encoding.Raw, PublicFormat.Raw)),
            }
            for kid, key in keys.items()
        ]
    }


# Rotating codes: what the fan's page shows, so that a screenshot stops
# working within a minute. ``<signed code>~<step>~<mac>``: the step is the
# Unix time divided by ROTATION_STEP_SECONDS, the mac the first 16 bytes of
# HMAC-SHA256 under the ticket's own secret (which only the fan's session
# and the door can fetch) over "<ticket id>.<step>", unpadded base64url.
ROTATION_STEP_SECONDS = 30
_ROTATING = re.compile(r"^([A-Za-z0-9_.-]+)~([0-9]{1,12})~([A-Za-z0-9_-]{22})$")


def rotation_step(now: float) -> int:
    """The rotation step of Unix time ``now``."""
    return int(now // ROTATION_STEP_SECONDS)


def rotation_mac(secret: bytes, ticket_id: str, step: int) -> str:
    digest = hmac.new(secret, f"{ticket_id}.{step}".encode(), hashlib.sha256).digest()
    return _b64(digest[:16])


def rotating_code(code: str, secret: bytes, ticket_id: str, step: int) -> str:
    """The rotating form of a signed ``code`` at ``step``."""
    return f"{code}~{step}~{rotation_mac(secret, ticket_id, step)}"


@dataclass(frozen=True, slots=True)
class RotatingParts:
    """A rotating code taken apart (nothing verified yet)."""

    code: str
    step: int
    mac: str


def split_rotating(text: str) -> RotatingParts | None:
    """The parts of a rotating code; None for a code of any other shape."""
    if len(text) > MAX_CODE_LENGTH or "~" not in text:
        return None
    found = _ROTATING.match(text)
    if found is None:
        return None
    return RotatingParts(found.group(1), int(found.group(2)), found.group(3))


def same_mac(expected: str, presented: str) -> bool:
    """Constant-time comparison of two macs."""
    return hmac.compare_digest(expected.encode(), presented.encode())
