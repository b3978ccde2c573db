"""Values the edge hands out and takes back signed: session cookies, place
cookies, proof-of-work challenges. Each is ``<kind>.<kid>.<payload>.<mac>``:
the payload base64url JSON, the MAC an HMAC-SHA256 of what precedes it with
the key ``kid`` of the edge's key ring (every key verifies, the active one
signs), compared in constant time. A payload is read within bounds (a few
KiB, a shallow nesting) even when its MAC verifies."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
from typing import Any

from boxoffice import boundedjson
from boxoffice.secrets import SecretSource
from boxoffice.tokens import KeyRing

# The largest payload a sealed value carries, and how deep it may nest.
_MAX_PAYLOAD_BYTES = 4096
_MAX_DEPTH = 4


def b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


class Unsealed(Exception):
    """A sealed value that does not open; ``check`` says why: ``format``,
    ``key`` (signed with a key the ring no longer holds) or ``signature``."""

    def __init__(self, check: str) -> None:
        super().__init__(check)
        self.check = check


class Sealer:
    """Seals and opens one kind of value with the edge's key ring."""

    def __init__(self, keys: SecretSource[KeyRing], kind: str) -> None:
        self._keys = keys
        self._kind = kind

    def seal(self, body: Any) -> str:
        ring = self._keys.get()
        payload = b64(json.dumps(body, separators=(",", ":")).encode())
        signing_input = f"{self._kind}.{ring.active_kid}.{payload}"
        return f"{signing_input}.{_mac(ring.keys[ring.active_kid], signing_input)}"

    def open(self, sealed: str) -> Any:
        """The body of a genuine value of this kind; :class:`Unsealed` otherwise."""
        parts = sealed.split(".")
        if len(parts) != 4 or parts[0] != self._kind:
            raise Unsealed("format")
        _, kid, payload, mac = parts
        key = self._keys.get().keys.get(kid)
        if key is None:
            raise Unsealed("key")
        if not hmac.compare_digest(_mac(key, f"{self._kind}.{kid}.{payload}").encode(), mac.encode()):
            raise Unsealed("signature")
        try:
            return boundedjson.loads(unb64(payload), max_bytes=_MAX_PAYLOAD_BYTES, max_depth=_MAX_DEPTH)
        except ValueError:
            raise Unsealed("format") from None


def _mac(key: bytes, signing_input: str) -> str:
    return b64(hmac.new(key, signing_input.encode(), hashlib.sha256).digest())
