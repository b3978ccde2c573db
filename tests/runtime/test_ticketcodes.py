"""Ticket codes: compact JWS (EdDSA) that verify with the public keys alone,
refused on any change, any other algorithm or key, and a bad key setting."""

from __future__ import annotations

import base64
import json

import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from boxoffice import ticketcodes
from boxoffice.env import ConfigError, Env
from boxoffice.secrets import DEV_CHECKIN_SEED
from boxoffice.ticketcodes import InvalidCode, TicketClaims, TicketCodeSigner, TicketCodeVerifier
from tests.support import ManualClock

NEW = "c2:" + "22" * 32
OLD = "c1:" + "11" * 32
CLAIMS = TicketClaims("7f8e0c2a-3c1b-4f6e-9d2a-0b1c2d3e4f50", 42, "A", "row K, seat 6", 1_700_000_000)


def _ring(text: str) -> ticketcodes.CheckInKeys:
    return ticketcodes.parse_keys(text)


def _pair(text: str) -> tuple[TicketCodeSigner, TicketCodeVerifier]:
    ring = _ring(text)
    clock = ManualClock(1_700_000_100)
    return TicketCodeSigner(lambda: ring, clock), TicketCodeVerifier(ring.public, clock)


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def test_a_code_is_a_compact_jws_any_jose_library_verifies() -> None:
    signer, verifier = _pair(f"{NEW},{OLD}")
    code = signer.sign(CLAIMS)
    assert verifier.verify(code) == CLAIMS
    header = json.loads(_unb64(code.split(".")[0]))
    assert header == {"alg": "EdDSA", "kid": "c2", "typ": "ticket"}
    # Small enough for a QR code a phone reads at arm's length.
    assert len(code) < 300
    # A verifier that knows only the published key (the JWKS), as a gate does.
    (jwk,) = [k for k in ticketcodes.jwks(_ring(NEW).public())["keys"]]
    assert (jwk["kty"], jwk["crv"], jwk["alg"], jwk["kid"]) == ("OKP", "Ed25519", "EdDSA", "c2")
    public = Ed25519PublicKey.from_public_bytes(_unb64(jwk["x"]))
    assert jwt.decode(code, public, algorithms=["EdDSA"])["sub"] == CLAIMS.ticket_id
    assert public.public_bytes(Encoding.Raw, PublicFormat.Raw) == _unb64(jwk["x"])


def test_every_listed_key_verifies_and_the_first_signs() -> None:
    old_signer, _ = _pair(OLD)
    old_code = old_signer.sign(CLAIMS)
    _, verifier = _pair(f"{NEW},{OLD}")
    assert verifier.verify(old_code) == CLAIMS
    # Once the old key is no longer listed, its codes are refused.
    _, rotated = _pair(NEW)
    with pytest.raises(InvalidCode):
        rotated.verify(old_code)


@pytest.mark.parametrize("index", range(0, 200, 7))
def test_one_character_changed_anywhere_is_invalid(index: int) -> None:
    signer, verifier = _pair(NEW)
    code = signer.sign(CLAIMS)
    index %= len(code)
    if code[index] == ".":
        index += 1
    changed = code[:index] + ("A" if code[index] != "A" else "B") + code[index + 1 :]
    with pytest.raises(InvalidCode):
        verifier.verify(changed)


def test_other_algorithms_keys_and_shapes_are_invalid() -> None:
    _, verifier = _pair(NEW)
    ring = _ring(NEW)
    payload = {"sub": CLAIMS.ticket_id, "ev": 42, "iat": CLAIMS.issued_at}
    public_raw = ring.public()["c2"].public_bytes(Encoding.Raw, PublicFormat.Raw)
    forged = [
        # The public key used as an HMAC secret (algorithm confusion).
        jwt.encode(payload, public_raw, algorithm="HS256", headers={"kid": "c2", "typ": "ticket"}),
        # Unsigned.
        jwt.encode(payload, "", algorithm="none", headers={"kid": "c2", "typ": "ticket"}),
        # Another key under the right key id.
        jwt.encode(payload, Ed25519PrivateKey.generate(), algorithm="EdDSA", headers={"kid": "c2", "typ": "ticket"}),
        # A key id nobody listed.
        jwt.encode(payload, ring.keys["c2"], algorithm="EdDSA", headers={"kid": "zz", "typ": "ticket"}),
        # Signed by us, but not a ticket (no type) or without its event.
        jwt.encode(payload, ring.keys["c2"], algorithm="EdDSA", headers={"kid": "c2"}),
        jwt.encode({"sub": "t", "iat": 1}, ring.keys["c2"], algorithm="EdDSA", headers={"kid": "c2", "typ": "ticket"}),
        # Issued far in the future.
        jwt.encode(
            {**payload, "iat": 1_800_000_000},
            ring.keys["c2"],
            algorithm="EdDSA",
            headers={"kid": "c2", "typ": "ticket"},
        ),
        "TKT-0123456789ABCDEF",
        "",
        "a.b.c",
        "x" * 2000,
    ]
    for code in forged:
        with pytest.raises(InvalidCode):
            verifier.verify(code)
    assert not ticketcodes.looks_signed("TKT-0123456789ABCDEF")


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        (",", "lists no key"),
        ("c1", "must be kid:<64 hex digits>"),
        ("c1:abcd", "64 hex digits"),
        ("c1:" + "zz" * 32, "64 hex digits"),
        (f"{OLD},{OLD}", "appears twice"),
        ("bad kid:" + "11" * 32, "must be kid"),
    ],
)
def test_bad_key_settings_are_config_errors(text: str, needle: str) -> None:
    with pytest.raises(ConfigError, match=r"^BOXOFFICE_CHECKIN_KEYS") as caught:
        ticketcodes.read_keys(Env({"BOXOFFICE_CHECKIN_KEYS": text}))
    assert needle in str(caught.value)


def test_unset_means_the_development_key() -> None:
    ring = ticketcodes.read_keys(Env({})).get()
    assert ring.active_kid == "dev"
    assert ring.keys["dev"].private_bytes_raw() == bytes.fromhex(DEV_CHECKIN_SEED)
    lines = ticketcodes.read_keys(Env({"BOXOFFICE_CHECKIN_KEYS": f"{NEW}\n{OLD}\n"})).get()
    assert list(lines.keys) == ["c2", "c1"] and lines.active_kid == "c2"
