"""Events, their sections and inventory, and the seat map, on Postgres.
A new section's counter stripes are made here: ``booking_stripes()`` of
them for a seated section (each counting its own seats), one for general
admission."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from datetime import datetime

from psycopg import AsyncConnection
from psycopg.rows import TupleRow

from booking_svc.adapters.postgres.base import PgBase
from booking_svc.adapters.postgres.listing import LISTING_COLUMNS, listing_of, listing_row
from booking_svc.model import (
    CheckInRules,
    Event,
    EventKind,
    EventSpec,
    Money,
    RefundPolicy,
    RowSpec,
    SeatMap,
    SeatRow,
    Section,
    SectionCounterPage,
    SectionCounters,
    SectionKind,
    SectionSeatMap,
    WaitlistRules,
)
from boxoffice.db import retry_lost_once, transaction
from boxoffice.errors import AlreadyExists, InvalidArgument, NotFound


class PgEvents(PgBase):
    """Events, inventory, seat maps and section counters."""

    async def create_event(self, spec: EventSpec) -> Event:
        async with transaction(self._pool) as conn:
            cur = await conn.execute(
                f"""
                INSERT INTO events (event_id, display_name, kind, starts_at, hold_ttl_seconds,
                                    max_seats_per_customer, max_tickets_per_customer, refundable_until,
                                    refund_percent, transfers, checkin_static_codes, checkin_reentry,
                                    waitlist_offer_minutes, {LISTING_COLUMNS})
                VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s,
                        %s, %s, %s)
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
                    spec.ticket_limit,
                    spec.refund_policy.refundable_until,
                    spec.refund_policy.refund_percent,
                    spec.transfers,
                    spec.checkin.static_codes,
                    spec.checkin.reentry,
                    spec.waitlist.offer_minutes,
                    *listing_row(spec.listing),
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
                 CROSS JOIN LATERAL generate_series(0, CASE WHEN n.kind = 'SEATED' THEN booking_stripes() - 1 ELSE 0 END)
                       AS g(stripe)
                """,
                (
                    spec.event_id,
                    [s.section_id for s in spec.sections],
                    [s.kind.value for s in spec.sections],
                    [s.capacity + s.overbook_limit for s in spec.sections],
                ),
            )
            return await self._read_event(conn, spec.event_id)

    async def get_event(self, event_id: int) -> Event:
        async def read() -> Event:
            async with transaction(self._pool) as conn:
                return await self._read_event(conn, event_id)

        return await retry_lost_once(read)

    async def _read_event(self, conn: AsyncConnection[TupleRow], event_id: int) -> Event:
        cur = await conn.execute(
            f"""
            SELECT display_name, kind, starts_at, hold_ttl_seconds, max_seats_per_customer,
                   refundable_until, refund_percent,
                   COALESCE(max_tickets_per_customer, max_seats_per_customer), transfers,
                   checkin_static_codes, checkin_reentry, waitlist_offer_minutes, {LISTING_COLUMNS}
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
            max_tickets_per_customer=row[7],
            refund_policy=RefundPolicy(row[5], row[6]),
            sections=sections,
            transfers=row[8],
            checkin=CheckInRules(static_codes=row[9], reentry=row[10]),
            waitlist=WaitlistRules(offer_minutes=row[11]),
            listing=listing_of(row[12:]),
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
                  FROM (SELECT section_id, (seat_id %% booking_stripes())::smallint AS stripe, count(*)::integer AS n
                          FROM seats WHERE event_id = %s AND seat_id >= %s GROUP BY 1, 2) c
                 WHERE st.event_id = %s AND st.section_id = c.section_id AND st.stripe = c.stripe
                """,
                (event_id, first_ids[0], event_id),
            )
            for section_id in sorted(added):
                await conn.execute(
                    "UPDATE sections SET capacity = capacity + %s WHERE event_id = %s AND section_id = %s",
                    (added[section_id], event_id, section_id),
                )
            return sum(added.values())

    async def seat_map(self, event_id: int, now: datetime) -> SeatMap:
        return await retry_lost_once(lambda: self._seat_map(event_id, now))

    async def _seat_map(self, event_id: int, now: datetime) -> SeatMap:
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

    async def event_counters(self, event_ids: Sequence[int]) -> list[SectionCounters]:
        # The events' sections by primary key, then only their stripes.
        rows = await self._statement(
            """
            SELECT sc.event_id, sc.section_id, sc.capacity, sc.overbook_limit,
                   COALESCE(sum(st.sold), 0)::integer, COALESCE(sum(st.held), 0)::integer
              FROM sections sc
              LEFT JOIN section_stripes st ON st.event_id = sc.event_id AND st.section_id = sc.section_id
             WHERE sc.event_id = ANY (%s)
             GROUP BY sc.event_id, sc.section_id, sc.capacity, sc.overbook_limit
             ORDER BY sc.event_id, sc.section_id
            """,
            (list(event_ids),),
            repeatable=True,
        )
        return [SectionCounters(*r) for r in rows]

    async def section_counters(self, *, starting_after: datetime, limit: int) -> SectionCounterPage:
        # The sections are picked first (the soonest events'), then only
        # their stripes are summed: the cost follows the limit, not the
        # catalogue.
        rows = await self._statement(
            """
            WITH upcoming AS (
                SELECT sc.event_id, sc.section_id, sc.capacity, sc.overbook_limit, e.starts_at
                  FROM sections sc JOIN events e ON e.event_id = sc.event_id
                 WHERE e.starts_at > %s
                 ORDER BY e.starts_at, sc.event_id, sc.section_id
                 LIMIT %s
            )
            SELECT u.event_id, u.section_id, u.capacity, u.overbook_limit,
                   COALESCE(sum(st.sold), 0)::integer, COALESCE(sum(st.held), 0)::integer,
                   (SELECT count(*) FROM sections sc JOIN events e ON e.event_id = sc.event_id
                     WHERE e.starts_at > %s)
              FROM upcoming u
              LEFT JOIN section_stripes st ON st.event_id = u.event_id AND st.section_id = u.section_id
             GROUP BY u.event_id, u.section_id, u.capacity, u.overbook_limit, u.starts_at
             ORDER BY u.starts_at, u.event_id, u.section_id
            """,
            (starting_after, limit, starting_after),
            repeatable=True,
        )
        if not rows:
            return SectionCounterPage([], 0)
        return SectionCounterPage([SectionCounters(*r[:6]) for r in rows], int(rows[0][6]))
