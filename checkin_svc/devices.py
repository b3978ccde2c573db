"""Gate devices' keys: made once, kept hashed, checked without timing leaks.

A key is ``bxd_`` and 43 base64url characters (32 random bytes); the store
keeps its SHA-256 only, so a copy of the database opens no gate. Whoever
presents a key is the device it was made for, for that device's event only.
"""

from __future__ import annotations

import hashlib
import re
import secrets
from dataclasses import dataclass
from datetime import datetime

KEY_PREFIX = "bxd_"
_KEY = re.compile(r"^bxd_[A-Za-z0-9_-]{43}$")


@dataclass(frozen=True, slots=True)
class GateDevice:
    device_id: str
    event_id: int
    name: str
    created_at: datetime
    revoked_at: datetime | None


def new_key() -> str:
    return KEY_PREFIX + secrets.token_urlsafe(32)


def key_hash(key: str) -> bytes | None:
    """The stored form of a key; None for what cannot be a key (so that it
    is refused without a lookup)."""
    if not _KEY.match(key):
        return None
    return hashlib.sha256(key.encode()).digest()
