"""HoldSeats's one path (booking_hold_seats) in batches: a batch answers
every hold as it would have been answered alone, had the holds run one by
one in the batch's order, and the database passes the audit after either; a
failing hold fails alone; concurrent calls share one statement; a batch
that fails as a whole falls back to one by one."""

from __future__ import annotations

import asyncio
import random
import time
import uuid
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg

from booking_svc.adapters.postgres import HoldAttempt, PgBookingStore
from booking_svc.model import (
    EventKind,
    EventSpec,
    Hold,
    Money,
    QuantitySelection,
    RefundPolicy,
    RowSpec,
    SeatSelection,
    SectionKind,
    SectionSpec,
    Selection,
)
from boxoffice import deadline
from boxoffice.errors import BoxofficeError, DeadlineExceeded
from tests.booking.harness import Booking, audit, booking_server, execute, new_event_id, query
from tests.booking.unsafe import OneTransactionBatchStore
from tests.support import Stores

Outcome = tuple[Hold, bool] | BaseException


def now_of(booking: Booking) -> datetime:
    return datetime.fromtimestamp(booking.clock.now(), UTC)


async def make_event(booking: Booking, *, ga_capacity: int = 12, ga_overbook: int = 1, max_seats: int = 4) -> int:
    """Sections A (3 rows of 8 seats), B (one row of 6) and G (general
    admission); seat ids follow the rows' order."""
    event_id = new_event_id()
    store = booking.store
    await store.create_event(
        EventSpec(
            event_id=event_id,
            display_name="batch",
            kind=EventKind.CONCERT,
            starts_at=now_of(booking) + timedelta(days=10),
            hold_ttl_seconds=300,
            max_seats_per_customer=max_seats,
            refund_policy=RefundPolicy(None, 0),
            sections=(
                SectionSpec("A", "A", SectionKind.SEATED, 0, 0, Money("EUR", 5000)),
                SectionSpec("B", "B", SectionKind.SEATED, 0, 0, Money("EUR", 7000)),
                SectionSpec("G", "G", SectionKind.GENERAL_ADMISSION, ga_capacity, ga_overbook, Money("EUR", 3000)),
            ),
        )
    )
    await store.load_inventory(
        event_id,
        [RowSpec("A", "A1", 1, 8), RowSpec("A", "A2", 1, 8), RowSpec("A", "A3", 1, 8), RowSpec("B", "B1", 1, 6)],
    )
    return event_id


async def first_seat(booking: Booking, event_id: int) -> int:
    rows = await query(booking, "SELECT min(seat_id) FROM seats WHERE event_id = %s", (event_id,))
    return int(rows[0][0])


def attempt(
    booking: Booking,
    event_id: int,
    customer: str,
    selection: Selection,
    request_id: str | None = None,
    *,
    seconds: float = 10.0,
) -> HoldAttempt:
    if isinstance(selection, SeatSelection):
        fingerprint = "seats:" + ",".join(map(str, selection.seat_ids))
    else:
        fingerprint = f"best:{selection.section_id}:{selection.quantity}"
    return HoldAttempt(
        event_id=event_id,
        customer_id=customer,
        selection=selection,
        hold_id=uuid.uuid4(),
        request_id=request_id,
        fingerprint=fingerprint,
        now=now_of(booking),
        deadline_at=time.monotonic() + seconds,
    )


async def one_by_one(store: PgBookingStore, attempts: Sequence[HoldAttempt]) -> list[Outcome]:
    out: list[Outcome] = []
    for a in attempts:
        try:
            with deadline.scope(10):
                out.append(await store.hold_one(a))
        except BoxofficeError as err:
            out.append(err)
    return out


def describe(outcome: Outcome) -> str:
    """A hold's event id, or an error's reason."""
    if isinstance(outcome, BoxofficeError):
        return outcome.reason
    if isinstance(outcome, BaseException):
        return repr(outcome)
    return str(outcome[0].event_id)


def seats(selection_ids: Sequence[int], base: int) -> SeatSelection:
    return SeatSelection(tuple(sorted(base + i for i in selection_ids)))


def normalized(outcomes: Sequence[Outcome], attempts: Sequence[HoldAttempt], base: int) -> list[tuple[Any, ...]]:
    """Outcomes with what differs between two identical events taken out:
    seat ids become positions, a replayed hold becomes the index of the
    request that made it."""
    made_by = {a.hold_id: i for i, a in enumerate(attempts)}
    out: list[tuple[Any, ...]] = []
    for outcome in outcomes:
        if isinstance(outcome, BoxofficeError):
            meta = dict(outcome.metadata)
            if "seat_ids" in meta:
                meta["seat_ids"] = ",".join(str(int(s) - base) for s in meta["seat_ids"].split(","))
            meta.pop("event_id", None)
            out.append(("error", type(outcome).__name__, outcome.reason, tuple(sorted(meta.items()))))
        elif isinstance(outcome, BaseException):
            out.append(("exception", repr(outcome)))
        else:
            hold, replayed = outcome
            out.append(
                (
                    "hold",
                    made_by.get(hold.hold_id),
                    hold.section_id,
                    hold.quantity,
                    hold.amount,
                    tuple((s.seat_id - base, s.row_label, s.seat_number, s.label) for s in hold.seats),
                    hold.state,
                    replayed,
                )
            )
    return out


async def state_of(booking: Booking, event_id: int, base: int) -> dict[str, Any]:
    seats_rows = await query(
        booking, "SELECT seat_id, status FROM seats WHERE event_id = %s ORDER BY seat_id", (event_id,)
    )
    stripes = await query(
        booking,
        "SELECT section_id, stripe, sold, held FROM section_stripes WHERE event_id = %s ORDER BY 1, 2",
        (event_id,),
    )
    holds = await query(
        booking,
        "SELECT customer_id, section_id, quantity, state FROM holds WHERE event_id = %s ORDER BY 1, 2, 3, 4",
        (event_id,),
    )
    requests = await query(
        booking, "SELECT customer_id, request_id FROM hold_requests WHERE event_id = %s ORDER BY 1, 2", (event_id,)
    )
    return {
        "seats": [(int(s) - base, status) for s, status in seats_rows],
        "stripes": stripes,
        "holds": holds,
        "requests": requests,
    }


def workload(rng: random.Random, event_id: int, unknown_event: int) -> list[tuple[int, str, Any, str | None]]:
    """(event, customer, selection as positions, request id) for a mix of
    every kind of hold and every way one fails."""
    customers = [f"c{i}" for i in range(14)]
    out: list[tuple[int, str, Any, str | None]] = []
    for n in range(80):
        earlier = [r for r in out if r[3] is not None]
        if earlier and rng.random() < 0.15:
            # A retry: the same call again, or its request id for another selection.
            event, customer, selection, request_id = rng.choice(earlier)
            if rng.random() < 0.4:
                selection = ("best", "G", 1) if selection != ("best", "G", 1) else ("best", "G", 2)
            out.append((event, customer, selection, request_id))
            continue
        customer = rng.choice(customers)
        roll = rng.random()
        if roll < 0.40:
            selection = ("seats", rng.sample(range(24), rng.randint(1, 4)))
        elif roll < 0.45:
            selection = ("seats", [rng.randrange(24), 24 + rng.randrange(6)])  # two sections
        elif roll < 0.50:
            selection = ("seats", [rng.randrange(24), 5000])  # no such seat
        elif roll < 0.56:
            selection = ("seats", rng.sample(range(24, 30), rng.randint(1, 2)))
        elif roll < 0.70:
            selection = ("best", rng.choice(["A", "A", "B"]), rng.randint(1, 4))
        elif roll < 0.72:
            selection = ("best", "Z", 1)  # no such section
        else:
            selection = ("best", "G", rng.randint(1, 4))
        event = unknown_event if n % 31 == 30 else event_id
        request_id = f"r{rng.randrange(6)}" if rng.random() < 0.3 else None
        out.append((event, customer, selection, request_id))
    return out


def to_selection(spec: Any, base: int) -> Selection:
    if spec[0] == "seats":
        return seats(spec[1], base)
    return QuantitySelection(spec[1], spec[2])


async def test_a_batch_answers_as_its_holds_would_one_by_one(stores: Stores) -> None:
    """The same requests against two identical events: in one batch, and
    one by one (batches of one) in the same order. Every answer and every
    row agree, and both events pass the audit."""
    async with booking_server(stores) as booking:
        store = booking.store
        kinds: set[str] = set()
        replays = 0
        for seed in (1, 2, 3):
            rng = random.Random(seed)
            batched, single = await make_event(booking), await make_event(booking)
            bases = {batched: await first_seat(booking, batched), single: await first_seat(booking, single)}
            # Earlier holds, some lapsed (reclaimable) and some live.
            for phase in range(2):
                for event_id in (batched, single):
                    early = [
                        attempt(booking, event_id, f"early{phase}-{i}", seats([i * 3 + phase], bases[event_id]))
                        for i in range(6)
                    ]
                    early.append(attempt(booking, event_id, f"early{phase}-b", QuantitySelection("A", 2)))
                    assert all(not isinstance(o, BaseException) for o in await one_by_one(store, early))
                if phase == 0:
                    booking.clock.advance(301)
            requests = workload(rng, 0, new_event_id())
            runs: dict[int, tuple[list[HoldAttempt], list[Outcome]]] = {}
            for event_id in (batched, single):
                attempts = [
                    attempt(
                        booking,
                        event_id if event == 0 else event,
                        customer,
                        to_selection(spec, bases[event_id]),
                        request_id,
                    )
                    for event, customer, spec, request_id in requests
                ]
                if event_id == batched:
                    runs[event_id] = (attempts, await store.hold_batch(attempts))
                else:
                    runs[event_id] = (attempts, await one_by_one(store, attempts))
            answers = {e: normalized(runs[e][1], runs[e][0], bases[e]) for e in runs}
            for i, (got, expected) in enumerate(zip(answers[batched], answers[single], strict=True)):
                assert got == expected, f"seed {seed}, request {i} {requests[i]}"
            kinds.update(a[0] if a[0] == "hold" else a[2] for a in answers[single])
            replays += sum(1 for a in answers[single] if a[0] == "hold" and a[-1])
            assert await state_of(booking, batched, bases[batched]) == await state_of(booking, single, bases[single])
            await audit(booking, batched)
            await audit(booking, single)
        # The workload covers wins, replays and every kind of refusal.
        assert kinds >= {
            "hold",
            "SEAT_UNAVAILABLE",
            "CUSTOMER_HOLD_LIMIT",
            "UNKNOWN_SEAT",
            "SEATS_IN_SEVERAL_SECTIONS",
            "UNKNOWN_SECTION",
            "EVENT_NOT_FOUND",
            "REQUEST_ID_REUSED",
            "SOLD_OUT",
        }, kinds
        assert replays > 0


async def test_a_failing_hold_does_not_fail_its_neighbours(stores: Stores) -> None:
    async with booking_server(stores) as booking:
        event_id = await make_event(booking, ga_capacity=3, ga_overbook=0)
        base = await first_seat(booking, event_id)
        taken = await booking.store.hold_one(attempt(booking, event_id, "early", seats([5], base)))
        assert not taken[1]
        attempts = [
            attempt(booking, event_id, "a", seats([0, 1], base)),
            attempt(booking, event_id, "b", seats([4, 5], base)),  # 5 is taken
            attempt(booking, event_id, "c", seats([2], base)),
            attempt(booking, event_id, "d", seats([3, 999], base)),  # 999 does not exist
            attempt(booking, event_id, "e", QuantitySelection("G", 2)),
            attempt(booking, event_id, "f", QuantitySelection("G", 2)),  # one place left
            attempt(booking, event_id, "g", QuantitySelection("Z", 1)),  # no such section
            attempt(booking, event_id, "h", seats([4], base)),  # free: b failed
        ]
        outcomes = await booking.store.hold_batch(attempts)
        reasons = [o.reason if isinstance(o, BoxofficeError) else "held" for o in outcomes]
        assert reasons == [
            "held",
            "SEAT_UNAVAILABLE",
            "held",
            "UNKNOWN_SEAT",
            "held",
            "NOT_ENOUGH_SEATS",
            "UNKNOWN_SECTION",
            "held",
        ]
        rows = await query(
            booking,
            "SELECT seat_id - %s, h.customer_id FROM seats s JOIN holds h USING (hold_id) "
            "WHERE s.event_id = %s AND s.status = 'HELD' ORDER BY 1",
            (base, event_id),
        )
        assert [tuple(r) for r in rows] == [(0, "a"), (1, "a"), (2, "c"), (4, "h"), (5, "early")]
        totals = await query(
            booking, "SELECT section_id, held FROM section_totals WHERE event_id = %s ORDER BY 1", (event_id,)
        )
        assert [tuple(r) for r in totals] == [("A", 5), ("B", 0), ("G", 2)]
        holds = await query(booking, "SELECT customer_id FROM holds WHERE event_id = %s ORDER BY 1", (event_id,))
        assert [r[0] for r in holds] == ["a", "c", "e", "early", "h"]
        await audit(booking, event_id)


async def test_control_one_transaction_batch_fails_every_neighbour(stores: Stores) -> None:
    """The control: holds batched in one transaction without deciding
    first, so that the first failure rolls back the batch. The test above
    catches it: the neighbours of a taken seat get nothing."""

    async with booking_server(stores, store_class=OneTransactionBatchStore) as booking:
        event_id = await make_event(booking)
        base = await first_seat(booking, event_id)
        await booking.store.hold_one(attempt(booking, event_id, "early", seats([5], base)))
        outcomes = await booking.store.hold_batch(
            [
                attempt(booking, event_id, "a", seats([0, 1], base)),
                attempt(booking, event_id, "b", seats([4, 5], base)),
                attempt(booking, event_id, "c", seats([2], base)),
            ]
        )
        assert all(isinstance(o, BaseException) for o in outcomes)


async def test_request_ids_within_and_across_batches(stores: Stores) -> None:
    async with booking_server(stores) as booking:
        event_id = await make_event(booking)
        base = await first_seat(booking, event_id)
        store = booking.store
        first = await store.hold_batch(
            [
                attempt(booking, event_id, "a", seats([0], base), "r1"),
                attempt(booking, event_id, "a", seats([0], base), "r1"),  # the same call twice
                attempt(booking, event_id, "a", seats([1], base), "r1"),  # the key, another selection
                attempt(booking, event_id, "b", seats([0], base), "r1"),  # another customer's key
                attempt(booking, event_id, "c", seats([0], base), "r2"),  # fails: a took seat 0
            ]
        )
        made, again = first[0], first[1]
        assert isinstance(made, tuple) and isinstance(again, tuple)
        assert (made[1], again[1], again[0].hold_id) == (False, True, made[0].hold_id)
        assert isinstance(first[2], BoxofficeError) and first[2].reason == "REQUEST_ID_REUSED"
        assert isinstance(first[3], BoxofficeError) and first[3].reason == "SEAT_UNAVAILABLE"
        assert isinstance(first[4], BoxofficeError) and first[4].reason == "SEAT_UNAVAILABLE"
        # A later batch replays the first answer; a failed hold's key is free.
        second = await store.hold_batch(
            [
                attempt(booking, event_id, "a", seats([0], base), "r1"),
                attempt(booking, event_id, "c", seats([2], base), "r2"),
            ]
        )
        replay, retried = second
        assert isinstance(replay, tuple) and replay[1] and replay[0].hold_id == made[0].hold_id
        assert isinstance(retried, tuple) and not retried[1]
        rows = await query(
            booking,
            "SELECT customer_id, request_id FROM hold_requests WHERE event_id = %s ORDER BY 1, 2",
            (event_id,),
        )
        assert [tuple(r) for r in rows] == [("a", "r1"), ("c", "r2")]
        await audit(booking, event_id)


async def test_the_customer_limit_counts_the_holds_before_in_the_batch(stores: Stores) -> None:
    async with booking_server(stores) as booking:
        event_id = await make_event(booking)
        base = await first_seat(booking, event_id)
        outcomes = await booking.store.hold_batch(
            [
                attempt(booking, event_id, "a", seats([0, 1], base)),
                attempt(booking, event_id, "a", QuantitySelection("G", 2)),
                attempt(booking, event_id, "a", seats([2], base)),
                attempt(booking, event_id, "b", seats([2], base)),
            ]
        )
        assert [o.reason if isinstance(o, BoxofficeError) else "held" for o in outcomes] == [
            "held",
            "held",
            "CUSTOMER_HOLD_LIMIT",
            "held",
        ]
        limit = outcomes[2]
        assert isinstance(limit, BoxofficeError) and limit.metadata == {"limit": "4", "held": "4"}


async def test_general_admission_in_a_batch_stops_at_capacity_and_reclaims_lapsed_places(stores: Stores) -> None:
    async with booking_server(stores) as booking:
        event_id = await make_event(booking, ga_capacity=10, ga_overbook=2, max_seats=100)
        store = booking.store
        outcomes = await store.hold_batch(
            [attempt(booking, event_id, f"p{i}", QuantitySelection("G", 1)) for i in range(15)]
        )
        reasons = [o.reason if isinstance(o, BoxofficeError) else "held" for o in outcomes]
        assert reasons == ["held"] * 12 + ["SOLD_OUT"] * 3
        # Every place lapses; the next batch takes them back.
        booking.clock.advance(301)
        outcomes = await store.hold_batch(
            [attempt(booking, event_id, f"q{i}", QuantitySelection("G", 4)) for i in range(4)]
        )
        reasons = [o.reason if isinstance(o, BoxofficeError) else "held" for o in outcomes]
        assert reasons == ["held", "held", "held", "SOLD_OUT"]
        rows = await query(
            booking,
            "SELECT state, count(*) FROM holds WHERE event_id = %s GROUP BY 1 ORDER BY 1",
            (event_id,),
        )
        assert [tuple(r) for r in rows] == [("EXPIRED", 12), ("HELD", 3)]
        await audit(booking, event_id)


async def test_holds_of_several_events_share_a_batch(stores: Stores) -> None:
    async with booking_server(stores) as booking:
        first, second = await make_event(booking), await make_event(booking)
        bases = [await first_seat(booking, first), await first_seat(booking, second)]
        outcomes = await booking.store.hold_batch(
            [
                attempt(booking, second, "a", seats([3], bases[1])),
                attempt(booking, first, "a", seats([3], bases[0])),
                attempt(booking, first, "b", QuantitySelection("A", 2)),
                attempt(booking, second, "b", QuantitySelection("G", 2)),
                attempt(booking, first, "c", seats([3], bases[0])),
            ]
        )
        assert [describe(o) for o in outcomes] == [
            str(second),
            str(first),
            str(first),
            str(second),
            "SEAT_UNAVAILABLE",
        ]
        await audit(booking, first)
        await audit(booking, second)


async def test_a_hold_past_its_deadline_fails_alone(stores: Stores) -> None:
    """One caller's deadline passes while the batch waits for a seat that
    another transaction has locked: that hold fails, the others do not."""
    async with booking_server(stores) as booking:
        event_id = await make_event(booking)
        base = await first_seat(booking, event_id)
        attempts = [
            attempt(booking, event_id, "short", seats([0], base), seconds=0.3),
            attempt(booking, event_id, "long", seats([1], base)),
            attempt(booking, event_id, "gone", seats([2], base), seconds=0.0005),
        ]
        async with await psycopg.AsyncConnection.connect(booking.database_url) as blocker:
            await blocker.execute(
                "SELECT 1 FROM seats WHERE event_id = %s AND seat_id = %s FOR UPDATE", (event_id, base + 1)
            )
            batch = asyncio.create_task(booking.store.hold_batch(attempts))
            await asyncio.sleep(0.6)
            await blocker.rollback()
        short, long, gone = await batch
        assert isinstance(short, DeadlineExceeded) and isinstance(gone, DeadlineExceeded)
        assert isinstance(long, tuple) and [s.seat_id for s in long[0].seats] == [base + 1]
        rows = await query(booking, "SELECT customer_id FROM holds WHERE event_id = %s", (event_id,))
        assert [r[0] for r in rows] == ["long"]
        await audit(booking, event_id)


async def test_a_hold_finished_past_its_deadline_rolls_back_and_the_others_go_again(stores: Stores) -> None:
    """Both holds are decided in time, but the batch ends (a test pause
    after the writes) past one caller's deadline: that hold is not made;
    the other is, in a batch of its own."""
    async with booking_server(stores, race_pause_seconds=0.4) as booking:
        event_id = await make_event(booking)
        base = await first_seat(booking, event_id)
        outcomes = await booking.store.hold_batch(
            [
                attempt(booking, event_id, "short", seats([0], base), seconds=0.2),
                attempt(booking, event_id, "long", seats([1], base)),
            ]
        )
        assert isinstance(outcomes[0], DeadlineExceeded)
        assert isinstance(outcomes[1], tuple) and outcomes[1][0].customer_id == "long"
        rows = await query(booking, "SELECT customer_id FROM holds WHERE event_id = %s", (event_id,))
        assert [r[0] for r in rows] == ["long"]
        await audit(booking, event_id)


async def test_concurrent_calls_share_one_statement(stores: Stores) -> None:
    async with booking_server(stores) as booking:
        event_id = await make_event(booking)
        base = await first_seat(booking, event_id)
        store = booking.store
        batcher = store.hold_batcher
        assert batcher is not None
        before = (batcher.batches_sent, batcher.items_sent)

        async def hold(i: int) -> tuple[Hold, bool]:
            with deadline.scope(10):
                return await store.hold_seats(
                    event_id=event_id,
                    customer_id=f"c{i}",
                    selection=seats([i], base),
                    hold_id=uuid.uuid4(),
                    request_id=None,
                    fingerprint=f"seats:{i}",
                    now=now_of(booking),
                )

        held = await asyncio.gather(*(hold(i) for i in range(20)))
        assert [h.seats[0].seat_id - base for h, _ in held] == list(range(20))
        assert (batcher.batches_sent - before[0], batcher.items_sent - before[1]) == (1, 20)
        await audit(booking, event_id)


async def test_a_batch_that_fails_as_a_whole_runs_its_holds_one_by_one(stores: Stores) -> None:
    async with booking_server(stores) as booking:
        event_id = await make_event(booking)
        base = await first_seat(booking, event_id)
        # A statement that writes two holds of this event fails as a whole;
        # one hold at a time passes.
        await execute(
            booking,
            f"""
            CREATE FUNCTION test_one_hold_per_statement() RETURNS trigger LANGUAGE plpgsql AS $$
            BEGIN
                IF (SELECT count(*) FROM made WHERE event_id = {event_id}) > 1 THEN
                    RAISE EXCEPTION 'test: one hold per statement';
                END IF;
                RETURN NULL;
            END $$
            """,
        )
        await execute(
            booking,
            "CREATE TRIGGER test_one_hold_per_statement AFTER INSERT ON holds REFERENCING NEW TABLE AS made "
            "FOR EACH STATEMENT EXECUTE FUNCTION test_one_hold_per_statement()",
        )
        try:
            outcomes = await booking.store.hold_batch(
                [
                    attempt(booking, event_id, "a", seats([0], base)),
                    attempt(booking, event_id, "b", seats([0], base)),
                    attempt(booking, event_id, "c", QuantitySelection("G", 1)),
                ]
            )
        finally:
            await execute(booking, "DROP TRIGGER test_one_hold_per_statement ON holds")
            await execute(booking, "DROP FUNCTION test_one_hold_per_statement()")
        assert [o.reason if isinstance(o, BoxofficeError) else "held" for o in outcomes].count("held") == 2
        assert [o.reason for o in outcomes if isinstance(o, BoxofficeError)] == ["SEAT_UNAVAILABLE"]
        await audit(booking, event_id)


async def test_hold_functions_never_plan_a_sequential_scan(stores: Stores) -> None:
    """Plans cached while a table was nearly empty must not scan it whole
    once it has grown: the hold, confirm and counter functions run with
    sequential scans off (and only one hold function exists)."""
    async with booking_server(stores) as booking:
        rows = await query(
            booking,
            "SELECT proname, proconfig FROM pg_proc WHERE proname IN "
            "('booking_hold_seats', 'booking_hold_batch', 'booking_confirm_hold', 'booking_move_counters') "
            "ORDER BY 1",
        )
        assert [(name, "enable_seqscan=off" in (config or [])) for name, config in rows] == [
            ("booking_confirm_hold", True),
            ("booking_hold_seats", True),
            ("booking_move_counters", True),
        ]
