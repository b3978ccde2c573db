"""A hold's life: expiry (lazy and swept), release, extension, confirmation
(idempotent, with its outbox row), cancellation with a refund; request ids;
the per-customer limit."""

from __future__ import annotations

import asyncio
import base64
import json
import uuid
from datetime import timedelta

import grpc
from prometheus_client import CollectorRegistry

from booking_svc.jobs.sweeper import Sweeper
from booking_svc.metrics import SweeperMetrics
from booking_svc.model import utc
from boxoffice.errors import FailedPrecondition, InvalidArgument, NotFound, PermissionDenied
from gen.boxoffice.booking.v1 import booking_service_pb2 as pb
from tests.booking.harness import (
    Booking,
    audit,
    booking_server,
    call,
    create_event,
    general,
    hold_request,
    query,
    seat_ids,
    seated,
    snapshot,
    ttl,
)
from tests.support import Stores


def sweeper(booking: Booking) -> Sweeper:
    return Sweeper(
        booking.store,
        booking.clock,
        SweeperMetrics.create(CollectorRegistry()),
        interval_seconds=1,
        batch_size=7,
        request_id_ttl_seconds=3600,
    )


def money(hold: pb.Hold) -> pb.Money:
    return pb.Money(currency_code=hold.amount.currency_code, amount_minor=hold.amount.amount_minor)


async def test_a_lapsed_hold_is_reclaimed_lazily_by_the_next_hold(stores: Stores) -> None:
    async with booking_server(stores) as booking:
        event = await create_event(booking, [seated("A")], [("A", "A", 4)])
        seats = await seat_ids(booking, event.event_id, "A")
        first = (
            await booking.stub.HoldSeats(hold_request(booking.token("a", event.event_id), event.event_id, seats[:2]))
        ).hold
        _, err = await call(
            booking.stub.HoldSeats(hold_request(booking.token("b", event.event_id), event.event_id, seats[1:3]))
        )
        assert isinstance(err, FailedPrecondition) and err.metadata["seat_ids"] == str(seats[1])
        booking.clock.advance(301)  # the concert default: 5 minutes
        second = (
            await booking.stub.HoldSeats(hold_request(booking.token("b", event.event_id), event.event_id, seats[1:3]))
        ).hold
        assert [s.seat_id for s in second.seats] == seats[1:3]
        # The first hold reads as expired; seat 1 is still its own until swept.
        got = (
            await booking.stub.GetHold(
                pb.GetHoldRequest(access_token=booking.token("a", event.event_id), hold_id=first.hold_id)
            )
        ).hold
        assert got.state == pb.HOLD_STATE_EXPIRED
        rows = await query(booking, "SELECT held FROM section_totals WHERE event_id = %s", (event.event_id,))
        assert rows[0][0] == 3  # seat 0 (lapsed, unswept) + the two of the new hold
        await audit(booking, event.event_id)
        # Money for the first hold arrives late: one of its seats is gone.
        _, err = await call(
            booking.stub.ConfirmHold(
                pb.ConfirmHoldRequest(
                    hold_id=first.hold_id, idempotency_key="late", payment_id="p-late", amount_paid=money(first)
                )
            )
        )
        assert isinstance(err, FailedPrecondition) and err.reason == "HOLD_EXPIRED"
        rows = await query(
            booking, "SELECT status FROM seats WHERE event_id = %s AND seat_id = %s", (event.event_id, seats[0])
        )
        assert rows[0][0] == "AVAILABLE"
        # Asked again with the key: the same answer, stored with it.
        _, again = await call(
            booking.stub.ConfirmHold(
                pb.ConfirmHoldRequest(
                    hold_id=first.hold_id, idempotency_key="late", payment_id="p-late", amount_paid=money(first)
                )
            )
        )
        assert isinstance(again, FailedPrecondition) and (again.reason, again.metadata, again.message) == (
            err.reason,
            err.metadata,
            err.message,
        )
        assert err.metadata == {"hold_id": first.hold_id, "state": "EXPIRED"}
        await audit(booking, event.event_id)


async def test_general_admission_confirms_move_the_section_counter(stores: Stores) -> None:
    async with booking_server(stores) as booking:
        event = await create_event(booking, [general("G", 5)])
        holds = [
            (
                await booking.stub.HoldSeats(
                    hold_request(booking.token(f"c{i}", event.event_id), event.event_id, section="G", quantity=2)
                )
            ).hold
            for i in range(2)
        ]
        requests = [
            pb.ConfirmHoldRequest(
                hold_id=h.hold_id, idempotency_key=f"k-{h.hold_id}", payment_id="p", amount_paid=money(h)
            )
            for h in holds
        ]
        answers = await asyncio.gather(*(booking.stub.ConfirmHold(r) for r in requests for _ in range(5)))
        assert {a.hold.state for a in answers} == {pb.HOLD_STATE_CONFIRMED}
        assert len({a.SerializeToString(deterministic=True) for a in answers}) == 2
        rows = await query(booking, "SELECT sold, held FROM section_totals WHERE event_id = %s", (event.event_id,))
        assert tuple(rows[0]) == (4, 0)
        outbox = await query(
            booking,
            "SELECT payload FROM outbox WHERE aggregateid = %s AND type = 'BookingConfirmed'",
            (holds[0].hold_id,),
        )
        assert [r[0] for r in outbox] == [
            {
                "event_id": event.event_id,
                "hold_id": holds[0].hold_id,
                "customer_id": "c0",
                "section_id": "G",
                "seats": [],
                "quantity": 2,
                "payment_id": "p",
                "amount_minor": 6000,
                "currency": "EUR",
            }
        ]
        got = (
            await booking.stub.GetHold(
                pb.GetHoldRequest(access_token=booking.token("c0", event.event_id), hold_id=holds[0].hold_id)
            )
        ).hold
        assert got == next(a.hold for a in answers if a.hold.hold_id == holds[0].hold_id)
        await audit(booking, event.event_id)


async def test_the_sweeper_expires_lapsed_holds_and_frees_seats_and_counters(stores: Stores) -> None:
    async with booking_server(stores) as booking:
        event = await create_event(
            booking, [seated("A"), general("G", 50)], [("A", "A", 40)], max_seats_per_customer=100
        )
        seats = await seat_ids(booking, event.event_id, "A")
        for i in range(10):
            await booking.stub.HoldSeats(
                hold_request(booking.token(f"s{i}", event.event_id), event.event_id, seats[4 * i : 4 * i + 4])
            )
            await booking.stub.HoldSeats(
                hold_request(booking.token(f"g{i}", event.event_id), event.event_id, section="G", quantity=3)
            )
        booking.clock.advance(100)
        keep = (
            await booking.stub.HoldSeats(
                hold_request(booking.token("late", event.event_id), event.event_id, section="G", quantity=2)
            )
        ).hold
        booking.clock.advance(250)  # the first twenty have lapsed, the late one has not
        # Two sweepers at once (replicas): each hold is ended exactly once.
        a, b = sweeper(booking), sweeper(booking)
        results = await asyncio.gather(a.sweep_once(), b.sweep_once())
        # (Other tests' lapsed holds count too: the sweeper is not per event.)
        assert sum(r.holds for r in results) >= 20 and sum(r.seats for r in results) >= 40
        rows = await query(
            booking,
            "SELECT section_id, sold, held FROM section_totals WHERE event_id = %s ORDER BY 1",
            (event.event_id,),
        )
        assert [tuple(r) for r in rows] == [("A", 0, 0), ("G", 0, 2)]
        rows = await query(
            booking, "SELECT state, count(*) FROM holds WHERE event_id = %s GROUP BY 1 ORDER BY 1", (event.event_id,)
        )
        assert [tuple(r) for r in rows] == [("EXPIRED", 20), ("HELD", 1)]
        rows = await query(
            booking, "SELECT count(*) FROM seats WHERE event_id = %s AND status = 'HELD'", (event.event_id,)
        )
        assert rows[0][0] == 0
        got = (
            await booking.stub.GetHold(
                pb.GetHoldRequest(access_token=booking.token("late", event.event_id), hold_id=keep.hold_id)
            )
        ).hold
        assert got.state == pb.HOLD_STATE_HELD
        await audit(booking, event.event_id)


async def test_general_admission_reclaims_lapsed_places_when_full(stores: Stores) -> None:
    async with booking_server(stores) as booking:
        event = await create_event(booking, [general("G", 4)])
        await booking.stub.HoldSeats(
            hold_request(booking.token("a", event.event_id), event.event_id, section="G", quantity=4)
        )
        _, err = await call(
            booking.stub.HoldSeats(
                hold_request(booking.token("b", event.event_id), event.event_id, section="G", quantity=1)
            )
        )
        assert err is not None and err.code == grpc.StatusCode.RESOURCE_EXHAUSTED and err.reason == "SOLD_OUT"
        booking.clock.advance(301)
        await booking.stub.HoldSeats(
            hold_request(booking.token("b", event.event_id), event.event_id, section="G", quantity=3)
        )
        rows = await query(booking, "SELECT held FROM section_totals WHERE event_id = %s", (event.event_id,))
        assert rows[0][0] == 3
        await audit(booking, event.event_id)


async def test_confirm_is_one_transaction_and_idempotent_by_key(stores: Stores) -> None:
    async with booking_server(stores) as booking:
        event = await create_event(booking, [seated("A", price=4200)], [("A", "A", 4)])
        seats = await seat_ids(booking, event.event_id, "A")
        hold = (
            await booking.stub.HoldSeats(hold_request(booking.token("c", event.event_id), event.event_id, seats[:2]))
        ).hold
        assert hold.amount.amount_minor == 8400
        request = pb.ConfirmHoldRequest(
            hold_id=hold.hold_id, idempotency_key="k1", payment_id="pay-1", amount_paid=money(hold)
        )
        # Ten at once with one key: one sale, one outbox row, one answer.
        answers = await asyncio.gather(*(booking.stub.ConfirmHold(request) for _ in range(10)))
        assert {a.hold.state for a in answers} == {pb.HOLD_STATE_CONFIRMED}
        assert len({a.SerializeToString(deterministic=True) for a in answers}) == 1
        rows = await query(
            booking, "SELECT status, count(*) FROM seats WHERE event_id = %s GROUP BY 1 ORDER BY 1", (event.event_id,)
        )
        assert [tuple(r) for r in rows] == [("AVAILABLE", 2), ("SOLD", 2)]
        rows = await query(booking, "SELECT sold, held FROM section_totals WHERE event_id = %s", (event.event_id,))
        assert tuple(rows[0]) == (2, 0)
        outbox = await query(
            booking,
            "SELECT aggregatetype, type, payload, published_at FROM outbox WHERE aggregateid = %s",
            (hold.hold_id,),
        )
        assert len(outbox) == 1
        kind, name, payload, published = outbox[0]
        assert (kind, name, published) == ("booking", "BookingConfirmed", None)
        assert payload == {
            "event_id": event.event_id,
            "hold_id": hold.hold_id,
            "customer_id": "c",
            "section_id": "A",
            "seats": [{"seat_id": s.seat_id, "label": s.label} for s in hold.seats],
            "quantity": 2,
            "payment_id": "pay-1",
            "amount_minor": 8400,
            "currency": "EUR",
        }
        # The same key for another payment is a client bug.
        other = pb.ConfirmHoldRequest(
            hold_id=hold.hold_id, idempotency_key="k1", payment_id="pay-2", amount_paid=money(hold)
        )
        _, err = await call(booking.stub.ConfirmHold(other))
        assert isinstance(err, InvalidArgument) and err.reason == "IDEMPOTENCY_KEY_REUSED"
        # Another payment for a sold hold is refused (and refunded by payment).
        other.idempotency_key = "k2"
        _, err = await call(booking.stub.ConfirmHold(other))
        assert isinstance(err, FailedPrecondition) and err.reason == "HOLD_ALREADY_CONFIRMED"
        await audit(booking, event.event_id)


async def test_confirm_answers_amount_mismatch_expired_and_unknown(stores: Stores) -> None:
    async with booking_server(stores) as booking:
        event = await create_event(booking, [seated("A")], [("A", "A", 4)])
        seats = await seat_ids(booking, event.event_id, "A")
        token = booking.token("c", event.event_id)
        hold = (await booking.stub.HoldSeats(hold_request(token, event.event_id, seats[:1]))).hold
        wrong = pb.ConfirmHoldRequest(
            hold_id=hold.hold_id,
            idempotency_key="m1",
            payment_id="p",
            amount_paid=pb.Money(currency_code="EUR", amount_minor=1),
        )
        _, err = await call(booking.stub.ConfirmHold(wrong))
        assert isinstance(err, FailedPrecondition) and err.reason == "AMOUNT_MISMATCH"
        _, again = await call(booking.stub.ConfirmHold(wrong))  # the stored first answer
        assert isinstance(again, FailedPrecondition) and again.reason == "AMOUNT_MISMATCH"
        # Lapsed but untouched: the seats are still its own, so it sells.
        booking.clock.advance(400)
        ok = await booking.stub.ConfirmHold(
            pb.ConfirmHoldRequest(hold_id=hold.hold_id, idempotency_key="m2", payment_id="p", amount_paid=money(hold))
        )
        assert ok.hold.state == pb.HOLD_STATE_CONFIRMED
        # Released, then paid: gone.
        released = (await booking.stub.HoldSeats(hold_request(token, event.event_id, seats[1:2]))).hold
        await booking.stub.ReleaseHold(pb.ReleaseHoldRequest(access_token=token, hold_id=released.hold_id))
        _, err = await call(
            booking.stub.ConfirmHold(
                pb.ConfirmHoldRequest(
                    hold_id=released.hold_id, idempotency_key="m3", payment_id="p", amount_paid=money(released)
                )
            )
        )
        assert isinstance(err, FailedPrecondition) and err.reason == "HOLD_EXPIRED"
        # Swept, then paid: gone.
        swept = (await booking.stub.HoldSeats(hold_request(token, event.event_id, seats[2:3]))).hold
        booking.clock.advance(400)
        await sweeper(booking).sweep_once()
        _, err = await call(
            booking.stub.ConfirmHold(
                pb.ConfirmHoldRequest(
                    hold_id=swept.hold_id, idempotency_key="m4", payment_id="p", amount_paid=money(swept)
                )
            )
        )
        assert isinstance(err, FailedPrecondition) and err.reason == "HOLD_EXPIRED"
        _, err = await call(
            booking.stub.ConfirmHold(
                pb.ConfirmHoldRequest(
                    hold_id=str(uuid.uuid4()), idempotency_key="m5", payment_id="p", amount_paid=money(swept)
                )
            )
        )
        assert isinstance(err, NotFound)
        await audit(booking, event.event_id)


async def test_extend_only_a_live_hold_of_its_customer_and_only_so_far(stores: Stores) -> None:
    async with booking_server(stores, environ={"BOXOFFICE_BOOKING_MAX_HOLD_LIFETIME_SECONDS": "900"}) as booking:
        event = await create_event(booking, [seated("A")], [("A", "A", 4)])
        seats = await seat_ids(booking, event.event_id, "A")
        hold = (
            await booking.stub.HoldSeats(hold_request(booking.token("c", event.event_id), event.event_id, seats[:1]))
        ).hold
        booking.clock.advance(200)
        longer = (
            await booking.stub.ExtendHold(
                pb.ExtendHoldRequest(hold_id=hold.hold_id, customer_id="c", extend_by=ttl(600))
            )
        ).hold
        assert longer.expires_at.seconds == hold.create_time.seconds + 800
        rows = await query(
            booking,
            "SELECT hold_expires_at FROM seats WHERE event_id = %s AND seat_id = %s",
            (event.event_id, seats[0]),
        )
        assert int(rows[0][0].timestamp()) == longer.expires_at.seconds
        capped = (
            await booking.stub.ExtendHold(
                pb.ExtendHoldRequest(hold_id=hold.hold_id, customer_id="c", extend_by=ttl(1800))
            )
        ).hold
        assert capped.expires_at.seconds == hold.create_time.seconds + 900
        _, err = await call(
            booking.stub.ExtendHold(pb.ExtendHoldRequest(hold_id=hold.hold_id, customer_id="other", extend_by=ttl(60)))
        )
        assert isinstance(err, PermissionDenied)
        _, err = await call(
            booking.stub.ExtendHold(pb.ExtendHoldRequest(hold_id=hold.hold_id, customer_id="c", extend_by=ttl(3600)))
        )
        assert isinstance(err, InvalidArgument)
        booking.clock.advance(701)
        _, err = await call(
            booking.stub.ExtendHold(pb.ExtendHoldRequest(hold_id=hold.hold_id, customer_id="c", extend_by=ttl(60)))
        )
        assert isinstance(err, FailedPrecondition) and err.reason == "HOLD_EXPIRED"


async def test_cancel_returns_seats_and_asks_for_the_policy_refund(stores: Stores) -> None:
    async with booking_server(stores) as booking:
        event = await create_event(
            booking,
            [seated("A", price=10000)],
            [("A", "A", 4)],
            refund_percent=80,
            refundable_for=timedelta(days=1),
        )
        seats = await seat_ids(booking, event.event_id, "A")
        hold = (
            await booking.stub.HoldSeats(hold_request(booking.token("c", event.event_id), event.event_id, seats[:2]))
        ).hold
        await booking.stub.ConfirmHold(
            pb.ConfirmHoldRequest(hold_id=hold.hold_id, idempotency_key="c1", payment_id="pay", amount_paid=money(hold))
        )
        _, err = await call(
            booking.stub.CancelBooking(pb.CancelBookingRequest(hold_id=hold.hold_id, customer_id="x", reason="r"))
        )
        assert isinstance(err, PermissionDenied)
        reply = await booking.stub.CancelBooking(
            pb.CancelBookingRequest(hold_id=hold.hold_id, customer_id="c", reason="ill")
        )
        assert reply.hold.state == pb.HOLD_STATE_CANCELLED and reply.refund_amount.amount_minor == 16000
        again = await booking.stub.CancelBooking(
            pb.CancelBookingRequest(hold_id=hold.hold_id, customer_id="c", reason="ill")
        )
        assert again.refund_amount.amount_minor == 16000
        rows = await query(
            booking, "SELECT type, payload FROM outbox WHERE aggregateid = %s ORDER BY seq", (hold.hold_id,)
        )
        assert [r[0] for r in rows] == ["BookingConfirmed", "BookingCancelled"]
        assert rows[1][1] == {
            "event_id": event.event_id,
            "hold_id": hold.hold_id,
            "customer_id": "c",
            "payment_id": "pay",
            "refund_amount_minor": 16000,
            "currency": "EUR",
            "reason": "ill",
            # What went back to sale, for whoever offers returned seats first.
            "section_id": "A",
            "quantity": 2,
            "returned_seat_ids": sorted(seats[:2]),
        }
        rows = await query(booking, "SELECT sold, held FROM section_totals WHERE event_id = %s", (event.event_id,))
        assert tuple(rows[0]) == (0, 0)
        # The seats are on sale again.
        await booking.stub.HoldSeats(hold_request(booking.token("d", event.event_id), event.event_id, seats[:2]))
        # Past the refund window nothing is refunded.
        late = (
            await booking.stub.HoldSeats(hold_request(booking.token("e", event.event_id), event.event_id, seats[2:3]))
        ).hold
        await booking.stub.ConfirmHold(
            pb.ConfirmHoldRequest(
                hold_id=late.hold_id, idempotency_key="c2", payment_id="pay2", amount_paid=money(late)
            )
        )
        booking.clock.advance(2 * 86400)
        reply = await booking.stub.CancelBooking(
            pb.CancelBookingRequest(hold_id=late.hold_id, customer_id="e", reason="")
        )
        assert reply.refund_amount.amount_minor == 0
        await audit(booking, event.event_id)


async def test_release_by_its_owner_returns_the_seats(stores: Stores) -> None:
    async with booking_server(stores) as booking:
        event = await create_event(booking, [seated("A")], [("A", "A", 4)])
        seats = await seat_ids(booking, event.event_id, "A")
        owner = booking.token("o", event.event_id)
        hold = (await booking.stub.HoldSeats(hold_request(owner, event.event_id, seats[:3]))).hold
        before = await snapshot(booking, event.event_id)
        _, err = await call(
            booking.stub.ReleaseHold(
                pb.ReleaseHoldRequest(access_token=booking.token("x", event.event_id), hold_id=hold.hold_id)
            )
        )
        assert isinstance(err, PermissionDenied) and err.reason == "NOT_HOLD_OWNER"
        assert await snapshot(booking, event.event_id) == before
        released = (
            await booking.stub.ReleaseHold(pb.ReleaseHoldRequest(access_token=owner, hold_id=hold.hold_id))
        ).hold
        assert released.state == pb.HOLD_STATE_RELEASED
        rows = await query(
            booking, "SELECT count(*) FROM seats WHERE event_id = %s AND status = 'AVAILABLE'", (event.event_id,)
        )
        assert rows[0][0] == 4
        await audit(booking, event.event_id)


async def test_request_id_replays_the_first_hold(stores: Stores) -> None:
    async with booking_server(stores) as booking:
        event = await create_event(booking, [seated("A")], [("A", "A", 4)])
        seats = await seat_ids(booking, event.event_id, "A")
        token = booking.token("c", event.event_id)
        request = hold_request(token, event.event_id, seats[:2], request_id="r-1")
        answers = await asyncio.gather(*(booking.stub.HoldSeats(request) for _ in range(5)))
        assert len({a.hold.hold_id for a in answers}) == 1
        rows = await query(booking, "SELECT count(*) FROM holds WHERE event_id = %s", (event.event_id,))
        assert rows[0][0] == 1
        _, err = await call(booking.stub.HoldSeats(hold_request(token, event.event_id, seats[2:3], request_id="r-1")))
        assert isinstance(err, InvalidArgument) and err.reason == "REQUEST_ID_REUSED"
        await audit(booking, event.event_id)


async def test_a_customer_holds_at_most_the_event_limit_even_in_parallel(stores: Stores) -> None:
    async with booking_server(stores, race_pause_seconds=0.01) as booking:
        event = await create_event(booking, [seated("A")], [("A", "A", 20)], max_seats_per_customer=4)
        seats = await seat_ids(booking, event.event_id, "A")
        token = booking.token("greedy", event.event_id)
        answers = await asyncio.gather(
            *(call(booking.stub.HoldSeats(hold_request(token, event.event_id, [s]))) for s in seats[:12])
        )
        assert sum(1 for r, _ in answers if r is not None) == 4
        for _, err in answers:
            if err is not None:
                assert isinstance(err, FailedPrecondition) and err.reason == "CUSTOMER_HOLD_LIMIT"
                assert err.metadata["limit"] == "4"
        # Once they lapse the customer may hold again.
        booking.clock.advance(301)
        await booking.stub.HoldSeats(hold_request(token, event.event_id, seats[12:16]))
        await audit(booking, event.event_id)


async def test_list_holds_pages_newest_first(stores: Stores) -> None:
    async with booking_server(stores) as booking:
        event = await create_event(booking, [general("G", 100)], max_seats_per_customer=100)
        made = []
        for i in range(7):
            made.append(
                (
                    await booking.stub.HoldSeats(
                        hold_request(
                            booking.token("c" if i % 2 else "d", event.event_id),
                            event.event_id,
                            section="G",
                            quantity=1,
                        )
                    )
                ).hold.hold_id
            )
            booking.clock.advance(1)
        seen: list[str] = []
        token = ""
        while True:
            page = await booking.operator.ListHolds(
                pb.ListHoldsRequest(event_id=event.event_id, page_size=3, page_token=token)
            )
            seen.extend(h.hold_id for h in page.holds)
            token = page.next_page_token
            if not token:
                break
        # Every customer's holds: the operator's listing.
        assert seen == made[::-1]
        mine = await booking.stub.ListHolds(pb.ListHoldsRequest(event_id=event.event_id, customer_id="c"))
        assert [h.hold_id for h in mine.holds] == [made[5], made[3], made[1]]
        # Garbage, and a token nested past the recursion limit (once a 500).
        nested = base64.urlsafe_b64encode(b"[" * 3000 + b"]" * 3000).decode()
        for garbage in ("garbage", nested):
            _, err = await call(
                booking.operator.ListHolds(pb.ListHoldsRequest(event_id=event.event_id, page_token=garbage))
            )
            assert isinstance(err, InvalidArgument) and err.reason == "INVALID_PAGE_TOKEN", err
        _, err = await call(
            booking.operator.ListHolds(
                pb.ListHoldsRequest(event_id=event.event_id + 1, page_token=page_token_of(booking, event.event_id))
            )
        )
        assert isinstance(err, InvalidArgument)


def page_token_of(booking: Booking, event_id: int) -> str:
    body = json.dumps({"e": event_id, "c": "", "t": utc(booking.clock.now()).isoformat(), "h": str(uuid.uuid4())})
    return base64.urlsafe_b64encode(body.encode()).decode().rstrip("=")


async def test_a_hold_past_its_deadline_is_cancelled_in_postgres_and_holds_nothing(stores: Stores) -> None:
    async with booking_server(stores, race_pause_seconds=1.0) as booking:
        event = await create_event(booking, [seated("A")], [("A", "A", 4)])
        seats = await seat_ids(booking, event.event_id, "A")
        request = hold_request(booking.token("c", event.event_id), event.event_id, seats[:2])
        _, err = await call(booking.stub.HoldSeats(request, timeout=0.2))
        assert err is not None and err.code == grpc.StatusCode.DEADLINE_EXCEEDED
        # The server cancels the statement (its transaction rolls back) rather
        # than finishing a hold nobody waits for.
        for _ in range(100):
            active = await query(
                booking,
                "SELECT count(*) FROM pg_stat_activity WHERE query LIKE '%%booking_hold_%%(%%' AND pid <> pg_backend_pid()"
                " AND state = 'active' AND datname = current_database()",
            )
            if active[0][0] == 0:
                break
            await asyncio.sleep(0.05)
        assert active[0][0] == 0, await query(
            booking, "SELECT pid, state, query FROM pg_stat_activity WHERE state = 'active'"
        )
        rows = await query(booking, "SELECT count(*) FROM holds WHERE event_id = %s", (event.event_id,))
        assert rows[0][0] == 0
        await audit(booking, event.event_id)
