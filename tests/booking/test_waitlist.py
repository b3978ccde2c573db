"""An event's waiting list on real Postgres, through BookingService as the
edge calls it: seats that come back after sell-out are offered down the list
in order (the fitting rule), nobody else gets them while fans wait or offers
are open (not by best available, not by seat id), an offer that lapses or is
declined passes on, an offer is paid for as any hold, and bad joins change
nothing."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta

from booking_svc.jobs.stock import stock_of
from booking_svc.model import SectionCounters
from booking_svc.waitlist import WaitlistOfferer
from booking_svc.waitlist_model import (
    OfferPass,
    WaitlistEntry,
    WaitlistReservations,
    WaitlistState,
    fitting_offers,
)
from gen.boxoffice.booking.v1 import booking_service_pb2 as pb
from tests.booking.harness import (
    Booking,
    booking_server,
    call,
    create_event,
    hold_request,
    new_event_id,
    query,
    seat_ids,
    seated,
)
from tests.edge.asserting import as_fan
from tests.support import Stores

# The offer pass runs when a test says so (the loop's first pass finds
# nothing; the next is a minute away).
_QUIET = {"BOXOFFICE_BOOKING_WAITLIST_INTERVAL_SECONDS": "60"}


def _entry(customer: str, quantity: int, section: str | None) -> WaitlistEntry:
    return WaitlistEntry(1, customer, section, quantity, WaitlistState.WAITING, datetime.now(UTC))


async def test_the_fitting_rule_keeps_the_order_per_section() -> None:
    tried: list[tuple[str, str]] = []
    limited = {"capped"}

    async def try_offer(entry: WaitlistEntry, section: str) -> str | None:
        tried.append((entry.customer_id, section))
        return "TICKET_LIMIT_REACHED" if entry.customer_id in limited else None

    passed: list[str] = []
    waiting = [
        _entry("capped", 1, "A"),  # may buy no more: passed over, holds nothing up
        _entry("pair", 2, "A"),  # one seat back in A: A waits for this fan
        _entry("single-a", 1, "A"),  # behind the pair: not offered A's seat
        _entry("single-b", 1, "B"),  # B is not held up by A
        _entry("anyone", 1, None),  # A waits for the pair; B's seat went: nothing
        _entry("late-b", 1, "B"),  # B now waits for "anyone"
    ]
    made = await fitting_offers(waiting, {"A": 1, "B": 1}, try_offer, passed)
    assert made == 1
    assert tried == [("capped", "A"), ("single-b", "B")]
    assert passed == ["capped"]


def test_the_stock_leaves_out_what_the_list_holds_on_to() -> None:
    counters = [SectionCounters(7, "A", 10, 0, 9, 1), SectionCounters(7, "B", 5, 0, 3, 0)]
    assert stock_of(counters)[7].available == 2
    # Fans wait for B; A's one held seat is an open offer.
    reserved = WaitlistReservations(frozenset({(7, "B")}), {(7, "A"): 1})
    stock = stock_of(counters, reserved)[7]
    assert (stock.available, stock.held, stock.sold, stock.sold_out) == (0, 0, 12, True)


async def _sold_out_event(
    booking: Booking, seats: int, *, limit: int = 4, offer_minutes: int = 0
) -> tuple[int, list[str]]:
    """A seated event whose ``seats`` seats are each bought by one fan;
    the bookings' ids. ``offer_minutes``: the event's offer time (0: the
    default)."""
    event = await create_event(
        booking,
        [seated("A")],
        [("A", "1", seats)],
        max_seats_per_customer=limit,
        waitlist_offer_minutes=offer_minutes,
    )
    bookings: list[str] = []
    for n in range(seats):
        bookings.append(await _buy(booking, event.event_id, f"buyer-{n}", 1))
    return event.event_id, bookings


async def _buy(booking: Booking, event_id: int, fan: str, quantity: int) -> str:
    token = booking.token(fan, event_id)
    hold = (await booking.stub.HoldSeats(hold_request(token, event_id, section="A", quantity=quantity))).hold
    await _pay(booking, hold)
    return str(hold.hold_id)


async def _pay(booking: Booking, hold: pb.Hold) -> None:
    await booking.stub.ConfirmHold(
        pb.ConfirmHoldRequest(
            hold_id=hold.hold_id,
            idempotency_key=f"c-{hold.hold_id}",
            payment_id=f"p-{hold.hold_id}",
            amount_paid=hold.amount,
        )
    )


async def _cancel(booking: Booking, hold_id: str, fan: str) -> None:
    await booking.operator.CancelBooking(pb.CancelBookingRequest(hold_id=hold_id, customer_id=fan, reason="test"))


async def _join(booking: Booking, event_id: int, fan: str, quantity: int = 1, section: str = "A") -> pb.WaitlistEntry:
    reply = await booking.stub.JoinWaitlist(
        pb.JoinWaitlistRequest(event_id=event_id, section_id=section, quantity=quantity), metadata=as_fan(fan)
    )
    entry: pb.WaitlistEntry = reply.entry
    return entry


async def _entry_of(booking: Booking, event_id: int, fan: str) -> pb.WaitlistEntry:
    reply = await booking.stub.GetWaitlistEntry(pb.GetWaitlistEntryRequest(event_id=event_id), metadata=as_fan(fan))
    entry: pb.WaitlistEntry = reply.entry
    return entry


def _offerer(booking: Booking) -> WaitlistOfferer:
    return WaitlistOfferer(booking.store, booking.clock, booking.metrics, interval_seconds=60)


async def _states(booking: Booking, event_id: int, fans: Sequence[str]) -> list[str]:
    return [pb.WaitlistState.Name((await _entry_of(booking, event_id, fan)).state) for fan in fans]


async def test_returned_seats_go_down_the_list_in_order_and_nobody_else_gets_them(stores: Stores) -> None:
    async with booking_server(stores, environ=_QUIET) as booking:
        event_id, bookings = await _sold_out_event(booking, 6)
        fans = [f"wait-{n:02d}" for n in range(30)]
        for n, fan in enumerate(fans):
            entry = await _join(booking, event_id, fan, quantity=2 if n == 2 else 1)
            assert (entry.state, entry.ahead) == (pb.WAITLIST_STATE_WAITING, n)
        # Five bookings cancelled: five seats back.
        for n in range(5):
            await _cancel(booking, bookings[n], f"buyer-{n}")
        outsider = booking.token("outsider", event_id)
        free = [s for s in await seat_ids(booking, event_id, "A")][:5]
        # While fans wait, the seats are theirs: not by best available, not by id.
        for request in (
            hold_request(outsider, event_id, section="A", quantity=1),
            hold_request(outsider, event_id, free[:1]),
        ):
            _, err = await call(booking.stub.HoldSeats(request))
            assert err is not None and err.reason == "SOLD_OUT"
        # One pass: the first fans in order; the pair (third) fits too.
        done = await _pass_of(booking, event_id)
        assert [o.customer_id for o in done.offers] == fans[:4]
        assert sum(o.quantity for o in done.offers) == 5
        assert (
            await _states(booking, event_id, fans[:6])
            == ["WAITLIST_STATE_OFFERED"] * 4 + ["WAITLIST_STATE_WAITING"] * 2
        )
        # Offers open: still nobody else.
        for request in (
            hold_request(outsider, event_id, section="A", quantity=1),
            hold_request(outsider, event_id, free[:1]),
        ):
            _, err = await call(booking.stub.HoldSeats(request))
            assert err is not None and err.reason in ("SOLD_OUT", "SEAT_UNAVAILABLE")
        # The offer is a hold in the fan's name with a token to pay for it.
        first = await _entry_of(booking, event_id, fans[0])
        assert first.offer.customer_id == fans[0] and first.offer.state == pb.HOLD_STATE_HELD
        assert first.access_token
        held = await booking.stub.GetHold(
            pb.GetHoldRequest(access_token=first.access_token, hold_id=first.offer.hold_id)
        )
        await _pay(booking, held.hold)
        # Another fan's entry is their own, never the first fan's.
        assert (await _entry_of(booking, event_id, fans[5])).ahead == 5
        # The second fan declines: the seat goes to the next fan on the next pass.
        left = await booking.stub.LeaveWaitlist(pb.LeaveWaitlistRequest(event_id=event_id), metadata=as_fan(fans[1]))
        assert left.entry.state == pb.WAITLIST_STATE_LEFT
        done = await _pass_of(booking, event_id)
        assert [o.customer_id for o in done.offers] == [fans[4]]
        assert done.taken == 1
        # Offers that run out pass on: fans 3 and 4 did not pay in time.
        booking.clock.advance(15 * 60 + 1)
        done = await _pass_of(booking, event_id)
        assert done.lapsed == 3  # the pair (third), the fourth and the fifth fan
        assert [o.customer_id for o in done.offers] == fans[5:9]
        assert await _states(booking, event_id, fans[:5]) == [
            "WAITLIST_STATE_TAKEN",
            "WAITLIST_STATE_LEFT",
            "WAITLIST_STATE_LAPSED",
            "WAITLIST_STATE_LAPSED",
            "WAITLIST_STATE_LAPSED",
        ]
        offered = await query(
            booking,
            "SELECT count(*), COALESCE(sum(h.quantity), 0) FROM waitlist_entries w JOIN holds h"
            " ON h.hold_id = w.offer_hold_id WHERE w.event_id = %s AND w.state = 'OFFERED'",
            (event_id,),
        )
        # Four seats free for the list (one was bought): four fans offered one each.
        assert offered == [(4, 4)]
        # Nobody off the list got a seat at any point.
        holders = await query(
            booking,
            "SELECT DISTINCT customer_id FROM holds WHERE event_id = %s AND state IN ('HELD', 'CONFIRMED')",
            (event_id,),
        )
        assert {h[0] for h in holders} <= set(fans) | {f"buyer-{n}" for n in range(6)}
        # The operators' figures: the declined offer counts as lapsed.
        stats = await booking.store.waitlist_stats(event_id)
        assert (stats.waiting, stats.offered, stats.taken, stats.lapsed) == (21, 4, 1, 4)


async def test_joining_needs_a_sold_out_section_and_a_quantity_within_the_limit(stores: Stores) -> None:
    async with booking_server(stores, environ=_QUIET) as booking:
        event = await create_event(
            booking, [seated("A"), seated("B")], [("A", "1", 1), ("B", "1", 2)], max_seats_per_customer=2
        )
        event_id = event.event_id
        await _buy(booking, event_id, "buyer", 1)
        before = await query(booking, "SELECT count(*) FROM waitlist_entries WHERE event_id = %s", (event_id,))
        for section, quantity, reason in (
            ("B", 1, "WAITLIST_SEATS_AVAILABLE"),  # B has seats for sale
            ("", 1, "WAITLIST_SEATS_AVAILABLE"),  # any section: B has
            ("Z", 1, "UNKNOWN_SECTION"),
            ("A", 3, "INVALID_FIELD"),  # over the event's limit of 2
            ("A", 0, "FIELD_REQUIRED"),
            ("A b", 1, "INVALID_FIELD"),
        ):
            _, err = await call(
                booking.stub.JoinWaitlist(
                    pb.JoinWaitlistRequest(event_id=event_id, section_id=section, quantity=quantity),
                    metadata=as_fan("fan"),
                )
            )
            assert err is not None and err.reason == reason, (section, quantity)
        _, err = await call(
            booking.stub.JoinWaitlist(pb.JoinWaitlistRequest(event_id=event_id, section_id="A", quantity=1))
        )
        assert err is not None and err.reason == "CUSTOMER_NOT_ASSERTED"
        _, err = await call(
            booking.stub.GetWaitlistEntry(pb.GetWaitlistEntryRequest(event_id=event_id), metadata=as_fan("fan"))
        )
        assert err is not None and err.reason == "WAITLIST_ENTRY_NOT_FOUND"
        # The buyer has one ticket of the limit's two: two more would pass it.
        _, err = await call(
            booking.stub.JoinWaitlist(
                pb.JoinWaitlistRequest(event_id=event_id, section_id="A", quantity=2), metadata=as_fan("buyer")
            )
        )
        assert err is not None and err.reason == "TICKET_LIMIT_REACHED"
        assert (err.metadata["limit"], err.metadata["bought"]) == ("2", "1")
        assert await query(booking, "SELECT count(*) FROM waitlist_entries WHERE event_id = %s", (event_id,)) == before
        assert (await _join(booking, event_id, "buyer")).state == pb.WAITLIST_STATE_WAITING
        # A sold-out section takes the join; joining again keeps the place.
        first = await _join(booking, event_id, "fan")
        again = await booking.stub.JoinWaitlist(
            pb.JoinWaitlistRequest(event_id=event_id, section_id="A", quantity=2), metadata=as_fan("fan")
        )
        assert (again.newly_joined, again.entry.quantity, again.entry.join_time) == (False, 2, first.join_time)
        # Unknown event.
        _, err = await call(
            booking.stub.JoinWaitlist(
                pb.JoinWaitlistRequest(event_id=uuid.uuid4().int % 10**12 + 1, section_id="A", quantity=1),
                metadata=as_fan("fan"),
            )
        )
        assert err is not None and err.reason == "EVENT_NOT_FOUND"


async def test_a_sold_out_event_with_fans_waiting_is_not_for_the_room(stores: Stores) -> None:
    async with booking_server(stores, environ=_QUIET) as booking:
        event_id, bookings = await _sold_out_event(booking, 2)
        await _join(booking, event_id, "waiting")
        await _cancel(booking, bookings[0], "buyer-0")
        now = datetime.fromtimestamp(booking.clock.now(), UTC)
        stock = stock_of(
            await booking.store.event_counters([event_id]), await booking.store.waitlist_reservations([event_id], now)
        )
        # A seat is back, but the list waits for it: the room stays closed.
        assert stock[event_id].sold_out
        await _offerer(booking).pass_once()
        stock = stock_of(
            await booking.store.event_counters([event_id]), await booking.store.waitlist_reservations([event_id], now)
        )
        # The seat is the offer's, and its fan counts against the room's cap.
        assert stock[event_id].sold_out and stock[event_id].offers == 1


async def _pass_of(booking: Booking, event_id: int) -> OfferPass:
    """One offer pass; what it did for ``event_id`` (other tests' events
    with open entries share the database)."""
    return next(p for p in await _offerer(booking).pass_once() if p.event_id == event_id)


async def test_an_offer_lasts_the_events_offer_minutes(stores: Stores) -> None:
    async with booking_server(stores, environ=_QUIET) as booking:
        event_id, bookings = await _sold_out_event(booking, 1, offer_minutes=2)
        read = await booking.stub.GetEvent(pb.GetEventRequest(event_id=event_id))
        assert read.event.waitlist.offer_minutes == 2
        await _join(booking, event_id, "first")
        await _join(booking, event_id, "second")
        await _cancel(booking, bookings[0], "buyer-0")
        done = await _pass_of(booking, event_id)
        assert [o.customer_id for o in done.offers] == ["first"]
        offered_at = datetime.fromtimestamp(booking.clock.now(), UTC)
        first = await _entry_of(booking, event_id, "first")
        assert first.offer.expires_at.ToDatetime(UTC) - offered_at == timedelta(minutes=2)
        # The offer's hold runs out two minutes after the offer was made.
        lasts = await query(
            booking,
            "SELECT h.expires_at - w.offered_at FROM waitlist_entries w JOIN holds h ON h.hold_id = w.offer_hold_id"
            " WHERE w.event_id = %s AND w.customer_id = 'first'",
            (event_id,),
        )
        assert lasts == [(timedelta(minutes=2),)]
        # A second before: still the first fan's.
        booking.clock.advance(2 * 60 - 1)
        done = await _pass_of(booking, event_id)
        assert (done.lapsed, done.offers) == (0, ())
        assert await _states(booking, event_id, ["first", "second"]) == [
            "WAITLIST_STATE_OFFERED",
            "WAITLIST_STATE_WAITING",
        ]
        # Past two minutes it has lapsed and passes on (not after the default 15).
        booking.clock.advance(2)
        done = await _pass_of(booking, event_id)
        assert done.lapsed == 1 and [o.customer_id for o in done.offers] == ["second"]
        assert await _states(booking, event_id, ["first", "second"]) == [
            "WAITLIST_STATE_LAPSED",
            "WAITLIST_STATE_OFFERED",
        ]
        # Declined: no open entry is left for other tests' offer passes.
        await booking.stub.LeaveWaitlist(pb.LeaveWaitlistRequest(event_id=event_id), metadata=as_fan("second"))


async def test_an_event_left_to_the_default_offers_for_15_minutes_and_a_bad_offer_time_creates_nothing(
    stores: Stores,
) -> None:
    async with booking_server(stores, environ=_QUIET) as booking:
        event = await create_event(booking, [seated("A")], [("A", "1", 1)])
        assert event.waitlist.offer_minutes == 15
        for minutes in (-1, 1441):
            event_id = new_event_id()
            _, err = await call(
                booking.stub.CreateEvent(
                    pb.CreateEventRequest(
                        event_id=event_id,
                        display_name="Bad offer time",
                        kind=pb.EVENT_KIND_CONCERT,
                        starts_at=event.starts_at,
                        sections=[seated("A")],
                        waitlist=pb.WaitlistSettings(offer_minutes=minutes),
                    )
                )
            )
            assert err is not None and (err.reason, err.metadata.get("field")) == (
                "INVALID_FIELD",
                "waitlist.offer_minutes",
            ), minutes
            _, missing = await call(booking.stub.GetEvent(pb.GetEventRequest(event_id=event_id)))
            assert missing is not None and missing.reason == "EVENT_NOT_FOUND"
