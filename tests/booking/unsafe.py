"""The classic double-booking bug, for control tests only: read the seats'
status, then write them unconditionally (SELECT-then-UPDATE). Tests run it
under the same race as the real store to show that the race is real and
that they catch a store that gets it wrong."""

from __future__ import annotations

import asyncio
import uuid
from datetime import datetime

from booking_svc.model import Hold, SeatSelection, Selection
from booking_svc.store import PgBookingStore, Pool
from boxoffice.db import transaction
from boxoffice.errors import FailedPrecondition


class CheckThenUpdateStore(PgBookingStore):
    def __init__(self, pool: Pool, *, pause_seconds: float) -> None:
        super().__init__(pool)
        self._pool_ = pool
        self._pause = pause_seconds

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
                    "UPDATE section_stripes SET held = held + 1 WHERE event_id = %s AND section_id = %s AND stripe = %s",
                    (event_id, section_id, seat_id % 16),
                )
        hold = await self.get_hold(hold_id)
        assert hold is not None
        return hold, False
