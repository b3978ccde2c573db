"""The ways into a lane that is not open to everyone: access codes (made
in batches by an operator, stored only as their SHA-256) and staff passes
(signed with the mesh's token keys, for one event, until they expire).
No I/O here."""

from __future__ import annotations

import hashlib
import hmac
import secrets
from dataclasses import dataclass

from boxoffice.clock import Clock
from boxoffice.tokens import TokenSigner

# Codes are typed by people: no 0/O, 1/I/L, 2/Z, 5/S or 8/B look-alikes.
CODE_ALPHABET = "ACDEFGHJKMNPQRTUVWXY34679"
CODE_LENGTH = 16
# An access code as typed: up to this many characters (dashes and spaces
# included) before it is normalised.
CODE_MAX_TYPED = 64


def new_code() -> str:
    """A fresh code, ``XXXX-XXXX-XXXX-XXXX`` (about 74 bits)."""
    raw = "".join(secrets.choice(CODE_ALPHABET) for _ in range(CODE_LENGTH))
    return "-".join(raw[i : i + 4] for i in range(0, CODE_LENGTH, 4))


def winner_code(key: bytes, event_id: int, pseudonym: str) -> str:
    """A verified-fan draw's code for one winner: derived from the draw's
    secret pseudonym key (never published), so that the service hands the
    winner the same code on every ask without keeping it anywhere."""
    mac = hmac.new(key, f"boxoffice-fandraw-code-v1|{event_id}|{pseudonym}".encode(), hashlib.sha256).digest()
    number = int.from_bytes(mac, "big")
    chars = []
    for _ in range(CODE_LENGTH):
        number, digit = divmod(number, len(CODE_ALPHABET))
        chars.append(CODE_ALPHABET[digit])
    raw = "".join(chars)
    return "-".join(raw[i : i + 4] for i in range(0, CODE_LENGTH, 4))


def normalised(code: str) -> str:
    """The code as stored: upper case, without dashes or spaces."""
    return "".join(c for c in code.upper() if c not in "- ")


def code_hash(code: str) -> bytes:
    """What is stored of a code: the SHA-256 of its normalised form."""
    return hashlib.sha256(normalised(code).encode()).digest()


def plausible(code: str) -> bool:
    """Whether ``code`` has the form of a code at all (checked before any
    lookup, so garbage costs no query)."""
    if len(code) > CODE_MAX_TYPED:
        return False
    plain = normalised(code)
    return len(plain) == CODE_LENGTH and all(c in CODE_ALPHABET for c in plain)


_PASS_KIND = "sp1"


@dataclass(frozen=True, slots=True)
class StaffPass:
    """What a verified staff pass says."""

    event_id: int
    staff_name: str
    expires_at_ms: int
    # The pass's own id (bound to the first account that uses it).
    pass_id: str = ""


class StaffPassInvalid(Exception):
    """A staff pass that does not verify; ``check`` says which check failed
    (signature, expiry, event, form)."""

    def __init__(self, check: str) -> None:
        super().__init__(check)
        self.check = check


class StaffPasses:
    """Issues and verifies staff passes with the token signer's keys (a
    kind of their own, so a pass is never an access token or the reverse)."""

    def __init__(self, signer: TokenSigner, clock: Clock) -> None:
        self._signer = signer
        self._clock = clock

    def issue(self, event_id: int, staff_name: str, ttl_ms: int) -> tuple[str, StaffPass]:
        expires = int(self._clock.now() * 1000) + ttl_ms
        body = {"e": event_id, "n": staff_name, "x": expires, "j": secrets.token_hex(6)}
        return self._signer.seal(_PASS_KIND, body), StaffPass(event_id, staff_name, expires, str(body["j"]))

    def verify(self, sealed: str, *, event_id: int) -> StaffPass:
        body = self._signer.open(_PASS_KIND, sealed.strip())
        if body is None:
            raise StaffPassInvalid("signature")
        try:
            found = StaffPass(int(str(body["e"])), str(body["n"]), int(str(body["x"])), str(body.get("j", "")))
        except (KeyError, ValueError):
            raise StaffPassInvalid("form") from None
        if found.event_id != event_id:
            raise StaffPassInvalid("event")
        if found.expires_at_ms <= int(self._clock.now() * 1000):
            raise StaffPassInvalid("expiry")
        return found
