"""Ticket transfers through the edge, on the real mesh: a fan offers a
ticket to a friend, the friend claims it signed in, and the ticket is
re-issued to the friend with a new signed code while the old code scans
VOID at the door (check-in's own handler and store over the same tickets).
Only the current holder transfers; the event's switch, the claimer's ticket
limit and a second claim are refused with their published reasons; bad
input changes nothing."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime

import pytest
from prometheus_client import CollectorRegistry

from boxoffice import ticketcodes
from boxoffice.clock import SystemClock
from boxoffice.env import Env
from checkin_svc.adapters.postgres import PgCheckInStore
from checkin_svc.handler import CheckInHandler
from checkin_svc.metrics import CheckInMetrics
from checkin_svc.model import Scan, ScanResult
from tests.checkin.harness import EventsAllowing
from tests.edge.harness import EdgeStack, edge_stack, error_of
from tests.edge.transfer_fans import (
    FRIEND_EMAIL,
    buy_tickets,
    claim,
    claim_secret,
    offer,
    signed_in,
    stored_rows,
    tickets_of,
)
from tests.payment.harness import open_pool
from tests.support import Stores

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
async def stack(stores: Stores) -> AsyncIterator[EdgeStack]:
    async with edge_stack(stores, prefix="edge-transfers") as opened:
        yield opened


async def test_a_claimed_transfer_reissues_the_ticket_and_voids_the_old_code(stack: EdgeStack, stores: Stores) -> None:
    event_id = await stack.event(seats=6)
    async with signed_in(stack, "sender", "friend", "other") as (sender, friend, other):
        tickets = await buy_tickets(sender, event_id, 2)
        given, kept = tickets
        transfer = await offer(sender, given["ticketId"])
        assert transfer["state"] == "TRANSFER_STATE_PENDING" and transfer["email"] == FRIEND_EMAIL
        assert transfer["ticketId"] == given["ticketId"] and not transfer.get("newTicketId")
        # The sender sees the pending transfer on the ticket, and still holds it.
        listed = {t["ticketId"]: t for t in await tickets_of(sender, event_id)}
        assert listed[given["ticketId"]]["pendingTransfer"]["transferId"] == transfer["transferId"]
        assert "pendingTransfer" not in listed[kept["ticketId"]]
        secret = await claim_secret(stores, transfer["transferId"])

        claimed = await claim(friend, transfer["transferId"], secret)
        assert claimed.status_code == 200, claimed.text
        new = claimed.json()["ticket"]
        assert claimed.json()["transfer"]["state"] == "TRANSFER_STATE_CLAIMED"
        assert claimed.json()["transfer"]["newTicketId"] == new["ticketId"] != given["ticketId"]
        assert new["code"] != given["code"] and new["state"] == "TICKET_STATE_VALID"
        assert (new["seatId"], new["seatLabel"], new["holdId"]) == (
            given["seatId"],
            given["seatLabel"],
            given["holdId"],
        )
        # The sender no longer lists it; the friend does.
        assert [t["ticketId"] for t in await tickets_of(sender, event_id)] == [kept["ticketId"]]
        assert [t["ticketId"] for t in await tickets_of(friend, event_id)] == [new["ticketId"]]
        # Signed as any ticket: the mesh's key verifies the new code, naming the new ticket.
        keys = ticketcodes.read_keys(Env({})).get()
        clock = SystemClock()
        verifier = ticketcodes.TicketCodeVerifier(keys.public, clock)
        assert verifier.verify(new["code"]).ticket_id == new["ticketId"]

        # At the door: the old code is VOID, the new one admits, once.
        async with open_pool(stores) as pool:
            metrics = CheckInMetrics.create(CollectorRegistry())
            door = CheckInHandler(
                PgCheckInStore(pool), verifier, clock, EventsAllowing(), metrics, EventsAllowing(set())
            )

            async def scan(code: str) -> ScanResult:
                return (await door.scan(Scan(event_id, code, "north-1", "d1", datetime.now(UTC)))).result

            assert await scan(given["code"]) is ScanResult.VOID
            assert await scan(new["code"]) is ScanResult.ADMITTED
            assert await scan(new["code"]) is ScanResult.ALREADY_CHECKED_IN

        # A ticket used at the door is not passed on.
        used = await friend.post(f"/v1/tickets/{new['ticketId']}:transfer", json={"email": FRIEND_EMAIL})
        assert error_of(used) == (400, "FAILED_PRECONDITION", "TICKET_CHECKED_IN")
        # Only the current holder transfers: the old holder's id is gone for
        # them (404), as the friend's ticket is, and another fan's ticket is
        # a 404 as well; the sender may not claim their own transfer.
        gone = await sender.post(f"/v1/tickets/{given['ticketId']}:transfer", json={"email": FRIEND_EMAIL})
        assert error_of(gone) == (404, "NOT_FOUND", "TICKET_NOT_FOUND")
        again = await sender.post(f"/v1/tickets/{new['ticketId']}:transfer", json={"email": FRIEND_EMAIL})
        assert error_of(again) == (404, "NOT_FOUND", "TICKET_NOT_FOUND")
        theirs = await other.post(f"/v1/tickets/{kept['ticketId']}:transfer", json={"email": FRIEND_EMAIL})
        assert error_of(theirs) == (404, "NOT_FOUND", "TICKET_NOT_FOUND")
        onward = await offer(sender, kept["ticketId"], "third@example.org")
        own = await claim(sender, onward["transferId"], await claim_secret(stores, onward["transferId"]))
        assert error_of(own) == (400, "FAILED_PRECONDITION", "TRANSFER_TO_SELF")
        # A second transfer of a ticket with one pending waits for its cancel.
        twice = await sender.post(f"/v1/tickets/{kept['ticketId']}:transfer", json={"email": FRIEND_EMAIL})
        assert error_of(twice)[1:] == ("ALREADY_EXISTS", "TRANSFER_PENDING")
        # Another fan cannot cancel it; its sender can, and then the link claims nothing.
        refused = await other.post(f"/v1/transfers/{onward['transferId']}:cancel", json={})
        assert error_of(refused) == (404, "NOT_FOUND", "TRANSFER_NOT_FOUND")
        onward_secret = await claim_secret(stores, onward["transferId"])
        cancelled = await sender.post(f"/v1/transfers/{onward['transferId']}:cancel", json={})
        assert cancelled.status_code == 200 and cancelled.json()["transfer"]["state"] == "TRANSFER_STATE_CANCELLED"
        late = await claim(other, onward["transferId"], onward_secret)
        assert error_of(late) == (400, "FAILED_PRECONDITION", "TRANSFER_CANCELLED")
        assert [t["ticketId"] for t in await tickets_of(sender, event_id)] == [kept["ticketId"]]
        assert [t["ticketId"] for t in await tickets_of(friend, event_id)] == [new["ticketId"]]


async def test_concurrent_claims_reissue_once_and_a_second_claim_is_refused(stack: EdgeStack, stores: Stores) -> None:
    event_id = await stack.event(seats=4)
    async with signed_in(stack, "sender", "friend") as (sender, friend):
        (ticket,) = await buy_tickets(sender, event_id, 1)
        transfer = await offer(sender, ticket["ticketId"])
        secret = await claim_secret(stores, transfer["transferId"])
        replies = await asyncio.gather(*(claim(friend, transfer["transferId"], secret) for _ in range(10)))
        ok = [r for r in replies if r.status_code == 200]
        assert len(ok) == 1, [r.text for r in replies]
        assert {error_of(r) for r in replies if r.status_code != 200} == {
            (400, "FAILED_PRECONDITION", "TRANSFER_CLAIMED")
        }
        tickets, transfers = await stored_rows(stores, event_id)
        assert len(tickets) == 2 and sum(1 for t in tickets if t[3] is None) == 1
        assert [t[0] for t in transfers] == [uuid.UUID(transfer["transferId"])]
        assert transfers[0][1] == "CLAIMED"
        # Claimed once: asking again later says so too.
        later = await claim(friend, transfer["transferId"], secret)
        assert error_of(later) == (400, "FAILED_PRECONDITION", "TRANSFER_CLAIMED")


async def test_an_event_that_forbids_transfers_refuses_them(stack: EdgeStack) -> None:
    event_id = await stack.event(seats=4, transfers=False)
    async with signed_in(stack, "sender") as (sender,):
        (ticket,) = await buy_tickets(sender, event_id, 1)
        reply = await sender.post(f"/v1/tickets/{ticket['ticketId']}:transfer", json={"email": FRIEND_EMAIL})
        assert error_of(reply) == (400, "FAILED_PRECONDITION", "TRANSFERS_NOT_ALLOWED")
        assert reply.json()["error"]["details"][0]["metadata"] == {"event_id": str(event_id), "why": "switched_off"}
        assert "pendingTransfer" not in (await tickets_of(sender, event_id))[0]


async def test_a_claim_over_the_receivers_ticket_limit_is_refused(stack: EdgeStack, stores: Stores) -> None:
    event_id = await stack.event(seats=6, max_tickets_per_customer=2)
    async with signed_in(stack, "sender", "friend") as (sender, friend):
        (ticket,) = await buy_tickets(sender, event_id, 1)
        await buy_tickets(friend, event_id, 2)
        transfer = await offer(sender, ticket["ticketId"])
        secret = await claim_secret(stores, transfer["transferId"])
        before = await stored_rows(stores, event_id)
        reply = await claim(friend, transfer["transferId"], secret)
        assert error_of(reply) == (400, "FAILED_PRECONDITION", "TICKET_LIMIT_REACHED")
        assert reply.json()["error"]["details"][0]["metadata"] == {"limit": "2", "tickets": "2"}
        assert await stored_rows(stores, event_id) == before
        assert [t["ticketId"] for t in await tickets_of(sender, event_id)] == [ticket["ticketId"]]


async def test_bad_input_is_refused_and_changes_nothing(stack: EdgeStack, stores: Stores) -> None:
    event_id = await stack.event(seats=4)
    async with signed_in(stack, "sender", "friend") as (sender, friend):
        (ticket,) = await buy_tickets(sender, event_id, 1)
        transfer = await offer(sender, ticket["ticketId"])
        before = await stored_rows(stores, event_id)
        path = f"/v1/tickets/{ticket['ticketId']}:transfer"
        cases = [
            (sender.post("/v1/tickets/not-a-uuid:transfer", json={"email": FRIEND_EMAIL}), "INVALID_FIELD"),
            (sender.post(path, json={}), "FIELD_REQUIRED"),
            (sender.post(path, json={"email": "no-at-sign"}), "INVALID_FIELD"),
            (sender.post(path, json={"email": "a@" + "b" * 300}), "INVALID_FIELD"),
            (sender.post(path, json={"email": "a\x01b@example.org"}), "INVALID_FIELD"),
            (sender.post(path, json={"email": FRIEND_EMAIL, "ticketId": str(uuid.uuid4())}), None),
            (sender.post(path, json={"email": 7}), None),
            (sender.post(path, content=b"{", headers={"content-type": "application/json"}), None),
            (claim(friend, transfer["transferId"], ""), "FIELD_REQUIRED"),
            (claim(friend, transfer["transferId"], "x" * 101), "INVALID_FIELD"),
            (claim(friend, "not-a-uuid", "secret"), "INVALID_FIELD"),
            (friend.post(f"/v1/transfers/{transfer['transferId']}:claim", json={"claimSecret": 1}), None),
        ]
        for call, reason in cases:
            reply = await call
            assert reply.status_code == 400, reply.text
            if reason is not None:
                assert error_of(reply)[2] == reason, reply.text
        wrong = await claim(friend, transfer["transferId"], "not-the-secret")
        assert error_of(wrong) == (404, "NOT_FOUND", "TRANSFER_NOT_FOUND")
        missing = await claim(friend, str(uuid.uuid4()), "secret")
        assert error_of(missing) == (404, "NOT_FOUND", "TRANSFER_NOT_FOUND")
        unknown = await sender.post(f"/v1/tickets/{uuid.uuid4()}:transfer", json={"email": FRIEND_EMAIL})
        assert error_of(unknown) == (404, "NOT_FOUND", "TICKET_NOT_FOUND")
        # Signed out: 401, nothing read.
        async with stack.client() as anonymous:
            refused = await anonymous.post(path, json={"email": FRIEND_EMAIL})
            assert error_of(refused)[2] == "NOT_SIGNED_IN"
        assert await stored_rows(stores, event_id) == before
