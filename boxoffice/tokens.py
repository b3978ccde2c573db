"""Access tokens: HMAC-SHA256 signed, with a key id for rotation.

Format: ``v1.<kid>.<payload>.<signature>``; payload and signature are
unpadded base64url; the payload is compact JSON ``{"e": event_id, "c":
customer_id, "iat": issued, "iatms": issued in milliseconds, "exp": expiry,
"jti": id}`` (a token without ``iatms`` was issued at the start of its
``iat`` second). The algorithm is
fixed here, never read from the token.

A customer-scoped call acts for a customer taken from credentials, never
from a request body: the token's customer (:meth:`TokenSigner.verify`), or
the fan the edge asserts (:func:`asserted_customer`).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import secrets
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from boxoffice import caller
from boxoffice.clock import Clock
from boxoffice.errors import PermissionDenied, Unauthenticated

_VERSION = "v1"
_MAX_TOKEN_LENGTH = 1024
# Tolerated clock skew between the issuing and verifying processes.
_LEEWAY_SECONDS = 5


@dataclass(frozen=True, slots=True)
class AccessClaims:
    """What a verified token says."""

    event_id: int
    customer_id: str
    issued_at: int
    expires_at: int
    token_id: str
    # When it was issued, in milliseconds (a session's end is compared with it).
    issued_at_ms: int = 0


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def _invalid(message: str) -> Unauthenticated:
    return Unauthenticated(message, reason="TOKEN_INVALID")


def presented(token: str) -> str:
    """``token`` if one is there and of a sane length, checked before any
    other field of a request so that every service answers alike:
    UNAUTHENTICATED with TOKEN_MISSING or TOKEN_INVALID otherwise."""
    if not token:
        raise Unauthenticated("an access token is required", reason="TOKEN_MISSING")
    if len(token) > _MAX_TOKEN_LENGTH:
        raise _invalid("access token is too long")
    return token


def asserted_customer(claimed: str = "") -> str:
    """The customer the current call acts for: the fan the edge asserts
    (:mod:`boxoffice.caller`), percent-encoded UTF-8 in the metadata, as
    gRPC metadata is ASCII. ``claimed`` is what the request body names, if
    anything: it may only repeat the assertion.

    UNAUTHENTICATED (``CUSTOMER_NOT_ASSERTED``) when the caller asserts no
    customer; PERMISSION_DENIED (``CUSTOMER_MISMATCH``) when the body names
    another.
    """
    customer = assertion()
    if not customer:
        raise Unauthenticated("the call names no customer it acts for", reason="CUSTOMER_NOT_ASSERTED")
    same_customer(claimed, customer)
    return customer


def assertion() -> str | None:
    """The fan the edge asserts for the current call; None when the caller
    is not the edge or asserts nobody (or nothing decodable)."""
    # The server decoded it (percent-encoded UTF-8 on the wire) when it
    # read the caller.
    return caller.current().customer_id or None


def token_customer(claims: AccessClaims) -> str:
    """The customer of a verified token, who must be the fan the edge
    asserts when it asserts one (PERMISSION_DENIED, ``CUSTOMER_MISMATCH``)."""
    asserted = assertion()
    if asserted is not None:
        same_customer(asserted, claims.customer_id)
    return claims.customer_id


def same_customer(claimed: str, customer_id: str) -> None:
    """PERMISSION_DENIED (``CUSTOMER_MISMATCH``) when a request body names a
    customer (``claimed``) other than the one its credentials carry."""
    if claimed and claimed != customer_id:
        raise PermissionDenied("the request names another customer than the caller's", reason="CUSTOMER_MISMATCH")


@dataclass(frozen=True, slots=True)
class KeyRing:
    """The signing keys: every one verifies, the active one signs."""

    keys: Mapping[str, bytes]
    active_kid: str

    def __post_init__(self) -> None:
        if self.active_kid not in self.keys:
            raise ValueError(f"active key id {self.active_kid!r} is not among the keys")


class TokenSigner:
    """Issues tokens with the active key; verifies with any known key. The
    keys are fixed, or read from ``ring`` at every call (a key ring that
    follows a mounted Secret, see :meth:`following`)."""

    def __init__(self, keys: Mapping[str, bytes], active_kid: str, clock: Clock) -> None:
        fixed = KeyRing(dict(keys), active_kid)
        self._ring: Callable[[], KeyRing] = lambda: fixed
        self._clock = clock

    @classmethod
    def following(cls, ring: Callable[[], KeyRing], clock: Clock) -> TokenSigner:
        """A signer whose keys are ``ring()``'s at each call."""
        first = ring()
        signer = cls(first.keys, first.active_kid, clock)
        signer._ring = ring
        return signer

    def _sign(self, key: bytes, signing_input: str) -> str:
        return _b64(hmac.new(key, signing_input.encode(), hashlib.sha256).digest())

    def issue(self, *, event_id: int, customer_id: str, ttl_seconds: int) -> tuple[str, AccessClaims]:
        ring = self._ring()
        now_ms = int(self._clock.now() * 1000)
        now = now_ms // 1000
        claims = AccessClaims(event_id, customer_id, now, now + ttl_seconds, secrets.token_hex(8), now_ms)
        payload = _b64(
            json.dumps(
                {
                    "e": event_id,
                    "c": customer_id,
                    "iat": claims.issued_at,
                    "iatms": claims.issued_at_ms,
                    "exp": claims.expires_at,
                    "jti": claims.token_id,
                },
                separators=(",", ":"),
            ).encode()
        )
        signing_input = f"{_VERSION}.{ring.active_kid}.{payload}"
        return f"{signing_input}.{self._sign(ring.keys[ring.active_kid], signing_input)}", claims

    def seal(self, kind: str, body: Mapping[str, object]) -> str:
        """Another signed value than an access token, with the same keys:
        ``<kind>.<kid>.<payload>.<signature>``; ``kind`` (never ``v1``)
        is signed too, so one kind is never taken for another."""
        if kind == _VERSION or not kind.isalnum():
            raise ValueError(f"kind {kind!r} must be alphanumeric and not {_VERSION!r}")
        ring = self._ring()
        payload = _b64(json.dumps(dict(body), separators=(",", ":"), sort_keys=True).encode())
        signing_input = f"{kind}.{ring.active_kid}.{payload}"
        return f"{signing_input}.{self._sign(ring.keys[ring.active_kid], signing_input)}"

    def open(self, kind: str, sealed: str) -> dict[str, object] | None:
        """The body of a genuine value that :meth:`seal` made with ``kind``
        (any known key); None for anything else (the signature compared in
        constant time)."""
        parts = sealed.split(".")
        if len(sealed) > _MAX_TOKEN_LENGTH or len(parts) != 4 or parts[0] != kind or kind == _VERSION:
            return None
        _, kid, payload, signature = parts
        key = self._ring().keys.get(kid)
        if key is None:
            return None
        if not hmac.compare_digest(self._sign(key, f"{kind}.{kid}.{payload}").encode(), signature.encode()):
            return None
        try:
            body = json.loads(_unb64(payload))
        except ValueError:
            return None
        return body if isinstance(body, dict) else None

    def verify(self, token: str, *, event_id: int) -> AccessClaims:
        """The claims of a genuine, unexpired token for ``event_id``.

        UNAUTHENTICATED for a missing, malformed, forged, unknown-key or
        expired token; PERMISSION_DENIED for another event's token.
        """
        parts = presented(token).split(".")
        if len(parts) != 4 or parts[0] != _VERSION:
            raise _invalid("access token is malformed")
        _, kid, payload, signature = parts
        key = self._ring().keys.get(kid)
        if key is None:
            raise Unauthenticated(
                "access token is signed with an unknown key", reason="TOKEN_UNKNOWN_KEY", metadata={"kid": kid[:64]}
            )
        expected = self._sign(key, f"{_VERSION}.{kid}.{payload}")
        if not hmac.compare_digest(expected.encode(), signature.encode()):
            raise _invalid("access token signature does not verify")
        try:
            body = json.loads(_unb64(payload))
            claims = AccessClaims(
                event_id=int(body["e"]),
                customer_id=str(body["c"]),
                issued_at=int(body["iat"]),
                expires_at=int(body["exp"]),
                token_id=str(body["jti"]),
                issued_at_ms=int(body.get("iatms", int(body["iat"]) * 1000)),
            )
        except (ValueError, KeyError, TypeError, AttributeError) as err:
            raise _invalid("access token payload is malformed") from err
        if self._clock.now() > claims.expires_at + _LEEWAY_SECONDS:
            raise Unauthenticated(
                "access token expired", reason="TOKEN_EXPIRED", metadata={"expired_at": str(claims.expires_at)}
            )
        if claims.event_id != event_id:
            raise PermissionDenied(
                "access token is for another event",
                reason="TOKEN_WRONG_EVENT",
                metadata={"token_event_id": str(claims.event_id), "event_id": str(event_id)},
            )
        return claims
