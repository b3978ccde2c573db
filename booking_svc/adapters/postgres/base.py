"""What the Postgres adapter's parts share: the pool type, the hold row
and its columns, one-statement calls bounded by the deadline, the deadlock
retry, and the reads and moves every change of a hold makes (counters move
only through the ``booking_move_counters`` SQL function)."""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

import psycopg
from psycopg import AsyncConnection
from psycopg.rows import TupleRow
from psycopg_pool import AsyncConnectionPool

from booking_svc.model import Hold, HoldState, Money, SeatRef
from boxoffice import db, deadline
from boxoffice.errors import DeadlineExceeded, NotFound, PermissionDenied, Unavailable

Pool = AsyncConnectionPool[AsyncConnection[TupleRow]]
T = TypeVar("T")

HOLD_COLUMNS = (
    "hold_id, event_id, customer_id, section_id, quantity, state, amount_minor, currency, expires_at, "
    "created_at, confirmed_at, payment_id, refund_amount_minor, seat_ids, row_labels, seat_numbers, labels"
)


def hold_from_row(row: Sequence[Any]) -> Hold:
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


def is_deadlock(err: BaseException) -> bool:
    return isinstance(err, psycopg.errors.DeadlockDetected) or isinstance(
        err.__cause__, psycopg.errors.DeadlockDetected
    )


async def retry_deadlock_once(work: Callable[[], Awaitable[T]]) -> T:
    """Run ``work``; once more if Postgres broke a deadlock by aborting it."""
    try:
        return await work()
    except (Unavailable, psycopg.errors.DeadlockDetected) as err:
        if not is_deadlock(err):
            raise
    return await work()


async def retry_tx_once(work: Callable[[], Awaitable[T]]) -> T:
    """Run ``work`` (a transaction of its own): once more if Postgres broke
    a deadlock, and once more on a fresh connection if its connection was
    lost before it committed (:func:`boxoffice.db.retry_lost_once`)."""
    return await db.retry_lost_once(lambda: retry_deadlock_once(work))


class PgBase:
    """The pool and the helpers the store's parts share."""

    def __init__(self, pool: Pool) -> None:
        self._pool = pool

    async def _statement(
        self, sql: str | bytes, params: Sequence[Any], *, repeatable: bool = False
    ) -> list[tuple[Any, ...]]:
        """One autocommit statement: its own implicit transaction. The call's
        deadline bounds the wait here (running out cancels the statement in
        the server); statements that write take the deadline as a parameter
        and enforce it themselves, since a cancel can be cut short.

        A statement whose connection broke is sent once more on a fresh one
        when that is safe: the server said it ended the session before the
        statement finished (so it did not commit), or the statement is
        ``repeatable`` (a read, or a write idempotent by a key)."""

        async def once() -> list[tuple[Any, ...]]:
            budget = deadline.remaining()
            conn: AsyncConnection[TupleRow] | None = None
            try:
                async with deadline.bounded(), self._pool.connection(timeout=budget) as conn:
                    cur = await conn.execute(sql if isinstance(sql, bytes) else sql.encode(), params)
                    return await cur.fetchall()
            except (psycopg.errors.QueryCanceled, psycopg.errors.LockNotAvailable) as err:
                raise DeadlineExceeded("database statement exceeded the deadline", reason="DEADLINE_EXCEEDED") from err
            except psycopg.errors.DeadlockDetected:
                raise
            except psycopg.OperationalError as err:
                if conn is None:
                    raise Unavailable("database unavailable", reason="DATABASE_UNAVAILABLE") from err
                raise db.lost(conn, err, repeatable=repeatable) from err

        return await db.retry_lost_once(once)

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
        return hold_from_row(row)

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
        await conn.execute(
            b"SELECT booking_move_counters(booking_hold_moves(%s, %s, %s::bigint[], %s, %s, %s))",
            (hold.event_id, hold.section_id, list(seat_ids), 0 if hold.seats else hold.quantity, held, sold),
        )

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
