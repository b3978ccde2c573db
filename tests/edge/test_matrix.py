"""The HTTP authorization matrix: every route of edge_svc.routes.ROUTES,
called through HTTP as every kind of caller, answers as the route's ``who``
says, and what a caller may not do changes nothing.

Callers: ``anonymous``; the ``provider`` (a genuine webhook signature with
no session); a signed-in ``fan`` with no access token; an ``intruder``, a
signed-in fan presenting the owner's access token; and the ``owner`` of
what the route reads or changes (signed in, with their own access token).

- PUBLIC and OPERATIONS routes answer everyone alike.
- FAN routes answer 401 NOT_SIGNED_IN without a session; another fan's
  payment answers 404 as one that does not exist.
- SHOPPER routes answer 401 without a session or a token, and another fan's
  token answers 403 CUSTOMER_MISMATCH or 404, never the owner's data.
- PROVIDER: no signature or a forged one answers 401 and records nothing.
- A FAN route that needs a thing of the caller's own (the waiting list's
  join: a place in the queue) answers fans without one as it says (403).
- DEVICE: no key answers 401 DEVICE_KEY_MISSING, a fan's session (even with
  an access token) 403 NOT_A_DEVICE; the owner is a gate device of the
  event, by its key. Another event's device key is 403 DEVICE_WRONG_EVENT.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import httpx
import psycopg
import pytest

from boxoffice import access, secrets
from edge_svc.routes import ROUTES, Route, Who
from gen.boxoffice.booking.v1 import booking_service_pb2 as bpb
from gen.boxoffice.booking.v1 import booking_service_pb2_grpc as bpb_grpc
from gen.boxoffice.checkin.v1 import checkin_service_pb2 as cpb
from gen.boxoffice.checkin.v1 import checkin_service_pb2_grpc as cpb_grpc
from gen.boxoffice.queue.v1 import queue_admin_service_pb2 as apb
from gen.boxoffice.queue.v1 import queue_admin_service_pb2_grpc as apb_grpc
from payment_svc.webhooks import signature_header
from tests.edge.fans import ACCESS_HEADER, admit, hold, problem, signed_in
from tests.edge.harness import EdgeStack, edge_stack
from tests.edge.waitlists import still_waiting, waiter
from tests.support import Stores

CALLERS = ("anonymous", "provider", "fan", "intruder", "owner")


@dataclass
class Fan:
    name: str
    session: str
    token: str = ""


@dataclass
class World:
    """One event and the fans and things the matrix calls about."""

    stack: EdgeStack
    event_id: int
    # owner: holds; payer: a settled payment; leaver: queued only.
    owner: Fan
    payer: Fan
    leaver: Fan
    fan: Fan
    intruder: Fan
    holds: dict[str, str]
    payment_id: str
    signature_header: str
    # canceller: a paid booking of their own to cancel (refunded in full).
    canceller: Fan
    booking_id: str
    # The payer's tickets: one for the door (its code is scanned, so no
    # transfer case may touch it), one to transfer, one whose pending transfer
    # the leaver claims (with its link's secret), one whose transfer is
    # cancelled; and keys of gate devices of this event and another.
    ticket_id: str
    ticket_code: str
    device_key: str
    other_device_key: str
    transfer_ticket_id: str
    claimable_transfer_id: str
    claim_secret: str
    cancellable_transfer_id: str
    # A sold-out event; the waiter has a place in its queue and on its list.
    waitlist_event_id: int
    waiter: Fan


async def _tickets(client: httpx.AsyncClient, event_id: int, count: int) -> list[dict[str, Any]]:
    """The fan's tickets of the event, once the issuer has issued ``count``."""
    for _ in range(200):
        reply = await client.get(f"/v1/events/{event_id}/tickets")
        assert reply.status_code == 200, reply.text
        tickets: list[dict[str, Any]] = reply.json().get("tickets", [])
        if len(tickets) >= count:
            return tickets
        await asyncio.sleep(0.05)
    raise AssertionError(f"the issuer issued no {count} tickets")


async def _claim_secret(stores: Stores, transfer_id: str) -> str:
    async with await psycopg.AsyncConnection.connect(stores.database_url) as conn:
        cur = await conn.execute("SELECT claim_secret FROM ticket_transfers WHERE transfer_id = %s", (transfer_id,))
        row = await cur.fetchone()
    assert row is not None
    return str(row[0])


@pytest.fixture(scope="module")
async def world(stores: Stores) -> AsyncIterator[World]:
    async with edge_stack(stores, prefix="edge-matrix") as stack:
        event_id = await stack.event(seats=9, max_active=10, refund_percent=100)
        await _with_a_fan_draw(stack, event_id)

        async def fan(prefix: str, *, admitted: bool, joined: bool = False) -> tuple[Fan, httpx.AsyncClient]:
            name = f"{prefix}-{uuid.uuid4().hex[:8]}"
            async with signed_in(stack, name) as client:
                found = Fan(name, client.cookies["bo_session"])
                if admitted:
                    found.token = await admit(client, event_id)
                elif joined:
                    assert (await client.post(f"/v1/events/{event_id}/queue:join", json={})).status_code == 200
            return found, stack.client(cookies={"bo_session": found.session, "bo_access": found.token})

        owner, owner_client = await fan("owner", admitted=True)
        payer, payer_client = await fan("payer", admitted=True)
        leaver, _ = await fan("leaver", admitted=False, joined=True)
        plain, _ = await fan("fan", admitted=False)
        intruder, _ = await fan("intruder", admitted=True)
        canceller, canceller_client = await fan("canceller", admitted=True)
        async with owner_client, payer_client, canceller_client:
            holds = {use: (await hold(owner_client, event_id))["holdId"] for use in ("get", "release", "start")}
            paid = (await hold(payer_client, event_id, quantity=4))["holdId"]
            started = await payer_client.post(f"/v1/holds/{paid}/payment", json={"paymentMethod": "pm_card_ok"})
            assert started.status_code == 200, started.text
            payment_id = started.json()["payment"]["paymentId"]
            confirmed = await payer_client.post(
                f"/v1/payments/{payment_id}:confirm", headers={"Idempotency-Key": "matrix-key"}
            )
            assert confirmed.json()["payment"]["state"] == "PAYMENT_STATE_SUCCEEDED", confirmed.text
            booking_id = (await hold(canceller_client, event_id))["holdId"]
            started = await canceller_client.post(
                f"/v1/holds/{booking_id}/payment", json={"paymentMethod": "pm_card_ok"}
            )
            paid_for = await canceller_client.post(
                f"/v1/payments/{started.json()['payment']['paymentId']}:confirm",
                headers={"Idempotency-Key": "matrix-key"},
            )
            assert paid_for.json()["payment"]["state"] == "PAYMENT_STATE_SUCCEEDED", paid_for.text
            door, to_transfer, to_claim, to_cancel = await _tickets(payer_client, event_id, 4)
            transfers = []
            for ticket in (to_claim, to_cancel):
                made = await payer_client.post(
                    f"/v1/tickets/{ticket['ticketId']}:transfer", json={"email": "friend@example.org"}
                )
                assert made.status_code == 200, made.text
                transfers.append(made.json()["transfer"]["transferId"])
        waitlist_event_id, waiter_name, waiter_session = await waiter(stack)
        gates = stack.operators["checkin"].stub(cpb_grpc.CheckInAdminServiceStub, role=access.OPERATOR)
        other_event = await stack.event(seats=1, max_active=1)
        keys = [
            (await gates.CreateGateDevice(cpb.CreateGateDeviceRequest(event_id=e, name="matrix"))).key
            for e in (event_id, other_event)
        ]
        yield World(
            stack,
            event_id,
            owner,
            payer,
            leaver,
            plain,
            intruder,
            holds,
            payment_id,
            stack.edge.config.webhook_signature_header,
            canceller,
            booking_id,
            door["ticketId"],
            door["code"],
            device_key=keys[0],
            other_device_key=keys[1],
            transfer_ticket_id=to_transfer["ticketId"],
            claimable_transfer_id=transfers[0],
            claim_secret=await _claim_secret(stores, transfers[0]),
            cancellable_transfer_id=transfers[1],
            waitlist_event_id=waitlist_event_id,
            waiter=Fan(waiter_name, waiter_session),
        )


async def _with_a_fan_draw(stack: EdgeStack, event_id: int) -> None:
    """A presale lane by code and a verified-fan draw for it, open for an hour."""
    admin = stack.operators["queue"].stub(apb_grpc.QueueAdminServiceStub, role=access.OPERATOR)
    room = (await admin.GetWaitingRoom(apb.GetWaitingRoomRequest(event_id=event_id))).config
    room.lanes.add(name="presale", entry=apb.WAITING_ROOM_LANE_ENTRY_CODE, share_percent=20)
    await admin.UpdateWaitingRoom(apb.UpdateWaitingRoomRequest(config=room))
    draw = apb.CreateFanDrawRequest(event_id=event_id, lane="presale", winners=10)
    draw.closes_at.FromSeconds(int(time.time()) + 3600)
    await admin.CreateFanDraw(draw)


@dataclass(frozen=True)
class Case:
    """How the matrix calls one route."""

    # Path parameters from the world.
    params: Callable[[World], Mapping[str, str]] = lambda w: {}
    body: Callable[[World], Any] = lambda w: None
    # A body that depends on the caller (a secret only the owner knows).
    body_as: Callable[[World, str], Any] | None = None
    headers: Mapping[str, str] = field(default_factory=dict)
    # Whose the route's thing is (a World attribute).
    owner: str = "owner"
    # A FAN route about one fan's thing: other fans get 404.
    owned: bool = False
    # A FAN route needing a thing of the caller's own: other fans' (status, reason).
    others: tuple[int, str] | None = None
    # Checked after every other caller and before the owner: nothing changed.
    unchanged: Callable[[World, httpx.AsyncClient], Awaitable[None]] | None = None
    # What the route changes, read before the first caller and again before
    # the owner: the same (what only the owner may change).
    state: Callable[[World], Awaitable[object]] | None = None
    # What a PUBLIC or OPERATIONS route answers everyone.
    status: int = 200
    # The route ends the session it is called with (sign-out): each caller
    # calls it with a fresh session of its fan, not the world's.
    ends_session: bool = False
    # The owner calls as the event's gate device (its key), not as a fan.
    device: bool = False


def _event(w: World) -> Mapping[str, str]:
    return {"event_id": str(w.event_id)}


def _hold(use: str) -> Callable[[World], Mapping[str, str]]:
    return lambda w: {"hold_id": w.holds[use]}


def _payment(w: World) -> Mapping[str, str]:
    return {"payment_id": w.payment_id}


def _webhook_body(w: World) -> dict[str, Any]:
    return {
        "id": f"evt_matrix_{uuid.uuid4().hex}",
        "type": "charge.failed",
        "created": int(time.time()),
        "data": {"id": "ch_matrix", "status": "failed", "metadata": {"payment_id": str(uuid.uuid4())}},
    }


async def _hold_state(w: World, owner: httpx.AsyncClient, use: str) -> dict[str, Any]:
    reply = await owner.get(f"/v1/holds/{w.holds[use]}")
    assert reply.status_code == 200, reply.text
    found: dict[str, Any] = reply.json()["hold"]
    return found


async def _still_held(w: World, owner: httpx.AsyncClient) -> None:
    assert (await _hold_state(w, owner, "release"))["state"] == "HOLD_STATE_HELD"


async def _still_unpaid(w: World, owner: httpx.AsyncClient) -> None:
    assert (await _hold_state(w, owner, "start"))["paymentId"] == ""


async def _payment_unchanged(w: World, payer: httpx.AsyncClient) -> None:
    reply = await payer.get(f"/v1/payments/{w.payment_id}")
    assert reply.json()["payment"]["state"] == "PAYMENT_STATE_SUCCEEDED"


async def _owners_holds(w: World) -> object:
    """The owner's holds of the event, as the operator lists them."""
    booking = w.stack.operators["booking"].stub(bpb_grpc.BookingServiceStub, role=access.OPERATOR)
    reply = await booking.ListHolds(bpb.ListHoldsRequest(event_id=w.event_id, customer_id=w.owner.name, page_size=100))
    return sorted((h.hold_id, h.state) for h in reply.holds)


def _booking(w: World) -> Mapping[str, str]:
    return {"booking_id": w.booking_id}


async def _still_booked(w: World, canceller: httpx.AsyncClient) -> None:
    reply = await canceller.get(f"/v1/bookings/{w.booking_id}/cancellation")
    assert reply.json()["state"] == "HOLD_STATE_CONFIRMED" and reply.json()["allowed"] is True, reply.text


async def _still_queued(w: World, leaver: httpx.AsyncClient) -> None:
    reply = await leaver.get(f"/v1/events/{w.event_id}/queue/position")
    assert reply.json()["position"]["state"] in ("QUEUE_STATE_WAITING", "QUEUE_STATE_ADMITTED"), reply.text


async def _checked_in(w: World) -> object:
    """Whether the payer's ticket is checked in, as the event's list says."""
    list_request = cpb.ExportCheckInListRequest(event_id=w.event_id)
    door = w.stack.operators["checkin"].stub(cpb_grpc.CheckInServiceStub, role=access.EDGE)
    metadata = (("x-boxoffice-device-key", w.device_key),)
    async for part in door.ExportCheckInList(list_request, metadata=metadata):
        for entry in part.entries:
            if entry.ticket.ticket_id == w.ticket_id:
                return entry.HasField("first_checkin")
    raise AssertionError("the payer's ticket is not in the list")


async def _pending_transfers(w: World) -> set[str]:
    async with w.stack.client(cookies={"bo_session": w.payer.session}) as payer:
        tickets = await _tickets(payer, w.event_id, 1)
    return {t["pendingTransfer"]["transferId"] for t in tickets if "pendingTransfer" in t}


async def _still_claimable(w: World, _: httpx.AsyncClient) -> None:
    assert w.claimable_transfer_id in await _pending_transfers(w)


async def _still_cancellable(w: World, _: httpx.AsyncClient) -> None:
    assert w.cancellable_transfer_id in await _pending_transfers(w)


MATRIX: dict[str, Case] = {
    "CreateSession": Case(body=lambda w: {"name": f"matrix-{uuid.uuid4().hex[:6]}"}),
    "GetSession": Case(),
    "DeleteSession": Case(ends_session=True),
    "GetEvent": Case(params=_event),
    "ListEvents": Case(),
    "GetQueueChallenge": Case(params=_event),
    "JoinQueue": Case(params=_event, body=lambda w: {}),
    "GetQueuePosition": Case(params=_event),
    "WatchQueuePosition": Case(params=_event),
    "GetAdmissionProgress": Case(params=_event),
    "GetPreQueueProof": Case(params=_event),
    "RegisterForFanDraw": Case(params=_event, body=lambda w: {}),
    "GetFanDrawResult": Case(params=_event),
    "GetFanDrawProof": Case(params=_event),
    "LeaveQueue": Case(params=_event, body=lambda w: {}, owner="leaver", unchanged=_still_queued),
    "GetSeatMap": Case(params=_event),
    "HoldSeats": Case(
        params=_event, body=lambda w: {"bestAvailable": {"sectionId": "A", "quantity": 1}}, state=_owners_holds
    ),
    "GetHold": Case(params=_hold("get")),
    "ReleaseHold": Case(params=_hold("release"), unchanged=_still_held),
    "StartPayment": Case(
        params=_hold("start"), body=lambda w: {"paymentMethod": "pm_card_ok"}, unchanged=_still_unpaid
    ),
    "ConfirmPayment": Case(
        params=_payment,
        headers={"Idempotency-Key": "matrix-key"},
        owner="payer",
        owned=True,
        unchanged=_payment_unchanged,
    ),
    "GetPayment": Case(params=_payment, owner="payer", owned=True),
    "ListTickets": Case(params=_event, owner="payer"),
    "GetCancellationQuote": Case(params=_booking, owner="canceller", owned=True),
    "CancelBooking": Case(
        params=_booking,
        body=lambda w: {"quotedRefund": {"currencyCode": "EUR", "amountMinor": "4500"}},
        headers={"Idempotency-Key": "matrix-cancel"},
        owner="canceller",
        owned=True,
        unchanged=_still_booked,
    ),
    "TransferTicket": Case(
        params=lambda w: {"ticket_id": w.transfer_ticket_id},
        body=lambda w: {"email": "friend@example.org"},
        owner="payer",
        owned=True,
    ),
    # Only the link's secret claims: others present a wrong one.
    "ClaimTransfer": Case(
        params=lambda w: {"transfer_id": w.claimable_transfer_id},
        body_as=lambda w, caller: {"claimSecret": w.claim_secret if caller == "owner" else "not-the-secret"},
        owner="leaver",
        owned=True,
        unchanged=_still_claimable,
    ),
    "CancelTransfer": Case(
        params=lambda w: {"transfer_id": w.cancellable_transfer_id},
        body=lambda w: {},
        owner="payer",
        owned=True,
        unchanged=_still_cancellable,
    ),
    "GetClaimPage": Case(),
    "HandleProviderWebhook": Case(body=_webhook_body),
    "GetTicketRotation": Case(params=lambda w: {"ticket_id": w.ticket_id}, owner="payer", owned=True),
    "JoinWaitlist": Case(
        params=lambda w: {"event_id": str(w.waitlist_event_id)},
        body=lambda w: {"sectionId": "A", "quantity": 1},
        owner="waiter",
        others=(403, "WAITLIST_QUEUE_REQUIRED"),
        unchanged=lambda w, c: still_waiting(c, w.waitlist_event_id),
    ),
    "GetWaitlistEntry": Case(params=lambda w: {"event_id": str(w.waitlist_event_id)}, owner="waiter", owned=True),
    "LeaveWaitlist": Case(
        params=lambda w: {"event_id": str(w.waitlist_event_id)},
        body=lambda w: {},
        owner="waiter",
        owned=True,
        unchanged=lambda w, c: still_waiting(c, w.waitlist_event_id),
    ),
    "GetCheckInKeys": Case(params=_event),
    "Scan": Case(
        params=_event, body=lambda w: {"code": w.ticket_code, "gateId": "matrix-1"}, device=True, state=_checked_in
    ),
    "ExportCheckInList": Case(params=_event, device=True),
    "UploadScans": Case(params=_event, body=lambda w: {"scans": []}, device=True),
    "GetGatePage": Case(),
    "GetIndexPage": Case(),
    "GetEventPage": Case(params=_event),
    # An asset that does not exist: the same answer for everyone.
    "GetAsset": Case(params=lambda w: {"asset": f"missing-{uuid.uuid4().hex}.js"}, status=404),
    "GetHealth": Case(),
    "GetReadiness": Case(),
    "GetMetrics": Case(),
    "GetOpenApi": Case(),
}


def test_every_route_has_a_matrix_entry() -> None:
    assert sorted(MATRIX) == sorted(route.name for route in ROUTES)


@dataclass(frozen=True)
class Answer:
    caller: str
    status: int
    reason: str
    text: str


def _path(route: Route, params: Mapping[str, str]) -> str:
    path = route.path
    for name, value in params.items():
        path = path.replace("{" + name + "}", value)
    assert "{" not in path, path
    return path


def _name_of(w: World, caller: str, case: Case) -> str:
    fan: Fan = w.fan if caller == "fan" else w.intruder if caller == "intruder" else getattr(w, case.owner)
    return fan.name


def _client(w: World, caller: str, case: Case) -> httpx.AsyncClient:
    owner: Fan = getattr(w, case.owner)
    if caller in ("anonymous", "provider"):
        return w.stack.client()
    if caller == "fan":
        return w.stack.client(cookies={"bo_session": w.fan.session})
    if caller == "intruder":
        return w.stack.client(cookies={"bo_session": w.intruder.session}, headers={ACCESS_HEADER: owner.token})
    if case.device:
        return w.stack.client(headers={"Authorization": f"Device {w.device_key}"})
    cookies = {"bo_session": owner.session}
    if owner.token:
        cookies["bo_access"] = owner.token
    return w.stack.client(cookies=cookies)


async def _call(w: World, route: Route, case: Case, caller: str, body: Any) -> Answer:
    content = None if body is None else json.dumps(body).encode()
    headers = dict(case.headers)
    if content is not None:
        headers["content-type"] = "application/json"
    if caller == "provider":
        headers[w.signature_header] = signature_header([secrets.DEV_WEBHOOK_SECRET], int(time.time()), content or b"")
    async with _client(w, caller, case) as client:
        if case.ends_session and "bo_session" in client.cookies:
            fresh = await client.post("/v1/session", json={"name": _name_of(w, caller, case)})
            assert fresh.status_code == 200, fresh.text
        path = _path(route, case.params(w))
        if route.sse:
            async with client.stream(route.method, path, headers=headers) as reply:
                text = "" if reply.status_code == 200 else (await reply.aread()).decode()
                if reply.status_code == 200:
                    assert reply.headers["content-type"].startswith("text/event-stream")
                    # The first event is enough to know whose place it is.
                    async for line in reply.aiter_lines():
                        text += line + "\n"
                        if line.startswith("data: "):
                            break
        else:
            reply = await client.request(route.method, path, content=content, headers=headers)
            text = reply.text
    json_error = reply.status_code >= 400 and reply.headers.get("content-type", "").startswith("application/json")
    reason = problem(reply).reason if json_error else ""
    return Answer(caller, reply.status_code, reason, text)


def _refused(answer: Answer, allowed: set[tuple[int, str]]) -> None:
    assert (answer.status, answer.reason) in allowed, answer


@pytest.mark.parametrize("route", ROUTES, ids=[route.name for route in ROUTES])
async def test_matrix(world: World, route: Route) -> None:
    case = MATRIX[route.name]
    owner: Fan = getattr(world, case.owner)
    body = case.body(world)
    answers: dict[str, Answer] = {}
    before = None if case.state is None else await case.state(world)
    for caller in CALLERS:
        if caller == "owner" and case.unchanged is not None:
            async with _client(world, "owner", case) as client:
                await case.unchanged(world, client)
        if caller == "owner" and case.state is not None:
            assert await case.state(world) == before, f"a caller refused {route.name} changed it"
        sent = body if case.body_as is None else case.body_as(world, caller)
        answers[caller] = await _call(world, route, case, caller, sent)
        # No one but the owner ever sees the owner's name.
        if caller != "owner":
            assert owner.name not in answers[caller].text, answers[caller]
    anonymous, provider, fan, intruder, mine = (answers[c] for c in CALLERS)
    if route.who in (Who.PUBLIC, Who.OPERATIONS):
        for answer in answers.values():
            assert answer.status == case.status, answer
    elif route.who is Who.FAN:
        for answer in (anonymous, provider):
            _refused(answer, {(401, "NOT_SIGNED_IN")})
        for answer in (fan, intruder):
            if case.owned:
                assert answer.status == 404 and answer.reason.endswith("NOT_FOUND"), answer
            elif case.others is not None:
                assert (answer.status, answer.reason) == case.others, answer
            else:
                assert answer.status == 200 or (answer.status, answer.reason) == (403, "CUSTOMER_MISMATCH"), answer
        assert mine.status == 200, mine
    elif route.who is Who.SHOPPER:
        for answer in (anonymous, provider):
            _refused(answer, {(401, "NOT_SIGNED_IN")})
        _refused(fan, {(401, "TOKEN_MISSING")})
        _refused(intruder, {(403, "CUSTOMER_MISMATCH"), (404, "NOT_FOUND")})
        assert mine.status == 200, mine
    elif route.who is Who.DEVICE:
        for answer in (anonymous, provider):
            _refused(answer, {(401, "DEVICE_KEY_MISSING")})
        for answer in (fan, intruder):
            # A fan's session, with or without an access token, is no gate.
            _refused(answer, {(403, "NOT_A_DEVICE")})
        assert mine.status == 200, mine
        other = await _call_as_device(world, route, case, world.other_device_key, body)
        _refused(other, {(403, "DEVICE_WRONG_EVENT")})
    else:
        assert route.who is Who.PROVIDER
        _refused(anonymous, {(401, "WEBHOOK_SIGNATURE_MISSING")})
        for answer in (fan, intruder, mine):
            # A fan's session is no provider's signature.
            _refused(answer, {(401, "WEBHOOK_SIGNATURE_MISSING")})
        assert provider.status == 200 and json.loads(provider.text)["duplicate"] is False, provider


async def _call_as_device(w: World, route: Route, case: Case, key: str, body: Any) -> Answer:
    async with w.stack.client(headers={"Authorization": f"Device {key}"}) as client:
        reply = await client.request(route.method, _path(route, case.params(w)), json=body)
    return Answer("device", reply.status_code, problem(reply).reason if reply.status_code >= 400 else "", reply.text)


async def test_a_forged_webhook_records_nothing(world: World) -> None:
    body = json.dumps(_webhook_body(world)).encode()
    now = int(time.time())
    event_id = json.loads(body)["id"]
    forged = {
        "content-type": "application/json",
        world.signature_header: signature_header(["whsec_guessed"], now, body),
    }
    tampered_body = body.replace(b"charge.failed", b"charge.refunded")
    genuine = {
        "content-type": "application/json",
        world.signature_header: signature_header([secrets.DEV_WEBHOOK_SECRET], now, body),
    }
    async with world.stack.client() as provider:
        path = "/v1/webhooks/payment-provider"
        _refused(
            await _answer(await provider.post(path, content=body, headers=forged)), {(401, "WEBHOOK_SIGNATURE_INVALID")}
        )
        # A genuine signature over another body.
        _refused(
            await _answer(await provider.post(path, content=tampered_body, headers=genuine)),
            {(401, "WEBHOOK_SIGNATURE_INVALID")},
        )
        stale = {**genuine, world.signature_header: signature_header([secrets.DEV_WEBHOOK_SECRET], now - 3600, body)}
        _refused(await _answer(await provider.post(path, content=body, headers=stale)), {(401, "WEBHOOK_STALE")})
        # None of those was recorded: the genuine delivery is the first.
        first = await provider.post(path, content=body, headers=genuine)
        assert first.status_code == 200, first.text
        assert first.json()["providerEventId"] == event_id and first.json()["duplicate"] is False
        again = await provider.post(path, content=body, headers=genuine)
        assert again.status_code == 200 and again.json()["duplicate"] is True


async def _answer(reply: httpx.Response) -> Answer:
    return Answer("provider", reply.status_code, problem(reply).reason if reply.status_code >= 400 else "", reply.text)
