"""An event's waiting list on Postgres: joining, leaving, reading a fan's
entry, and the offer pass that turns seats which came back into offers.

An offer is a hold in the fan's name, made by ``booking_hold_seats`` like
any other (so the fan's ticket limit, the seats' locks and the counters are
the hold path's own) with ``offer_seconds`` set: it passes the list's guard
and lapses after the event's offer time. The pass runs per event under a
transaction-scoped advisory lock taken with ``pg_try_advisory_xact_lock``,
so replicas share the events out and never offer one event's seats twice.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from psycopg import AsyncConnection
from psycopg.rows import TupleRow

from booking_svc.adapters.postgres.base import HOLD_COLUMNS, PgBase, hold_from_row, retry_tx_once
from booking_svc.adapters.postgres.outcomes import ticket_limit_error
from booking_svc.waitlist_model import (
    Offer,
    OfferPass,
    WaitlistEntry,
    WaitlistReservations,
    WaitlistState,
    WaitlistStats,
    fitting_offers,
)
from boxoffice.db import transaction
from boxoffice.errors import FailedPrecondition, InvalidArgument, NotFound

# The advisory lock space of the offer pass (the first key; the event id's
# low 32 bits the second).
_PASS_LOCK = 0x7761_6974  # "wait"
# Entries looked at per event and pass; offers beyond wait for the next pass.
_PASS_ENTRIES = 500
# What an offer's statement may take.
_OFFER_TIMEOUT_MS = 5_000

_ENTRY_COLUMNS = "w.event_id, w.customer_id, w.section_id, w.quantity, w.state, w.joined_at, w.offer_hold_id, w.place"

_AHEAD_SQL = b"""
SELECT count(*) FROM waitlist_entries o
 WHERE o.event_id = %(event)s AND o.state IN ('WAITING', 'OFFERED') AND o.place < %(place)s
   AND (o.section_id IS NULL OR %(section)s::text IS NULL OR o.section_id = %(section)s)
"""

# The event's ticket limit and offer time and, per section (its live
# counters, section_totals), what is free now (capacity and overbooking
# left) and whether fans wait for it.
_SECTIONS_SQL = b"""
SELECT COALESCE(e.max_tickets_per_customer, e.max_seats_per_customer), e.waitlist_offer_minutes, t.section_id,
       GREATEST(t.capacity + t.overbook_limit - t.sold - t.held, 0),
       booking_waitlist_waits(t.event_id, t.section_id)
  FROM events e JOIN section_totals t ON t.event_id = e.event_id
 WHERE e.event_id = %s
 ORDER BY t.section_id
"""

# The fan's tickets in the event as HoldSeats counts them (held, bought).
_TICKETS_SQL = b"SELECT held, bought FROM booking_customer_tickets(%(event)s, %(customer)s, %(now)s)"

_OFFER_SQL = (
    b"SELECT outcome, detail, hold_id FROM booking_hold_seats("
    b"ARRAY[jsonb_populate_record(NULL::booking_hold_request, %s::jsonb)], %s, 0)"
)


def _entry(row: Sequence[Any], ahead: int) -> WaitlistEntry:
    return WaitlistEntry(
        event_id=int(row[0]),
        customer_id=str(row[1]),
        section_id=row[2],
        quantity=int(row[3]),
        state=WaitlistState[row[4]],
        joined_at=row[5],
        offer_hold_id=row[6],
        ahead=ahead,
    )


class PgWaitlist(PgBase):
    """The waiting list's statements."""

    async def join_waitlist(
        self,
        *,
        event_id: int,
        customer_id: str,
        section_id: str | None,
        quantity: int,
        now: datetime,
        email: str | None = None,
        language: str | None = None,
    ) -> tuple[WaitlistEntry, bool]:
        async def work() -> tuple[WaitlistEntry, bool]:
            async with transaction(self._pool) as conn:
                cur = await conn.execute(_SECTIONS_SQL, (event_id,))
                sections = await cur.fetchall()
                if not sections:
                    await self._event_exists(conn, event_id)
                    raise InvalidArgument(
                        f"event {event_id} has no sections",
                        reason="UNKNOWN_SECTION",
                        metadata={"field": "section_id", "section_id": section_id or ""},
                    )
                limit = int(sections[0][0])
                if section_id is not None and section_id not in {r[2] for r in sections}:
                    raise InvalidArgument(
                        f"section {section_id!r} does not exist in event {event_id}",
                        reason="UNKNOWN_SECTION",
                        metadata={"field": "section_id", "section_id": section_id},
                    )
                if not 1 <= quantity <= limit:
                    raise InvalidArgument(
                        f"quantity must be 1 to {limit}, the event's limit per customer",
                        reason="INVALID_FIELD",
                        metadata={"field": "quantity", "limit": str(limit)},
                    )
                # The fan's entry, locked (a concurrent join of theirs waits).
                await conn.execute(
                    "SELECT pg_advisory_xact_lock(hashtext('booking.waitlist.' || %s), hashtext(%s))",
                    (event_id, customer_id),
                )
                cur = await conn.execute(
                    f"SELECT {_ENTRY_COLUMNS} FROM waitlist_entries w"
                    " WHERE w.event_id = %s AND w.customer_id = %s FOR UPDATE".encode(),
                    (event_id, customer_id),
                )
                before = await cur.fetchone()
                if before is not None and before[4] == "OFFERED":
                    return await self._read(conn, before), False
                # A fan who may not buy that many more would be passed over
                # for every offer while holding the section's seats for the
                # list: refused now, as HoldSeats would refuse them.
                cur = await conn.execute(_TICKETS_SQL, {"event": event_id, "customer": customer_id, "now": now})
                counted = await cur.fetchone()
                held, bought = (int(counted[0]), int(counted[1])) if counted else (0, 0)
                if held + bought + quantity > limit:
                    raise ticket_limit_error(limit=str(limit), held=str(held), bought=str(bought))
                # Seats for sale now that no fan on the list waits for: the
                # fan can hold them through the queue instead.
                free = sum(int(r[3]) for r in sections if not r[4] and (section_id is None or r[2] == section_id))
                if free > 0:
                    raise FailedPrecondition(
                        "seats are for sale: hold them through the queue",
                        reason="WAITLIST_SEATS_AVAILABLE",
                        metadata={"available": str(free)},
                    )
                if before is not None and before[4] == "WAITING":
                    cur = await conn.execute(
                        "UPDATE waitlist_entries w SET section_id = %s, quantity = %s,"
                        " notify_email = COALESCE(%s, w.notify_email), notify_language = COALESCE(%s, w.notify_language)"
                        f" WHERE w.event_id = %s AND w.customer_id = %s RETURNING {_ENTRY_COLUMNS}".encode(),
                        (section_id, quantity, email, language if email else None, event_id, customer_id),
                    )
                    return await self._read(conn, await cur.fetchone()), False
                cur = await conn.execute(
                    b"""
                    INSERT INTO waitlist_entries AS w (event_id, customer_id, section_id, quantity, state, joined_at,
                                                       notify_email, notify_language)
                    VALUES (%(event)s, %(customer)s, %(section)s, %(quantity)s, 'WAITING', %(now)s,
                            %(email)s, %(language)s)
                    ON CONFLICT (event_id, customer_id) DO UPDATE
                       SET section_id = EXCLUDED.section_id, quantity = EXCLUDED.quantity, state = 'WAITING',
                           joined_at = EXCLUDED.joined_at, place = nextval('waitlist_places'),
                           offer_hold_id = NULL, offered_at = NULL, ended_at = NULL,
                           notify_email = COALESCE(EXCLUDED.notify_email, w.notify_email),
                           notify_language = COALESCE(EXCLUDED.notify_language, w.notify_language)
                    RETURNING """
                    + _ENTRY_COLUMNS.encode(),
                    {
                        "event": event_id,
                        "customer": customer_id,
                        "section": section_id,
                        "quantity": quantity,
                        "now": now,
                        "email": email,
                        "language": language if email else None,
                    },
                )
                return await self._read(conn, await cur.fetchone()), True

        return await retry_tx_once(work)

    async def waitlist_entry(self, *, event_id: int, customer_id: str) -> WaitlistEntry:
        async with transaction(self._pool) as conn:
            cur = await conn.execute(
                f"SELECT {_ENTRY_COLUMNS} FROM waitlist_entries w WHERE w.event_id = %s AND w.customer_id = %s".encode(),
                (event_id, customer_id),
            )
            row = await cur.fetchone()
            if row is None:
                raise _not_on_list(event_id)
            return await self._read(conn, row)

    async def leave_waitlist(self, *, event_id: int, customer_id: str, now: datetime) -> WaitlistEntry:
        """LEFT (an offer's hold released), or TAKEN when the offer was
        bought; an entry already ended is answered as it is."""

        async def work() -> WaitlistEntry:
            async with transaction(self._pool) as conn:
                cur = await conn.execute(
                    f"SELECT {_ENTRY_COLUMNS}, h.state FROM waitlist_entries w"
                    " LEFT JOIN holds h ON h.hold_id = w.offer_hold_id"
                    " WHERE w.event_id = %s AND w.customer_id = %s FOR UPDATE OF w".encode(),
                    (event_id, customer_id),
                )
                row = await cur.fetchone()
                if row is None:
                    raise _not_on_list(event_id)
                if row[4] not in ("WAITING", "OFFERED"):
                    return await self._read(conn, row)
                ended = "TAKEN" if row[8] in ("CONFIRMED", "CANCELLED") else "LEFT"
                cur = await conn.execute(
                    "UPDATE waitlist_entries w SET state = %s, ended_at = %s"
                    f" WHERE w.event_id = %s AND w.customer_id = %s RETURNING {_ENTRY_COLUMNS}".encode(),
                    (ended, now, event_id, customer_id),
                )
                return await self._read(conn, await cur.fetchone())

        return await retry_tx_once(work)

    async def _read(self, conn: AsyncConnection[TupleRow], row: Sequence[Any] | None) -> WaitlistEntry:
        assert row is not None
        ahead = 0
        if row[4] == "WAITING":
            cur = await conn.execute(_AHEAD_SQL, {"event": row[0], "place": row[7], "section": row[2]})
            counted = await cur.fetchone()
            ahead = int(counted[0]) if counted else 0
        entry = _entry(row, ahead)
        if entry.offer_hold_id is not None:
            cur = await conn.execute(
                f"SELECT {HOLD_COLUMNS} FROM hold_details WHERE hold_id = %s".encode(), (entry.offer_hold_id,)
            )
            held = await cur.fetchone()
            if held is not None:
                entry = entry.with_offer(hold_from_row(held))
        return entry

    async def _event_exists(self, conn: AsyncConnection[TupleRow], event_id: int) -> None:
        cur = await conn.execute(b"SELECT 1 FROM events WHERE event_id = %s", (event_id,))
        if await cur.fetchone() is None:
            raise NotFound(
                f"event {event_id} does not exist", reason="EVENT_NOT_FOUND", metadata={"event_id": str(event_id)}
            )

    # -- the offer pass -----------------------------------------------------

    async def waitlist_events(self) -> list[int]:
        """Events with open entries (waiting or offered), one index probe per
        event (a loose scan of the partial index)."""
        rows = await self._statement(
            """
            WITH RECURSIVE e AS (
                (SELECT w.event_id FROM waitlist_entries w WHERE w.state IN ('WAITING', 'OFFERED')
                  ORDER BY w.event_id LIMIT 1)
                UNION ALL
                SELECT (SELECT w.event_id FROM waitlist_entries w
                         WHERE w.state IN ('WAITING', 'OFFERED') AND w.event_id > e.event_id
                         ORDER BY w.event_id LIMIT 1)
                  FROM e WHERE e.event_id IS NOT NULL
            )
            SELECT event_id FROM e WHERE event_id IS NOT NULL
            """,
            (),
            repeatable=True,
        )
        return [int(r[0]) for r in rows]

    async def offer_pass(self, *, event_id: int, now: datetime) -> OfferPass:
        """Settle the event's offers (bought: TAKEN; released or run out:
        LAPSED), then offer the seats free now down the list; what it did.
        An event another replica is passing over is skipped."""

        async def work() -> OfferPass:
            async with transaction(self._pool) as conn:
                cur = await conn.execute(
                    b"SELECT pg_try_advisory_xact_lock(%s, %s)", (_PASS_LOCK, event_id & 0x7FFF_FFFF)
                )
                locked = await cur.fetchone()
                if not (locked and locked[0]):
                    return OfferPass(event_id, skipped=True)
                # Offers settled: bought (TAKEN), or released or run out
                # (LAPSED); an offer paid for after it lapsed is TAKEN after all.
                cur = await conn.execute(
                    """
                    UPDATE waitlist_entries w
                       SET state = CASE WHEN h.state IN ('CONFIRMED', 'CANCELLED') THEN 'TAKEN' ELSE 'LAPSED' END,
                           ended_at = %(now)s
                      FROM holds h
                     WHERE w.event_id = %(event)s AND h.hold_id = w.offer_hold_id
                       AND ((w.state = 'OFFERED' AND (h.state <> 'HELD' OR h.expires_at < %(now)s))
                            OR (w.state = 'LAPSED' AND h.state IN ('CONFIRMED', 'CANCELLED')))
                    RETURNING w.state, h.section_id, h.quantity, h.state
                    """,
                    {"event": event_id, "now": now},
                )
                settled = await cur.fetchall()
                cur = await conn.execute(_SECTIONS_SQL, (event_id,))
                sections = await cur.fetchall()
                cur = await conn.execute(
                    f"SELECT {_ENTRY_COLUMNS} FROM waitlist_entries w"
                    " WHERE w.event_id = %s AND w.state = 'WAITING' ORDER BY w.place LIMIT %s FOR UPDATE".encode(),
                    (event_id, _PASS_ENTRIES),
                )
                waiting = [_entry(r, 0) for r in await cur.fetchall()]
                taken = sum(1 for r in settled if r[0] == "TAKEN")
                lapsed = len(settled) - taken
                if not sections or not waiting:
                    return OfferPass(event_id, taken=taken, lapsed=lapsed)
                minutes = int(sections[0][1])
                free = {str(r[2]): int(r[3]) for r in sections}
                # A lapsed offer's seats still count as held until the
                # sweeper ends its hold; the hold path takes them over.
                for state, section, quantity, hold_state in settled:
                    if state == "LAPSED" and hold_state == "HELD" and section in free:
                        free[section] += int(quantity)
                offers: list[Offer] = []
                passed: list[str] = []

                async def try_offer(entry: WaitlistEntry, section: str) -> str | None:
                    hold_id = uuid.uuid4()
                    request = {
                        "event_id": event_id,
                        "customer_id": entry.customer_id,
                        "seat_ids": None,
                        "section_id": section,
                        "quantity": entry.quantity,
                        "hold_id": str(hold_id),
                        "request_id": None,
                        "fingerprint": "",
                        "timeout_ms": _OFFER_TIMEOUT_MS,
                        "offer_seconds": minutes * 60,
                    }
                    async with conn.transaction():
                        cur = await conn.execute(_OFFER_SQL, (json.dumps(request), now))
                        answer = await cur.fetchone()
                        if answer is None or answer[0] is not None:
                            return None if answer is None else str(answer[0])
                        await conn.execute(
                            "UPDATE waitlist_entries SET state = 'OFFERED', offer_hold_id = %s, offered_at = %s"
                            " WHERE event_id = %s AND customer_id = %s",
                            (hold_id, now, event_id, entry.customer_id),
                        )
                    offers.append(Offer(event_id, entry.customer_id, section, entry.quantity, hold_id))
                    return None

                await fitting_offers(waiting, free, try_offer, passed)
                return OfferPass(
                    event_id,
                    offers=tuple(offers),
                    passed_over=tuple(passed),
                    taken=taken,
                    lapsed=lapsed,
                )

        return await retry_tx_once(work)

    # -- figures --------------------------------------------------------------

    async def waitlist_stats(self, event_id: int) -> WaitlistStats:
        # A fan who left with an offer open declined it: counted as lapsed.
        rows = await self._statement(
            "SELECT CASE WHEN state = 'LEFT' AND offer_hold_id IS NOT NULL THEN 'LAPSED' ELSE state END, count(*)"
            " FROM waitlist_entries WHERE event_id = %s GROUP BY 1",
            (event_id,),
            repeatable=True,
        )
        counts = {str(r[0]): int(r[1]) for r in rows}
        return WaitlistStats(
            waiting=counts.get("WAITING", 0),
            offered=counts.get("OFFERED", 0),
            taken=counts.get("TAKEN", 0),
            lapsed=counts.get("LAPSED", 0),
        )

    async def waitlist_reservations(self, event_ids: Sequence[int], now: datetime) -> WaitlistReservations:
        """For the stock, per section of the events: whether fans wait for
        it, and the seats of it that open offers hold (index probes per
        section, never a scan of the list)."""
        rows = await self._statement(
            """
            SELECT sc.event_id, sc.section_id, booking_waitlist_waits(sc.event_id, sc.section_id),
                   COALESCE(o.seats, 0)::integer, COALESCE(o.fans, 0)::integer
              FROM sections sc
              LEFT JOIN LATERAL (
                    SELECT sum(h.quantity) AS seats, count(*) AS fans FROM waitlist_entries w
                      JOIN holds h ON h.hold_id = w.offer_hold_id
                     WHERE w.event_id = sc.event_id AND w.state = 'OFFERED'
                       AND h.section_id = sc.section_id AND h.state = 'HELD' AND h.expires_at > %s
                   ) o ON true
             WHERE sc.event_id = ANY (%s)
            """,
            (now, list(event_ids)),
            repeatable=True,
        )
        return WaitlistReservations.of((int(r[0]), str(r[1]), bool(r[2]), int(r[3]), int(r[4])) for r in rows)


def _not_on_list(event_id: int) -> NotFound:
    return NotFound(
        f"the customer is not on event {event_id}'s waiting list",
        reason="WAITLIST_ENTRY_NOT_FOUND",
        metadata={"event_id": str(event_id)},
    )
