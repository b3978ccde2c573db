"""The door through the edge, on real servers (the edge, CheckInService and
the rest of the mesh, Postgres, Redis): gate devices by their key, the
public keys, the check-in list as newline-delimited JSON with its cursor,
offline uploads and a fan's rotating code.

- Who: no key is 401 DEVICE_KEY_MISSING; a fan's session or bearer token
  403 NOT_A_DEVICE; an unknown key 401 DEVICE_KEY_INVALID and another
  event's key 403 DEVICE_WRONG_EVENT (CheckInService decides those); none
  of them changes anything.
- Bad input is a clear 400 and changes nothing.
- The tickets route lists signed codes that the published keys verify; at
  a concert (rotating codes only) a gate admits the code the fan's page
  shows, made with the secret the fan's session fetches, and refuses the
  static one.
"""

from __future__ import annotations

import base64
import json
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import httpx
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from boxoffice import access, ticketcodes
from boxoffice.clock import SystemClock
from gen.boxoffice.checkin.v1 import checkin_service_pb2 as cpb
from gen.boxoffice.checkin.v1 import checkin_service_pb2_grpc as cpb_grpc
from tests.edge.fans import buy_tickets, expect, signed_in
from tests.edge.harness import EdgeStack, edge_stack
from tests.support import Stores


@dataclass
class Door:
    stack: EdgeStack
    event_id: int
    # A fan's client (session cookie) and their tickets.
    fan: httpx.AsyncClient
    tickets: list[dict[str, Any]]
    key: str
    second_key: str
    other_event_key: str


async def gate_device(stack: EdgeStack, event_id: int, name: str = "North gate") -> str:
    """A new gate device of ``event_id``, made as the operator makes it; its key."""
    admin = stack.operators["checkin"].stub(cpb_grpc.CheckInAdminServiceStub, role=access.OPERATOR)
    reply = await admin.CreateGateDevice(cpb.CreateGateDeviceRequest(event_id=event_id, name=name))
    return str(reply.key)


def device(key: str) -> dict[str, str]:
    return {"Authorization": f"Device {key}"}


@pytest.fixture(scope="module")
async def door(stores: Stores) -> AsyncIterator[Door]:
    async with edge_stack(stores, prefix="edge-checkin") as stack:
        event_id = await stack.event(seats=8, max_active=10)
        other = await stack.event(seats=2, max_active=10)
        async with signed_in(stack) as fan:
            tickets = await buy_tickets(fan, event_id, 4)
            yield Door(
                stack,
                event_id,
                fan,
                tickets,
                await gate_device(stack, event_id),
                await gate_device(stack, event_id, "South gate"),
                await gate_device(stack, other),
            )


def _public_keys(jwks: dict[str, Any]) -> dict[str, Ed25519PublicKey]:
    keys = {}
    for jwk in jwks["keys"]:
        assert (jwk["kty"], jwk["crv"], jwk["alg"], jwk["use"]) == ("OKP", "Ed25519", "EdDSA", "sig"), jwk
        raw = base64.urlsafe_b64decode(jwk["x"] + "=" * (-len(jwk["x"]) % 4))
        keys[jwk["kid"]] = Ed25519PublicKey.from_public_bytes(raw)
    return keys


async def test_the_keys_are_public_cacheable_and_verify_the_listed_codes(door: Door) -> None:
    path = f"/v1/events/{door.event_id}/checkin-keys"
    async with door.stack.client() as anyone:
        reply = await anyone.get(path)
        assert reply.status_code == 200, reply.text
        assert reply.headers["cache-control"].startswith("public, max-age=")
        again = await anyone.get(path, headers={"If-None-Match": reply.headers["etag"]})
        assert again.status_code == 304
        expect(await anyone.get(f"{path}?x=1"), 400, "INVALID_ARGUMENT", "INVALID_FIELD")
        expect(await anyone.get("/v1/events/zero/checkin-keys"), 400, "INVALID_ARGUMENT", "INVALID_FIELD")
    verifier = ticketcodes.TicketCodeVerifier(lambda: _public_keys(reply.json()), SystemClock())
    for ticket in door.tickets:
        # The tickets route lists each ticket's signed code.
        assert ticketcodes.looks_signed(ticket["code"]), ticket
        claims = verifier.verify(ticket["code"])
        assert (claims.ticket_id, claims.event_id, claims.seat_label) == (
            ticket["ticketId"],
            door.event_id,
            ticket["seatLabel"],
        )


async def _live(fan: httpx.AsyncClient, ticket: dict[str, Any], step_offset: int = 0) -> str:
    """The rotating code the fan's page shows now for ``ticket``."""
    reply = await fan.get(f"/v1/tickets/{ticket['ticketId']}/rotation")
    assert reply.status_code == 200, reply.text
    rotation = reply.json()
    step = ticketcodes.rotation_step(time.time()) + step_offset
    return ticketcodes.rotating_code(rotation["code"], base64.b64decode(rotation["secret"]), ticket["ticketId"], step)


async def _scan(door: Door, code: str, key: str | None = None, gate: str = "north-1") -> httpx.Response:
    async with door.stack.client() as gate_client:
        return await gate_client.post(
            f"/v1/events/{door.event_id}/checkins", json={"code": code, "gateId": gate}, headers=device(key or door.key)
        )


async def test_a_device_scans_a_ticket_in_once(door: Door) -> None:
    ticket = door.tickets[0]
    # A concert takes rotating codes only: the static code is refused as
    # the contract says (EXPIRED_CODE: ask for the live code).
    static = await _scan(door, ticket["code"])
    assert static.status_code == 200 and static.json()["result"] == "SCAN_RESULT_EXPIRED_CODE", static.text
    live = await _live(door.fan, ticket)
    first = await _scan(door, live)
    assert first.status_code == 200, first.text
    body = first.json()
    assert body["result"] == "SCAN_RESULT_ADMITTED", body
    assert body["ticket"]["ticketId"] == ticket["ticketId"] and body["ticket"]["seatLabel"] == ticket["seatLabel"]
    assert first.headers["cache-control"] == "private, no-store"
    again = (await _scan(door, await _live(door.fan, ticket), door.second_key, gate="south-2")).json()
    assert again["result"] == "SCAN_RESULT_ALREADY_CHECKED_IN", again
    assert again["firstCheckin"]["gateId"] == "north-1"
    # One byte of the signature changed: INVALID, a verdict, not an error.
    head, _, tail = live.partition(".")
    payload, _, rest = tail.partition(".")
    tampered = f"{head}.{payload}.{rest[:5]}{'B' if rest[5] == 'A' else 'A'}{rest[6:]}"
    assert (await _scan(door, tampered)).json()["result"] == "SCAN_RESULT_INVALID"


async def test_who_may_call_the_devices_routes(door: Door) -> None:
    ticket = door.tickets[1]
    code = await _live(door.fan, ticket)
    routes = (
        ("POST", f"/v1/events/{door.event_id}/checkins", {"code": code, "gateId": "north-1"}),
        ("GET", f"/v1/events/{door.event_id}/checkin-list", None),
        (
            "POST",
            f"/v1/events/{door.event_id}/checkins:upload",
            {"scans": [{"code": code, "gateId": "n", "scannedAt": datetime.now(UTC).isoformat()}]},
        ),
    )
    session = door.fan.cookies["bo_session"]
    for method, path, body in routes:
        async with door.stack.client() as anyone:

            async def call(method: str = method, path: str = path, body: Any = body, **kw: Any) -> httpx.Response:
                return await anyone.request(method, path, json=body, **kw)

            expect(await call(), 401, "UNAUTHENTICATED", "DEVICE_KEY_MISSING")
            expect(await call(headers={"Authorization": "Device"}), 401, "UNAUTHENTICATED", "DEVICE_KEY_MISSING")
            expect(await call(headers={"Authorization": "Bearer a.b.c"}), 403, "PERMISSION_DENIED", "NOT_A_DEVICE")
            expect(await call(cookies={"bo_session": session}), 403, "PERMISSION_DENIED", "NOT_A_DEVICE")
            unknown = device("bxd_" + "u" * 43)
            expect(await call(headers=unknown), 401, "UNAUTHENTICATED", "DEVICE_KEY_INVALID")
            expect(await call(headers=device("junk")), 401, "UNAUTHENTICATED", "DEVICE_KEY_INVALID")
            wrong = expect(
                await call(headers=device(door.other_event_key)), 403, "PERMISSION_DENIED", "DEVICE_WRONG_EVENT"
            )
            assert wrong.metadata["event_id"] == str(door.event_id)
    # None of them checked the ticket in.
    assert (await _scan(door, await _live(door.fan, ticket))).json()["result"] == "SCAN_RESULT_ADMITTED"


async def test_bad_input_is_a_clear_400(door: Door) -> None:
    code = await _live(door.fan, door.tickets[2])
    path = f"/v1/events/{door.event_id}/checkins"
    async with door.stack.client(headers=device(door.key)) as gate_client:
        cases = (
            ({"code": code, "gateId": "n", "eventId": "5"}, "INVALID_FIELD"),
            ({"code": code, "gateId": "n", "colour": "red"}, "MALFORMED_JSON"),
            ({"code": code}, "FIELD_REQUIRED"),
            ({"code": code, "gateId": "no spaces"}, "INVALID_FIELD"),
        )
        for body, reason in cases:
            expect(await gate_client.post(path, json=body), 400, "INVALID_ARGUMENT", reason)
        expect(await gate_client.post(path, content=b"{"), 400, "INVALID_ARGUMENT", "MALFORMED_JSON")
        expect(await gate_client.post("/v1/events/-1/checkins", json={}), 400, "INVALID_ARGUMENT", "INVALID_FIELD")
        listing = f"/v1/events/{door.event_id}/checkin-list"
        expect(await gate_client.get(f"{listing}?page=2"), 400, "INVALID_ARGUMENT", "INVALID_FIELD")
        scan = {"code": code, "gateId": "n", "scannedAt": datetime.now(UTC).isoformat()}
        too_many = {"scans": [scan] * 10_001}
        expect(await gate_client.post(f"{path}:upload", json=too_many), 400, "INVALID_ARGUMENT", "INVALID_FIELD")
    # Nothing was checked in.
    assert (await _scan(door, await _live(door.fan, door.tickets[2]))).json()["result"] == "SCAN_RESULT_ADMITTED"


async def _list(door: Door, since: str = "") -> tuple[list[dict[str, Any]], str]:
    params = {"since": since} if since else {}
    async with door.stack.client(headers=device(door.key)) as gate_client:
        reply = await gate_client.get(f"/v1/events/{door.event_id}/checkin-list", params=params)
    assert reply.status_code == 200, reply.text
    assert reply.headers["content-type"].startswith("application/x-ndjson")
    lines = [json.loads(line) for line in reply.text.splitlines()]
    assert lines and all("error" not in line for line in lines), reply.text
    assert all(not line["cursor"] for line in lines[:-1]) and lines[-1]["cursor"], lines
    return [entry for line in lines for entry in line["entries"]], lines[-1]["cursor"]


async def test_the_check_in_list_streams_and_resumes_from_its_cursor(door: Door) -> None:
    entries, cursor = await _list(door)
    mine = {ticket["ticketId"] for ticket in door.tickets}
    assert mine <= {entry["ticket"]["ticketId"] for entry in entries}
    ticket = door.tickets[3]
    assert (await _scan(door, await _live(door.fan, ticket), gate="east-3")).json()["result"] == "SCAN_RESULT_ADMITTED"
    changed, later = await _list(door, cursor)
    # The changes since the cursor (the store may repeat a few from just
    # before it, never miss one): the ticket just checked in is among them.
    (scanned,) = [e for e in changed if e["ticket"]["ticketId"] == ticket["ticketId"]]
    assert scanned["firstCheckin"]["gateId"] == "east-3" and scanned["inside"] is True, scanned
    assert all(e["ticket"]["eventId"] == str(door.event_id) for e in changed)
    assert later


async def test_a_fans_rotating_code_scans_and_is_theirs_alone(door: Door) -> None:
    async with signed_in(door.stack) as owner:
        (ticket,) = await buy_tickets(owner, door.event_id, 1)
        path = f"/v1/tickets/{ticket['ticketId']}/rotation"
        reply = await owner.get(path)
    assert reply.status_code == 200, reply.text
    rotation = reply.json()
    assert rotation["code"] == ticket["code"] and rotation["stepSeconds"] == 30
    secret = base64.b64decode(rotation["secret"])
    async with signed_in(door.stack) as stranger:
        expect(await stranger.get(path), 404, "NOT_FOUND", "NOT_FOUND")
        expect(await stranger.get(f"/v1/tickets/{uuid.uuid4()}/rotation"), 404, "NOT_FOUND", "NOT_FOUND")
    async with door.stack.client() as anyone:
        expect(await anyone.get(path), 401, "UNAUTHENTICATED", "NOT_SIGNED_IN")
    step = ticketcodes.rotation_step(time.time())
    old = ticketcodes.rotating_code(ticket["code"], secret, ticket["ticketId"], step - 2)
    assert (await _scan(door, old)).json()["result"] == "SCAN_RESULT_EXPIRED_CODE"
    now = ticketcodes.rotating_code(ticket["code"], secret, ticket["ticketId"], step)
    assert (await _scan(door, now)).json()["result"] == "SCAN_RESULT_ADMITTED"


async def test_an_offline_upload_records_the_conflict_with_an_online_scan(door: Door) -> None:
    async with signed_in(door.stack) as owner:
        (ticket,) = await buy_tickets(owner, door.event_id, 1)
        offline_code = await _live(owner, ticket)
        offline_at = datetime.now(UTC).isoformat()
        online = await _scan(door, await _live(owner, ticket), door.second_key, gate="south-2")
    assert online.json()["result"] == "SCAN_RESULT_ADMITTED", online.text
    scans = {"scans": [{"code": offline_code, "gateId": "north-1", "scannedAt": offline_at}]}
    async with door.stack.client(headers=device(door.key)) as gate_client:
        reply = await gate_client.post(f"/v1/events/{door.event_id}/checkins:upload", json=scans)
    assert reply.status_code == 200, reply.text
    body = reply.json()
    assert body["conflicts"] == 1, body
    (uploaded,) = body["scans"]
    assert uploaded["conflict"] is True and uploaded["result"] == "SCAN_RESULT_ALREADY_CHECKED_IN", uploaded
