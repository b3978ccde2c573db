"""The ticket limit: the most tickets one customer may have in an event,
bought and held together, decided by booking_hold_seats in the statement
that makes the hold. Refused across orders, after a new admission, in one
batch and under concurrent holds of one customer (with the control that
counts outside the statement and lets too many through); released, expired
and cancelled tickets give their place back; a lapsed hold paid for late
must fit again; the setting per event, its default and its bounds."""

from __future__ import annotations

import asyncio
import functools
import time
import uuid
from collections import Counter
from collections.abc import Callable
from datetime import UTC, datetime

import pytest
from prometheus_client import CollectorRegistry

from booking_svc.adapters.postgres import HoldAttempt
from booking_svc.jobs.sweeper import Sweeper
from booking_svc.metrics import SweeperMetrics
from booking_svc.model import SeatSelection
from boxoffice.errors import BoxofficeError, FailedPrecondition, InvalidArgument, NotFound
from boxoffice.sessions import EndedSessions
from gen.boxoffice.booking.v1 import booking_service_pb2 as pb
from tests.booking.harness import (
    Booking,
    audit,
    booking_server,
    call,
    create_event,
    general,
    hold_request,
    new_event_id,
    query,
    seat_ids,
    seated,
    snapshot,
    ts,
)
from tests.booking.unsafe import CONTROL_ENV, CountThenHoldStore, Rendezvous
from tests.support import Stores

RACE_PAUSE_SECONDS = 0.05


def _money(hold: pb.Hold) -> pb.Money:
    return pb.Money(currency_code=hold.amount.currency_code, amount_minor=hold.amount.amount_minor)


async def _buy(booking: Booking, token: str, event_id: int, *, section: str, quantity: int) -> pb.Hold:
    """A hold, confirmed as PaymentService confirms it once the money is in."""
    request = hold_request(token, event_id, section=section, quantity=quantity)
    hold: pb.Hold = (await booking.stub.HoldSeats(request)).hold
    reply = await booking.stub.ConfirmHold(
        pb.ConfirmHoldRequest(
            hold_id=hold.hold_id,
            idempotency_key=f"confirm-{hold.hold_id}",
            payment_id=f"pay-{hold.hold_id}",
            amount_paid=_money(hold),
        )
    )
    confirmed: pb.Hold = reply.hold
    assert confirmed.state == pb.HOLD_STATE_CONFIRMED
    return confirmed


async def _refused(booking: Booking, request: pb.HoldSeatsRequest) -> dict[str, str]:
    """The hold is refused TICKET_LIMIT_REACHED and changes nothing; its metadata."""
    before = await snapshot(booking, request.event_id)
    _, err = await call(booking.stub.HoldSeats(request))
    assert isinstance(err, FailedPrecondition) and err.reason == "TICKET_LIMIT_REACHED", err
    assert await snapshot(booking, request.event_id) == before
    return dict(err.metadata)


def _sweeper(booking: Booking) -> Sweeper:
    return Sweeper(
        booking.store,
        booking.clock,
        SweeperMetrics.create(CollectorRegistry()),
        interval_seconds=1,
        batch_size=100,
        request_id_ttl_seconds=3600,
    )


async def _tickets(booking: Booking, event_id: int, customer: str) -> int:
    """What the customer has in the event now: seats bought and in live holds."""
    now = datetime.fromtimestamp(booking.clock.now(), UTC)
    rows = await query(
        booking,
        "SELECT COALESCE(sum(quantity), 0) FROM holds WHERE event_id = %s AND customer_id = %s "
        "AND (state = 'CONFIRMED' OR (state = 'HELD' AND expires_at > %s))",
        (event_id, customer, now),
    )
    return int(rows[0][0])


async def test_the_fifth_ticket_is_refused_across_orders(stores: Stores) -> None:
    async with booking_server(stores) as booking:
        # No ticket limit given: the event's max_seats_per_customer (4).
        event = await create_event(booking, [seated("A"), general("G", 50)], [("A", "A", 20)])
        assert (event.max_seats_per_customer, event.max_tickets_per_customer) == (4, 4)
        event_id = event.event_id
        fan = booking.token("fan", event_id)
        await _buy(booking, fan, event_id, section="A", quantity=2)
        await _buy(booking, fan, event_id, section="G", quantity=2)
        # Each order was within the 4 seats one may hold at once; together
        # they are the limit, and a fifth ticket in any section is refused.
        for request in (
            hold_request(fan, event_id, section="A", quantity=1),
            hold_request(fan, event_id, section="G", quantity=1),
            hold_request(fan, event_id, (await seat_ids(booking, event_id, "A"))[-1:]),
        ):
            assert await _refused(booking, request) == {"limit": "4", "held": "0", "bought": "4"}
        # The limit is the customer's: another fan buys, and the fan's
        # tickets of another event are not counted here.
        await _buy(booking, booking.token("other", event_id), event_id, section="A", quantity=4)
        elsewhere = await create_event(booking, [general("G", 10)])
        await _buy(booking, booking.token("fan", elsewhere.event_id), elsewhere.event_id, section="G", quantity=4)
        assert await _tickets(booking, event_id, "fan") == 4
        await audit(booking, event_id)


async def test_released_expired_and_cancelled_tickets_give_their_place_back(stores: Stores) -> None:
    async with booking_server(stores) as booking:
        event = await create_event(
            booking, [seated("A")], [("A", "A", 20)], max_seats_per_customer=100, max_tickets_per_customer=4
        )
        event_id = event.event_id
        fan = booking.token("fan", event_id)
        bought = await _buy(booking, fan, event_id, section="A", quantity=2)
        held = (await booking.stub.HoldSeats(hold_request(fan, event_id, section="A", quantity=2))).hold
        one_more = hold_request(fan, event_id, section="A", quantity=1)
        assert await _refused(booking, one_more) == {"limit": "4", "held": "2", "bought": "2"}

        # Released: its seats count no more.
        await booking.stub.ReleaseHold(pb.ReleaseHoldRequest(access_token=fan, hold_id=held.hold_id))
        lapsing = (await booking.stub.HoldSeats(hold_request(fan, event_id, section="A", quantity=2))).hold
        # Lapsed (and not yet swept): not counted either.
        booking.clock.advance(event.hold_ttl.seconds + 1)
        live = (await booking.stub.HoldSeats(hold_request(fan, event_id, section="A", quantity=2))).hold
        assert await _refused(booking, one_more) == {"limit": "4", "held": "2", "bought": "2"}
        # Swept: the same.
        await _sweeper(booking).sweep_once()
        rows = await query(booking, "SELECT state FROM holds WHERE hold_id = %s", (lapsing.hold_id,))
        assert rows == [("EXPIRED",)]
        assert await _refused(booking, one_more) == {"limit": "4", "held": "2", "bought": "2"}

        # Cancelled: the booking's tickets go back to the limit.
        await booking.stub.CancelBooking(pb.CancelBookingRequest(hold_id=bought.hold_id, customer_id="fan", reason=""))
        await booking.stub.HoldSeats(hold_request(fan, event_id, section="A", quantity=2))
        assert await _refused(booking, one_more) == {"limit": "4", "held": "4", "bought": "0"}
        assert await _tickets(booking, event_id, "fan") == 4
        assert live.state == pb.HOLD_STATE_HELD
        await audit(booking, event_id)


async def _session_ended(booking: Booking, old_token: str, hold_id: str) -> None:
    """Until booking refuses the old token (it reads ended sessions from
    Redis about every second)."""
    loop = asyncio.get_running_loop()
    give_up = loop.time() + 10
    while True:
        _, err = await call(booking.stub.GetHold(pb.GetHoldRequest(access_token=old_token, hold_id=hold_id)))
        if err is not None:
            assert err.reason == "SESSION_ENDED", err
            return
        assert loop.time() < give_up, "the ended session's token was never refused"
        await asyncio.sleep(0.05)


async def test_a_new_admission_does_not_reset_the_limit(stores: Stores) -> None:
    async with booking_server(stores) as booking:
        event = await create_event(booking, [seated("A")], [("A", "A", 20)], max_tickets_per_customer=4)
        event_id = event.event_id
        first = booking.token("fan", event_id)
        bought = await _buy(booking, first, event_id, section="A", quantity=4)
        # The fan ends their shopping session (as the queue records it) ...
        ended_ms = int(booking.clock.now() * 1000)
        await EndedSessions(booking.rt.redis()).record(event_id, "fan", ended_ms, first=True)
        await _session_ended(booking, first, bought.hold_id)
        # ... and is admitted again: a new token, issued after the end.
        booking.clock.advance(1)
        second = booking.token("fan", event_id)
        got = await booking.stub.GetHold(pb.GetHoldRequest(access_token=second, hold_id=bought.hold_id))
        assert got.hold.state == pb.HOLD_STATE_CONFIRMED
        request = hold_request(second, event_id, section="A", quantity=1)
        assert await _refused(booking, request) == {"limit": "4", "held": "0", "bought": "4"}
        await audit(booking, event_id)


async def test_one_batch_counts_the_holds_before_each(stores: Stores) -> None:
    async with booking_server(stores) as booking:
        event = await create_event(
            booking, [seated("A")], [("A", "A", 20)], max_seats_per_customer=100, max_tickets_per_customer=4
        )
        event_id = event.event_id
        await _buy(booking, booking.token("fan", event_id), event_id, section="A", quantity=2)
        seats = await seat_ids(booking, event_id, "A")
        now = datetime.fromtimestamp(booking.clock.now(), UTC)

        def attempt(customer: str, seat: int) -> HoldAttempt:
            return HoldAttempt(
                event_id=event_id,
                customer_id=customer,
                selection=SeatSelection((seat,)),
                hold_id=uuid.uuid4(),
                request_id=None,
                fingerprint=f"seats:{seat}",
                now=now,
                deadline_at=time.monotonic() + 10,
            )

        answers = await booking.store.hold_batch(
            [
                attempt("fan", seats[10]),
                attempt("other", seats[11]),
                attempt("fan", seats[12]),
                attempt("fan", seats[13]),
            ]
        )
        outcomes = [a.reason if isinstance(a, BoxofficeError) else "held" for a in answers]
        assert outcomes == ["held", "held", "held", "TICKET_LIMIT_REACHED"]
        refused = answers[3]
        assert isinstance(refused, FailedPrecondition)
        assert refused.metadata == {"limit": "4", "held": "2", "bought": "2"}
        assert await _tickets(booking, event_id, "fan") == 4
        await audit(booking, event_id)


async def greedy_fan(
    booking: Booking, *, ticket_limit: int, holds: int = 12, race_begins: Callable[[], None] = lambda: None
) -> tuple[int, int, Counter[str]]:
    """A fan who bought 2 tickets sends ``holds`` holds of one seat at once
    (``race_begins`` is called just before); (the holds won, the tickets the
    fan has after, the refusals' reasons)."""
    event = await create_event(
        booking, [seated("A")], [("A", "A", 40)], max_seats_per_customer=100, max_tickets_per_customer=ticket_limit
    )
    event_id = event.event_id
    token = booking.token("greedy", event_id)
    await _buy(booking, token, event_id, section="A", quantity=2)
    seats = await seat_ids(booking, event_id, "A")
    race_begins()
    answers = await asyncio.gather(
        *(call(booking.stub.HoldSeats(hold_request(token, event_id, [s]))) for s in seats[10 : 10 + holds])
    )
    won = sum(1 for reply, _ in answers if reply is not None)
    reasons = Counter(err.reason for _, err in answers if err is not None)
    await audit(booking, event_id)
    return won, await _tickets(booking, event_id, "greedy"), reasons


@pytest.mark.parametrize(
    "environ",
    [{}, {"BOXOFFICE_BOOKING_HOLD_BATCH_MAX": "1"}],
    ids=["batched", "one-statement-each"],
)
async def test_concurrent_holds_of_one_customer_never_pass_the_limit(stores: Stores, environ: dict[str, str]) -> None:
    # The test pause holds each winning statement open between taking its
    # seats and committing, under the customer's lock.
    async with booking_server(stores, environ=environ, race_pause_seconds=RACE_PAUSE_SECONDS) as booking:
        won, tickets, reasons = await greedy_fan(booking, ticket_limit=4)
        assert (won, tickets, reasons) == (2, 4, {"TICKET_LIMIT_REACHED": 10})


async def test_control_counting_outside_the_statement_lets_the_fan_past_the_limit(stores: Stores) -> None:
    """The same race against a store that counts the fan's tickets in a
    transaction of its own before holding: every hold counts the same 2 and
    passes. The test above would fail for such a store."""
    window = Rendezvous(12, armed=False)  # armed once the fan's first 2 are bought
    store_class = functools.partial(CountThenHoldStore, window=window)
    async with booking_server(stores, environ=CONTROL_ENV, store_class=store_class) as booking:
        won, tickets, reasons = await greedy_fan(booking, ticket_limit=1000, race_begins=window.arm)
        assert (won, tickets, reasons) == (12, 14, {})


async def test_a_lapsed_hold_paid_late_must_fit_the_limit_again(stores: Stores) -> None:
    async with booking_server(stores) as booking:
        event = await create_event(booking, [seated("A")], [("A", "A", 20)])
        event_id = event.event_id
        fan = booking.token("fan", event_id)
        seats = await seat_ids(booking, event_id, "A")
        first = (await booking.stub.HoldSeats(hold_request(fan, event_id, seats[:4]))).hold
        booking.clock.advance(event.hold_ttl.seconds + 1)
        # The first hold lapsed, so the fan may hold again ...
        second = (await booking.stub.HoldSeats(hold_request(fan, event_id, seats[4:8]))).hold
        # ... but its late payment cannot make the fan's tickets 8 of 4.
        late = pb.ConfirmHoldRequest(
            hold_id=first.hold_id,
            idempotency_key=f"late-{first.hold_id}",
            payment_id="pay-late",
            amount_paid=_money(first),
        )
        for _ in range(2):  # the stored answer replays
            _, err = await call(booking.stub.ConfirmHold(late))
            assert isinstance(err, FailedPrecondition) and err.reason == "TICKET_LIMIT_REACHED", err
            assert dict(err.metadata) == {"hold_id": first.hold_id, "limit": "4", "held": "4", "bought": "0"}
        await booking.stub.ConfirmHold(
            pb.ConfirmHoldRequest(
                hold_id=second.hold_id,
                idempotency_key=f"on-time-{second.hold_id}",
                payment_id="pay-on-time",
                amount_paid=_money(second),
            )
        )
        assert await _tickets(booking, event_id, "fan") == 4
        # A lapsed hold that still fits is confirmed as before.
        other = booking.token("other", event_id)
        kept = (await booking.stub.HoldSeats(hold_request(other, event_id, seats[8:10]))).hold
        booking.clock.advance(event.hold_ttl.seconds + 1)
        reply = await booking.stub.ConfirmHold(
            pb.ConfirmHoldRequest(
                hold_id=kept.hold_id, idempotency_key=f"k-{kept.hold_id}", payment_id="p", amount_paid=_money(kept)
            )
        )
        assert reply.hold.state == pb.HOLD_STATE_CONFIRMED
        await audit(booking, event_id)


async def test_tickets_received_by_transfer_count_at_hold_and_at_a_late_payment(stores: Stores) -> None:
    """Booking told of two claimed transfers (as PaymentService tells it):
    the receiver's two count as bought, at HoldSeats and at the late payment
    of a lapsed hold; the giver's no longer do."""
    async with booking_server(stores) as booking:
        event = await create_event(booking, [seated("A")], [("A", "A", 20)])
        event_id = event.event_id
        giver, fan = booking.token("giver", event_id), booking.token("fan", event_id)
        seats = await seat_ids(booking, event_id, "A")
        given = await booking.stub.HoldSeats(hold_request(giver, event_id, seats[:2]))
        given_hold = (
            await booking.stub.ConfirmHold(
                pb.ConfirmHoldRequest(
                    hold_id=given.hold.hold_id,
                    idempotency_key=f"c-{given.hold.hold_id}",
                    payment_id="pay-given",
                    amount_paid=_money(given.hold),
                )
            )
        ).hold
        for unit in (1, 2):
            await booking.stub.RecordTicketTransfer(
                pb.RecordTicketTransferRequest(
                    transfer_id=str(uuid.uuid4()),
                    event_id=event_id,
                    booking_id=given_hold.hold_id,
                    unit=unit,
                    generation=1,
                    sender_customer_id="giver",
                    receiver_customer_id="fan",
                    claimed_at=ts(datetime.now(UTC)),
                )
            )
        # The fan has 2 of 4: three more are refused, and the giver holds 4 again.
        assert await _refused(booking, hold_request(fan, event_id, seats[4:7])) == {
            "limit": "4",
            "held": "0",
            "bought": "2",
        }
        await booking.stub.HoldSeats(hold_request(giver, event_id, seats[10:14]))
        # A lapsed hold of 2 paid late, after another hold of 2: 6 of 4.
        first = (await booking.stub.HoldSeats(hold_request(fan, event_id, seats[4:6]))).hold
        booking.clock.advance(event.hold_ttl.seconds + 1)
        await booking.stub.HoldSeats(hold_request(fan, event_id, seats[6:8]))
        late = pb.ConfirmHoldRequest(
            hold_id=first.hold_id,
            idempotency_key=f"late-{first.hold_id}",
            payment_id="pay-late",
            amount_paid=_money(first),
        )
        _, err = await call(booking.stub.ConfirmHold(late))
        assert isinstance(err, FailedPrecondition) and err.reason == "TICKET_LIMIT_REACHED", err
        assert dict(err.metadata) == {"hold_id": first.hold_id, "limit": "4", "held": "2", "bought": "2"}


async def test_the_limit_is_set_per_event_with_a_default_and_bounds(stores: Stores) -> None:
    async with booking_server(stores) as booking:
        flight = await create_event(booking, [general("Y", 50)], kind=pb.EVENT_KIND_FLIGHT, max_seats_per_customer=6)
        assert (flight.max_seats_per_customer, flight.max_tickets_per_customer) == (6, 6)
        # Two at a time, six in all.
        event = await create_event(booking, [general("G", 50)], max_seats_per_customer=2, max_tickets_per_customer=6)
        assert (event.max_seats_per_customer, event.max_tickets_per_customer) == (2, 6)
        fan = booking.token("fan", event.event_id)
        for _ in range(3):
            await _buy(booking, fan, event.event_id, section="G", quantity=2)
        request = hold_request(fan, event.event_id, section="G", quantity=1)
        assert await _refused(booking, request) == {"limit": "6", "held": "0", "bought": "6"}

        for bad in (-1, 10_001):
            fresh = new_event_id()
            now = datetime.fromtimestamp(booking.clock.now(), UTC)
            _, err = await call(
                booking.stub.CreateEvent(
                    pb.CreateEventRequest(
                        event_id=fresh,
                        display_name="Bad limit",
                        kind=pb.EVENT_KIND_CONCERT,
                        starts_at=ts(now),
                        max_tickets_per_customer=bad,
                        sections=[general("G", 5)],
                    )
                )
            )
            assert isinstance(err, InvalidArgument) and err.reason == "INVALID_FIELD", err
            assert err.metadata == {"field": "max_tickets_per_customer"}
            _, missing = await call(booking.stub.GetEvent(pb.GetEventRequest(event_id=fresh)))
            assert isinstance(missing, NotFound)
