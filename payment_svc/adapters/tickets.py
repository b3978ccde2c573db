"""Tickets in Postgres (the :class:`~payment_svc.ports.TicketStore`).

Idempotent by the outbox event id: the event is recorded in
``processed_stream_events`` in the transaction that writes (or voids) its
tickets, so a redelivered entry finds it and changes nothing. Issuing and
voiding take a per-booking advisory lock, so a confirmation and a
cancellation of one booking handled at once by two consumers end with void
tickets. A seat may have one valid ticket only (a partial UNIQUE index): the
violation becomes :class:`~payment_svc.ports.TicketConflict` here, and nowhere else.
"""

from __future__ import annotations

import base64
import json
import uuid
from collections.abc import Sequence
from dataclasses import replace
from datetime import datetime
from typing import Any

import psycopg

from boxoffice import db
from boxoffice.errors import InvalidArgument
from boxoffice.runtime import Pool
from boxoffice.ticketcodes import TicketClaims, TicketCodeSigner
from payment_svc.model import Ticket, Transfer, TransferState
from payment_svc.ports import ConfirmedBooking, TicketConflict, TicketStore

TICKET_COLUMNS = (
    "ticket_id::text, event_id, hold_id::text, unit, customer_id, section_id, seat_id, seat_label, payment_id, "
    "code, issued_at, voided_at, "
    # Paid in the sandbox (no money taken): said on the ticket.
    "EXISTS (SELECT 1 FROM payments p WHERE p.payment_id::text = tickets.payment_id AND p.provider = 'sandbox')"
)
_MARK_PROCESSED = (
    "INSERT INTO processed_stream_events (consumer, event_id) VALUES (%s, %s) ON CONFLICT DO NOTHING RETURNING 1"
)


TRANSFER_COLUMNS = (
    "transfer_id::text, ticket_id::text, event_id, sender_id, email, state, created_at, ended_at, new_ticket_id::text"
)


def transfer_of(row: Sequence[Any]) -> Transfer:
    return Transfer(
        transfer_id=row[0],
        ticket_id=row[1],
        event_id=int(row[2]),
        sender_id=row[3],
        email=row[4],
        state=TransferState(row[5]),
        created_at=row[6],
        ended_at=row[7],
        new_ticket_id=row[8],
    )


def ticket_of(row: Sequence[Any]) -> Ticket:
    """A ticket from a row of :data:`TICKET_COLUMNS`."""
    return Ticket(*row)


def _encode_cursor(ticket: Ticket) -> str:
    raw = json.dumps([ticket.issued_at.isoformat(), ticket.ticket_id]).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _decode_cursor(token: str) -> tuple[datetime, str]:
    try:
        raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))
        issued, ticket_id = json.loads(raw)
        return datetime.fromisoformat(issued), str(uuid.UUID(ticket_id))
    except (ValueError, TypeError) as err:
        raise InvalidArgument(
            "page_token is not valid", reason="INVALID_FIELD", metadata={"field": "page_token"}
        ) from err


async def _with_pending_transfers(conn: psycopg.AsyncConnection[Any], tickets: list[Ticket]) -> list[Ticket]:
    """``tickets``, each with its pending transfer when it has one."""
    if not tickets:
        return tickets
    cur = await conn.execute(
        f"SELECT {TRANSFER_COLUMNS} FROM ticket_transfers WHERE ticket_id = ANY(%s::uuid[]) AND state = 'PENDING'",
        ([t.ticket_id for t in tickets],),
    )
    pending = {transfer.ticket_id: transfer for transfer in map(transfer_of, await cur.fetchall())}
    return [replace(t, pending_transfer=pending.get(t.ticket_id)) for t in tickets]


class PgTicketStore:
    """``codes`` signs the codes of the tickets :meth:`issue` writes (the
    issuer's store has it; a store that only reads needs none)."""

    def __init__(self, pool: Pool, *, codes: TicketCodeSigner | None = None) -> None:
        self._pool = pool
        self._codes = codes

    @staticmethod
    async def _first_time(conn: psycopg.AsyncConnection[Any], consumer: str, event_id: str, hold_id: str) -> bool:
        """Lock the booking and record the event; False when it was recorded before."""
        await conn.execute("SELECT pg_advisory_xact_lock(hashtextextended(%s, 7))", (hold_id,))
        cur = await conn.execute(_MARK_PROCESSED, (consumer, event_id))
        return await cur.fetchone() is not None

    @db.repeated_when_lost
    async def issue(self, consumer: str, booking: ConfirmedBooking) -> int:
        if self._codes is None:
            raise RuntimeError("this ticket store has no code signer; the issuer's has")
        codes = self._codes
        issued_at = codes.now()
        ticket_ids = [str(uuid.uuid4()) for _ in booking.units]
        try:
            async with db.transaction(self._pool) as conn:
                if not await self._first_time(conn, consumer, booking.source_event_id, booking.hold_id):
                    return 0
                cur = await conn.execute("SELECT 1 FROM cancelled_bookings WHERE hold_id = %s", (booking.hold_id,))
                cancelled = await cur.fetchone() is not None
                async with conn.cursor() as insert:
                    await insert.executemany(
                        """
                        INSERT INTO tickets (ticket_id, event_id, hold_id, unit, customer_id, section_id, seat_id,
                                             seat_label, payment_id, source_event_id, code, issued_at, voided_at)
                        VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, to_timestamp(%s),
                                CASE WHEN %s THEN now() END)
                        ON CONFLICT (hold_id, unit, generation) DO NOTHING
                        """,
                        [
                            (
                                ticket_id,
                                booking.event_id,
                                booking.hold_id,
                                unit.unit,
                                booking.customer_id,
                                booking.section_id,
                                unit.seat_id,
                                unit.seat_label,
                                booking.payment_id,
                                booking.source_event_id,
                                codes.sign(
                                    TicketClaims(
                                        ticket_id, booking.event_id, booking.section_id, unit.seat_label, issued_at
                                    )
                                ),
                                issued_at,
                                cancelled,
                            )
                            for ticket_id, unit in zip(ticket_ids, booking.units, strict=True)
                        ],
                    )
        except psycopg.errors.UniqueViolation as err:
            raise TicketConflict(
                "a seat already has a valid ticket", reason="TICKET_CONFLICT", metadata={"hold_id": booking.hold_id}
            ) from err
        return len(booking.units)

    @db.repeated_when_lost
    async def void(self, consumer: str, source_event_id: str, hold_id: str) -> None:
        async with db.transaction(self._pool) as conn:
            if not await self._first_time(conn, consumer, source_event_id, hold_id):
                return
            await conn.execute(
                "INSERT INTO cancelled_bookings (hold_id, source_event_id) VALUES (%s, %s) ON CONFLICT DO NOTHING",
                (hold_id, source_event_id),
            )
            await conn.execute(
                "UPDATE tickets SET voided_at = now() WHERE hold_id = %s AND voided_at IS NULL", (hold_id,)
            )
            # Offers of the booking's tickets not claimed yet are withdrawn:
            # their links claim nothing (TRANSFER_CANCELLED).
            await conn.execute(
                """
                UPDATE ticket_transfers x SET state = 'CANCELLED', ended_at = now(), claim_secret = ''
                  FROM tickets t
                 WHERE t.ticket_id = x.ticket_id AND t.hold_id = %s AND x.state = 'PENDING'
                """,
                (hold_id,),
            )

    @db.repeated_when_lost
    async def mark_processed(self, consumer: str, source_event_id: str) -> None:
        async with db.transaction(self._pool) as conn:
            await conn.execute(_MARK_PROCESSED, (consumer, source_event_id))

    @db.repeated_when_lost
    async def list_for_customer(
        self, *, event_id: int, customer_id: str, hold_id: str | None, page_size: int, page_token: str
    ) -> tuple[list[Ticket], str]:
        after = _decode_cursor(page_token) if page_token else None
        async with db.transaction(self._pool) as conn:
            cur = await conn.execute(
                f"""
                SELECT {TICKET_COLUMNS} FROM tickets
                 WHERE event_id = %(event)s AND customer_id = %(customer)s AND transferred_at IS NULL
                   AND (%(hold)s::uuid IS NULL OR hold_id = %(hold)s::uuid)
                   AND (%(after_at)s::timestamptz IS NULL OR (issued_at, ticket_id) > (%(after_at)s, %(after_id)s::uuid))
                 ORDER BY issued_at, ticket_id
                 LIMIT %(limit)s
                """,
                {
                    "event": event_id,
                    "customer": customer_id,
                    "hold": hold_id,
                    "after_at": after[0] if after else None,
                    "after_id": after[1] if after else None,
                    "limit": page_size + 1,
                },
            )
            rows = [ticket_of(row) for row in await cur.fetchall()]
            rows = await _with_pending_transfers(conn, rows[: page_size + 1])
        if len(rows) > page_size:
            rows = rows[:page_size]
            return rows, _encode_cursor(rows[-1])
        return rows, ""


def _compliance(store: PgTicketStore) -> TicketStore:
    return store
