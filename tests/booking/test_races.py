"""Races against a real BookingService and Postgres: one seat, many
clients; thousands of overlapping holds audited afterwards; crossed groups;
overbooking; best available under contention; late confirms against
reclaims. Each race has its control: the same race against a store without
the protection (tests/booking/unsafe.py), which shows that the race happens
and that the test would catch it."""

from __future__ import annotations

import asyncio
import functools
import random
import uuid
from collections import Counter

import grpc

from booking_svc.adapters.postgres.base import is_deadlock
from booking_svc.model import SeatSelection, utc
from boxoffice.errors import BoxofficeError, FailedPrecondition, ResourceExhausted
from gen.boxoffice.booking.v1 import booking_service_pb2 as pb
from tests.booking.harness import (
    Booking,
    audit,
    booking_server,
    call,
    create_event,
    discard_event,
    general,
    hold_request,
    query,
    seat_ids,
    seated,
)
from tests.booking.unsafe import (
    CONTROL_ENV,
    CheckThenConfirmStore,
    CheckThenUpdateStore,
    CountThenHoldPlacesStore,
    LockInGivenOrderStore,
    PickWithoutLocksStore,
    Rendezvous,
)
from tests.support import Stores

RACE_PAUSE_SECONDS = 0.05


async def race_for_one_seat(booking: Booking, clients: int = 50) -> tuple[int, int, Counter[str]]:
    """``clients`` customers hold the same seat at once; (winners, holds
    the database says have the seat, the losers' error reasons)."""
    event = await create_event(booking, [seated("A")], [("A", "A", 160)], max_seats_per_customer=4)
    seat = (await seat_ids(booking, event.event_id, "A"))[0]
    requests = [hold_request(booking.token(f"fan-{i}", event.event_id), event.event_id, [seat]) for i in range(clients)]
    answers = await asyncio.gather(*(call(booking.stub.HoldSeats(r)) for r in requests))
    winners = sum(1 for reply, _ in answers if reply is not None)
    reasons = Counter(err.reason for _, err in answers if err is not None)
    rows = await query(
        booking,
        "SELECT count(*) FROM hold_seats hs JOIN holds h USING (hold_id) WHERE h.state = 'HELD' AND hs.seat_id = %s "
        "AND hs.event_id = %s",
        (seat, event.event_id),
    )
    return winners, int(rows[0][0]), reasons


async def test_fifty_clients_race_for_one_seat_exactly_one_wins(stores: Stores) -> None:
    async with booking_server(stores, race_pause_seconds=RACE_PAUSE_SECONDS) as booking:
        winners, holders, reasons = await race_for_one_seat(booking)
        assert (winners, holders, reasons) == (1, 1, {"SEAT_UNAVAILABLE": 49})


async def test_control_check_then_update_lets_several_win(stores: Stores) -> None:
    """The same race against SELECT-then-UPDATE: several customers get the
    seat. The race test above would fail for such a store."""

    window = Rendezvous(50)  # every client checks before any writes
    async with booking_server(
        stores, environ=CONTROL_ENV, store_class=functools.partial(CheckThenUpdateStore, window=window)
    ) as booking:
        winners, holders, reasons = await race_for_one_seat(booking)
        # The stripe's CHECK, the last net, stops it at 10: the seat's
        # stripe counts 10 seats. The losers past that get INTERNAL.
        assert (winners, holders, reasons) == (10, 10, {"INTERNAL": 40})


async def overlapping_holds(
    booking: Booking, event_id: int, seats: list[int], count: int, rng: random.Random
) -> list[tuple[list[int], pb.Hold | None, str]]:
    """``count`` concurrent holds of random groups of 1-4 seats; each
    request with its answer (the hold, or the error's seat ids)."""
    semaphore = asyncio.Semaphore(96)

    async def one(i: int) -> tuple[list[int], pb.Hold | None, str]:
        group = rng.sample(seats, rng.randint(1, 4))
        async with semaphore:
            reply, err = await call(
                booking.stub.HoldSeats(hold_request(booking.token(f"c{i % 300}", event_id), event_id, group))
            )
        if err is not None:
            assert isinstance(err, FailedPrecondition) and err.reason == "SEAT_UNAVAILABLE", err
            taken = [int(s) for s in err.metadata["seat_ids"].split(",")]
            assert taken and set(taken) <= set(group)
            return group, None, err.metadata["seat_ids"]
        hold: pb.Hold = reply.hold
        assert sorted(s.seat_id for s in hold.seats) == sorted(group) and hold.quantity == len(group)
        return group, hold, ""

    return list(await asyncio.gather(*(one(i) for i in range(count))))


async def test_thousands_of_overlapping_holds_agree_with_the_database(stores: Stores) -> None:
    rng = random.Random(7)
    async with booking_server(stores) as booking:
        event = await create_event(
            booking, [seated("A")], [("A", f"R{r}", 20) for r in range(10)], max_seats_per_customer=100
        )
        event_id = event.event_id
        seats = await seat_ids(booking, event_id, "A")
        for phase in range(2):
            answers = await overlapping_holds(booking, event_id, seats, 1500, rng)
            won = [h for _, h, _ in answers if h is not None]
            held_by: dict[int, str] = {}
            for hold in won:
                for s in hold.seats:
                    assert s.seat_id not in held_by, f"seat {s.seat_id} handed out twice"
                    held_by[s.seat_id] = hold.hold_id
            # Every winner's seats are its own in the database; every loser
            # was told of seats that a winner of this phase holds.
            rows = await query(
                booking,
                "SELECT seat_id, hold_id::text FROM seats WHERE event_id = %s AND status = 'HELD' AND hold_expires_at > %s",
                (event_id, utc(booking.clock.now())),
            )
            assert dict((int(s), h) for s, h in rows) == held_by
            for _, answered, taken in answers:
                if answered is None:
                    assert all(int(s) in held_by for s in taken.split(","))
            assert len(won) > 10
            await audit(booking, event_id)
            if phase == 0:
                # Every hold lapses; the next phase reclaims them lazily.
                booking.clock.advance(event.hold_ttl.seconds + 1)


async def test_crossed_groups_never_deadlock_fail(stores: Stores) -> None:
    async with booking_server(stores, race_pause_seconds=0.02) as booking:
        event = await create_event(booking, [seated("A")], [("A", "A", 80)])
        seats = await seat_ids(booking, event.event_id, "A")
        pairs = [(seats[i], seats[i + 1]) for i in range(0, 80, 2)]
        answers = await asyncio.gather(
            *(
                call(
                    booking.stub.HoldSeats(
                        hold_request(booking.token(f"{side}-{a}", event.event_id), event.event_id, group)
                    )
                )
                for a, b in pairs
                for side, group in (("x", [a, b]), ("y", [b, a]))
            )
        )
        outcomes = Counter("ok" if err is None else f"{type(err).__name__}:{err.reason}" for _, err in answers)
        assert outcomes == {"ok": len(pairs), "FailedPrecondition:SEAT_UNAVAILABLE": len(pairs)}
        await audit(booking, event.event_id)


async def crossed_straight_to_the_store(booking: Booking, pairs: int) -> Counter[str]:
    """``pairs`` pairs of customers hold the same two seats at once, one
    listing them ``[a, b]`` and the other ``[b, a]``, straight to the store
    (the service sorts the seats before the store sees them); what they got."""
    event = await create_event(booking, [seated("A")], [("A", "A", 2 * pairs)])
    seats = await seat_ids(booking, event.event_id, "A")
    now = utc(booking.clock.now())

    async def hold(customer: str, group: tuple[int, int]) -> str:
        try:
            await booking.store.hold_seats(
                event_id=event.event_id,
                customer_id=customer,
                selection=SeatSelection(group),
                hold_id=uuid.uuid4(),
                request_id=None,
                fingerprint=customer,
                now=now,
            )
        except BoxofficeError as err:
            return "deadlock" if is_deadlock(err) else f"{type(err).__name__}:{err.reason}"
        return "ok"

    answers = await asyncio.gather(
        *(
            hold(f"{side}-{a}", group)
            for a, b in zip(seats[::2], seats[1::2], strict=True)
            for side, group in (("x", (a, b)), ("y", (b, a)))
        )
    )
    await audit(booking, event.event_id)
    return Counter(answers)


async def test_crossed_orders_straight_to_the_store_never_deadlock(stores: Stores) -> None:
    async with booking_server(stores, race_pause_seconds=0.02) as booking:
        assert await crossed_straight_to_the_store(booking, 10) == {"ok": 10, "FailedPrecondition:SEAT_UNAVAILABLE": 10}


async def test_control_locking_seats_in_the_order_given_deadlocks(stores: Stores) -> None:
    """The same crossed holds against a store that locks the seats in the
    order listed: each of a pair holds its first seat (the window lets them
    on once both do) and waits for the other's; Postgres breaks every such
    deadlock by failing one of the two. The tests above would fail for such
    a store."""
    window = Rendezvous(2)
    store_class = functools.partial(LockInGivenOrderStore, window=window)
    async with booking_server(stores, environ=CONTROL_ENV, store_class=store_class) as booking:
        assert await crossed_straight_to_the_store(booking, 10) == {"ok": 10, "deadlock": 10}


PASSENGERS = 260


async def race_for_places(booking: Booking) -> tuple[int, int, list[BoxofficeError], int]:
    """``PASSENGERS`` passengers hold one place each at once on a flight of
    180 places and 3 overbooked; (the event, winners, the losers' errors,
    places the database's holds take)."""
    event = await create_event(booking, [general("Y", capacity=180, overbook=3)], kind=pb.EVENT_KIND_FLIGHT)
    answers = await asyncio.gather(
        *(
            call(
                booking.stub.HoldSeats(
                    hold_request(booking.token(f"p{i}", event.event_id), event.event_id, section="Y", quantity=1)
                )
            )
            for i in range(PASSENGERS)
        )
    )
    won = sum(1 for reply, _ in answers if reply is not None)
    errors = [err for _, err in answers if err is not None]
    rows = await query(
        booking,
        "SELECT COALESCE(sum(quantity), 0) FROM holds WHERE event_id = %s AND state = 'HELD'",
        (event.event_id,),
    )
    return event.event_id, won, errors, int(rows[0][0])


async def test_overbooking_stops_exactly_at_capacity_plus_limit(stores: Stores) -> None:
    async with booking_server(stores) as booking:
        event_id, won, errors, taken = await race_for_places(booking)
        assert (won, taken) == (183, 183)
        for err in errors:
            assert isinstance(err, ResourceExhausted) and err.reason == "SOLD_OUT"
        rows = await query(booking, "SELECT sold, held FROM section_totals WHERE event_id = %s", (event_id,))
        assert tuple(rows[0]) == (0, 183)
        await audit(booking, event_id)


async def test_control_counting_then_holding_overbooks(stores: Stores) -> None:
    """The same race against a store that counts the section's holds, then
    writes the hold in another transaction: every passenger counted before
    any wrote, each saw room, and the flight is sold past its capacity plus
    overbook limit. The test above would fail for such a store."""
    window = Rendezvous(PASSENGERS)
    async with booking_server(
        stores, environ=CONTROL_ENV, store_class=functools.partial(CountThenHoldPlacesStore, window=window)
    ) as booking:
        event_id, won, errors, taken = await race_for_places(booking)
        assert (won, taken, errors) == (PASSENGERS, PASSENGERS, [])
        await discard_event(booking, event_id)


async def test_best_available_under_contention_never_hands_a_seat_twice(stores: Stores) -> None:
    rng = random.Random(11)
    async with booking_server(stores, race_pause_seconds=0.01) as booking:
        event = await create_event(
            booking, [seated("A")], [("A", f"R{r}", 10) for r in range(10)], max_seats_per_customer=100
        )
        quantities = [rng.randint(1, 4) for _ in range(80)]
        answers = await asyncio.gather(
            *(
                call(
                    booking.stub.HoldSeats(
                        hold_request(booking.token(f"b{i}", event.event_id), event.event_id, section="A", quantity=q)
                    )
                )
                for i, q in enumerate(quantities)
            )
        )
        handed: list[int] = []
        for (reply, err), q in zip(answers, quantities, strict=True):
            if reply is not None:
                assert len(reply.hold.seats) == q
                handed.extend(s.seat_id for s in reply.hold.seats)
            else:
                assert err is not None and err.code in (
                    grpc.StatusCode.RESOURCE_EXHAUSTED,
                    grpc.StatusCode.ABORTED,
                ), err
        assert len(handed) == len(set(handed))
        # Nothing was lost to the contention: one seat at a time, a single
        # caller now takes every seat the storm left, then hears SOLD_OUT.
        rest: list[int] = []
        while True:
            reply, err = await call(
                booking.stub.HoldSeats(
                    hold_request(
                        booking.token(f"r{len(rest)}", event.event_id), event.event_id, section="A", quantity=1
                    )
                )
            )
            if reply is None:
                assert isinstance(err, ResourceExhausted) and err.reason == "SOLD_OUT", err
                break
            rest.extend(s.seat_id for s in reply.hold.seats)
        assert sorted(handed + rest) == sorted(set(handed + rest))
        assert len(handed) + len(rest) == 100
        await audit(booking, event.event_id)


async def test_control_picking_without_locks_hands_seats_twice(stores: Stores) -> None:
    """Best available against a store that picks the lowest free seats as
    it reads them and marks them held in another transaction: four buyers
    who all read before any wrote get the same two seats. The test above
    (every seat handed once) would fail for such a store."""
    window = Rendezvous(4)
    async with booking_server(
        stores, environ=CONTROL_ENV, store_class=functools.partial(PickWithoutLocksStore, window=window)
    ) as booking:
        event = await create_event(
            booking, [seated("A")], [("A", f"R{r}", 10) for r in range(10)], max_seats_per_customer=100
        )
        answers = await asyncio.gather(
            *(
                call(
                    booking.stub.HoldSeats(
                        hold_request(booking.token(f"b{i}", event.event_id), event.event_id, section="A", quantity=2)
                    )
                )
                for i in range(4)
            )
        )
        handed = [s.seat_id for reply, _ in answers if reply is not None for s in reply.hold.seats]
        assert len(handed) == 8 and len(set(handed)) == 2, answers
        await discard_event(booking, event.event_id)


async def test_best_available_prefers_adjacent_seats_of_one_row(stores: Stores) -> None:
    async with booking_server(stores) as booking:
        event = await create_event(booking, [seated("A")], [("A", "A", 3), ("A", "B", 10)])
        seats = await seat_ids(booking, event.event_id, "A")
        # Seat A-2 taken: A has no 3 together, so the three come from row B.
        await booking.stub.HoldSeats(hold_request(booking.token("x", event.event_id), event.event_id, [seats[1]]))
        reply = await booking.stub.HoldSeats(
            hold_request(booking.token("y", event.event_id), event.event_id, section="A", quantity=3)
        )
        got = [(s.row_label, s.seat_number) for s in reply.hold.seats]
        assert got == [("B", 1), ("B", 2), ("B", 3)]


async def test_late_confirms_and_reclaims_of_lapsed_holds_never_both_win(stores: Stores) -> None:
    """Money arrives for lapsed holds while other customers take the same
    seats: for each hold either the payment buys it or the newcomer holds
    it, never both (I6 at the booking level)."""
    async with booking_server(stores, race_pause_seconds=0.01) as booking:
        event = await create_event(booking, [seated("A")], [("A", "A", 60)], max_seats_per_customer=100)
        seats = await seat_ids(booking, event.event_id, "A")
        groups = [seats[i : i + 2] for i in range(0, 60, 2)]
        token = booking.token("early", event.event_id)
        holds = [(await booking.stub.HoldSeats(hold_request(token, event.event_id, g))).hold for g in groups]
        booking.clock.advance(event.hold_ttl.seconds + 1)

        async def confirm(hold: pb.Hold) -> bool:
            reply, err = await call(
                booking.stub.ConfirmHold(
                    pb.ConfirmHoldRequest(
                        hold_id=hold.hold_id,
                        idempotency_key=f"late-{hold.hold_id}",
                        payment_id=f"pay-{hold.hold_id}",
                        amount_paid=hold.amount,
                    )
                )
            )
            assert reply is not None or (isinstance(err, FailedPrecondition) and err.reason == "HOLD_EXPIRED"), err
            return reply is not None

        async def take(i: int, group: list[int]) -> bool:
            reply, err = await call(
                booking.stub.HoldSeats(hold_request(booking.token(f"new-{i}", event.event_id), event.event_id, group))
            )
            assert reply is not None or (isinstance(err, FailedPrecondition) and err.reason == "SEAT_UNAVAILABLE"), err
            return reply is not None

        outcomes = await asyncio.gather(
            *(asyncio.gather(confirm(h), take(i, g)) for i, (h, g) in enumerate(zip(holds, groups, strict=True)))
        )
        assert all(paid != taken for paid, taken in outcomes), outcomes
        await audit(booking, event.event_id)


async def test_control_checking_then_confirming_sells_seats_a_newcomer_holds(stores: Stores) -> None:
    """Late confirms against a store that checks that the lapsed hold still
    has its seats, then sells them in another transaction: each confirm
    checks, a newcomer then takes the lapsed seats, and the confirm goes on
    to sell them. Both win, for every hold; the test above (never both)
    would fail for such a store."""
    checked: dict[str, asyncio.Event] = {}
    taken: dict[str, asyncio.Event] = {}

    async def window(hold_id: object) -> None:
        checked[str(hold_id)].set()
        async with asyncio.timeout(60):
            await taken[str(hold_id)].wait()

    async with booking_server(
        stores, environ=CONTROL_ENV, store_class=functools.partial(CheckThenConfirmStore, window=window)
    ) as booking:
        event = await create_event(booking, [seated("A")], [("A", "A", 20)], max_seats_per_customer=100)
        seats = await seat_ids(booking, event.event_id, "A")
        groups = [seats[i : i + 2] for i in range(0, 20, 2)]
        token = booking.token("early", event.event_id)
        holds = [(await booking.stub.HoldSeats(hold_request(token, event.event_id, g))).hold for g in groups]
        for hold in holds:
            checked[hold.hold_id], taken[hold.hold_id] = asyncio.Event(), asyncio.Event()
        booking.clock.advance(event.hold_ttl.seconds + 1)

        async def confirm(hold: pb.Hold) -> bool:
            reply, _ = await call(
                booking.stub.ConfirmHold(
                    pb.ConfirmHoldRequest(
                        hold_id=hold.hold_id,
                        idempotency_key=f"late-{hold.hold_id}",
                        payment_id=f"pay-{hold.hold_id}",
                        amount_paid=hold.amount,
                    )
                )
            )
            return reply is not None

        async def take(i: int, hold: pb.Hold, group: list[int]) -> bool:
            async with asyncio.timeout(60):
                await checked[hold.hold_id].wait()  # the confirm has checked
            try:
                reply, _ = await call(
                    booking.stub.HoldSeats(
                        hold_request(booking.token(f"new-{i}", event.event_id), event.event_id, group)
                    )
                )
            finally:
                taken[hold.hold_id].set()
            return reply is not None

        outcomes = await asyncio.gather(
            *(asyncio.gather(confirm(h), take(i, h, g)) for i, (h, g) in enumerate(zip(holds, groups, strict=True)))
        )
        assert all(paid and took for paid, took in outcomes), outcomes
        await discard_event(booking, event.event_id)
