"""Hostile JSON in everything that carries JSON, against the live edge and
mesh, with "no 5xx" as the check: every route's body, a bearer token's
header and claims, the session and place cookies (signed with the edge's
development key, so that their payload is read), the webhook's body, and
the page tokens that services decode. The documents are nested deep
(around Python's recursion limit and far past it), wide, oversized, with
numbers no float holds, NaN, lone surrogates, duplicate keys and bytes that
are not UTF-8 (generated from these shapes by Hypothesis, derandomized,
plus each shape at its extreme)."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import json
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from boxoffice import secrets
from edge_svc.config import DEV_SESSION_KID
from edge_svc.routes import ROUTES
from tests.edge.harness import EdgeStack, edge_stack, sign_in
from tests.support import Stores


def _b64(data: bytes) -> bytes:
    return base64.urlsafe_b64encode(data).rstrip(b"=")


def _nested(depth: int, *, kind: str) -> bytes:
    if kind == "array":
        return b"[" * depth + b"]" * depth
    return b'{"a":' * depth + b"1" + b"}" * depth


def _wrapped(inner: bytes) -> bytes:
    """``inner`` as the value of a field in an object (where a route or a
    token looks for fields)."""
    return b'{"name": "x", "c": "fan", "exp": 9999999999, "x": ' + inner + b"}"


# Each shape at its extreme (and around Python's recursion limit).
EXTREMES: list[bytes] = [
    *(_nested(depth, kind=kind) for depth in (999, 1000, 1001, 3000) for kind in ("array", "object")),
    *(_wrapped(_nested(depth, kind="array")) for depth in (40, 1000, 2500)),
    b"[" + b"0," * 20_000 + b"0]",
    b'{"x": "' + b"y" * 70_000 + b'"}',
    b'{"x": 1e400, "exp": 1e400, "c": "fan"}',
    b'{"x": ' + b"9" * 5000 + b"}",
    b'{"exp": NaN, "c": "fan", "x": Infinity}',
    b'{"c": "\\ud800", "exp": 9999999999, "name": "\\udfff"}',
    b'{"c": "a", "c": "b", "exp": 1, "exp": 9999999999}',
    b"\xff\xfe\x00{",
    b"",
    b"null",
]


def _documents() -> st.SearchStrategy[bytes]:
    """JSON-ish documents of hostile shapes, nested up to a few thousand."""
    depth = st.sampled_from([1, 20, 64, 500, 998, 1500, 4000])
    kind = st.sampled_from(["array", "object"])
    nested = st.builds(lambda d, k: _nested(d, kind=k), depth, kind)
    return st.one_of(nested, st.builds(_wrapped, nested), st.sampled_from(EXTREMES))


@dataclass(frozen=True)
class Carrier:
    """Where a document goes in a request."""

    name: str
    send: Callable[[httpx.AsyncClient, World, bytes], Request]


@dataclass(frozen=True)
class Request:
    method: str
    path: str
    body: bytes | None = None
    headers: dict[str, str] | None = None
    cookies: dict[str, str] | None = None


@dataclass
class World:
    event_id: int
    hold_id: str
    payment_id: str
    signature_header: str
    # A signed-in fan's session cookie (the carriers' requests are theirs).
    session: str

    def path(self, template: str) -> str:
        return (
            template.replace("{event_id}", str(self.event_id))
            .replace("{hold_id}", self.hold_id)
            .replace("{payment_id}", self.payment_id)
            .replace("{asset}", "app.js")
        )


def _signed_cookie(kind: str, payload: bytes) -> str:
    signing = f"{kind}.{DEV_SESSION_KID}.{_b64(payload).decode()}"
    mac = hmac.new(secrets.DEV_EDGE_SESSION_KEY.encode(), signing.encode(), hashlib.sha256).digest()
    return f"{signing}.{_b64(mac).decode()}"


_RS256_HEADER = _b64(json.dumps({"alg": "RS256", "kid": "k"}).encode()).decode()


_WITH_BODY = ("POST", "PUT", "PATCH", "DELETE")


def _body(method: str, template: str, name: str) -> Carrier:
    def send(client: httpx.AsyncClient, world: World, document: bytes) -> Request:
        return Request(method, world.path(template), body=document, headers={"content-type": "application/json"})

    return Carrier(f"body:{name}", send)


def _page_token(template: str) -> Carrier:
    def send(client: httpx.AsyncClient, world: World, document: bytes) -> Request:
        return Request("GET", world.path(template) + "?pageToken=" + _b64(document).decode()[:60_000])

    return Carrier(f"page-token:{template}", send)


def _carriers() -> list[Carrier]:
    carriers = [_body(route.method, route.path, route.name) for route in ROUTES if route.method in _WITH_BODY]
    carriers += [
        Carrier(
            "bearer:header",
            lambda client, w, doc: Request(
                "GET",
                "/v1/session",
                headers={"Authorization": f"Bearer {_b64(doc).decode()}.{_b64(b'{}').decode()}.AAAA"},
            ),
        ),
        Carrier(
            "bearer:claims",
            lambda client, w, doc: Request(
                "GET",
                f"/v1/events/{w.event_id}/queue/position",
                headers={"Authorization": f"Bearer {_RS256_HEADER}.{_b64(doc).decode()}.AA"},
            ),
        ),
        Carrier(
            "cookie:session",
            lambda client, w, doc: Request("GET", "/v1/session", cookies={"bo_session": _signed_cookie("v1", doc)}),
        ),
        Carrier(
            "cookie:session-unsigned",
            lambda client, w, doc: Request(
                "GET", "/v1/session", cookies={"bo_session": f"v1.{DEV_SESSION_KID}.{_b64(doc).decode()}.AAAA"}
            ),
        ),
        Carrier(
            "cookie:place",
            lambda client, w, doc: Request(
                "GET", f"/v1/events/{w.event_id}/queue/position", cookies={"bo_place": _signed_cookie("p1", doc)}
            ),
        ),
        Carrier(
            "header:proof",
            lambda client, w, doc: Request(
                "POST",
                f"/v1/events/{w.event_id}/queue:join",
                body=b"{}",
                headers={"Boxoffice-Proof": _signed_cookie("v1", doc) + ":1", "content-type": "application/json"},
            ),
        ),
        Carrier(
            "webhook:signed-body",
            lambda client, w, doc: Request(
                "POST",
                "/v1/webhooks/payment-provider",
                body=doc,
                headers={w.signature_header: "t=1,v1=" + "0" * 64, "content-type": "application/json"},
            ),
        ),
        *(
            _page_token(path)
            for path in (
                "/v1/events/{event_id}/queue/proof",
                "/v1/events/{event_id}/fan-draw/proof",
                "/v1/events/{event_id}/tickets",
                "/v1/events",
            )
        ),
    ]
    return carriers


CARRIERS = _carriers()


@pytest.fixture(scope="module")
async def stack(stores: Stores) -> AsyncIterator[EdgeStack]:
    async with edge_stack(stores, prefix="edge-fuzz-json") as stack:
        yield stack


@pytest.fixture(scope="module")
async def world(stack: EdgeStack) -> World:
    async with stack.client() as fan:
        await sign_in(fan, "fuzzed-fan")
        session = fan.cookies["bo_session"]
    return World(
        event_id=await stack.event(),
        hold_id=str(uuid.uuid4()),
        payment_id=str(uuid.uuid4()),
        signature_header=stack.edge.config.webhook_signature_header,
        session=session,
    )


async def _send(stack: EdgeStack, world: World, carrier: Carrier, document: bytes) -> int:
    async with stack.client(cookies={"bo_session": world.session}) as client:
        request = carrier.send(client, world, document)
        if request.cookies:
            for name, value in request.cookies.items():
                client.cookies.set(name, value)
        reply = await client.request(request.method, request.path, content=request.body, headers=request.headers)
        return reply.status_code


@pytest.mark.parametrize("carrier", CARRIERS, ids=[c.name for c in CARRIERS])
async def test_every_extreme_document_in_every_carrier_answers_no_5xx(
    stack: EdgeStack, world: World, carrier: Carrier
) -> None:
    answers = {document[:40]: await _send(stack, world, carrier, document) for document in EXTREMES}
    assert all(status < 500 for status in answers.values()), answers


async def test_generated_documents_in_every_carrier_answer_no_5xx(stack: EdgeStack, world: World) -> None:
    """Generated combinations (Hypothesis, derandomized): a document of a
    generated shape in a generated carrier. Hypothesis runs in a worker
    thread; each request runs on the test's loop, where the edge serves."""
    loop = asyncio.get_running_loop()

    @settings(
        max_examples=30,
        derandomize=True,
        database=None,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )
    @given(document=_documents(), carrier=st.sampled_from(CARRIERS))
    def check(document: bytes, carrier: Carrier) -> None:
        status = asyncio.run_coroutine_threadsafe(_send(stack, world, carrier, document), loop).result(60)
        assert status < 500, (carrier.name, document[:80], status)

    await asyncio.to_thread(check)
