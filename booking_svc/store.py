"""Booking storage on Postgres, the arbiter of every seat.

HoldSeats is one statement: the holds that arrive together go as one call
of ``booking_hold_batch`` (``sql/booking_hold_batch.sql``), which decides
each of them as ``booking_hold_seats`` would, one after another, and
writes the winners at once: one round trip and one commit for the batch,
each hold all or nothing, a failing hold failing alone. Either way the
implicit transaction commits on the server, so the counter rows it moves
are locked only until that commit, never across a round trip to this
process. A section counts in stripes (16 for a seated section, by seat id;
one for general admission) so that a hot section's holds do not all queue
on one row. The other mutations are short transactions through
:func:`boxoffice.db.transaction` that take their locks in the order the
functions do (hold rows, seats by ascending id, counter stripes in
ascending order), so that no two transactions wait on each other in a
cycle; a deadlock is retried once all the same.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
import uuid
from collections import Counter, defaultdict
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Protocol, TypeVar

import psycopg
from psycopg import AsyncConnection
from psycopg.rows import TupleRow
from psycopg_pool import AsyncConnectionPool

from booking_svc.model import (
    Event,
    EventKind,
    EventSpec,
    Hold,
    HoldState,
    Money,
    QuantitySelection,
    RefundPolicy,
    RowSpec,
    SeatMap,
    SeatRef,
    SeatRow,
    SeatSelection,
    Section,
    SectionCounters,
    SectionKind,
    SectionSeatMap,
    Selection,
    SweepResult,
)
from boxoffice import deadline
from boxoffice.batching import MicroBatcher
from boxoffice.db import transaction
from boxoffice.errors import (
    Aborted,
    AlreadyExists,
    BoxofficeError,
    DeadlineExceeded,
    FailedPrecondition,
    Internal,
    InvalidArgument,
    NotFound,
    PermissionDenied,
    ResourceExhausted,
    Unavailable,
)

Pool = AsyncConnectionPool[AsyncConnection[TupleRow]]
T = TypeVar("T")

_log = logging.getLogger("booking_svc.store")

# A seated section counts in this many stripes (seat_id % STRIPES); a
# general-admission section in one (the section_stripes table).
STRIPES = 16

HOLD_COLUMNS = (
    "hold_id, event_id, customer_id, section_id, quantity, state, amount_minor, currency, expires_at, "
    "created_at, confirmed_at, payment_id, refund_amount_minor, seat_ids, row_labels, seat_numbers, labels"
)


class BookingStore(Protocol):
    """What the booking handlers need from storage."""

    async def create_event(self, spec: EventSpec) -> Event: ...

    async def get_event(self, event_id: int) -> Event: ...

    async def load_inventory(self, event_id: int, rows: Sequence[RowSpec]) -> int: ...

    async def seat_map(self, event_id: int, now: datetime) -> SeatMap: ...

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
    ) -> tuple[Hold, bool]: ...

    async def get_hold(self, hold_id: uuid.UUID) -> Hold | None: ...

    async def list_holds(
        self, *, event_id: int, customer_id: str | None, limit: int, after: tuple[datetime, uuid.UUID] | None
    ) -> list[Hold]: ...

    async def release_hold(self, *, hold_id: uuid.UUID, customer_id: str, now: datetime) -> Hold: ...

    async def extend_hold(
        self, *, hold_id: uuid.UUID, customer_id: str, extend_by: timedelta, max_lifetime: timedelta, now: datetime
    ) -> Hold: ...

    async def confirm_hold(
        self, *, hold_id: uuid.UUID, idempotency_key: str, payment_id: str, amount_paid: Money, now: datetime
    ) -> Hold: ...

    async def cancel_booking(
        self, *, hold_id: uuid.UUID, customer_id: str, reason: str, now: datetime
    ) -> tuple[Hold, int]: ...

    async def sweep(self, *, now: datetime, batch_size: int) -> SweepResult: ...

    async def section_counters(self) -> list[SectionCounters]: ...


def _hold_from_row(row: Sequence[Any]) -> Hold:
    (
        hold_id,
        event_id,
        customer_id,
        section_id,
        quantity,
        state,
        amount_minor,
        currency,
        expires_at,
        created_at,
        confirmed_at,
        payment_id,
        refund_amount_minor,
        seat_ids,
        row_labels,
        seat_numbers,
        labels,
    ) = row[:17]
    return Hold(
        hold_id=hold_id,
        event_id=event_id,
        customer_id=customer_id,
        section_id=section_id,
        quantity=quantity,
        state=HoldState(state),
        amount=Money(currency, amount_minor),
        expires_at=expires_at,
        created_at=created_at,
        confirmed_at=confirmed_at,
        payment_id=payment_id,
        refund_amount_minor=refund_amount_minor,
        seats=tuple(
            SeatRef(seat_id=s, row_label=r, seat_number=n, label=lb)
            for s, r, n, lb in zip(seat_ids, row_labels, seat_numbers, labels, strict=True)
        ),
    )


def _hold_error(sqlstate: str | None, detail: str, event_id: int, selection: Selection) -> BoxofficeError | None:
    """The domain error for a SQLSTATE of ``booking_hold_seats`` (raised) or
    ``booking_hold_batch`` (answered), with its DETAIL."""
    section = selection.section_id if isinstance(selection, QuantitySelection) else ""
    match sqlstate:
        case "B1001":
            return FailedPrecondition(
                f"seats {detail} are not available", reason="SEAT_UNAVAILABLE", metadata={"seat_ids": detail}
            )
        case "B1002":
            return ResourceExhausted(
                "the section is sold out",
                reason="SOLD_OUT",
                metadata={"event_id": str(event_id), "section_id": section},
            )
        case "B1003":
            limit, _, held = detail.partition(",")
            return FailedPrecondition(
                f"a customer may hold at most {limit} seats of this event at once",
                reason="CUSTOMER_HOLD_LIMIT",
                metadata={"limit": limit, "held": held},
            )
        case "B1004":
            return InvalidArgument(
                "request_id was already used for another selection",
                reason="REQUEST_ID_REUSED",
                metadata={"field": "request_id"},
            )
        case "B1005":
            return NotFound(
                f"event {event_id} does not exist", reason="EVENT_NOT_FOUND", metadata={"event_id": str(event_id)}
            )
        case "B1006":
            return InvalidArgument(
                f"section {detail!r} does not exist in event {event_id}",
                reason="UNKNOWN_SECTION",
                metadata={"field": "best_available.section_id", "section_id": detail},
            )
        case "B1007":
            return InvalidArgument(
                f"seats {detail} do not exist in event {event_id}",
                reason="UNKNOWN_SEAT",
                metadata={"field": "seats.seat_ids", "seat_ids": detail},
            )
        case "B1008":
            return InvalidArgument(
                "the seats must all be in one section",
                reason="SEATS_IN_SEVERAL_SECTIONS",
                metadata={"field": "seats.seat_ids"},
            )
        case "B1009":
            return ResourceExhausted(
                f"only {detail} seats are left in the section",
                reason="NOT_ENOUGH_SEATS",
                metadata={"available": detail, "section_id": section},
            )
        case "B1010":
            return Aborted(
                "the free seats are being taken by other customers; try again",
                reason="SEATS_CONTENDED",
                metadata={"section_id": section},
            )
    return None


async def _apply_counters(conn: AsyncConnection[TupleRow], deltas: dict[tuple[int, str, int], tuple[int, int]]) -> None:
    """Add (held, sold) to each (event, section, stripe), locking the stripes
    in ascending order first, as the hold function does."""
    keys = sorted(k for k, v in deltas.items() if v != (0, 0))
    if not keys:
        return
    columns = (
        [k[0] for k in keys],
        [k[1] for k in keys],
        [k[2] for k in keys],
        [deltas[k][0] for k in keys],
        [deltas[k][1] for k in keys],
    )
    if len(keys) > 1:
        await conn.execute(
            """
            SELECT 1 FROM section_stripes st
              JOIN unnest(%s::bigint[], %s::text[], %s::smallint[]) AS d(event_id, section_id, stripe)
                ON st.event_id = d.event_id AND st.section_id = d.section_id AND st.stripe = d.stripe
             ORDER BY st.event_id, st.section_id, st.stripe
               FOR UPDATE OF st
            """,
            columns[:3],
        )
    await conn.execute(
        """
        UPDATE section_stripes st SET held = st.held + d.held, sold = st.sold + d.sold
          FROM unnest(%s::bigint[], %s::text[], %s::smallint[], %s::int[], %s::int[])
               AS d(event_id, section_id, stripe, held, sold)
         WHERE st.event_id = d.event_id AND st.section_id = d.section_id AND st.stripe = d.stripe
        """,
        columns,
    )


@dataclass(frozen=True, slots=True)
class HoldAttempt:
    """One HoldSeats call on its way to Postgres."""

    event_id: int
    customer_id: str
    selection: Selection
    hold_id: uuid.UUID
    request_id: str | None
    fingerprint: str
    now: datetime
    # When its caller stops waiting (time.monotonic()).
    deadline_at: float


def _seat_ids(selection: Selection) -> list[int]:
    return sorted(selection.seat_ids) if isinstance(selection, SeatSelection) else []


def _batch_params(attempts: Sequence[HoldAttempt], remaining_ms: Sequence[int], pause: float) -> tuple[Any, ...]:
    """The arguments of ``booking_hold_batch``."""
    seats = [_seat_ids(a.selection) for a in attempts]
    return (
        [a.event_id for a in attempts],
        [a.customer_id for a in attempts],
        [len(s) for s in seats],
        [seat for s in seats for seat in s],
        [a.selection.section_id if isinstance(a.selection, QuantitySelection) else None for a in attempts],
        [a.selection.quantity if isinstance(a.selection, QuantitySelection) else None for a in attempts],
        [a.hold_id for a in attempts],
        [a.request_id for a in attempts],
        [a.fingerprint for a in attempts],
        list(remaining_ms),
        max(a.now for a in attempts),
        pause,
    )


_CONFIRM_SQL = b"SELECT outcome, in_flight, key_reused FROM booking_confirm_hold(%s, %s, %s, %s, %s, %s, %s)"

_HOLD_BATCH_SQL = (
    f"SELECT idx, error_state, error_detail, {HOLD_COLUMNS}, replayed FROM booking_hold_batch("
    "%s::bigint[], %s::text[], %s::int[], %s::bigint[], %s::text[], %s::int[], %s::uuid[], %s::text[], "
    "%s::text[], %s::int[], %s, %s)"
).encode()


def _batch_outcome(attempt: HoldAttempt, row: Sequence[Any]) -> tuple[Hold, bool] | BoxofficeError:
    """One answer of ``booking_hold_batch``: the hold, or the error that
    ``booking_hold_seats`` would have raised."""
    state = row[1]
    if state is None:
        return _hold_from_row(row[3:20]), bool(row[20])
    if state == "57014":
        return DeadlineExceeded("the hold could not be made within the deadline", reason="DEADLINE_EXCEEDED")
    domain = _hold_error(state, row[2] or "", attempt.event_id, attempt.selection)
    return domain if domain is not None else Internal(f"hold failed ({state})", reason="INTERNAL")


def _is_deadlock(err: BaseException) -> bool:
    return isinstance(err, psycopg.errors.DeadlockDetected) or isinstance(
        err.__cause__, psycopg.errors.DeadlockDetected
    )


async def _retry_deadlock_once(work: Callable[[], Awaitable[T]]) -> T:
    """Run ``work``; once more if Postgres broke a deadlock by aborting it."""
    try:
        return await work()
    except (Unavailable, psycopg.errors.DeadlockDetected) as err:
        if not _is_deadlock(err):
            raise
    return await work()


_ERROR_CLASSES: dict[str, type[BoxofficeError]] = {
    cls.code.name: cls
    for cls in (FailedPrecondition, NotFound, InvalidArgument, PermissionDenied, ResourceExhausted, Aborted)
}


def _replay(outcome: dict[str, Any]) -> Hold:
    """A stored ConfirmHold answer (``booking_confirm_hold``): the hold, or
    its error raised."""
    if "hold" in outcome:
        return Hold.from_json(outcome["hold"])
    error = outcome["error"]
    cls = _ERROR_CLASSES.get(error["code"], Internal)
    raise cls(error["message"], reason=error["reason"], metadata=error["metadata"])


class PgBookingStore:
    """:class:`BookingStore` on Postgres.

    ``race_pause_seconds`` is a test hook: HoldSeats sleeps that long inside
    its transaction, between claiming the seats and moving the counter (once
    per batch), to hold race windows open. It is 0 (off) unless a test
    constructs the store otherwise; nothing on the wire can set it.

    ``hold_batch_*`` shape the batches of HoldSeats calls (see
    :class:`booking_svc.batcher.MicroBatcher`); ``hold_batch_max`` of 1 sends
    each call alone (``booking_hold_seats``).
    """

    def __init__(
        self,
        pool: Pool,
        *,
        race_pause_seconds: float = 0.0,
        hold_batch_max: int = 64,
        hold_batches_in_flight: int = 2,
        hold_batch_overlap_min: int | None = None,
        hold_batch_linger_seconds: float = 0.0,
    ) -> None:
        self._pool = pool
        self._race_pause_seconds = race_pause_seconds
        # HoldSeats calls that arrive together go to Postgres as one
        # statement (booking_hold_batch); at most 1 means one by one.
        self.hold_batcher: MicroBatcher[HoldAttempt, tuple[Hold, bool]] | None = (
            MicroBatcher(
                self.hold_batch,
                name="booking-hold-batcher",
                max_batch=hold_batch_max,
                max_in_flight=hold_batches_in_flight,
                overlap_min=hold_batch_overlap_min,
                linger_seconds=hold_batch_linger_seconds,
            )
            if hold_batch_max > 1
            else None
        )

    # -- events and inventory ------------------------------------------------

    async def create_event(self, spec: EventSpec) -> Event:
        async with transaction(self._pool) as conn:
            cur = await conn.execute(
                """
                INSERT INTO events (event_id, display_name, kind, starts_at, hold_ttl_seconds,
                                    max_seats_per_customer, refundable_until, refund_percent)
                VALUES (%s, %s, %s, %s, %s, %s, %s, %s)
                ON CONFLICT (event_id) DO NOTHING
                RETURNING event_id
                """,
                (
                    spec.event_id,
                    spec.display_name,
                    spec.kind.value,
                    spec.starts_at,
                    spec.hold_ttl_seconds,
                    spec.max_seats_per_customer,
                    spec.refund_policy.refundable_until,
                    spec.refund_policy.refund_percent,
                ),
            )
            if await cur.fetchone() is None:
                raise AlreadyExists(
                    f"event {spec.event_id} already exists",
                    reason="EVENT_EXISTS",
                    metadata={"event_id": str(spec.event_id)},
                )
            async with conn.cursor() as many:
                await many.executemany(
                    """
                    INSERT INTO sections (event_id, section_id, display_name, kind, capacity, overbook_limit,
                                          price_minor, currency)
                    VALUES (%s, %s, %s, %s, %s, %s, %s, %s)
                    """,
                    [
                        (
                            spec.event_id,
                            s.section_id,
                            s.display_name,
                            s.kind.value,
                            s.capacity,
                            s.overbook_limit,
                            s.price.amount_minor,
                            s.price.currency,
                        )
                        for s in spec.sections
                    ],
                )
            await conn.execute(
                """
                INSERT INTO section_stripes (event_id, section_id, stripe, capacity)
                SELECT %s, n.section_id, g.stripe, CASE WHEN n.kind = 'SEATED' THEN 0 ELSE n.places END
                  FROM unnest(%s::text[], %s::text[], %s::int[]) AS n(section_id, kind, places)
                 CROSS JOIN LATERAL generate_series(0, CASE WHEN n.kind = 'SEATED' THEN %s - 1 ELSE 0 END) AS g(stripe)
                """,
                (
                    spec.event_id,
                    [s.section_id for s in spec.sections],
                    [s.kind.value for s in spec.sections],
                    [s.capacity + s.overbook_limit for s in spec.sections],
                    STRIPES,
                ),
            )
            return await self._read_event(conn, spec.event_id)

    async def get_event(self, event_id: int) -> Event:
        async with transaction(self._pool) as conn:
            return await self._read_event(conn, event_id)

    async def _read_event(self, conn: AsyncConnection[TupleRow], event_id: int) -> Event:
        cur = await conn.execute(
            """
            SELECT display_name, kind, starts_at, hold_ttl_seconds, max_seats_per_customer,
                   refundable_until, refund_percent
              FROM events WHERE event_id = %s
            """,
            (event_id,),
        )
        row = await cur.fetchone()
        if row is None:
            raise NotFound(
                f"event {event_id} does not exist", reason="EVENT_NOT_FOUND", metadata={"event_id": str(event_id)}
            )
        cur = await conn.execute(
            """
            SELECT sc.section_id, sc.display_name, sc.kind, sc.capacity, sc.overbook_limit, sc.price_minor,
                   sc.currency, t.sold, t.held
              FROM sections sc
              JOIN section_totals t ON t.event_id = sc.event_id AND t.section_id = sc.section_id
             WHERE sc.event_id = %s ORDER BY sc.section_id
            """,
            (event_id,),
        )
        sections = tuple(
            Section(
                section_id=r[0],
                display_name=r[1],
                kind=SectionKind(r[2]),
                capacity=r[3],
                overbook_limit=r[4],
                price=Money(r[6], r[5]),
                sold=r[7],
                held=r[8],
            )
            for r in await cur.fetchall()
        )
        return Event(
            event_id=event_id,
            display_name=row[0],
            kind=EventKind(row[1]),
            starts_at=row[2],
            hold_ttl_seconds=row[3],
            max_seats_per_customer=row[4],
            refund_policy=RefundPolicy(row[5], row[6]),
            sections=sections,
        )

    async def load_inventory(self, event_id: int, rows: Sequence[RowSpec]) -> int:
        """Add seats row by row; every row is checked before anything is
        written, and all of them are written or none. Seat ids are
        consecutive within a row (the event's row lock serialises loads)."""
        async with transaction(self._pool, default_seconds=60.0) as conn:
            cur = await conn.execute("SELECT 1 FROM events WHERE event_id = %s FOR UPDATE", (event_id,))
            if await cur.fetchone() is None:
                raise NotFound(
                    f"event {event_id} does not exist", reason="EVENT_NOT_FOUND", metadata={"event_id": str(event_id)}
                )
            cur = await conn.execute("SELECT section_id, kind FROM sections WHERE event_id = %s", (event_id,))
            kinds = {r[0]: r[1] for r in await cur.fetchall()}
            for index, spec in enumerate(rows):
                field = f"rows[{index}].section_id"
                if spec.section_id not in kinds:
                    raise InvalidArgument(
                        f"{field}: section {spec.section_id!r} does not exist in event {event_id}",
                        reason="UNKNOWN_SECTION",
                        metadata={"field": field, "section_id": spec.section_id},
                    )
                if kinds[spec.section_id] != SectionKind.SEATED.value:
                    raise InvalidArgument(
                        f"{field}: section {spec.section_id!r} is general admission and has no seats",
                        reason="SECTION_NOT_SEATED",
                        metadata={"field": field, "section_id": spec.section_id},
                    )
            cur = await conn.execute(
                """
                SELECT r.section_id, r.row_label FROM seat_rows r
                  JOIN unnest(%s::text[], %s::text[]) AS n(section_id, row_label)
                    ON r.section_id = n.section_id AND r.row_label = n.row_label
                 WHERE r.event_id = %s
                 ORDER BY 1, 2
                """,
                ([r.section_id for r in rows], [r.row_label for r in rows], event_id),
            )
            existing = await cur.fetchall()
            if existing:
                names = ",".join(f"{s}/{r}" for s, r in existing[:20])
                raise AlreadyExists(
                    f"rows already loaded: {names}", reason="ROW_EXISTS", metadata={"rows": names, "field": "rows"}
                )
            cur = await conn.execute("SELECT COALESCE(max(seat_id), 0) FROM seats WHERE event_id = %s", (event_id,))
            fetched = await cur.fetchone()
            next_id = int(fetched[0]) + 1 if fetched else 1
            first_ids: list[int] = []
            for spec in rows:
                first_ids.append(next_id)
                next_id += spec.seat_count
            params = (
                [r.section_id for r in rows],
                [r.row_label for r in rows],
                first_ids,
                [r.first_seat_number for r in rows],
                [r.seat_count for r in rows],
                event_id,
            )
            await conn.execute(
                """
                INSERT INTO seat_rows (event_id, section_id, row_label, first_seat_id, first_seat_number, seat_count)
                SELECT %s, n.section_id, n.row_label, n.first_id, n.first_number, n.seat_count
                  FROM unnest(%s::text[], %s::text[], %s::bigint[], %s::int[], %s::int[])
                       AS n(section_id, row_label, first_id, first_number, seat_count)
                """,
                (event_id, *params[:5]),
            )
            await conn.execute(
                """
                INSERT INTO seats (event_id, seat_id, section_id, row_label, seat_number, label)
                SELECT %s, n.first_id + g.i, n.section_id, n.row_label, n.first_number + g.i,
                       n.section_id || '-' || n.row_label || '-' || (n.first_number + g.i)
                  FROM unnest(%s::text[], %s::text[], %s::bigint[], %s::int[], %s::int[])
                       AS n(section_id, row_label, first_id, first_number, seat_count)
                  CROSS JOIN LATERAL generate_series(0, n.seat_count - 1) AS g(i)
                """,
                (event_id, *params[:5]),
            )
            added: dict[str, int] = defaultdict(int)
            for spec in rows:
                added[spec.section_id] += spec.seat_count
            # The new seats' stripes grow (stripes locked in the order holds
            # lock them).
            await conn.execute(
                "SELECT 1 FROM section_stripes WHERE event_id = %s ORDER BY section_id, stripe FOR UPDATE", (event_id,)
            )
            await conn.execute(
                """
                UPDATE section_stripes st SET capacity = st.capacity + c.n
                  FROM (SELECT section_id, (seat_id %% %s)::smallint AS stripe, count(*)::integer AS n
                          FROM seats WHERE event_id = %s AND seat_id >= %s GROUP BY 1, 2) c
                 WHERE st.event_id = %s AND st.section_id = c.section_id AND st.stripe = c.stripe
                """,
                (STRIPES, event_id, first_ids[0], event_id),
            )
            for section_id in sorted(added):
                await conn.execute(
                    "UPDATE sections SET capacity = capacity + %s WHERE event_id = %s AND section_id = %s",
                    (added[section_id], event_id, section_id),
                )
            return sum(added.values())

    async def seat_map(self, event_id: int, now: datetime) -> SeatMap:
        async with transaction(self._pool) as conn:
            event = await self._read_event(conn, event_id)
            cur = await conn.execute(
                """
                SELECT section_id, row_label, first_seat_id, first_seat_number, seat_count
                  FROM seat_rows WHERE event_id = %s ORDER BY section_id, first_seat_id
                """,
                (event_id,),
            )
            rows: dict[str, list[SeatRow]] = defaultdict(list)
            for r in await cur.fetchall():
                rows[r[0]].append(SeatRow(r[1], r[2], r[3], r[4]))
            cur = await conn.execute(
                """
                SELECT section_id,
                       string_agg(CASE WHEN status = 'AVAILABLE' OR (status = 'HELD' AND hold_expires_at < %s)
                                       THEN '1' ELSE '0' END, '' ORDER BY seat_id)
                  FROM seats WHERE event_id = %s GROUP BY section_id
                """,
                (now, event_id),
            )
            bits = {r[0]: str(r[1]) for r in await cur.fetchall()}
        sections: list[SectionSeatMap] = []
        for section in event.sections:
            flags = bits.get(section.section_id, "")
            if section.kind is SectionKind.SEATED:
                # Bit i (least significant first) is the i-th seat in id order.
                bitmap = int(flags[::-1], 2).to_bytes((len(flags) + 7) // 8, "little") if flags else b""
                available = flags.count("1")
            else:
                bitmap = b""
                available = section.available
            sections.append(SectionSeatMap(section, tuple(rows.get(section.section_id, ())), bitmap, available))
        return SeatMap(event_id=event_id, sections=tuple(sections), snapshot_time=now)

    # -- holds ---------------------------------------------------------------

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
        attempt = HoldAttempt(
            event_id=event_id,
            customer_id=customer_id,
            selection=selection,
            hold_id=hold_id,
            request_id=request_id,
            fingerprint=fingerprint,
            now=now,
            deadline_at=time.monotonic() + deadline.remaining(),
        )
        if self.hold_batcher is None:
            return await self.hold_one(attempt)
        return await self.hold_batcher.submit(attempt)

    async def hold_one(self, hold: HoldAttempt) -> tuple[Hold, bool]:
        """One hold, one statement (``booking_hold_seats``); a deadlock is
        retried once."""
        seat_ids = _seat_ids(hold.selection) if isinstance(hold.selection, SeatSelection) else None
        quantity = hold.selection if isinstance(hold.selection, QuantitySelection) else None
        params = (
            hold.event_id,
            hold.customer_id,
            seat_ids,
            None if quantity is None else quantity.section_id,
            None if quantity is None else quantity.quantity,
            hold.hold_id,
            hold.request_id,
            hold.fingerprint,
            hold.now,
            self._race_pause_seconds,
        )

        async def attempt() -> tuple[Hold, bool]:
            try:
                rows = await self._statement(
                    f"SELECT {HOLD_COLUMNS}, replayed FROM booking_hold_seats("
                    "%s, %s, %s::bigint[], %s, %s, %s, %s, %s, %s, %s, %s)",
                    (*params, deadline.statement_timeout_ms()),
                )
            except psycopg.errors.DeadlockDetected:
                raise
            except psycopg.DatabaseError as err:
                domain = _hold_error(err.sqlstate, err.diag.message_detail or "", hold.event_id, hold.selection)
                if domain is None:
                    raise
                raise domain from None
            return _hold_from_row(rows[0]), bool(rows[0][17])

        return await _retry_deadlock_once(attempt)

    async def hold_batch(self, attempts: list[HoldAttempt]) -> list[tuple[Hold, bool] | BaseException]:
        """Holds that arrived together, in one statement (``booking_hold_batch``):
        each answered as ``booking_hold_seats`` would have answered it.

        Holds that finished past their callers' deadlines roll the batch
        back (they are answered DEADLINE_EXCEEDED and the others sent again).
        Should the statement fail as a whole otherwise (it is not expected
        to), each hold runs alone, so that none fails for another's sake.
        """
        outcomes: list[tuple[Hold, bool] | BaseException | None] = [None] * len(attempts)
        live = list(range(len(attempts)))
        while live:
            began = time.monotonic()
            for i in live:
                if attempts[i].deadline_at - began <= 0.001:
                    outcomes[i] = DeadlineExceeded(
                        "deadline exceeded before the hold started", reason="DEADLINE_EXCEEDED"
                    )
            live = [i for i in live if outcomes[i] is None]
            if not live:
                break
            batch = [attempts[i] for i in live]
            remaining = [max(1, int((a.deadline_at - began) * 1000)) for a in batch]
            try:
                with deadline.scope(max(remaining) / 1000):
                    rows = await self._statement(
                        _HOLD_BATCH_SQL, _batch_params(batch, remaining, self._race_pause_seconds)
                    )
            except (DeadlineExceeded, Unavailable) as err:
                for i in live:
                    outcomes[i] = err
                break
            except psycopg.Error as err:
                if err.sqlstate == "B1011":
                    late = {live[int(n) - 1] for n in (err.diag.message_detail or "").split(",") if n}
                    for i in late:
                        outcomes[i] = DeadlineExceeded(
                            "the hold could not be made within the deadline", reason="DEADLINE_EXCEEDED"
                        )
                    if late:
                        live = [i for i in live if i not in late]
                        continue
                _log.warning("hold batch failed; its holds run one by one", exc_info=True)
                singles = await asyncio.gather(*(self._hold_alone(attempts[i]) for i in live), return_exceptions=True)
                for i, single in zip(live, singles, strict=True):
                    outcomes[i] = single
                break
            answered = {int(row[0]): row for row in rows}
            for n, i in enumerate(live, start=1):
                row = answered.get(n)
                outcomes[i] = (
                    Internal("the hold batch gave no answer for a hold", reason="INTERNAL")
                    if row is None
                    else _batch_outcome(attempts[i], row)
                )
            break
        return [o if o is not None else Internal("no answer", reason="INTERNAL") for o in outcomes]

    async def _hold_alone(self, hold: HoldAttempt) -> tuple[Hold, bool]:
        with deadline.scope(max(hold.deadline_at - time.monotonic(), 0.001)):
            return await self.hold_one(hold)

    async def _statement(self, sql: str | bytes, params: Sequence[Any]) -> list[tuple[Any, ...]]:
        """One autocommit statement: its own implicit transaction. The call's
        deadline bounds the wait here (running out cancels the statement in
        the server); statements that write take the deadline as a parameter
        and enforce it themselves, since a cancel can be cut short."""
        budget = deadline.remaining()
        try:
            async with deadline.bounded(), self._pool.connection(timeout=budget) as conn:
                cur = await conn.execute(sql if isinstance(sql, bytes) else sql.encode(), params)
                return await cur.fetchall()
        except (psycopg.errors.QueryCanceled, psycopg.errors.LockNotAvailable) as err:
            raise DeadlineExceeded("database statement exceeded the deadline", reason="DEADLINE_EXCEEDED") from err
        except psycopg.errors.DeadlockDetected:
            raise
        except psycopg.OperationalError as err:
            raise Unavailable("database unavailable", reason="DATABASE_UNAVAILABLE") from err

    async def get_hold(self, hold_id: uuid.UUID) -> Hold | None:
        rows = await self._statement(f"SELECT {HOLD_COLUMNS} FROM hold_details WHERE hold_id = %s", (hold_id,))
        return _hold_from_row(rows[0]) if rows else None

    async def list_holds(
        self, *, event_id: int, customer_id: str | None, limit: int, after: tuple[datetime, uuid.UUID] | None
    ) -> list[Hold]:
        where = ["event_id = %s"]
        params: list[Any] = [event_id]
        if customer_id is not None:
            where.append("customer_id = %s")
            params.append(customer_id)
        if after is not None:
            where.append("(created_at, hold_id) < (%s, %s)")
            params.extend(after)
        params.append(limit)
        rows = await self._statement(
            f"SELECT {HOLD_COLUMNS} FROM hold_details WHERE {' AND '.join(where)} "
            "ORDER BY created_at DESC, hold_id DESC LIMIT %s",
            params,
        )
        return [_hold_from_row(r) for r in rows]

    async def _lock_hold(self, conn: AsyncConnection[TupleRow], hold_id: uuid.UUID) -> Hold:
        cur = await conn.execute("SELECT 1 FROM holds WHERE hold_id = %s FOR UPDATE", (hold_id,))
        if await cur.fetchone() is None:
            raise NotFound(
                f"hold {hold_id} does not exist", reason="HOLD_NOT_FOUND", metadata={"hold_id": str(hold_id)}
            )
        return await self._read_hold(conn, hold_id)

    async def _read_hold(self, conn: AsyncConnection[TupleRow], hold_id: uuid.UUID) -> Hold:
        cur = await conn.execute(f"SELECT {HOLD_COLUMNS} FROM hold_details WHERE hold_id = %s", (hold_id,))
        row = await cur.fetchone()
        if row is None:
            raise NotFound(
                f"hold {hold_id} does not exist", reason="HOLD_NOT_FOUND", metadata={"hold_id": str(hold_id)}
            )
        return _hold_from_row(row)

    @staticmethod
    def _check_owner(hold: Hold, customer_id: str) -> None:
        if hold.customer_id != customer_id:
            raise PermissionDenied(
                "the hold belongs to another customer", reason="NOT_HOLD_OWNER", metadata={"hold_id": str(hold.hold_id)}
            )

    async def _seats_of(self, conn: AsyncConnection[TupleRow], hold: Hold, status: str, new_status: str) -> list[int]:
        """Move the hold's seats that are still its own from ``status`` to
        ``new_status``, locking them by ascending id; their ids. Seats are
        found by primary key: the hold knows its seat ids."""
        cur = await conn.execute(
            """
            WITH mine AS MATERIALIZED (
                SELECT s.seat_id FROM seats s
                 WHERE s.event_id = %(event)s AND s.seat_id = ANY (%(ids)s)
                   AND s.hold_id = %(hold)s AND s.status = %(status)s
                 ORDER BY s.seat_id
                   FOR UPDATE
            )
            UPDATE seats s
               SET status = %(new)s,
                   hold_id = CASE WHEN %(new)s = 'AVAILABLE' THEN NULL ELSE s.hold_id END,
                   hold_expires_at = NULL
              FROM mine
             WHERE s.event_id = %(event)s AND s.seat_id = mine.seat_id
               AND s.hold_id = %(hold)s AND s.status = %(status)s
            RETURNING s.seat_id
            """,
            {
                "event": hold.event_id,
                "ids": [seat.seat_id for seat in hold.seats],
                "hold": hold.hold_id,
                "status": status,
                "new": new_status,
            },
        )
        return sorted(int(r[0]) for r in await cur.fetchall())

    async def _move_counters(
        self, conn: AsyncConnection[TupleRow], hold: Hold, seat_ids: Sequence[int], *, held: int, sold: int
    ) -> None:
        """Move the counters of ``seat_ids`` of a seated hold (or of all the
        places of a general-admission hold) by ``held`` and ``sold`` each."""
        if hold.seats:
            per_stripe = Counter(seat_id % STRIPES for seat_id in seat_ids)
        else:
            per_stripe = Counter({0: hold.quantity})
        deltas = {
            (hold.event_id, hold.section_id, stripe): (n * held, n * sold) for stripe, n in per_stripe.items() if n
        }
        await _apply_counters(conn, deltas)

    async def _free_held(self, conn: AsyncConnection[TupleRow], hold: Hold) -> int:
        """Give back what a HELD hold still has: its seats that no one
        reclaimed (seated), or its places (general admission)."""
        if hold.seats:
            freed_ids = await self._seats_of(conn, hold, "HELD", "AVAILABLE")
            freed = len(freed_ids)
        else:
            freed_ids, freed = [], hold.quantity
        await self._move_counters(conn, hold, freed_ids, held=-1, sold=0)
        return freed

    async def release_hold(self, *, hold_id: uuid.UUID, customer_id: str, now: datetime) -> Hold:
        async def work() -> Hold:
            async with transaction(self._pool) as conn:
                hold = await self._lock_hold(conn, hold_id)
                self._check_owner(hold, customer_id)
                if hold.state is HoldState.RELEASED:
                    return hold
                if hold.state is not HoldState.HELD:
                    raise FailedPrecondition(
                        f"the hold is {hold.state.value}, not HELD",
                        reason="HOLD_NOT_HELD",
                        metadata={"hold_id": str(hold_id), "state": hold.state.value},
                    )
                await conn.execute(
                    "UPDATE holds SET state = 'RELEASED', ended_at = %s WHERE hold_id = %s", (now, hold_id)
                )
                await self._free_held(conn, hold)
                return await self._read_hold(conn, hold_id)

        return await _retry_deadlock_once(work)

    async def extend_hold(
        self, *, hold_id: uuid.UUID, customer_id: str, extend_by: timedelta, max_lifetime: timedelta, now: datetime
    ) -> Hold:
        async def work() -> Hold:
            async with transaction(self._pool) as conn:
                hold = await self._lock_hold(conn, hold_id)
                self._check_owner(hold, customer_id)
                state = hold.state_at(now)
                if state is HoldState.EXPIRED:
                    raise FailedPrecondition(
                        "the hold has expired", reason="HOLD_EXPIRED", metadata={"hold_id": str(hold_id)}
                    )
                if state is not HoldState.HELD:
                    raise FailedPrecondition(
                        f"the hold is {state.value}, not HELD",
                        reason="HOLD_NOT_HELD",
                        metadata={"hold_id": str(hold_id), "state": state.value},
                    )
                # Never shorter than it was; never longer than max_lifetime
                # from its creation, so that a hold cannot be kept forever.
                expires = min(max(hold.expires_at, now + extend_by), hold.created_at + max_lifetime)
                expires = max(expires, hold.expires_at)
                if expires != hold.expires_at:
                    await conn.execute("UPDATE holds SET expires_at = %s WHERE hold_id = %s", (expires, hold_id))
                    await conn.execute(
                        """
                        WITH mine AS MATERIALIZED (
                            SELECT s.seat_id FROM seats s
                             WHERE s.event_id = %(event)s AND s.seat_id = ANY (%(ids)s)
                               AND s.hold_id = %(hold)s AND s.status = 'HELD'
                             ORDER BY s.seat_id
                               FOR UPDATE
                        )
                        UPDATE seats s SET hold_expires_at = %(expires)s
                          FROM mine WHERE s.event_id = %(event)s AND s.seat_id = mine.seat_id
                        """,
                        {
                            "event": hold.event_id,
                            "ids": [seat.seat_id for seat in hold.seats],
                            "hold": hold_id,
                            "expires": expires,
                        },
                    )
                return await self._read_hold(conn, hold_id)

        return await _retry_deadlock_once(work)

    async def confirm_hold(
        self, *, hold_id: uuid.UUID, idempotency_key: str, payment_id: str, amount_paid: Money, now: datetime
    ) -> Hold:
        """HELD -> CONFIRMED, seats SOLD, counters moved, an outbox row: one
        statement (``booking_confirm_hold``), one
        transaction. The first answer for a key (a hold or an error) is
        stored with it and replayed; a twin in flight waits for it."""

        async def attempt() -> Hold:
            rows = await self._statement(
                _CONFIRM_SQL,
                (
                    hold_id,
                    idempotency_key,
                    payment_id,
                    amount_paid.amount_minor,
                    amount_paid.currency,
                    now,
                    deadline.statement_timeout_ms(),
                ),
            )
            outcome, in_flight, key_reused = rows[0]
            if in_flight:
                raise Aborted("a confirmation with this key is in flight", reason="CONFIRMATION_IN_FLIGHT")
            if key_reused:
                raise InvalidArgument(
                    "idempotency_key was already used for another confirmation",
                    reason="IDEMPOTENCY_KEY_REUSED",
                    metadata={"field": "idempotency_key"},
                )
            return _replay(outcome)

        return await _retry_deadlock_once(attempt)

    async def _outbox(
        self, conn: AsyncConnection[TupleRow], hold_id: uuid.UUID, kind: str, payload: dict[str, Any]
    ) -> None:
        await conn.execute(
            "INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload) VALUES (%s, 'booking', %s, %s, %s)",
            (uuid.uuid4(), str(hold_id), kind, json.dumps(payload)),
        )

    async def cancel_booking(
        self, *, hold_id: uuid.UUID, customer_id: str, reason: str, now: datetime
    ) -> tuple[Hold, int]:
        async def work() -> tuple[Hold, int]:
            async with transaction(self._pool) as conn:
                hold = await self._lock_hold(conn, hold_id)
                self._check_owner(hold, customer_id)
                if hold.state is HoldState.CANCELLED:
                    return hold, hold.refund_amount_minor or 0
                if hold.state is not HoldState.CONFIRMED:
                    raise FailedPrecondition(
                        f"the hold is {hold.state_at(now).value}, not a confirmed booking",
                        reason="BOOKING_NOT_CONFIRMED",
                        metadata={"hold_id": str(hold_id), "state": hold.state_at(now).value},
                    )
                cur = await conn.execute(
                    "SELECT refundable_until, refund_percent FROM events WHERE event_id = %s", (hold.event_id,)
                )
                policy_row = await cur.fetchone()
                policy = RefundPolicy(None, 0) if policy_row is None else RefundPolicy(policy_row[0], policy_row[1])
                refund = policy.refund_for(hold.amount.amount_minor, now)
                returned: list[int] = []
                if hold.seats:
                    returned = await self._seats_of(conn, hold, "SOLD", "AVAILABLE")
                await conn.execute(
                    """
                    UPDATE holds SET state = 'CANCELLED', ended_at = %s, refund_amount_minor = %s, cancel_reason = %s
                     WHERE hold_id = %s
                    """,
                    (now, refund, reason, hold_id),
                )
                await self._outbox(
                    conn,
                    hold_id,
                    "BookingCancelled",
                    {
                        "event_id": hold.event_id,
                        "hold_id": str(hold_id),
                        "customer_id": hold.customer_id,
                        "payment_id": hold.payment_id,
                        "refund_amount_minor": refund,
                        "currency": hold.amount.currency,
                        "reason": reason,
                    },
                )
                await self._move_counters(conn, hold, returned, held=0, sold=-1)
                return await self._read_hold(conn, hold_id), refund

        return await _retry_deadlock_once(work)

    # -- expiry --------------------------------------------------------------

    async def sweep(self, *, now: datetime, batch_size: int) -> SweepResult:
        """End up to ``batch_size`` lapsed holds: HELD -> EXPIRED, their seats
        and counters freed. Replicas skip each other's rows (SKIP LOCKED)."""

        async def work() -> SweepResult:
            async with transaction(self._pool) as conn:
                cur = await conn.execute(
                    """
                    SELECT h.hold_id, h.event_id, h.section_id, h.quantity, sc.kind
                      FROM holds h
                      JOIN sections sc ON sc.event_id = h.event_id AND sc.section_id = h.section_id
                     WHERE h.state = 'HELD' AND h.expires_at < %s
                     ORDER BY h.expires_at
                     LIMIT %s
                       FOR UPDATE OF h SKIP LOCKED
                    """,
                    (now, batch_size),
                )
                lapsed = await cur.fetchall()
                if not lapsed:
                    return SweepResult(0, 0)
                ids = [r[0] for r in lapsed]
                await conn.execute(
                    "UPDATE holds SET state = 'EXPIRED', ended_at = %s WHERE hold_id = ANY (%s)", (now, ids)
                )
                freed: dict[tuple[int, str, int], int] = defaultdict(int)
                for _, event_id, section_id, quantity, kind in lapsed:
                    if kind == SectionKind.GENERAL_ADMISSION.value:
                        freed[(event_id, section_id, 0)] += quantity
                # The seats still theirs, by primary key, one event at a
                # time, each event's in ascending id order.
                cur = await conn.execute(
                    "SELECT event_id, array_agg(seat_id ORDER BY seat_id) FROM hold_seats "
                    "WHERE hold_id = ANY (%s) GROUP BY event_id ORDER BY event_id",
                    (ids,),
                )
                seats = 0
                for event_id, event_seats in await cur.fetchall():
                    cur = await conn.execute(
                        """
                        WITH mine AS MATERIALIZED (
                            SELECT s.seat_id FROM seats s
                             WHERE s.event_id = %(event)s AND s.seat_id = ANY (%(seats)s)
                               AND s.hold_id = ANY (%(ids)s) AND s.status = 'HELD'
                             ORDER BY s.seat_id
                               FOR UPDATE
                        )
                        UPDATE seats s SET status = 'AVAILABLE', hold_id = NULL, hold_expires_at = NULL
                          FROM mine
                         WHERE s.event_id = %(event)s AND s.seat_id = mine.seat_id
                           AND s.status = 'HELD' AND s.hold_id = ANY (%(ids)s)
                        RETURNING s.section_id, s.seat_id
                        """,
                        {"event": event_id, "seats": event_seats, "ids": ids},
                    )
                    for section_id, seat_id in await cur.fetchall():
                        freed[(event_id, section_id, seat_id % STRIPES)] += 1
                        seats += 1
                await _apply_counters(conn, {key: (-n, 0) for key, n in freed.items()})
                return SweepResult(len(lapsed), seats)

        return await _retry_deadlock_once(work)

    async def forget_requests(self, *, older_than: datetime) -> int:
        """Drop HoldSeats request ids older than ``older_than``."""
        async with transaction(self._pool) as conn:
            cur = await conn.execute("DELETE FROM hold_requests WHERE created_at < %s", (older_than,))
            return cur.rowcount

    async def section_counters(self) -> list[SectionCounters]:
        rows = await self._statement(
            "SELECT event_id, section_id, capacity, overbook_limit, sold, held FROM section_totals ORDER BY 1, 2", ()
        )
        return [SectionCounters(*r) for r in rows]


def _compliance(pool: Pool) -> BookingStore:
    return PgBookingStore(pool)
