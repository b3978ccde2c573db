"""A fan cancels their own booking through the edge, on real servers: the
quote under the event's policy, then the cancel, which refunds exactly the
quote through the provider (once, however many cancels race), voids the
tickets (the door scans them VOID) and puts the seats back on sale. A refund
window that closes between the quote and the cancel (booking's clock moved,
no sleeps) refuses the cancel with REFUND_WINDOW_CLOSED and changes nothing;
another fan's booking is a 404 like one that does not exist; bad input is
refused and changes nothing; a policy that refunds nothing says so."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import psycopg
import pytest
from prometheus_client import CollectorRegistry

from boxoffice import access, ticketcodes
from boxoffice.env import Env
from checkin_svc.adapters.postgres import PgCheckInStore
from checkin_svc.handler import CheckInHandler
from checkin_svc.metrics import CheckInMetrics
from checkin_svc.model import Scan, ScanResult
from gen.boxoffice.booking.v1 import booking_service_pb2 as bpb
from gen.boxoffice.booking.v1 import booking_service_pb2_grpc as bpb_grpc
from tests.checkin.harness import EventsAllowing
from tests.e2e.harness import eventually
from tests.edge.fans import admit
from tests.edge.harness import EdgeStack, edge_stack, error_of, sign_in
from tests.payment.harness import open_pool
from tests.support import Stores

pytestmark = pytest.mark.slow

PRICE = 4500  # a seat of section A, in EUR cents


class ShiftedClock:
    """Wall-clock time plus an offset that a test moves forward (booking's
    clock here: refund windows close without anyone waiting)."""

    def __init__(self) -> None:
        self.offset = 0.0

    def now(self) -> float:
        return time.time() + self.offset

    def advance(self, seconds: float) -> None:
        self.offset += seconds


@dataclass
class Cancelling:
    stack: EdgeStack
    clock: ShiftedClock
    stores: Stores


@pytest.fixture
async def world(stores: Stores) -> AsyncIterator[Cancelling]:
    clock = ShiftedClock()
    async with edge_stack(stores, prefix="edge-cancel", booking_clock=clock) as stack:
        yield Cancelling(stack, clock, stores)


@dataclass
class Bought:
    client: httpx.AsyncClient
    event_id: int
    booking_id: str
    payment_id: str
    seat_ids: list[int]


async def _buy(stack: EdgeStack, client: httpx.AsyncClient, event_id: int, quantity: int = 2) -> Bought:
    """The signed-in fan of ``client`` buys ``quantity`` seats of section A."""
    await admit(client, event_id)
    held = await client.post(
        f"/v1/events/{event_id}/holds", json={"bestAvailable": {"sectionId": "A", "quantity": quantity}}
    )
    assert held.status_code == 200, held.text
    hold = held.json()["hold"]
    started = await client.post(f"/v1/holds/{hold['holdId']}/payment", json={"paymentMethod": "pm_card_ok"})
    assert started.status_code == 200, started.text
    payment_id = started.json()["payment"]["paymentId"]
    paid = await client.post(f"/v1/payments/{payment_id}:confirm", headers={"Idempotency-Key": f"pay-{payment_id}"})
    assert paid.json()["payment"]["state"] == "PAYMENT_STATE_SUCCEEDED", paid.text
    return Bought(client, event_id, hold["holdId"], payment_id, [int(s["seatId"]) for s in hold["seats"]])


async def _tickets(bought: Bought, count: int) -> list[dict[str, Any]]:
    async def issued() -> list[dict[str, Any]] | None:
        reply = await bought.client.get(f"/v1/events/{bought.event_id}/tickets", params={"holdId": bought.booking_id})
        assert reply.status_code == 200, reply.text
        found: list[dict[str, Any]] = reply.json()["tickets"]
        return found if len(found) == count else None

    return await eventually(issued, f"{count} tickets")


async def _payment(bought: Bought) -> dict[str, Any]:
    reply = await bought.client.get(f"/v1/payments/{bought.payment_id}")
    assert reply.status_code == 200, reply.text
    found: dict[str, Any] = reply.json()["payment"]
    return found


async def _provider_refunds(stores: Stores, charge_id: str) -> list[int]:
    """The refunds the sandbox provider made of a charge (their amounts)."""
    async with await psycopg.AsyncConnection.connect(stores.database_url) as conn:
        cur = await conn.execute("SELECT amount_minor FROM sandbox_refunds WHERE charge_id = %s", (charge_id,))
        return [int(row[0]) for row in await cur.fetchall()]


async def _section(stack: EdgeStack, event_id: int) -> bpb.Section:
    booking = stack.operators["booking"].stub(bpb_grpc.BookingServiceStub, role=access.OPERATOR)
    event = (await booking.GetEvent(bpb.GetEventRequest(event_id=event_id))).event
    (section,) = [s for s in event.sections if s.section_id == "A"]
    found: bpb.Section = section
    return found


async def _scan(stores: Stores, event_id: int, code: str) -> ScanResult:
    """What the door answers a scan of ``code`` (check-in's own store,
    reading the tickets' rows)."""
    keys = ticketcodes.read_keys(Env({})).get()
    async with open_pool(stores, max_size=2) as pool:
        clock = ShiftedClock()
        door = CheckInHandler(
            PgCheckInStore(pool),
            ticketcodes.TicketCodeVerifier(keys.public, clock),
            clock,
            EventsAllowing(),
            CheckInMetrics.create(CollectorRegistry()),
            EventsAllowing(set()),
        )
        return (await door.scan(Scan(event_id, code, "north-1", "d1", datetime.now(UTC)))).result


def _quoted(quote: dict[str, Any]) -> dict[str, Any]:
    return {"quotedRefund": quote["refund"]}


async def test_quote_then_cancel_refunds_exactly_the_quote_voids_the_tickets_and_returns_the_seats(
    world: Cancelling,
) -> None:
    stack = world.stack
    until = datetime.now(UTC).replace(microsecond=0) + timedelta(days=20)
    event_id = await stack.event(seats=6, refund_percent=80, refundable_until=until)
    async with stack.client() as fan, stack.client() as other:
        await sign_in(fan, "fan-cancels")
        bought = await _buy(stack, fan, event_id)
        tickets = await _tickets(bought, 2)
        assert await _scan(world.stores, event_id, tickets[0]["code"]) is ScanResult.ADMITTED

        quoted = await fan.get(f"/v1/bookings/{bought.booking_id}/cancellation")
        assert quoted.status_code == 200, quoted.text
        assert quoted.headers["cache-control"] == "private, no-store"
        quote = quoted.json()
        assert quote["allowed"] is True and quote["reason"] == ""
        assert quote["refund"] == {"currencyCode": "EUR", "amountMinor": str(2 * PRICE * 80 // 100)}
        assert quote["price"] == {"currencyCode": "EUR", "amountMinor": str(2 * PRICE)}
        assert quote["until"] == until.strftime("%Y-%m-%dT%H:%M:%SZ") and quote["refundPercent"] == 80
        assert quote["state"] == "HOLD_STATE_CONFIRMED" and quote["eventId"] == str(event_id)
        assert (await _section(stack, event_id)).sold == 2

        cancelled = await fan.post(
            f"/v1/bookings/{bought.booking_id}:cancel", json=_quoted(quote), headers={"Idempotency-Key": "cancel-1"}
        )
        assert cancelled.status_code == 200, cancelled.text
        answer = cancelled.json()
        assert answer["bookingId"] == bought.booking_id and answer["refund"] == quote["refund"]
        assert answer["payment"]["state"] == "PAYMENT_STATE_PARTIALLY_REFUNDED"
        assert answer["payment"]["refunded"] == quote["refund"]
        # A replay of the key answers the same; the provider refunded once, the quote exactly.
        again = await fan.post(
            f"/v1/bookings/{bought.booking_id}:cancel", json=_quoted(quote), headers={"Idempotency-Key": "cancel-1"}
        )
        assert again.status_code == 200 and again.json() == answer
        payment = await _payment(bought)
        assert payment["refunded"] == quote["refund"]
        assert await _provider_refunds(world.stores, payment["providerPaymentId"]) == [2 * PRICE * 80 // 100]

        # The seats are back on sale, and another fan can hold exactly those.
        section = await _section(stack, event_id)
        assert (section.sold, section.held) == (0, 0)
        await sign_in(other, "fan-takes-the-seats")
        await admit(other, event_id)
        taken = await other.post(f"/v1/events/{event_id}/holds", json={"seats": {"seatIds": bought.seat_ids}})
        assert taken.status_code == 200, taken.text

        # The tickets are void: on the fan's page and at the door.
        async def voided() -> list[dict[str, Any]] | None:
            found = await _tickets(bought, 2)
            return found if all(t["state"] == "TICKET_STATE_VOID" for t in found) else None

        void = await eventually(voided, "the tickets voided")
        assert [await _scan(world.stores, event_id, t["code"]) for t in void] == [ScanResult.VOID, ScanResult.VOID]
        # The booking is cancelled now: nothing more to quote.
        after = (await fan.get(f"/v1/bookings/{bought.booking_id}/cancellation")).json()
        assert (after["allowed"], after["reason"], after["state"]) == (
            False,
            "BOOKING_NOT_CONFIRMED",
            "HOLD_STATE_CANCELLED",
        )
        assert after["refund"]["amountMinor"] == "0"


async def test_a_refund_window_that_closes_after_the_quote_refuses_the_cancel_and_changes_nothing(
    world: Cancelling,
) -> None:
    stack = world.stack
    until = datetime.now(UTC) + timedelta(hours=1)
    event_id = await stack.event(seats=4, refund_percent=100, refundable_until=until)
    async with stack.client() as fan:
        await sign_in(fan, "fan-too-late")
        bought = await _buy(stack, fan, event_id, quantity=1)
        tickets = await _tickets(bought, 1)
        quote = (await fan.get(f"/v1/bookings/{bought.booking_id}/cancellation")).json()
        assert quote["allowed"] is True and quote["refund"]["amountMinor"] == str(PRICE)
        # The window closes between the quote and the cancel (booking's clock).
        world.clock.advance(2 * 3600)
        late = await fan.post(
            f"/v1/bookings/{bought.booking_id}:cancel", json=_quoted(quote), headers={"Idempotency-Key": "late"}
        )
        assert error_of(late) == (400, "FAILED_PRECONDITION", "REFUND_WINDOW_CLOSED"), late.text
        # Nothing changed: still booked, nothing refunded, the seat sold, the ticket valid.
        now = (await fan.get(f"/v1/bookings/{bought.booking_id}/cancellation")).json()
        assert (now["allowed"], now["reason"], now["state"]) == (
            False,
            "REFUND_WINDOW_CLOSED",
            "HOLD_STATE_CONFIRMED",
        )
        payment = await _payment(bought)
        assert payment["state"] == "PAYMENT_STATE_SUCCEEDED" and payment["refunded"]["amountMinor"] == "0"
        assert await _provider_refunds(world.stores, payment["providerPaymentId"]) == []
        assert (await _section(stack, event_id)).sold == 1
        assert (await _tickets(bought, 1))[0]["state"] == "TICKET_STATE_VALID"
        assert await _scan(world.stores, event_id, tickets[0]["code"]) is ScanResult.ADMITTED
        # The key's answer is the refusal, replayed.
        replay = await fan.post(
            f"/v1/bookings/{bought.booking_id}:cancel", json=_quoted(quote), headers={"Idempotency-Key": "late"}
        )
        assert error_of(replay) == (400, "FAILED_PRECONDITION", "REFUND_WINDOW_CLOSED")


async def test_twenty_concurrent_cancels_of_one_booking_refund_once(world: Cancelling) -> None:
    stack = world.stack
    event_id = await stack.event(seats=8, refund_percent=100)
    async with stack.client() as fan:
        await sign_in(fan, "fan-many-tabs")
        tabs = await _buy(stack, fan, event_id)
        retries = await _buy(stack, fan, event_id)
        for bought in (tabs, retries):
            await _tickets(bought, 2)
        quote = (await fan.get(f"/v1/bookings/{tabs.booking_id}/cancellation")).json()
        assert quote["refund"]["amountMinor"] == str(2 * PRICE)

        def cancel(bought: Bought, key: str) -> Any:
            return fan.post(
                f"/v1/bookings/{bought.booking_id}:cancel", json=_quoted(quote), headers={"Idempotency-Key": key}
            )

        async def until_answered(bought: Bought, key: str) -> tuple[list[tuple[int, str, str]], httpx.Response]:
            """A client keeping the contract: an answer that says "retry" (the
            key in flight, a deadline that ran out on a loaded machine) is
            asked again with the same key; the retries, and the final answer."""
            retried: list[tuple[int, str, str]] = []
            for _ in range(50):
                reply = await cancel(bought, key)
                if reply.status_code not in (409, 503, 504):
                    return retried, reply
                retried.append(error_of(reply))
                await asyncio.sleep(0.1)
            raise AssertionError(f"never answered: {retried[-5:]}")

        retryable = {
            (409, "ABORTED", "IDEMPOTENCY_KEY_IN_FLIGHT"),
            (503, "UNAVAILABLE", "REFUND_PENDING"),
            (504, "DEADLINE_EXCEEDED", "DEADLINE_EXCEEDED"),
        }
        # Twenty tabs, each with its own key, and twenty retries of one key,
        # all at once: every one ends with the one cancellation's answer.
        for bought, keys in ((tabs, [f"tab-{n}" for n in range(20)]), (retries, ["one-key"] * 20)):
            outcomes = await asyncio.gather(*(until_answered(bought, key) for key in keys))
            assert {e for retried, _ in outcomes for e in retried} <= retryable, outcomes
            answers = [reply for _, reply in outcomes]
            assert [a.status_code for a in answers] == [200] * 20, [a.text for a in answers if a.status_code != 200]
            assert {a.json()["refund"]["amountMinor"] for a in answers} == {str(2 * PRICE)}
            assert {a.json()["bookingId"] for a in answers} == {bought.booking_id}
        for bought in (tabs, retries):
            payment = await _payment(bought)
            assert payment["state"] == "PAYMENT_STATE_REFUNDED" and payment["refunded"]["amountMinor"] == str(2 * PRICE)
            assert await _provider_refunds(world.stores, payment["providerPaymentId"]) == [2 * PRICE]
        section = await _section(stack, event_id)
        assert (section.sold, section.held) == (0, 0)


async def test_another_fans_booking_answers_404_like_one_that_does_not_exist(world: Cancelling) -> None:
    stack = world.stack
    event_id = await stack.event(seats=4, refund_percent=100)
    async with stack.client() as owner, stack.client() as other:
        await sign_in(owner, "fan-owner")
        await sign_in(other, "fan-other")
        bought = await _buy(stack, owner, event_id, quantity=1)
        quote = (await owner.get(f"/v1/bookings/{bought.booking_id}/cancellation")).json()
        for booking_id in (bought.booking_id, str(uuid.uuid4())):
            theirs = await other.get(f"/v1/bookings/{booking_id}/cancellation")
            assert error_of(theirs) == (404, "NOT_FOUND", "NOT_FOUND"), theirs.text
            assert "fan-owner" not in theirs.text
            cancel = await other.post(
                f"/v1/bookings/{booking_id}:cancel", json=_quoted(quote), headers={"Idempotency-Key": "not-mine"}
            )
            assert error_of(cancel) == (404, "NOT_FOUND", "NOT_FOUND"), cancel.text
        # Not signed in at all: 401.
        async with stack.client() as nobody:
            assert error_of(await nobody.get(f"/v1/bookings/{bought.booking_id}/cancellation"))[2] == "NOT_SIGNED_IN"
        # The owner's booking is untouched, and the key the other fan used is not the owner's.
        assert (await _payment(bought))["state"] == "PAYMENT_STATE_SUCCEEDED"
        mine = await owner.post(
            f"/v1/bookings/{bought.booking_id}:cancel", json=_quoted(quote), headers={"Idempotency-Key": "not-mine"}
        )
        assert mine.status_code == 200, mine.text


async def test_bad_input_is_refused_and_changes_nothing(world: Cancelling) -> None:
    stack = world.stack
    event_id = await stack.event(seats=4, refund_percent=50)
    async with stack.client() as fan:
        await sign_in(fan, "fan-bad-input")
        bought = await _buy(stack, fan, event_id, quantity=1)
        half = {"currencyCode": "EUR", "amountMinor": str(PRICE // 2)}
        path = f"/v1/bookings/{bought.booking_id}:cancel"
        cases: list[tuple[str | None, dict[str, Any], dict[str, str] | None, tuple[int, str, str], str | None]] = [
            (None, {"quotedRefund": half}, {}, (400, "INVALID_ARGUMENT", "FIELD_REQUIRED"), "Idempotency-Key"),
            ("not-a-uuid", {"quotedRefund": half}, None, (400, "INVALID_ARGUMENT", "INVALID_FIELD"), "booking_id"),
            (None, {}, None, (400, "INVALID_ARGUMENT", "FIELD_REQUIRED"), "quoted_refund"),
            (
                None,
                {"quotedRefund": {"currencyCode": "EUR", "amountMinor": "0"}},
                None,
                (400, "INVALID_ARGUMENT", "INVALID_FIELD"),
                "quoted_refund.amount_minor",
            ),
            (
                None,
                {"quotedRefund": {"currencyCode": "eur", "amountMinor": "10"}},
                None,
                (400, "INVALID_ARGUMENT", "INVALID_FIELD"),
                "quoted_refund.currency_code",
            ),
            (
                None,
                {"quotedRefund": {"currencyCode": "USD", "amountMinor": str(PRICE // 2)}},
                None,
                (400, "INVALID_ARGUMENT", "INVALID_FIELD"),
                "quoted_refund.currency_code",
            ),
            (
                None,
                {"quotedRefund": {"currencyCode": "EUR", "amountMinor": str(PRICE)}},
                None,
                (400, "INVALID_ARGUMENT", "INVALID_FIELD"),
                "quoted_refund.amount_minor",
            ),
            (
                None,
                {"quotedRefund": half, "bookingId": bought.booking_id},
                None,
                (400, "INVALID_ARGUMENT", "INVALID_FIELD"),
                "bookingId",
            ),
            (None, {"quotedRefund": half, "extra": 1}, None, (400, "INVALID_ARGUMENT", "MALFORMED_JSON"), None),
        ]
        for n, (booking, body, headers, expected, field) in enumerate(cases):
            target = path if booking is None else f"/v1/bookings/{booking}:cancel"
            reply = await fan.post(
                target, json=body, headers={"Idempotency-Key": f"bad-{n}"} if headers is None else {}
            )
            assert error_of(reply) == expected, (n, reply.text)
            if field is not None:
                assert reply.json()["error"]["details"][0]["metadata"]["field"] == field, (n, reply.text)
        quote = await fan.get("/v1/bookings/not-a-uuid/cancellation")
        assert error_of(quote) == (400, "INVALID_ARGUMENT", "INVALID_FIELD")
        unknown = await fan.get(f"/v1/bookings/{bought.booking_id}/cancellation", params={"x": "1"})
        assert error_of(unknown) == (400, "INVALID_ARGUMENT", "INVALID_FIELD")
        # Nothing changed, and the quote still stands.
        payment = await _payment(bought)
        assert payment["state"] == "PAYMENT_STATE_SUCCEEDED" and payment["refunded"]["amountMinor"] == "0"
        assert (await _section(stack, event_id)).sold == 1
        now = (await fan.get(f"/v1/bookings/{bought.booking_id}/cancellation")).json()
        assert now["allowed"] is True and now["refund"] == half


async def test_an_event_whose_policy_refunds_nothing_says_cancelling_is_not_allowed(world: Cancelling) -> None:
    stack = world.stack
    async with stack.client() as fan:
        await sign_in(fan, "fan-no-refunds")
        for event_id in (await stack.event(seats=2), await stack.event(seats=2, refund_percent=0)):
            bought = await _buy(stack, fan, event_id, quantity=1)
            quote = (await fan.get(f"/v1/bookings/{bought.booking_id}/cancellation")).json()
            assert (quote["allowed"], quote["reason"], quote["refund"]["amountMinor"]) == (
                False,
                "REFUND_NOT_ALLOWED",
                "0",
            )
            refused = await fan.post(
                f"/v1/bookings/{bought.booking_id}:cancel",
                json={"quotedRefund": {"currencyCode": "EUR", "amountMinor": "100"}},
                headers={"Idempotency-Key": f"no-refund-{event_id}"},
            )
            assert error_of(refused) == (400, "FAILED_PRECONDITION", "REFUND_NOT_ALLOWED"), refused.text
            assert (await _payment(bought))["state"] == "PAYMENT_STATE_SUCCEEDED"
            assert (await _section(stack, event_id)).sold == 1
        # A hold not paid for is no booking: nothing to quote, nothing to cancel.
        event_id = await stack.event(seats=2, refund_percent=100)
        await admit(fan, event_id)
        held = (
            await fan.post(f"/v1/events/{event_id}/holds", json={"bestAvailable": {"sectionId": "A", "quantity": 1}})
        ).json()
        unpaid = held["hold"]["holdId"]
        quote = (await fan.get(f"/v1/bookings/{unpaid}/cancellation")).json()
        assert (quote["allowed"], quote["reason"]) == (False, "BOOKING_NOT_CONFIRMED")
        refused = await fan.post(
            f"/v1/bookings/{unpaid}:cancel",
            json={"quotedRefund": {"currencyCode": "EUR", "amountMinor": "100"}},
            headers={"Idempotency-Key": "unpaid"},
        )
        assert error_of(refused) == (404, "NOT_FOUND", "NOT_FOUND")
