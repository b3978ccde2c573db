"""Stores that get it wrong, for control tests only: they show that the
tests catch the bugs they are written for.

- The classic double-booking bug: read the seats' status, then write them
  unconditionally (SELECT-then-UPDATE), run under the same race as the real
  store.
- Batched holds that fail together: one transaction for the batch.
- The ticket limit counted outside the hold's statement: the customer's
  tickets read in one transaction, the hold made in another."""

from __future__ import annotations

import asyncio
import json
import uuid
from datetime import datetime
from typing import Any

import psycopg

from booking_svc.adapters.postgres import HOLD_COLUMNS, HoldAttempt, PgBookingStore, Pool, hold_from_row
from booking_svc.model import Hold, SeatSelection, Selection
from boxoffice.db import transaction
from boxoffice.errors import FailedPrecondition


class CheckThenUpdateStore(PgBookingStore):
    """Built as the real store is; its test pause is the window between
    the check and the write."""

    def __init__(self, pool: Pool, *, race_pause_seconds: float = 0.0, **kwargs: Any) -> None:
        super().__init__(pool, **kwargs)
        self._pool_ = pool
        self._pause = race_pause_seconds

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
        await asyncio.sleep(self._pause)  # the window between check and write
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
    make the hold. Its test pause is the window between the count and the
    hold; the events it is tested on set a ticket limit far above
    :attr:`LIMIT`, so that the statement's own check never decides."""

    LIMIT = 4

    def __init__(self, pool: Pool, *, race_pause_seconds: float = 0.0, **kwargs: Any) -> None:
        super().__init__(pool, **kwargs)
        self._pool_ = pool
        self._pause = race_pause_seconds

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
        await asyncio.sleep(self._pause)  # the window between the count and the hold
        return await super().hold_seats(
            event_id=event_id,
            customer_id=customer_id,
            selection=selection,
            hold_id=hold_id,
            request_id=request_id,
            fingerprint=fingerprint,
            now=now,
        )
