"""Stores that get it wrong, for control tests only: they show that the
tests catch the bugs they are written for.

- The classic double-booking bug: read the seats' status, then write them
  unconditionally (SELECT-then-UPDATE), run under the same race as the real
  store.
- Batched holds that fail together: one transaction for the batch.
- The ticket limit counted outside the hold's statement: the customer's
  tickets read in one transaction, the hold made in another.
- Overbooking: a general-admission section's places counted from its holds
  in one transaction, the hold written in another.
- Seats locked in the order a hold lists them, not in ascending order.
- Best available picked from the free seats as read, without locking them.
- A late confirm that checks its hold still has its seats, then sells them
  in another transaction.

The races are held open by a :data:`Window` the test passes: the store
waits there between its check and its write (a :class:`Rendezvous` lets
the contenders on through together, once every one has checked)."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import Any

import psycopg

from booking_svc.adapters.postgres import HOLD_COLUMNS, HoldAttempt, PgBookingStore, Pool, hold_from_row
from booking_svc.model import Hold, HoldState, Money, QuantitySelection, SeatSelection, Selection
from boxoffice.db import transaction
from boxoffice.errors import FailedPrecondition, NotFound, ResourceExhausted

# The settings of a control's server: its calls wait at the window until
# every contender has checked, however long a loaded machine takes (the
# default deadline is 5 s).
CONTROL_ENV = {"BOXOFFICE_DEFAULT_DEADLINE_SECONDS": "90"}

# Where a store waits between its check and its write; the key says whose
# race it is (the contenders for one seat, one pair of crossed groups).
Window = Callable[[object], Awaitable[None]]


async def _no_window(key: object) -> None:
    return None


class Rendezvous:
    """A :data:`Window` that holds each caller until ``parties`` callers
    with the same key have reached it, then lets them all on: every
    contender has made its check before any of them writes. A party that
    never comes fails the others after ``timeout_seconds``. Made
    ``armed=False``, it lets callers straight on until :meth:`arm` (the
    calls that set a race up go through the same store)."""

    def __init__(self, parties: int, *, timeout_seconds: float = 60.0, armed: bool = True) -> None:
        self._parties = parties
        self._timeout_seconds = timeout_seconds
        self._armed = armed
        self._barriers: dict[object, asyncio.Barrier] = {}
        # How many callers reached the window, in all.
        self.reached = 0

    def arm(self) -> None:
        self._armed = True

    async def __call__(self, key: object) -> None:
        if not self._armed:
            return
        self.reached += 1
        barrier = self._barriers.setdefault(key, asyncio.Barrier(self._parties))
        async with asyncio.timeout(self._timeout_seconds):
            await barrier.wait()


class CheckThenUpdateStore(PgBookingStore):
    """Built as the real store is; it waits at its window between the check
    and the write."""

    def __init__(self, pool: Pool, *, window: Window = _no_window, **kwargs: Any) -> None:
        super().__init__(pool, **kwargs)
        self._pool_ = pool
        self._window = window

    async def hold_seats(
        self,
        *,
        event_id: int,
        customer_id: str,
        selection: Selection,
        hold_id: uuid.UUID,
        request_id: str | None,
        fingerprint: str,
        now: datetime,
    ) -> tuple[Hold, bool]:
        assert isinstance(selection, SeatSelection)
        ids = sorted(selection.seat_ids)
        async with transaction(self._pool_) as conn:
            cur = await conn.execute(
                "SELECT seat_id, status, section_id FROM seats WHERE event_id = %s AND seat_id = ANY (%s)",
                (event_id, ids),
            )
            rows = await cur.fetchall()
        taken = [r[0] for r in rows if r[1] != "AVAILABLE"]
        if taken:
            raise FailedPrecondition(
                "taken", reason="SEAT_UNAVAILABLE", metadata={"seat_ids": ",".join(map(str, taken))}
            )
        section_id = rows[0][2]
        await self._window(tuple(ids))  # the window between check and write
        async with transaction(self._pool_) as conn:
            await conn.execute(
                "UPDATE seats SET status = 'HELD', hold_id = %s, hold_expires_at = %s + interval '5 minutes' "
                "WHERE event_id = %s AND seat_id = ANY (%s)",
                (hold_id, now, event_id, ids),
            )
            await conn.execute(
                "INSERT INTO holds (hold_id, event_id, customer_id, section_id, quantity, state, amount_minor, "
                "currency, expires_at, created_at) VALUES (%s, %s, %s, %s, %s, 'HELD', 0, 'EUR', "
                "%s + interval '5 minutes', %s)",
                (hold_id, event_id, customer_id, section_id, len(ids), now, now),
            )
            await conn.execute(
                "INSERT INTO hold_seats (hold_id, event_id, seat_id, row_label, seat_number, label) "
                "SELECT %s, event_id, seat_id, row_label, seat_number, label FROM seats "
                "WHERE event_id = %s AND seat_id = ANY (%s)",
                (hold_id, event_id, ids),
            )
            for seat_id in ids:
                await conn.execute(
                    "UPDATE section_stripes SET held = held + 1 "
                    "WHERE event_id = %s AND section_id = %s AND stripe = %s %% booking_stripes()",
                    (event_id, section_id, seat_id),
                )
        hold = await self.get_hold(hold_id)
        assert hold is not None
        return hold, False


class OneTransactionBatchStore(PgBookingStore):
    """Batched holds the naive way: every hold of the batch in one
    transaction, one hold statement after another, so that the first hold
    that fails rolls back (and fails) all of them."""

    def __init__(self, pool: Pool, **kwargs: Any) -> None:
        super().__init__(pool, **kwargs)
        self._pool_ = pool

    async def hold_batch(self, attempts: list[HoldAttempt]) -> list[tuple[Hold, bool] | BaseException]:
        try:
            async with transaction(self._pool_) as conn:
                answers: list[tuple[Hold, bool] | BaseException] = []
                for a in attempts:
                    cur = await conn.execute(
                        f"SELECT outcome, {HOLD_COLUMNS}, replayed FROM booking_hold_seats("
                        "ARRAY[jsonb_populate_record(NULL::booking_hold_request, %s::jsonb)], %s, 0)",
                        (json.dumps(a.request(5000)), a.now),
                    )
                    row = await cur.fetchone()
                    assert row is not None
                    if row[0] is not None:
                        raise FailedPrecondition(f"hold failed: {row[0]}", reason="SEAT_UNAVAILABLE")
                    answers.append((hold_from_row(row[1:]), bool(row[18])))
                return answers
        except (psycopg.Error, FailedPrecondition) as err:
            return [err] * len(attempts)


class CountThenHoldStore(PgBookingStore):
    """The ticket limit the naive way: count what the customer bought and
    holds (in a transaction of its own), refuse past :attr:`LIMIT`, then
    make the hold. It waits at its window between the count and the hold;
    the events it is tested on set a ticket limit far above :attr:`LIMIT`,
    so that the statement's own check never decides."""

    LIMIT = 4

    def __init__(self, pool: Pool, *, window: Window = _no_window, **kwargs: Any) -> None:
        super().__init__(pool, **kwargs)
        self._pool_ = pool
        self._window = window

    async def hold_seats(
        self,
        *,
        event_id: int,
        customer_id: str,
        selection: Selection,
        hold_id: uuid.UUID,
        request_id: str | None,
        fingerprint: str,
        now: datetime,
    ) -> tuple[Hold, bool]:
        async with transaction(self._pool_) as conn:
            cur = await conn.execute(
                "SELECT COALESCE(sum(quantity) FILTER (WHERE state = 'HELD' AND expires_at > %s), 0), "
                "COALESCE(sum(quantity) FILTER (WHERE state = 'CONFIRMED'), 0) "
                "FROM holds WHERE event_id = %s AND customer_id = %s",
                (now, event_id, customer_id),
            )
            row = await cur.fetchone()
        assert row is not None
        held, bought = int(row[0]), int(row[1])
        wanted = len(selection.seat_ids) if isinstance(selection, SeatSelection) else selection.quantity
        if held + bought + wanted > self.LIMIT:
            raise FailedPrecondition(
                "over the limit",
                reason="TICKET_LIMIT_REACHED",
                metadata={"limit": str(self.LIMIT), "held": str(held), "bought": str(bought)},
            )
        await self._window(customer_id)  # the window between the count and the hold
        return await super().hold_seats(
            event_id=event_id,
            customer_id=customer_id,
            selection=selection,
            hold_id=hold_id,
            request_id=request_id,
            fingerprint=fingerprint,
            now=now,
        )


async def _insert_hold(
    conn: psycopg.AsyncConnection[Any],
    *,
    hold_id: uuid.UUID,
    event_id: int,
    customer_id: str,
    section_id: str,
    seat_ids: list[int],
    quantity: int,
    now: datetime,
) -> None:
    """The hold's rows as the real store writes them (HELD for the event's
    hold TTL, at the section's price)."""
    await conn.execute(
        "INSERT INTO holds (hold_id, event_id, customer_id, section_id, quantity, state, amount_minor, currency, "
        "expires_at, created_at) "
        "SELECT %s, e.event_id, %s, s.section_id, %s, 'HELD', s.price_minor * %s, s.currency, "
        "%s + make_interval(secs => e.hold_ttl_seconds), %s "
        "FROM events e JOIN sections s ON s.event_id = e.event_id AND s.section_id = %s WHERE e.event_id = %s",
        (hold_id, customer_id, quantity, quantity, now, now, section_id, event_id),
    )
    if seat_ids:
        await conn.execute(
            "INSERT INTO hold_seats (hold_id, event_id, seat_id, row_label, seat_number, label) "
            "SELECT %s, event_id, seat_id, row_label, seat_number, label FROM seats "
            "WHERE event_id = %s AND seat_id = ANY (%s)",
            (hold_id, event_id, seat_ids),
        )


class CountThenHoldPlacesStore(PgBookingStore):
    """General admission the naive way: count the section's live holds,
    refuse past capacity plus the overbook limit, then (in another
    transaction) write the hold. It keeps no counter, so that the
    counters' CHECK, the last net behind the real store, does not stand
    behind it either."""

    def __init__(self, pool: Pool, *, window: Window = _no_window, **kwargs: Any) -> None:
        super().__init__(pool, **kwargs)
        self._pool_ = pool
        self._window = window

    async def hold_seats(
        self,
        *,
        event_id: int,
        customer_id: str,
        selection: Selection,
        hold_id: uuid.UUID,
        request_id: str | None,
        fingerprint: str,
        now: datetime,
    ) -> tuple[Hold, bool]:
        assert isinstance(selection, QuantitySelection)
        async with transaction(self._pool_) as conn:
            cur = await conn.execute(
                "SELECT s.capacity + s.overbook_limit - COALESCE((SELECT sum(h.quantity) FROM holds h "
                "WHERE h.event_id = s.event_id AND h.section_id = s.section_id "
                "AND (h.state = 'CONFIRMED' OR (h.state = 'HELD' AND h.expires_at > %s))), 0) "
                "FROM sections s WHERE s.event_id = %s AND s.section_id = %s",
                (now, event_id, selection.section_id),
            )
            row = await cur.fetchone()
        assert row is not None
        if int(row[0]) < selection.quantity:
            raise ResourceExhausted("sold out", reason="SOLD_OUT", metadata={"section_id": selection.section_id})
        await self._window(selection.section_id)  # the window between the count and the write
        async with transaction(self._pool_) as conn:
            await _insert_hold(
                conn,
                hold_id=hold_id,
                event_id=event_id,
                customer_id=customer_id,
                section_id=selection.section_id,
                seat_ids=[],
                quantity=selection.quantity,
                now=now,
            )
        hold = await self.get_hold(hold_id)
        assert hold is not None
        return hold, False


class LockInGivenOrderStore(PgBookingStore):
    """Locks a hold's seats one by one in the order the selection lists
    them (the real statement locks them in ascending order, and the service
    sorts them before); it waits at its window once it holds the first.
    The rest is all or nothing, in one transaction."""

    def __init__(self, pool: Pool, *, window: Window = _no_window, **kwargs: Any) -> None:
        super().__init__(pool, **kwargs)
        self._pool_ = pool
        self._window = window

    async def hold_seats(
        self,
        *,
        event_id: int,
        customer_id: str,
        selection: Selection,
        hold_id: uuid.UUID,
        request_id: str | None,
        fingerprint: str,
        now: datetime,
    ) -> tuple[Hold, bool]:
        assert isinstance(selection, SeatSelection)
        ids = list(selection.seat_ids)
        async with transaction(self._pool_) as conn:
            rows = []
            for n, seat_id in enumerate(ids):
                cur = await conn.execute(
                    "SELECT status, section_id FROM seats WHERE event_id = %s AND seat_id = %s FOR UPDATE",
                    (event_id, seat_id),
                )
                found = await cur.fetchone()
                if found is None:
                    raise NotFound("no such seat", reason="UNKNOWN_SEAT", metadata={"seat_ids": str(seat_id)})
                rows.append(found)
                if n == 0:
                    await self._window(frozenset(ids))  # the first seat locked
            taken = [seat_id for seat_id, (status, _) in zip(ids, rows, strict=True) if status != "AVAILABLE"]
            if taken:
                raise FailedPrecondition(
                    "taken", reason="SEAT_UNAVAILABLE", metadata={"seat_ids": ",".join(map(str, taken))}
                )
            section_id = rows[0][1]
            await conn.execute(
                "UPDATE seats SET status = 'HELD', hold_id = %s, "
                "hold_expires_at = %s + make_interval(secs => (SELECT hold_ttl_seconds FROM events WHERE event_id = %s)) "
                "WHERE event_id = %s AND seat_id = ANY (%s)",
                (hold_id, now, event_id, event_id, ids),
            )
            await _insert_hold(
                conn,
                hold_id=hold_id,
                event_id=event_id,
                customer_id=customer_id,
                section_id=section_id,
                seat_ids=ids,
                quantity=len(ids),
                now=now,
            )
            await conn.execute(
                "SELECT booking_move_counters(booking_hold_moves(%s, %s, %s, %s, 1, 0))",
                (event_id, section_id, sorted(ids), len(ids)),
            )
        hold = await self.get_hold(hold_id)
        assert hold is not None
        return hold, False


class PickWithoutLocksStore(PgBookingStore):
    """Best available the naive way: read the lowest free seats of the
    section (no row lock, no SKIP LOCKED), then, in another transaction,
    mark them held whatever they are by then."""

    def __init__(self, pool: Pool, *, window: Window = _no_window, **kwargs: Any) -> None:
        super().__init__(pool, **kwargs)
        self._pool_ = pool
        self._window = window

    async def hold_seats(
        self,
        *,
        event_id: int,
        customer_id: str,
        selection: Selection,
        hold_id: uuid.UUID,
        request_id: str | None,
        fingerprint: str,
        now: datetime,
    ) -> tuple[Hold, bool]:
        assert isinstance(selection, QuantitySelection)
        async with transaction(self._pool_) as conn:
            cur = await conn.execute(
                "SELECT seat_id FROM seats WHERE event_id = %s AND section_id = %s AND status = 'AVAILABLE' "
                "ORDER BY seat_id LIMIT %s",
                (event_id, selection.section_id, selection.quantity),
            )
            ids = [int(r[0]) for r in await cur.fetchall()]
        if len(ids) < selection.quantity:
            raise ResourceExhausted("sold out", reason="SOLD_OUT", metadata={"section_id": selection.section_id})
        await self._window(selection.section_id)  # the window between the pick and the write
        async with transaction(self._pool_) as conn:
            await conn.execute(
                "UPDATE seats SET status = 'HELD', hold_id = %s, "
                "hold_expires_at = %s + make_interval(secs => (SELECT hold_ttl_seconds FROM events WHERE event_id = %s)) "
                "WHERE event_id = %s AND seat_id = ANY (%s)",
                (hold_id, now, event_id, event_id, ids),
            )
            await _insert_hold(
                conn,
                hold_id=hold_id,
                event_id=event_id,
                customer_id=customer_id,
                section_id=selection.section_id,
                seat_ids=ids,
                quantity=len(ids),
                now=now,
            )
            await conn.execute(
                "SELECT booking_move_counters(booking_hold_moves(%s, %s, %s, %s, 1, 0))",
                (event_id, selection.section_id, ids, len(ids)),
            )
        hold = await self.get_hold(hold_id)
        assert hold is not None
        return hold, False


class CheckThenConfirmStore(PgBookingStore):
    """ConfirmHold the naive way: check that the hold is HELD and every one
    of its seats is still its own (as the real statement does for a lapsed
    hold), then, in another transaction, sell its seats and confirm it. No
    idempotency key: a test of this store sends each confirm once."""

    def __init__(self, pool: Pool, *, window: Window = _no_window, **kwargs: Any) -> None:
        super().__init__(pool, **kwargs)
        self._pool_ = pool
        self._window = window

    async def confirm_hold(
        self, *, hold_id: uuid.UUID, idempotency_key: str, payment_id: str, amount_paid: Money, now: datetime
    ) -> Hold:
        hold = await self.get_hold(hold_id)
        if hold is None:
            raise NotFound("no such hold", reason="HOLD_NOT_FOUND")
        async with transaction(self._pool_) as conn:
            cur = await conn.execute(
                "SELECT count(*) FROM seats WHERE event_id = %s AND hold_id = %s AND status = 'HELD'",
                (hold.event_id, hold_id),
            )
            row = await cur.fetchone()
        assert row is not None
        if hold.state is not HoldState.HELD or int(row[0]) < hold.quantity:
            raise FailedPrecondition("the hold expired", reason="HOLD_EXPIRED", metadata={"hold_id": str(hold_id)})
        await self._window(hold_id)  # the window between the check and the sale
        seat_ids = [s.seat_id for s in hold.seats]
        async with transaction(self._pool_) as conn:
            await conn.execute(
                "UPDATE seats SET status = 'SOLD', hold_expires_at = NULL WHERE event_id = %s AND seat_id = ANY (%s)",
                (hold.event_id, seat_ids),
            )
            await conn.execute(
                "UPDATE holds SET state = 'CONFIRMED', confirmed_at = %s, payment_id = %s WHERE hold_id = %s",
                (now, payment_id, hold_id),
            )
            await conn.execute(
                "SELECT booking_move_counters(booking_hold_moves(%s, %s, %s, %s, -1, 1))",
                (hold.event_id, hold.section_id, seat_ids, hold.quantity),
            )
        confirmed = await self.get_hold(hold_id)
        assert confirmed is not None
        return confirmed
