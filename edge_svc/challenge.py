"""Bot defence at the door: a challenge a join must answer.

Two kinds, behind one :class:`HumanCheck` protocol:

- :class:`ProofOfWork`, stateless: ``GET /v1/events/{event_id}/queue/challenge``
  hands the fan a challenge ``v1.<payload>.<mac>`` (base64url JSON payload:
  event, fan, difficulty, a random id, expiry; HMAC-SHA256 with the edge's
  session keys). The fan's browser finds a ``nonce`` such that
  SHA-256(``<challenge>:<nonce>``) starts with ``difficulty`` zero bits (a Web
  Worker does it in about 2^difficulty hashes) and joins with the header
  ``Boxoffice-Proof: <challenge>:<nonce>``. The edge checks the MAC in
  constant time, the event, the fan, the expiry, the difficulty and the hash,
  then spends the challenge's id in Redis (``SET NX`` until it expires), so
  that no proof is accepted twice. Nothing is stored per challenge issued.
- :class:`ExternalCheck`: a challenge service of the "siteverify" kind (the
  page runs its widget; the token arrives in the same header): the edge posts
  the token, the client's address and its secret to the service and believes
  its ``success``.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import secrets
import urllib.parse
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import redis.asyncio as aioredis

from boxoffice.clock import Clock
from boxoffice.errors import PermissionDenied
from boxoffice.secrets import SecretSource
from boxoffice.tokens import KeyRing
from edge_svc.sealed import Sealer, Unsealed

PROOF_HEADER = "boxoffice-proof"
_MAX_PROOF = 1024


def _invalid(check: str) -> PermissionDenied:
    return PermissionDenied(
        "the proof does not verify; ask for a new challenge", reason="PROOF_INVALID", metadata={"check": check}
    )


def leading_zero_bits(digest: bytes) -> int:
    """How many zero bits ``digest`` starts with."""
    bits = 0
    for byte in digest:
        if byte == 0:
            bits += 8
            continue
        return bits + 8 - byte.bit_length()
    return bits


@dataclass(frozen=True, slots=True)
class Challenge:
    """A challenge as the fan receives it."""

    challenge: str
    difficulty_bits: int
    expires_at: int


@dataclass(frozen=True, slots=True)
class Attempt:
    """What a join presents and who presents it."""

    event_id: int
    customer_id: str
    client_ip: str
    proof: str


class HumanCheck(Protocol):
    """What a join must pass before the edge queues the fan."""

    kind: str

    def required(self, event_id: int) -> bool:
        """Whether joins of this event need a proof."""

    async def verify(self, attempt: Attempt) -> None:
        """Nothing when the proof holds; PERMISSION_DENIED otherwise."""


class ProofUsed(Protocol):
    """Remembers spent proofs until they expire."""

    async def spend(self, proof_id: str, *, until_epoch_seconds: int) -> bool:
        """True the first time a proof id is spent, False after."""


class RedisProofUsed:
    def __init__(self, client: aioredis.Redis, clock: Clock) -> None:
        self._client = client
        self._clock = clock

    async def spend(self, proof_id: str, *, until_epoch_seconds: int) -> bool:
        ttl_ms = max(1000, int((until_epoch_seconds - self._clock.now()) * 1000) + 1000)
        return bool(await self._client.set(f"edge:proof:{{{proof_id}}}", b"1", nx=True, px=ttl_ms))


class NoCheck:
    """No challenge at the door."""

    kind = "none"

    def required(self, event_id: int) -> bool:
        return False

    async def verify(self, attempt: Attempt) -> None:
        return None


class ProofOfWork:
    """The stateless proof-of-work described in the module's docstring."""

    kind = "proof-of-work"

    def __init__(
        self,
        keys: SecretSource[KeyRing],
        used: ProofUsed,
        clock: Clock,
        *,
        difficulty_bits: int,
        by_event: dict[int, int] | None = None,
        ttl_seconds: int = 300,
    ) -> None:
        self._sealer = Sealer(keys, "v1")
        self._used = used
        self._clock = clock
        self._default_bits = difficulty_bits
        self._by_event = dict(by_event or {})
        self._ttl = ttl_seconds

    def difficulty(self, event_id: int) -> int:
        return self._by_event.get(event_id, self._default_bits)

    def required(self, event_id: int) -> bool:
        return self.difficulty(event_id) > 0

    def issue(self, event_id: int, customer_id: str) -> Challenge:
        bits = self.difficulty(event_id)
        expires = int(self._clock.now()) + self._ttl
        body = {"e": event_id, "c": customer_id, "d": bits, "i": secrets.token_hex(12), "x": expires}
        return Challenge(self._sealer.seal(body), bits, expires)

    async def verify(self, attempt: Attempt) -> None:
        proof = attempt.proof
        if len(proof) > _MAX_PROOF:
            raise _invalid("format")
        challenge, sep, nonce = proof.rpartition(":")
        if not sep or not nonce or len(nonce) > 64:
            raise _invalid("format")
        try:
            body = self._sealer.open(challenge)
            event_id, customer, bits, proof_id, expires = (
                int(body["e"]),
                str(body["c"]),
                int(body["d"]),
                str(body["i"]),
                int(body["x"]),
            )
        except Unsealed as err:
            # A retired key reads as a bad signature: challenges live minutes.
            raise _invalid("format" if err.check == "format" else "signature") from None
        except (ValueError, KeyError, TypeError, OverflowError):
            raise _invalid("format") from None
        if event_id != attempt.event_id or customer != attempt.customer_id:
            raise _invalid("subject")
        if expires < self._clock.now():
            raise _invalid("expiry")
        if bits < self.difficulty(attempt.event_id):
            raise _invalid("difficulty")
        if leading_zero_bits(hashlib.sha256(proof.encode()).digest()) < bits:
            raise _invalid("work")
        if not await self._used.spend(proof_id, until_epoch_seconds=expires):
            raise PermissionDenied("this proof was already used; ask for a new challenge", reason="PROOF_REUSED")


def solve(challenge: str, bits: int) -> str:
    """A proof for ``challenge`` (what the page's worker does; tests and
    clients without a browser use it)."""
    nonce = 0
    while True:
        proof = f"{challenge}:{nonce}"
        if leading_zero_bits(hashlib.sha256(proof.encode()).digest()) >= bits:
            return proof
        nonce += 1


Verify = Callable[[str, dict[str, str]], dict[str, object]]


def _post_form(url: str, form: dict[str, str]) -> dict[str, object]:
    data = urllib.parse.urlencode(form).encode()
    request = urllib.request.Request(url, data=data, headers={"Content-Type": "application/x-www-form-urlencoded"})
    with urllib.request.urlopen(request, timeout=5) as response:
        answer = json.loads(response.read(1 << 16))
    if not isinstance(answer, dict):
        raise ValueError("not a JSON object")
    return answer


class ExternalCheck:
    """A challenge service of the siteverify kind: POST ``secret``,
    ``response`` (the token) and ``remoteip``; JSON ``{"success": true}``."""

    kind = "external"

    def __init__(self, url: str, secret: SecretSource[str], *, post: Verify | None = None) -> None:
        self._url = url
        self._secret = secret
        self._post = post or _post_form

    def required(self, event_id: int) -> bool:
        return True

    async def verify(self, attempt: Attempt) -> None:
        if len(attempt.proof) > 4096:
            raise _invalid("format")
        form = {"secret": self._secret.get(), "response": attempt.proof, "remoteip": attempt.client_ip}
        try:
            answer = await asyncio.to_thread(self._post, self._url, form)
        except (OSError, ValueError):
            raise _invalid("service") from None
        if answer.get("success") is not True:
            raise _invalid("external")


def proof_required(kind: str) -> PermissionDenied:
    return PermissionDenied(
        "joining needs a solved challenge in the Boxoffice-Proof header",
        reason="PROOF_REQUIRED",
        metadata={"challenge": kind},
    )
