"""Hold expiry on Postgres: the sweeper's batch (lapsed HELD holds ->
EXPIRED, their seats and counters freed; replicas skip each other's rows)
and the pruning of old HoldSeats request ids."""

from __future__ import annotations

from datetime import datetime

from booking_svc.adapters.postgres.base import PgBase, retry_tx_once
from booking_svc.model import SectionKind, SweepResult
from boxoffice.db import transaction


class PgSweep(PgBase):
    """Expiry and pruning."""

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
                # Counter moves (event, section, seat or None, held).
                freed: list[tuple[int, str, int | None, int]] = [
                    (event_id, section_id, None, -quantity)
                    for _, event_id, section_id, quantity, kind in lapsed
                    if kind == SectionKind.GENERAL_ADMISSION.value
                ]
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
                        freed.append((event_id, section_id, seat_id, -1))
                        seats += 1
                await conn.execute(
                    """
                    SELECT booking_move_counters(ARRAY(
                        SELECT ROW(m.event_id, m.section_id, m.seat_id, m.held, 0)::booking_counter_move
                          FROM unnest(%s::bigint[], %s::text[], %s::bigint[], %s::int[])
                               AS m(event_id, section_id, seat_id, held)))
                    """,
                    tuple(list(column) for column in zip(*freed, strict=True)) if freed else ([], [], [], []),
                )
                return SweepResult(len(lapsed), seats)

        return await retry_tx_once(work)

    async def forget_requests(self, *, older_than: datetime) -> int:
        """Drop HoldSeats request ids older than ``older_than``."""
        async with transaction(self._pool) as conn:
            cur = await conn.execute("DELETE FROM hold_requests WHERE created_at < %s", (older_than,))
            return cur.rowcount
