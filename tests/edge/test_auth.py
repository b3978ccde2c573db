"""Who the fan is, through HTTP only against every role running: the
session cookie's attributes, forged / tampered / expired / retired-key
cookies, the CSRF check of cookie-authenticated changes, development
sign-in switched off, and OpenID Connect bearer tokens (RS256 and ES256
signed here, against a JWKS file that rotates) for apps, whose access token
arrives in the body and travels in the Boxoffice-Access-Token header."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import os
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from http.cookies import SimpleCookie
from pathlib import Path
from typing import Any

import httpx
import pytest
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, padding, rsa
from cryptography.hazmat.primitives.asymmetric.utils import decode_dss_signature

from boxoffice import secrets
from boxoffice.clock import SystemClock
from edge_svc.config import DEV_SESSION_KID, OidcConfig
from edge_svc.identity import FileKeys, OidcVerifier
from tests.e2e.harness import eventually
from tests.edge.fans import ACCESS_HEADER, ADMITTED, NOT_IN_QUEUE, admit, buy, expect, hold, signed_in, state_of
from tests.edge.harness import EdgeStack, edge_stack
from tests.support import Stores

ISSUER = "https://id.example.test"
AUDIENCE = "boxoffice-edge"
EVIL = "https://evil.example"


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


# -- session cookies -------------------------------------------------------------


@pytest.fixture(scope="module")
async def stack(stores: Stores) -> AsyncIterator[EdgeStack]:
    async with edge_stack(stores, prefix="edge-auth") as stack:
        yield stack


def _set_cookies(reply: httpx.Response) -> dict[str, str]:
    """Each Set-Cookie header of ``reply`` by cookie name."""
    return {header.split("=", 1)[0]: header for header in reply.headers.get_list("set-cookie")}


def _attributes(header: str) -> dict[str, str]:
    parsed = SimpleCookie()
    parsed.load(header)
    (morsel,) = parsed.values()
    return {key: str(value) for key, value in morsel.items() if value}


def _session_cookie(payload: dict[str, Any], *, kid: str = DEV_SESSION_KID, key: bytes | None = None) -> str:
    signing = f"v1.{kid}.{_b64(json.dumps(payload).encode())}"
    secret = key if key is not None else secrets.DEV_EDGE_SESSION_KEY.encode()
    return f"{signing}.{_b64(hmac.new(secret, signing.encode(), hashlib.sha256).digest())}"


async def test_the_session_cookie_is_httponly_lax_and_not_secure_on_loopback(stack: EdgeStack) -> None:
    async with stack.client() as client:
        reply = await client.post("/v1/session", json={"name": "cookie-fan"})
        assert reply.status_code == 200 and reply.json()["customerId"] == "cookie-fan"
        assert reply.headers["cache-control"] == "private, no-store"
        header = _set_cookies(reply)["bo_session"]
        attributes = _attributes(header)
        assert "httponly" in attributes and attributes["samesite"].lower() == "lax"
        assert "secure" not in attributes and attributes["path"] == "/"
        assert int(attributes["max-age"]) == stack.edge.config.session_ttl_seconds
        assert (await client.get("/v1/session")).json()["customerId"] == "cookie-fan"
        # Sign-out clears every cookie of the edge.
        cleared = _set_cookies(await client.delete("/v1/session"))
        assert set(cleared) == {"bo_session", "bo_access", "bo_place"}
        assert all(_attributes(h)["max-age"] == "0" for h in cleared.values())
        expect(await client.get("/v1/session"), 401, "UNAUTHENTICATED", "NOT_SIGNED_IN")


async def test_the_access_token_cookie_is_httponly(stack: EdgeStack) -> None:
    event_id = await stack.event()
    async with signed_in(stack) as fan:
        await fan.post(f"/v1/events/{event_id}/queue:join", json={})

        async def token_cookie() -> str | None:
            reply = await fan.get(f"/v1/events/{event_id}/queue/position")
            if reply.json()["position"]["state"] != ADMITTED:
                return None
            assert reply.json()["position"]["accessToken"] == ""
            return _set_cookies(reply).get("bo_access")

        attributes = _attributes(await eventually(token_cookie, "admitted"))
        assert "httponly" in attributes and attributes["samesite"].lower() == "lax" and "secure" not in attributes


def _now() -> int:
    return int(time.time())


@pytest.mark.parametrize(
    "cookie",
    [
        pytest.param(_session_cookie({"c": "victim", "iat": 0, "exp": 2**40}, key=b"guessed"), id="forged"),
        pytest.param(_session_cookie({"c": "victim", "iat": 0, "exp": 2**40}, kid="2019"), id="unknown-kid"),
        pytest.param("v1.dev.e30.AAAA", id="bad-signature"),
        pytest.param("not-a-cookie", id="malformed"),
        pytest.param("v2." + _session_cookie({"c": "victim", "iat": 0, "exp": 2**40})[3:], id="version"),
        pytest.param("v1.dev." + "A" * 2000, id="too-long"),
    ],
)
async def test_a_bad_session_cookie_is_refused(stack: EdgeStack, cookie: str) -> None:
    async with stack.client(cookies={"bo_session": cookie}) as client:
        expect(await client.get("/v1/session"), 401, "UNAUTHENTICATED", "SESSION_INVALID")


@pytest.mark.parametrize("name", ["half\ud800", "bell\x07", "é" * 65, " ", ""])
async def test_development_sign_in_refuses_a_name_no_customer_id_can_be(stack: EdgeStack, name: str) -> None:
    async with stack.client() as client:
        body = json.dumps({"name": name}).encode()
        reply = await client.post("/v1/session", content=body, headers={"content-type": "application/json"})
        assert expect(reply, 400, "INVALID_ARGUMENT", "INVALID_FIELD").metadata == {"field": "name"}
        assert not client.cookies


async def test_expired_and_tampered_cookies_are_refused(stack: EdgeStack) -> None:
    event_id = await stack.event()
    expired = _session_cookie({"c": "late-fan", "iat": _now() - 7200, "exp": _now() - 60})
    async with stack.client(cookies={"bo_session": expired}) as client:
        expect(await client.get("/v1/session"), 401, "UNAUTHENTICATED", "SESSION_INVALID")
        expect(
            await client.post(f"/v1/events/{event_id}/queue:join", json={}), 401, "UNAUTHENTICATED", "SESSION_INVALID"
        )
    # A genuine cookie whose payload is changed to another fan's name.
    async with signed_in(stack, "honest-fan") as honest:
        version, kid, _, signature = honest.cookies["bo_session"].split(".")
        payload = _b64(json.dumps({"c": "victim", "iat": _now(), "exp": _now() + 3600}).encode())
        tampered = f"{version}.{kid}.{payload}.{signature}"
    async with stack.client(cookies={"bo_session": tampered}) as client:
        expect(
            await client.post(f"/v1/events/{event_id}/queue:join", json={}), 401, "UNAUTHENTICATED", "SESSION_INVALID"
        )
    # The genuine cookie of a signature we made with the dev key works: the
    # refusals above are the cookies', not the test's.
    good = _session_cookie({"c": "victim", "iat": _now(), "exp": _now() + 3600})
    async with stack.client(cookies={"bo_session": good}) as victim:
        assert await state_of(victim, event_id) == NOT_IN_QUEUE


# -- CSRF --------------------------------------------------------------------------


async def test_a_cross_site_post_with_the_cookie_changes_nothing(stack: EdgeStack) -> None:
    event_id = await stack.event()
    async with signed_in(stack) as fan:
        join = f"/v1/events/{event_id}/queue:join"
        found = expect(
            await fan.post(join, json={}, headers={"Origin": EVIL}), 403, "PERMISSION_DENIED", "CROSS_SITE_REQUEST"
        )
        assert found.metadata == {"origin": EVIL}
        for site in ("cross-site", "same-site"):
            reply = await fan.post(join, json={}, headers={"Sec-Fetch-Site": site})
            expect(reply, 403, "PERMISSION_DENIED", "CROSS_SITE_REQUEST")
        # An Origin that is not ours wins over a Sec-Fetch-Site that says it is.
        reply = await fan.post(join, json={}, headers={"Origin": EVIL, "Sec-Fetch-Site": "same-origin"})
        expect(reply, 403, "PERMISSION_DENIED", "CROSS_SITE_REQUEST")
        expect(
            await fan.post(join, json={}, headers={"Origin": "null"}), 403, "PERMISSION_DENIED", "CROSS_SITE_REQUEST"
        )
        assert await state_of(fan, event_id) == NOT_IN_QUEUE
        # Leaving and signing in are changes too.
        expect(
            await fan.post(f"/v1/events/{event_id}/queue:leave", json={}, headers={"Origin": EVIL}),
            403,
            "PERMISSION_DENIED",
            "CROSS_SITE_REQUEST",
        )
        signin = await fan.post("/v1/session", json={"name": "planted"}, headers={"Origin": EVIL})
        expect(signin, 403, "PERMISSION_DENIED", "CROSS_SITE_REQUEST")
        assert "set-cookie" not in signin.headers
        # A read from another site is no change: answered.
        assert (await fan.get("/v1/session", headers={"Origin": EVIL})).status_code == 200
        # Our own origin, and a browser that says same-origin, pass.
        ours = await fan.post(join, json={}, headers={"Origin": stack.url})
        assert ours.status_code == 200, ours.text
        same = await fan.post(join, json={}, headers={"Sec-Fetch-Site": "same-origin"})
        assert same.status_code == 200 and same.json()["position"]["score"] == ours.json()["position"]["score"]


async def test_development_sign_in_off(oidc: Oidc) -> None:
    async with oidc.stack.client() as client:
        reply = await client.post("/v1/session", json={"name": "someone"})
        expect(reply, 404, "NOT_FOUND", "SIGN_IN_DISABLED")
        assert "set-cookie" not in reply.headers and not client.cookies
        expect(await client.get("/v1/session"), 401, "UNAUTHENTICATED", "NOT_SIGNED_IN")


# -- OpenID Connect -----------------------------------------------------------------


@dataclass
class Oidc:
    """A stack that believes one issuer's tokens, the issuer's keys and
    its JWKS file."""

    stack: EdgeStack
    jwks: Path
    rsa_key: rsa.RSAPrivateKey
    ec_key: ec.EllipticCurvePrivateKey

    def token(
        self,
        claims: dict[str, Any] | None = None,
        *,
        alg: str = "RS256",
        kid: str | None = None,
        key: Any = None,
        drop: tuple[str, ...] = (),
    ) -> str:
        now = _now()
        body: dict[str, Any] = {"iss": ISSUER, "aud": AUDIENCE, "sub": "app-fan", "iat": now, "exp": now + 600}
        body.update(claims or {})
        for name in drop:
            body.pop(name, None)
        header = {"alg": alg, "typ": "JWT", "kid": kid if kid is not None else ("ec-1" if alg == "ES256" else "rsa-1")}
        signing = f"{_b64(json.dumps(header).encode())}.{_b64(json.dumps(body).encode())}".encode()
        return f"{signing.decode()}.{_b64(sign(alg, key, signing, self))}"

    def bearer(self, token: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {token}"}


def sign(alg: str, key: Any, signing: bytes, oidc: Oidc) -> bytes:
    if alg == "RS256":
        private = key if key is not None else oidc.rsa_key
        signature: bytes = private.sign(signing, padding.PKCS1v15(), hashes.SHA256())
        return signature
    if alg == "ES256":
        private_ec = key if key is not None else oidc.ec_key
        r, s = decode_dss_signature(private_ec.sign(signing, ec.ECDSA(hashes.SHA256())))
        return r.to_bytes(32, "big") + s.to_bytes(32, "big")
    if alg == "HS256":
        return hmac.new(key, signing, hashlib.sha256).digest()
    return b""


def _jwk(kid: str, key: rsa.RSAPrivateKey | ec.EllipticCurvePrivateKey) -> dict[str, str]:
    if isinstance(key, rsa.RSAPrivateKey):
        numbers = key.public_key().public_numbers()
        return {
            "kty": "RSA",
            "kid": kid,
            "use": "sig",
            "alg": "RS256",
            "n": _b64(numbers.n.to_bytes((numbers.n.bit_length() + 7) // 8, "big")),
            "e": _b64(numbers.e.to_bytes(3, "big")),
        }
    point = key.public_key().public_numbers()
    return {
        "kty": "EC",
        "kid": kid,
        "use": "sig",
        "crv": "P-256",
        "alg": "ES256",
        "x": _b64(point.x.to_bytes(32, "big")),
        "y": _b64(point.y.to_bytes(32, "big")),
    }


def write_jwks(path: Path, keys: dict[str, rsa.RSAPrivateKey | ec.EllipticCurvePrivateKey]) -> None:
    """Replaces the file at once (as a mounted ConfigMap changes)."""
    scratch = path.with_suffix(f".{uuid.uuid4().hex}")
    scratch.write_text(json.dumps({"keys": [_jwk(kid, key) for kid, key in keys.items()]}))
    os.replace(scratch, path)


@pytest.fixture(scope="module")
async def oidc(stores: Stores, tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Oidc]:
    rsa_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    ec_key = ec.generate_private_key(ec.SECP256R1())
    jwks = tmp_path_factory.mktemp("oidc") / "jwks.json"
    write_jwks(jwks, {"rsa-1": rsa_key, "ec-1": ec_key})
    config = OidcConfig(
        issuer=ISSUER,
        audience=AUDIENCE,
        jwks_url=None,
        jwks_file=str(jwks),
        algorithms=("RS256", "ES256"),
        jwks_cache_seconds=300.0,
        leeway_seconds=5.0,
    )
    async with edge_stack(stores, settings={"oidc": config, "dev_sign_in": False}, prefix="edge-oidc") as stack:
        yield Oidc(stack, jwks, rsa_key, ec_key)


async def test_the_email_claim_is_the_fans_address_only_when_the_issuer_verified_it(oidc: Oidc) -> None:
    config = OidcConfig(
        issuer=ISSUER,
        audience=AUDIENCE,
        jwks_url=None,
        jwks_file=str(oidc.jwks),
        algorithms=("RS256",),
        jwks_cache_seconds=300.0,
        leeway_seconds=5.0,
    )
    verifier = OidcVerifier(config, FileKeys(str(oidc.jwks)), SystemClock())
    verified = await verifier.verify(oidc.token({"email": "ana@example.test", "email_verified": True}))
    assert verified.email == "ana@example.test"
    for claims in (
        {"email": "ana@example.test"},
        {"email": "ana@example.test", "email_verified": False},
        {"email": "ana@example.test", "email_verified": "true"},
        {"email": "not an address", "email_verified": True},
        {"email": ["ana@example.test"], "email_verified": True},
    ):
        assert (await verifier.verify(oidc.token(claims))).email is None, claims


@pytest.mark.parametrize("alg", ["RS256", "ES256"])
async def test_a_good_bearer_token_works_end_to_end(oidc: Oidc, alg: str) -> None:
    event_id = await oidc.stack.event(seats=4)
    subject = f"app-{alg}-{uuid.uuid4().hex[:8]}"
    headers = oidc.bearer(oidc.token({"sub": subject}, alg=alg))
    async with oidc.stack.client(headers=headers) as app:
        assert (await app.get("/v1/session")).json()["customerId"] == subject
        # An app is no browser: no CSRF check applies to a bearer token.
        joined = await app.post(f"/v1/events/{event_id}/queue:join", json={}, headers={"Origin": EVIL})
        assert joined.status_code == 200, joined.text
        assert joined.json()["position"]["customerId"] == subject
        # The access token comes in the body for a bearer client...
        token = await admit(app, event_id)
        assert token.startswith("v1.")
        # ...and holds through the header, with no cookie jar at all.
        app.cookies.clear()
        made = await hold(app, event_id, 2, headers={ACCESS_HEADER: token})
        assert made["customerId"] == subject and len(made["seats"]) == 2
        expect(
            await app.post(f"/v1/events/{event_id}/holds", json={"bestAvailable": {"sectionId": "A", "quantity": 1}}),
            401,
            "UNAUTHENTICATED",
            "TOKEN_MISSING",
        )
        got = await app.get(f"/v1/holds/{made['holdId']}", headers={ACCESS_HEADER: token})
        assert got.status_code == 200 and got.json()["hold"]["holdId"] == made["holdId"]


async def test_an_app_gets_its_waitlist_offers_token_in_the_body(oidc: Oidc) -> None:
    """A waiting-list offer's access token, like an admission's: in the
    body for a bearer client (a browser gets only the cookie: test_waitlist)."""
    event_id = await oidc.stack.event(seats=1, refund_percent=100)
    buyer = oidc.stack.client(headers=oidc.bearer(oidc.token({"sub": f"buyer-{uuid.uuid4().hex[:8]}"})))
    subject = f"app-{uuid.uuid4().hex[:8]}"
    app = oidc.stack.client(headers=oidc.bearer(oidc.token({"sub": subject})))
    async with buyer, app:
        await admit(buyer, event_id)
        booking_id = await buy(buyer, event_id, 1)
        assert (await app.post(f"/v1/events/{event_id}/queue:join", json={})).status_code == 200
        joined = await app.post(f"/v1/events/{event_id}/waitlist:join", json={"quantity": 1})
        assert joined.status_code == 200, joined.text
        quote = (await buyer.get(f"/v1/bookings/{booking_id}/cancellation")).json()
        cancelled = await buyer.post(
            f"/v1/bookings/{booking_id}:cancel",
            json={"quotedRefund": quote["refund"]},
            headers={"Idempotency-Key": uuid.uuid4().hex},
        )
        assert cancelled.status_code == 200, cancelled.text

        async def offer() -> dict[str, Any] | None:
            reply = await app.get(f"/v1/events/{event_id}/waitlist")
            assert reply.status_code == 200, reply.text
            entry: dict[str, Any] = reply.json()["entry"]
            return entry if entry["state"] == "WAITLIST_STATE_OFFERED" else None

        entry = await eventually(offer, "the app's fan is offered the seat", seconds=30)
        token = entry["accessToken"]
        assert token.startswith("v1."), entry
        app.cookies.clear()
        held = await app.get(f"/v1/holds/{entry['offer']['holdId']}", headers={ACCESS_HEADER: token})
        assert held.status_code == 200 and held.json()["hold"]["customerId"] == subject, held.text


async def test_bad_bearer_tokens_are_refused(oidc: Oidc) -> None:
    event_id = await oidc.stack.event()
    stranger_rsa = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    public_pem = oidc.rsa_key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    good = oidc.token()
    head, body, signature = good.split(".")
    flipped = signature[:-2] + ("AA" if signature[-2:] != "AA" else "BB")
    cases: list[tuple[str, str]] = [
        (oidc.token({"iss": "https://other.example"}), "issuer"),
        (oidc.token({"aud": "another-app"}), "audience"),
        (oidc.token({"aud": ["x", "y"]}), "audience"),
        (oidc.token({"exp": _now() - 60}), "expiry"),
        (oidc.token(drop=("exp",)), "expiry"),
        (oidc.token({"nbf": _now() + 600}), "expiry"),
        (oidc.token(alg="none"), "key"),
        (oidc.token(alg="HS256", key=public_pem), "key"),
        (oidc.token(kid="rsa-unknown"), "key"),
        (oidc.token(alg="ES256", kid="rsa-1"), "key"),
        (oidc.token(key=stranger_rsa), "signature"),
        (f"{head}.{body}.{flipped}", "signature"),
        (
            f"{head}.{_b64(json.dumps({'iss': ISSUER, 'aud': AUDIENCE, 'sub': 'admin', 'exp': _now() + 60}).encode())}.{signature}",
            "signature",
        ),
        (oidc.token(drop=("sub",)), "subject"),
        (oidc.token({"sub": ""}), "subject"),
        (oidc.token({"sub": "x" * 300}), "subject"),
        ("not.a-jwt", "format"),
        ("a.b.c", "format"),
    ]
    async with oidc.stack.client() as app:
        for token, check in cases:
            reply = await app.post(f"/v1/events/{event_id}/queue:join", json={}, headers=oidc.bearer(token))
            found = expect(reply, 401, "UNAUTHENTICATED", "BEARER_INVALID")
            assert found.metadata == {"check": check}, (token, found)
        for authorization in ("Basic YTpi", "Bearer", "Token abc"):
            reply = await app.get("/v1/session", headers={"Authorization": authorization})
            assert expect(reply, 401, "UNAUTHENTICATED", "BEARER_INVALID").metadata == {"check": "format"}
        # None of that queued anyone; the good token, within the leeway, does.
        app_fan = oidc.bearer(good)
        assert await state_of(app, event_id, headers=app_fan) == NOT_IN_QUEUE
        late = oidc.bearer(oidc.token({"exp": _now() - 2}))
        assert (await app.get("/v1/session", headers=late)).status_code == 200


async def test_a_subject_the_mesh_cannot_carry_is_refused(oidc: Oidc) -> None:
    """The services take a customer id of at most 128 characters of UTF-8
    and no control characters; another subject is refused at the door, not
    asserted and refused behind it."""
    event_id = await oidc.stack.event()
    async with oidc.stack.client() as app:
        longest = oidc.bearer(oidc.token({"sub": "é" * 128}))
        joined = await app.post(f"/v1/events/{event_id}/queue:join", json={}, headers=longest)
        assert joined.status_code == 200 and joined.json()["position"]["customerId"] == "é" * 128, joined.text
        # Longer, or with control characters (which the services refuse in a customer id).
        # A lone surrogate (JSON's "\ud800") is no character UTF-8 can carry.
        for subject in ("é" * 129, "line\nbreak", "tab\there", "del\x7f", "half\ud800"):
            refused = oidc.bearer(oidc.token({"sub": subject}))
            reply = await app.post(f"/v1/events/{event_id}/queue:join", json={}, headers=refused)
            assert expect(reply, 401, "UNAUTHENTICATED", "BEARER_INVALID").metadata == {"check": "subject"}, subject


@pytest.mark.parametrize("exp", [float("nan"), float("inf"), 1e300, 10**20, True, "9999999999"])
async def test_an_expiry_that_is_no_time_is_refused(oidc: Oidc, exp: object) -> None:
    """Signed by the issuer, still no expiry: NaN compares false with every
    time (a token that never expires), infinity and times past year 9999 are
    none a session can end at."""
    async with oidc.stack.client(headers=oidc.bearer(oidc.token({"exp": exp}))) as app:
        reply = await app.get("/v1/session")
        assert expect(reply, 401, "UNAUTHENTICATED", "BEARER_INVALID").metadata == {"check": "expiry"}


async def test_a_key_added_to_the_jwks_file_verifies_after_the_change(oidc: Oidc) -> None:
    rotated = ec.generate_private_key(ec.SECP256R1())
    token = oidc.token({"sub": "rotated-fan"}, alg="ES256", kid="ec-2", key=rotated)
    async with oidc.stack.client(headers=oidc.bearer(token)) as app:
        reply = await app.get("/v1/session")
        assert expect(reply, 401, "UNAUTHENTICATED", "BEARER_INVALID").metadata == {"check": "key"}
        write_jwks(oidc.jwks, {"rsa-1": oidc.rsa_key, "ec-1": oidc.ec_key, "ec-2": rotated})

        async def verified() -> str | None:
            answer = await app.get("/v1/session")
            if answer.status_code == 401:
                return None
            assert answer.status_code == 200, answer.text
            return str(answer.json()["customerId"])

        assert await eventually(verified, "the new key is read") == "rotated-fan"
        # The keys kept verify still; a key removed stops verifying.
        assert (await app.get("/v1/session", headers=oidc.bearer(oidc.token()))).status_code == 200
        write_jwks(oidc.jwks, {"ec-2": rotated})

        async def retired() -> bool | None:
            answer = await app.get("/v1/session", headers=oidc.bearer(oidc.token()))
            return True if answer.status_code == 401 else None

        await eventually(retired, "the removed key is dropped")
        write_jwks(oidc.jwks, {"rsa-1": oidc.rsa_key, "ec-1": oidc.ec_key, "ec-2": rotated})


async def test_a_cookie_fan_and_an_app_fan_are_kept_apart(stack: EdgeStack) -> None:
    """On an edge without OpenID Connect, a bearer token is refused outright
    (never ignored in favour of the cookie)."""
    async with signed_in(stack) as fan:
        reply = await fan.get("/v1/session", headers={"Authorization": "Bearer a.b.c"})
        assert expect(reply, 401, "UNAUTHENTICATED", "BEARER_INVALID").metadata == {"check": "issuer"}
        assert (await fan.get("/v1/session")).status_code == 200
