"""Every error path of the edge, through HTTP only against every role
running: the HTTP status, Google's JSON error with the right ErrorInfo
reason, and nothing changed by a refused request (the fan is not queued,
no hold is made, another fan's hold is as it was). Request ids and trace
context; per-IP and per-account rate limits on a stack with low limits."""

from __future__ import annotations

import ipaddress
import logging
import re
import uuid
from collections.abc import AsyncIterator

import httpx
import pytest

from tests.edge.fans import (
    ACCESS_HEADER,
    NOT_IN_QUEUE,
    admit,
    expect,
    hold,
    problem,
    signed_in,
    state_of,
)
from tests.edge.harness import EdgeStack, edge_stack
from tests.support import Stores


@pytest.fixture(scope="module")
async def stack(stores: Stores) -> AsyncIterator[EdgeStack]:
    async with edge_stack(stores, prefix="edge-errors") as stack:
        yield stack


@pytest.fixture
async def fan(stack: EdgeStack) -> AsyncIterator[httpx.AsyncClient]:
    async with signed_in(stack) as client:
        yield client


@pytest.fixture
async def event_id(stack: EdgeStack) -> int:
    return await stack.event(seats=4, max_active=10)


# -- bodies ---------------------------------------------------------------


async def test_malformed_json_is_refused_and_changes_nothing(fan: httpx.AsyncClient, event_id: int) -> None:
    for body in (b"{not json", b"[1, 2]", b'"a string"', b"\xff\xfe", b'{"a":' * 2000):
        reply = await fan.post(
            f"/v1/events/{event_id}/queue:join", content=body, headers={"content-type": "application/json"}
        )
        expect(reply, 400, "INVALID_ARGUMENT", "MALFORMED_JSON")
    assert await state_of(fan, event_id) == NOT_IN_QUEUE


async def test_unknown_field_is_refused(fan: httpx.AsyncClient, event_id: int) -> None:
    reply = await fan.post(f"/v1/events/{event_id}/queue:join", json={"vipLane": True})
    found = expect(reply, 400, "INVALID_ARGUMENT", "MALFORMED_JSON")
    assert "vipLane" in found.metadata["detail"]
    assert await state_of(fan, event_id) == NOT_IN_QUEUE


@pytest.mark.parametrize(
    "field,value",
    [("customerId", "someone-else"), ("clientId", "10.0.0.1"), ("eventId", "5")],
)
async def test_a_field_the_edge_sets_is_refused_in_a_join(
    fan: httpx.AsyncClient, event_id: int, field: str, value: str
) -> None:
    reply = await fan.post(f"/v1/events/{event_id}/queue:join", json={field: value})
    found = expect(reply, 400, "INVALID_ARGUMENT", "INVALID_FIELD")
    assert found.metadata == {"field": field}
    assert await state_of(fan, event_id) == NOT_IN_QUEUE


async def test_a_field_the_edge_sets_is_refused_in_a_hold_and_a_payment(fan: httpx.AsyncClient, event_id: int) -> None:
    token = await admit(fan, event_id)
    reply = await fan.post(
        f"/v1/events/{event_id}/holds",
        json={"accessToken": token, "bestAvailable": {"sectionId": "A", "quantity": 1}},
    )
    assert expect(reply, 400, "INVALID_ARGUMENT", "INVALID_FIELD").metadata == {"field": "accessToken"}
    made = await hold(fan, event_id)
    for body in ({"holdId": str(uuid.uuid4()), "paymentMethod": "pm_card_ok"}, {"accessToken": token}):
        reply = await fan.post(f"/v1/holds/{made['holdId']}/payment", json=body)
        assert expect(reply, 400, "INVALID_ARGUMENT", "INVALID_FIELD").metadata == {"field": next(iter(body))}
    # The one hold made is the only one, and it is still unpaid.
    got = await fan.get(f"/v1/holds/{made['holdId']}")
    assert got.json()["hold"]["state"] == "HOLD_STATE_HELD" and got.json()["hold"]["paymentId"] == ""


async def test_body_too_large(stack: EdgeStack, fan: httpx.AsyncClient, event_id: int) -> None:
    limit = stack.edge.config.max_body_bytes
    big = b'{"requestId": "' + b"x" * limit + b'"}'
    reply = await fan.post(
        f"/v1/events/{event_id}/queue:join", content=big, headers={"content-type": "application/json"}
    )
    assert expect(reply, 400, "INVALID_ARGUMENT", "BODY_TOO_LARGE").metadata == {"limit_bytes": str(limit)}

    async def chunks() -> AsyncIterator[bytes]:
        # No Content-Length: the limit holds on what arrives.
        for _ in range(limit // 4096 + 2):
            yield b" " * 4096

    reply = await fan.post(f"/v1/events/{event_id}/queue:join", content=chunks())
    expect(reply, 400, "INVALID_ARGUMENT", "BODY_TOO_LARGE")
    assert await state_of(fan, event_id) == NOT_IN_QUEUE


# -- paths, methods, headers ------------------------------------------------


@pytest.mark.parametrize(
    "bad",
    # Unicode digits are digits to str.isdigit: "١٢٣" is not another spelling of 123, "²" is no number.
    ["abc", "0", "-1", "1.5", "99999999999999999999", "9223372036854775808", "%20", "%C2%B2", "%D9%A1%D9%A2%D9%A3"],
)
async def test_event_id_must_be_a_positive_64_bit_number(fan: httpx.AsyncClient, bad: str) -> None:
    for method, path in (
        ("GET", f"/v1/events/{bad}"),
        ("GET", f"/v1/events/{bad}/seatmap"),
        ("GET", f"/v1/events/{bad}/queue/progress"),
        ("POST", f"/v1/events/{bad}/queue:join"),
        ("GET", f"/v1/events/{bad}/queue/position"),
    ):
        reply = await fan.request(method, path, json={} if method == "POST" else None)
        found = expect(reply, 400, "INVALID_ARGUMENT", "INVALID_FIELD")
        assert found.metadata == {"field": "event_id"}, (method, path)


@pytest.mark.parametrize("bad", ["x", "-1", "1001", "%C2%B2", "%D9%A1"])
async def test_page_size_must_be_a_small_number(fan: httpx.AsyncClient, event_id: int, bad: str) -> None:
    reply = await fan.get(f"/v1/events/{event_id}/tickets?pageSize={bad}")
    assert expect(reply, 400, "INVALID_ARGUMENT", "INVALID_FIELD").metadata["field"] == "pageSize"


async def test_unknown_event(fan: httpx.AsyncClient) -> None:
    missing = 2**63 - 1
    expect(await fan.get(f"/v1/events/{missing}"), 404, "NOT_FOUND", "EVENT_NOT_FOUND")
    expect(await fan.post(f"/v1/events/{missing}/queue:join", json={}), 404, "NOT_FOUND", "EVENT_NOT_FOUND")
    expect(await fan.get(f"/v1/events/{missing}/queue/progress"), 404, "NOT_FOUND", "EVENT_NOT_FOUND")


async def test_unknown_route(stack: EdgeStack) -> None:
    async with stack.client() as client:
        for path in ("/v1/nothing", "/v1/event", "/v1/events/1/", "/v1/holds", "/index.html", "/v2/session"):
            found = expect(await client.get(path), 404, "NOT_FOUND", "ROUTE_NOT_FOUND")
            assert found.metadata == {"path": path}


async def test_wrong_method_answers_405_with_allow(stack: EdgeStack) -> None:
    async with stack.client() as client:
        for method, path, allow in (
            # HEAD is answered wherever GET is, so Allow names it too.
            ("PUT", "/v1/session", "DELETE, GET, HEAD, POST"),
            ("DELETE", "/v1/events/1", "GET, HEAD"),
            ("POST", "/v1/holds/abc", "DELETE, GET, HEAD"),
            ("GET", "/v1/webhooks/payment-provider", "POST"),
            ("PATCH", "/v1/events/1/holds", "POST"),
        ):
            reply = await client.request(method, path)
            found = expect(reply, 405, "UNIMPLEMENTED", "METHOD_NOT_ALLOWED")
            assert reply.headers["allow"] == allow and found.metadata == {"allow": allow}
        head = await client.head("/healthz")
        assert head.status_code == 200 and head.content == b""


@pytest.mark.parametrize("bad", ["abc", "0", "-1", "nan", "", "1s"])
async def test_bad_server_timeout_header(fan: httpx.AsyncClient, event_id: int, bad: str) -> None:
    reply = await fan.post(f"/v1/events/{event_id}/queue:join", json={}, headers={"X-Server-Timeout": bad})
    found = expect(reply, 400, "INVALID_ARGUMENT", "INVALID_HEADER")
    assert found.metadata == {"header": "X-Server-Timeout"}
    assert await state_of(fan, event_id) == NOT_IN_QUEUE


async def test_a_deadline_already_past_answers_504_and_changes_nothing(fan: httpx.AsyncClient, event_id: int) -> None:
    # A microsecond is over before the edge calls the waiting room, whatever the machine.
    reply = await fan.post(f"/v1/events/{event_id}/queue:join", json={}, headers={"X-Server-Timeout": "0.000001"})
    expect(reply, 504, "DEADLINE_EXCEEDED", "DEADLINE_EXCEEDED")
    assert await state_of(fan, event_id) == NOT_IN_QUEUE
    # A stated deadline that leaves time works.
    ok = await fan.post(f"/v1/events/{event_id}/queue:join", json={}, headers={"X-Server-Timeout": "5.5"})
    assert ok.status_code == 200, ok.text


async def test_missing_idempotency_key(fan: httpx.AsyncClient) -> None:
    reply = await fan.post(f"/v1/payments/{uuid.uuid4()}:confirm")
    found = expect(reply, 400, "INVALID_ARGUMENT", "FIELD_REQUIRED")
    assert found.metadata == {"field": "Idempotency-Key"}


async def test_no_access_token_on_shopper_routes(fan: httpx.AsyncClient, event_id: int) -> None:
    hold_id = str(uuid.uuid4())
    for method, path in (
        ("POST", f"/v1/events/{event_id}/holds"),
        ("GET", f"/v1/holds/{hold_id}"),
        ("DELETE", f"/v1/holds/{hold_id}"),
        ("POST", f"/v1/holds/{hold_id}/payment"),
    ):
        reply = await fan.request(method, path, json={} if method == "POST" else None)
        expect(reply, 401, "UNAUTHENTICATED", "TOKEN_MISSING")


async def test_not_signed_in(stack: EdgeStack, event_id: int) -> None:
    async with stack.client() as anonymous:
        expect(
            await anonymous.post(f"/v1/events/{event_id}/queue:join", json={}), 401, "UNAUTHENTICATED", "NOT_SIGNED_IN"
        )
        expect(await anonymous.get("/v1/session"), 401, "UNAUTHENTICATED", "NOT_SIGNED_IN")


# -- what the services refuse -------------------------------------------------


async def test_seat_unavailable_names_the_seats_and_leaves_the_holder_alone(stack: EdgeStack) -> None:
    event_id = await stack.event(seats=4, max_active=10)
    async with signed_in(stack) as holder, signed_in(stack) as other:
        await admit(holder, event_id)
        await admit(other, event_id)
        held = await hold(holder, event_id)
        seat_id = held["seats"][0]["seatId"]
        reply = await other.post(f"/v1/events/{event_id}/holds", json={"seats": {"seatIds": [seat_id]}})
        found = expect(reply, 400, "FAILED_PRECONDITION", "SEAT_UNAVAILABLE")
        assert seat_id in found.metadata["seat_ids"]
        assert "retry-after" not in reply.headers
        mine = (await holder.get(f"/v1/holds/{held['holdId']}")).json()["hold"]
        assert mine["state"] == "HOLD_STATE_HELD" and [s["seatId"] for s in mine["seats"]] == [seat_id]


async def test_sold_out_and_not_enough_seats_answer_429_without_retry_after(stack: EdgeStack) -> None:
    """Coming back later does not cure them (docs/errors.md: SOLD_OUT is not
    retried, NOT_ENOUGH_SEATS asks for fewer): no Retry-After invites it."""
    event_id = await stack.event(seats=3, max_active=10)
    async with signed_in(stack) as first, signed_in(stack) as second:
        await admit(first, event_id)
        await admit(second, event_id)
        await hold(first, event_id, 2)
        reply = await second.post(
            f"/v1/events/{event_id}/holds", json={"bestAvailable": {"sectionId": "A", "quantity": 2}}
        )
        found = expect(reply, 429, "RESOURCE_EXHAUSTED", "NOT_ENOUGH_SEATS")
        assert found.metadata["available"] == "1"
        assert "retry-after" not in reply.headers
        await hold(second, event_id, 1)
        async with signed_in(stack) as third:
            await admit(third, event_id)
            reply = await third.post(
                f"/v1/events/{event_id}/holds", json={"bestAvailable": {"sectionId": "A", "quantity": 1}}
            )
            expect(reply, 429, "RESOURCE_EXHAUSTED", "SOLD_OUT")
            assert "retry-after" not in reply.headers


async def test_another_fans_token_is_refused(stack: EdgeStack) -> None:
    event_id = await stack.event(seats=4, max_active=10)
    async with signed_in(stack) as owner, signed_in(stack) as thief:
        token = await admit(owner, event_id)
        reply = await thief.post(
            f"/v1/events/{event_id}/holds",
            json={"bestAvailable": {"sectionId": "A", "quantity": 1}},
            headers={ACCESS_HEADER: token},
        )
        found = problem(reply)
        assert (found.status, found.reason) in ((403, "CUSTOMER_MISMATCH"), (404, "NOT_FOUND")), found
        # The owner can still hold all four seats: the refused call held none.
        assert len((await hold(owner, event_id, 4))["seats"]) == 4


# -- request ids and trace context ---------------------------------------------


async def test_request_id_is_echoed_or_created(stack: EdgeStack) -> None:
    async with stack.client() as client:
        given = await client.get("/healthz", headers={"X-Request-Id": "req-123.abc:9"})
        assert given.headers["x-request-id"] == "req-123.abc:9"
        created = await client.get("/healthz")
        assert re.fullmatch(r"[0-9a-f]{32}", created.headers["x-request-id"])
        refused = await client.get("/healthz", headers={"X-Request-Id": "not allowed!" + "x" * 200})
        assert re.fullmatch(r"[0-9a-f]{32}", refused.headers["x-request-id"])
        error = await client.get("/v1/nothing", headers={"X-Request-Id": "err-1"})
        assert error.status_code == 404 and error.headers["x-request-id"] == "err-1"


async def test_traceparent_is_accepted_and_carried(
    stack: EdgeStack, fan: httpx.AsyncClient, event_id: int, caplog: pytest.LogCaptureFixture
) -> None:
    trace_id = uuid.uuid4().hex
    traceparent = f"00-{trace_id}-{uuid.uuid4().hex[:16]}-01"
    ok = await fan.post(f"/v1/events/{event_id}/queue:join", json={}, headers={"traceparent": traceparent})
    assert ok.status_code == 200, ok.text
    # A malformed one is replaced, never refused.
    ok = await fan.get(f"/v1/events/{event_id}/queue/position", headers={"traceparent": "00-zz-zz-01"})
    assert ok.status_code == 200, ok.text
    # The edge logs a refused request with the caller's trace id.
    with caplog.at_level(logging.INFO, logger="boxoffice.edge.http"):
        bad = await fan.post(
            f"/v1/events/{event_id}/queue:join",
            json={"customerId": "x"},
            headers={"traceparent": traceparent, "X-Request-Id": "traced-1"},
        )
    expect(bad, 400, "INVALID_ARGUMENT", "INVALID_FIELD")
    assert _logged_trace(caplog, "traced-1") == trace_id
    # A later version is read for its trace id (W3C Trace Context, "versioning");
    # version ff and a version 00 with more fields are not trace context.
    span = uuid.uuid4().hex[:16]
    for n, (given, kept) in enumerate(
        (
            (f"cc-{trace_id}-{span}-09-more-fields", True),
            (f"ff-{trace_id}-{span}-01", False),
            (f"00-{trace_id}-{span}-01-extra", False),
            (f"00-{trace_id.upper()}-{span}-01", False),
        )
    ):
        with caplog.at_level(logging.INFO, logger="boxoffice.edge.http"):
            reply = await fan.post(
                f"/v1/events/{event_id}/queue:join",
                json={"customerId": "x"},
                headers={"traceparent": given, "X-Request-Id": f"traced-v{n}"},
            )
        expect(reply, 400, "INVALID_ARGUMENT", "INVALID_FIELD")
        assert (_logged_trace(caplog, f"traced-v{n}") == trace_id) is kept, given


def _logged_trace(caplog: pytest.LogCaptureFixture, request_id: str) -> str:
    logged = [r for r in caplog.records if getattr(r, "request_id", None) == request_id]
    assert logged, request_id
    trace_id: str = logged[0].__dict__["trace_id"]
    return trace_id


# -- rate limits ---------------------------------------------------------------


@pytest.fixture(scope="module")
async def strict(stores: Stores) -> AsyncIterator[EdgeStack]:
    """An edge behind a trusted proxy (loopback) with low limits: three
    requests at once per address and per account, then one per 100 s. Its
    checks wait for Redis as long as a request may take: with production's
    quarter of a second, a check that a busy machine answered late let the
    request in (as it should: the limit fails open), and the test saw no 429."""
    settings: dict[str, object] = {
        "trusted_proxies": (ipaddress.ip_network("127.0.0.1/32"),),
        "ip_rate_per_second": 0.01,
        "ip_burst": 3,
        "account_rate_per_second": 0.01,
        "account_burst": 3,
        "rate_limit_timeout_seconds": 10.0,
    }
    async with edge_stack(stores, settings=settings, prefix="edge-limits") as stack:
        yield stack


def _from(address: str) -> dict[str, str]:
    return {"X-Forwarded-For": f"203.0.113.9, {address}"}


async def test_per_address_limit(strict: EdgeStack) -> None:
    address = f"10.{uuid.uuid4().int % 250}.{uuid.uuid4().int % 250}.1"
    async with strict.client() as client:
        for _ in range(3):
            assert (await client.post("/v1/session", json={"name": "a"}, headers=_from(address))).status_code == 200
        client.cookies.clear()
        reply = await client.post("/v1/session", json={"name": "a"}, headers=_from(address))
        found = expect(reply, 429, "RESOURCE_EXHAUSTED", "TOO_MANY_REQUESTS")
        assert found.metadata["scope"] == "ip"
        assert int(reply.headers["retry-after"]) == int(found.metadata["retry_after_seconds"]) >= 1
        # Refused: no session was handed out.
        assert "set-cookie" not in reply.headers and not client.cookies.get("bo_session")
        # Another address is not limited by this one.
        other = address.rsplit(".", 1)[0] + ".2"
        assert (await client.post("/v1/session", json={"name": "a"}, headers=_from(other))).status_code == 200


async def test_per_account_limit(strict: EdgeStack) -> None:
    base = f"10.{uuid.uuid4().int % 250}.{uuid.uuid4().int % 250}"
    event_id = await strict.event()
    async with strict.client() as client:
        name = f"limited-{uuid.uuid4().hex[:8]}"
        assert (await client.post("/v1/session", json={"name": name}, headers=_from(f"{base}.1"))).status_code == 200
        # Each request from a new address: only the account's limit applies.
        for n in range(3):
            assert (await client.get("/v1/session", headers=_from(f"{base}.{10 + n}"))).status_code == 200
        reply = await client.post(f"/v1/events/{event_id}/queue:join", json={}, headers=_from(f"{base}.20"))
        found = expect(reply, 429, "RESOURCE_EXHAUSTED", "TOO_MANY_REQUESTS")
        assert found.metadata["scope"] == "account"
        assert int(reply.headers["retry-after"]) >= 1
        # Another account from the same addresses is not limited by this one.
        async with strict.client() as other:
            assert (
                await other.post("/v1/session", json={"name": name + "-b"}, headers=_from(f"{base}.2"))
            ).status_code == 200
            assert await state_of(other, event_id, headers=_from(f"{base}.21")) == NOT_IN_QUEUE
