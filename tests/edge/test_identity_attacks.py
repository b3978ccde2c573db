"""What an attacker sends as an identity, answered 401 and never 500: bearer
tokens with ``alg: none``, HS256 signed with the issuer's public key, a
``crit`` header, ``kid`` path and injection tricks, a header or claims
nested thousands deep or past their size; session cookies signed with our
key whose payload is no session (an expiry past any date, a lone surrogate,
a nested customer). A control beside each proves the same token or cookie
passes when the one thing wrong with it is put right."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, padding, rsa

from boxoffice import secrets
from edge_svc.config import DEV_SESSION_KID, OidcConfig
from tests.edge.fans import expect
from tests.edge.harness import EdgeStack, edge_stack, loopback_address
from tests.edge.test_auth import AUDIENCE, ISSUER, write_jwks
from tests.support import Stores


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _claims(**changes: Any) -> bytes:
    now = int(time.time())
    body: dict[str, Any] = {"iss": ISSUER, "aud": AUDIENCE, "sub": "attacked-fan", "iat": now, "exp": now + 600}
    body.update(changes)
    return json.dumps(body).encode()


class Issuer:
    """The test's OpenID Connect issuer: its RSA key and a stack that believes it."""

    def __init__(self, stack: EdgeStack, key: rsa.RSAPrivateKey, config: OidcConfig) -> None:
        self.stack = stack
        self.key = key
        self.config = config

    def rs256(self, header: bytes, claims: bytes) -> str:
        signing = f"{_b64(header)}.{_b64(claims)}".encode()
        return f"{signing.decode()}.{_b64(self.key.sign(signing, padding.PKCS1v15(), hashes.SHA256()))}"

    def public_pem(self) -> bytes:
        return self.key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )


def _hs256(header: bytes, claims: bytes, key: bytes) -> str:
    signing = f"{_b64(header)}.{_b64(claims)}".encode()
    return f"{signing.decode()}.{_b64(hmac.new(key, signing, hashlib.sha256).digest())}"


def _header(**fields: Any) -> bytes:
    return json.dumps({"alg": "RS256", "typ": "JWT", "kid": "rsa-1", **fields}).encode()


@pytest.fixture(scope="module")
async def issuer(stores: Stores, tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Issuer]:
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    jwks: Path = tmp_path_factory.mktemp("oidc-attacks") / "jwks.json"
    write_jwks(jwks, {"rsa-1": key, "ec-1": ec.generate_private_key(ec.SECP256R1())})
    config = OidcConfig(
        issuer=ISSUER,
        audience=AUDIENCE,
        jwks_url=None,
        jwks_file=str(jwks),
        algorithms=("RS256", "ES256"),
        jwks_cache_seconds=300.0,
        leeway_seconds=5.0,
    )
    async with edge_stack(stores, settings={"oidc": config}, prefix="edge-identity-attacks") as stack:
        yield Issuer(stack, key, config)


async def _refused(issuer: Issuer, token: str, check: str) -> None:
    async with issuer.stack.client() as app:
        reply = await app.get("/v1/session", headers={"Authorization": f"Bearer {token}"})
        found = expect(reply, 401, "UNAUTHENTICATED", "BEARER_INVALID")
        assert found.metadata == {"check": check}, (token[:120], found)


async def _accepted(issuer: Issuer, token: str) -> None:
    async with issuer.stack.client() as app:
        reply = await app.get("/v1/session", headers={"Authorization": f"Bearer {token}"})
        assert reply.status_code == 200 and reply.json()["customerId"] == "attacked-fan", reply.text


async def test_the_control_token_is_accepted(issuer: Issuer) -> None:
    await _accepted(issuer, issuer.rs256(_header(), _claims()))


@pytest.mark.parametrize("alg", ["none", "None", "NONE", "nOnE"])
async def test_alg_none_is_refused(issuer: Issuer, alg: str) -> None:
    unsigned = f"{_b64(_header(alg=alg))}.{_b64(_claims())}."
    await _refused(issuer, unsigned, "key")
    # Even with the issuer's genuine signature kept.
    signed = issuer.rs256(_header(), _claims())
    await _refused(issuer, f"{_b64(_header(alg=alg))}.{signed.split('.', 1)[1]}", "key")


async def test_hs256_signed_with_the_public_key_is_refused(issuer: Issuer) -> None:
    """The confusion attack: a verifier that takes the algorithm from the
    token checks an HMAC with the RSA public key as its secret."""
    pem = issuer.public_pem()
    numbers = issuer.key.public_key().public_numbers()
    jwk = json.dumps({"kty": "RSA", "n": _b64(numbers.n.to_bytes(256, "big")), "e": "AQAB"}).encode()
    for secret in (pem, pem.strip(), jwk):
        await _refused(issuer, _hs256(_header(alg="HS256"), _claims(), secret), "key")


@pytest.mark.parametrize(
    "extra",
    [
        {"crit": ["exp"]},
        {"crit": ["urn:example:unknown"], "urn:example:unknown": True},
        {"crit": ["b64"], "b64": False},
        {"crit": []},
        {"crit": "b64"},
        {"b64": False},
    ],
    ids=["registered", "unknown", "b64", "empty", "not-a-list", "b64-without-crit"],
)
async def test_a_critical_header_is_refused(issuer: Issuer, extra: dict[str, Any]) -> None:
    await _refused(issuer, issuer.rs256(_header(**extra), _claims()), "format")


@pytest.mark.parametrize(
    "kid",
    [
        "../../../../../../dev/null",
        "/dev/null",
        "rsa-1/../rsa-1",
        "..",
        "rsa-1\u0000",
        "rsa-1' OR '1'='1",
        "rsa-1%2f..%2f",
        "file:///etc/passwd",
        "https://evil.example/jwks.json",
        "x" * 300,
        ["rsa-1"],
        {"$ne": ""},
        1,
    ],
    ids=lambda kid: repr(kid)[:24],
)
async def test_kid_tricks_are_refused(issuer: Issuer, kid: object) -> None:
    """A key id is looked up as a name among the issuer's keys, never as a
    path, URL or query: a trick is an unknown key (and asks for no JWKS)."""
    # Signed by the real key: only the kid is wrong.
    await _refused(issuer, issuer.rs256(_header(kid=kid), _claims()), "key")
    # The classic: HS256 with an empty key or /dev/null's contents.
    await _refused(issuer, _hs256(_header(alg="HS256", kid=kid), _claims(), b""), "key")


@pytest.mark.parametrize("part", ["header", "claims"])
@pytest.mark.parametrize("levels", [40, 2500])
async def test_a_deeply_nested_token_is_refused_not_a_500(issuer: Issuer, part: str, levels: int) -> None:
    nested = "[" * levels + "]" * levels
    header, claims = _header(), _claims()
    if part == "header":
        header = header[:-1] + f', "x": {nested}}}'.encode()
    else:
        claims = claims[:-1] + f', "x": {nested}}}'.encode()
    await _refused(issuer, issuer.rs256(header, claims), "format")


async def test_oversized_and_unreadable_tokens_are_refused(issuer: Issuer) -> None:
    padding_claim = _claims(x="y" * 9000)
    await _refused(issuer, issuer.rs256(_header(), padding_claim), "format")
    for header in (b"[]", b'"RS256"', b"null", b"\xff\xfe", b'{"alg": "RS256", "kid": "rsa-1"'):
        await _refused(issuer, issuer.rs256(header, _claims()), "format")
    # Claims that are no object.
    await _refused(issuer, issuer.rs256(_header(), b"[1, 2]"), "format")
    # A huge number where a time goes.
    await _refused(issuer, issuer.rs256(_header(), _claims()[:-1] + b', "exp": 1e400}'), "expiry")
    await _refused(issuer, issuer.rs256(_header(), _claims(exp=10**30)), "expiry")


async def test_many_unreadable_tokens_meet_the_per_address_limit(stores: Stores, issuer: Issuer) -> None:
    """A refusal counts against the per-address limit like any request: the
    same unreadable token sent again and again ends in 429s."""
    settings: dict[str, object] = {
        "oidc": issuer.config,
        "trusted_proxies": (),
        "ip_rate_per_second": 0.01,
        "ip_burst": 5,
        "rate_limit_timeout_seconds": 10.0,
    }
    async with edge_stack(stores, settings=settings, prefix="edge-identity-limit") as stack:
        deep = "[" * 2500 + "]" * 2500
        header = _header()[:-1] + f', "x": {deep}}}'.encode()
        token = issuer.rs256(header, _claims())
        statuses: list[int] = []
        async with stack.client_from(loopback_address()) as app:
            for _ in range(8):
                reply = await app.get("/v1/session", headers={"Authorization": f"Bearer {token}"})
                statuses.append(reply.status_code)
        assert statuses == [401] * 5 + [429] * 3, statuses


# -- session cookies ------------------------------------------------------------


def _cookie(payload: bytes) -> str:
    signing = f"v1.{DEV_SESSION_KID}.{_b64(payload)}"
    mac = hmac.new(secrets.DEV_EDGE_SESSION_KEY.encode(), signing.encode(), hashlib.sha256).digest()
    return f"{signing}.{_b64(mac)}"


@pytest.fixture(scope="module")
async def stack(stores: Stores) -> AsyncIterator[EdgeStack]:
    async with edge_stack(stores, prefix="edge-cookie-attacks") as stack:
        yield stack


@pytest.mark.parametrize(
    "payload",
    [
        b'{"c": "fan", "iat": 0, "exp": 1e400}',
        b'{"c": "fan", "iat": 0, "exp": 100000000000000000000000000000}',
        b'{"c": "fan", "iat": 0, "exp": NaN}',
        b'{"c": "fan", "iat": 0, "exp": Infinity}',
        b'{"c": "fan", "iat": 0, "exp": true}',
        b'{"c": "fan", "iat": 0, "exp": "9999999999"}',
        b'{"c": "half\\ud800", "iat": 0, "exp": 9999999999}',
        b'{"c": "line\\nbreak", "iat": 0, "exp": 9999999999}',
        b'{"c": ' + b"[" * 300 + b"]" * 300 + b', "iat": 0, "exp": 9999999999}',
        b'{"c": {"admin": true}, "iat": 0, "exp": 9999999999}',
        b'{"c": 42, "iat": 0, "exp": 9999999999}',
        b"[" * 700 + b"]" * 700,
        b'"fan"',
        b"\xff",
    ],
    ids=[
        "exp-1e400",
        "exp-10e29",
        "exp-nan",
        "exp-infinity",
        "exp-true",
        "exp-string",
        "lone-surrogate",
        "control-character",
        "nested-customer",
        "object-customer",
        "number-customer",
        "nested-payload",
        "string-payload",
        "not-utf8",
    ],
)
async def test_a_signed_cookie_that_is_no_session_is_refused(stack: EdgeStack, payload: bytes) -> None:
    event_id = await stack.event()
    async with stack.client(cookies={"bo_session": _cookie(payload)}) as client:
        expect(await client.get("/v1/session"), 401, "UNAUTHENTICATED", "SESSION_INVALID")
        join = await client.post(f"/v1/events/{event_id}/queue:join", json={})
        expect(join, 401, "UNAUTHENTICATED", "SESSION_INVALID")


async def test_the_control_cookie_is_a_session(stack: EdgeStack) -> None:
    async with stack.client(cookies={"bo_session": _cookie(b'{"c": "fan", "iat": 0, "exp": 9999999999}')}) as client:
        reply = await client.get("/v1/session")
        assert reply.status_code == 200 and reply.json()["customerId"] == "fan", reply.text


async def test_a_signed_out_cookie_stops_working_at_once(stack: EdgeStack) -> None:
    event_id = await stack.event()
    async with stack.client() as fan:
        reply = await fan.post("/v1/session", json={"name": "leaving-fan"})
        assert reply.status_code == 200
        kept = fan.cookies["bo_session"]
        async with stack.client() as other_device:
            # The same fan signed in elsewhere: another session, untouched by this sign-out.
            assert (await other_device.post("/v1/session", json={"name": "leaving-fan"})).status_code == 200
            assert (await fan.delete("/v1/session")).status_code == 200
            # A copy of the cookie kept (by a thief, or a browser that ignores the clearing).
            async with stack.client(cookies={"bo_session": kept}) as replay:
                expect(await replay.get("/v1/session"), 401, "UNAUTHENTICATED", "SESSION_INVALID")
                joined = await replay.post(f"/v1/events/{event_id}/queue:join", json={})
                expect(joined, 401, "UNAUTHENTICATED", "SESSION_INVALID")
            assert (await other_device.get("/v1/session")).json()["customerId"] == "leaving-fan"
            # Signing out from another site changes nothing.
            cross = await other_device.delete("/v1/session", headers={"Origin": "https://evil.example"})
            expect(cross, 403, "PERMISSION_DENIED", "CROSS_SITE_REQUEST")
            assert (await other_device.get("/v1/session")).status_code == 200
