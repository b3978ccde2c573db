"""Ticket transfers in Postgres (the :class:`~payment_svc.ports.TransferStore`).

Each use case is one transaction. A claim locks the transfer's row first (a
second claim of the same transfer waits for the first and then finds it
CLAIMED: the ticket is re-issued once), then the booking's advisory lock
(the one the issuer takes to issue or void the booking's tickets, so that
a cancellation handled at the same moment is seen or waits), then the
ticket's row, then the claimer's own lock in the event, so that two claims
by one fan never pass the ticket limit on one count. A transaction cut by a
lost connection before it committed runs once more (``db.repeated_when_lost``).

A claimed transfer is then told to BookingService (``booking_told_at`` marks
it acknowledged; :meth:`PgTransferStore.untold` lists the others for the
retry loop), and a fan's cancel of a booking holds the booking's lock while
it tells booking of the booking's untold transfers and cancels, then
withdraws the booking's pending transfers
(:meth:`PgTransferStore.cancelling_booking`), so no claim commits in between;
and a claim of a ticket whose booking is no longer confirmed (an operator's
refund before the issuer voided it) is TICKET_VOID.

The event's settings (its ``transfers`` switch, its start, its ticket
limit) and the claimer's live holds and paid bookings not ticketed yet are
read from booking's tables in the claim's own transaction, read only; a
ticket the door admitted already (check-in's table) is not passed on.
"""

from __future__ import annotations

import contextlib
import hmac
import uuid
from collections.abc import AsyncIterator, Sequence
from datetime import datetime
from typing import Any

import psycopg

from boxoffice import db
from boxoffice.errors import AlreadyExists, FailedPrecondition, NotFound
from boxoffice.runtime import Pool
from boxoffice.ticketcodes import TicketClaims, TicketCodeSigner
from payment_svc.adapters.tickets import TICKET_COLUMNS, TRANSFER_COLUMNS, ticket_of, transfer_of
from payment_svc.model import ClaimedTransfer, Ticket, Transfer, TransferState
from payment_svc.ports import TransferStore


def _ticket_not_found(ticket_id: str) -> NotFound:
    return NotFound("no such ticket", reason="TICKET_NOT_FOUND", metadata={"ticket_id": ticket_id})


def _transfer_not_found(transfer_id: str) -> NotFound:
    return NotFound("no such transfer", reason="TRANSFER_NOT_FOUND", metadata={"transfer_id": transfer_id})


def _ended(transfer: Transfer) -> FailedPrecondition:
    if transfer.state is TransferState.CLAIMED:
        return FailedPrecondition(
            "this transfer was claimed already",
            reason="TRANSFER_CLAIMED",
            metadata={"transfer_id": transfer.transfer_id},
        )
    return FailedPrecondition(
        "the sender cancelled this transfer",
        reason="TRANSFER_CANCELLED",
        metadata={"transfer_id": transfer.transfer_id},
    )


async def _not_checked_in(conn: psycopg.AsyncConnection[Any], ticket_id: str) -> None:
    """TICKET_CHECKED_IN when the door admitted the ticket (check-in's table)."""
    cur = await conn.execute("SELECT 1 FROM checkins WHERE ticket_id = %s", (ticket_id,))
    if await cur.fetchone() is not None:
        raise FailedPrecondition(
            "this ticket was used at the door already", reason="TICKET_CHECKED_IN", metadata={"ticket_id": ticket_id}
        )


async def _check_event(conn: psycopg.AsyncConnection[Any], event_id: int, now: datetime) -> int:
    """The event's ticket limit, once its transfers are allowed now;
    TRANSFERS_NOT_ALLOWED otherwise."""
    cur = await conn.execute(
        "SELECT transfers, starts_at, COALESCE(max_tickets_per_customer, max_seats_per_customer) "
        "FROM events WHERE event_id = %s",
        (event_id,),
    )
    row = await cur.fetchone()
    if row is None or not row[0]:
        why = "switched_off"
    elif row[1] <= now:
        why = "event_started"
    else:
        return int(row[2])
    raise FailedPrecondition(
        "this event's tickets cannot be transferred" if why == "switched_off" else "this event has started",
        reason="TRANSFERS_NOT_ALLOWED",
        metadata={"event_id": str(event_id), "why": why},
    )


async def _customer_tickets(conn: psycopg.AsyncConnection[Any], event_id: int, customer_id: str, now: datetime) -> int:
    """What counts against ``customer_id``'s ticket limit in the event: their
    valid tickets (bought or received), the seats of their paid bookings not
    ticketed yet, and the seats of their live holds."""
    cur = await conn.execute(
        """
        SELECT (SELECT count(*) FROM tickets
                 WHERE event_id = %(event)s AND customer_id = %(customer)s
                   AND voided_at IS NULL AND transferred_at IS NULL)
             + (SELECT coalesce(sum(h.quantity), 0) FROM holds h
                 WHERE h.event_id = %(event)s AND h.customer_id = %(customer)s
                   AND (h.state = 'HELD' AND h.expires_at > %(now)s
                        OR h.state = 'CONFIRMED'
                           AND NOT EXISTS (SELECT 1 FROM tickets t WHERE t.hold_id = h.hold_id)))
        """,
        {"event": event_id, "customer": customer_id, "now": now},
    )
    row = await cur.fetchone()
    return int(row[0]) if row else 0


class PgTransferStore:
    """``codes`` signs the re-issued tickets' codes, as the issuer signs any."""

    def __init__(self, pool: Pool, *, codes: TicketCodeSigner) -> None:
        self._pool = pool
        self._codes = codes

    @db.repeated_when_lost
    async def create(
        self, *, ticket_id: str, sender_id: str, email: str, language: str, secret: str, now: datetime
    ) -> Transfer:
        transfer_id = str(uuid.uuid4())
        async with db.transaction(self._pool) as conn:
            cur = await conn.execute(
                "SELECT customer_id, event_id, voided_at IS NOT NULL, transferred_at IS NOT NULL "
                "FROM tickets WHERE ticket_id = %s FOR UPDATE",
                (ticket_id,),
            )
            row = await cur.fetchone()
            if row is None or row[0] != sender_id or row[3]:
                raise _ticket_not_found(ticket_id)
            if row[2]:
                raise FailedPrecondition("this ticket is void", reason="TICKET_VOID", metadata={"ticket_id": ticket_id})
            event_id = int(row[1])
            await _not_checked_in(conn, ticket_id)
            await _check_event(conn, event_id, now)
            cur = await conn.execute(
                "SELECT transfer_id::text FROM ticket_transfers WHERE ticket_id = %s AND state = 'PENDING'",
                (ticket_id,),
            )
            pending = await cur.fetchone()
            if pending is not None:
                raise AlreadyExists(
                    "this ticket is being transferred already; cancel that transfer first",
                    reason="TRANSFER_PENDING",
                    metadata={"transfer_id": pending[0]},
                )
            cur = await conn.execute(
                f"""
                INSERT INTO ticket_transfers (transfer_id, ticket_id, event_id, sender_id, email, language,
                                              claim_secret, state, created_at)
                VALUES (%s, %s, %s, %s, %s, %s, %s, 'PENDING', %s)
                RETURNING {TRANSFER_COLUMNS}
                """,
                (transfer_id, ticket_id, event_id, sender_id, email, language, secret, now),
            )
            inserted = await cur.fetchone()
            assert inserted is not None
            return transfer_of(inserted)

    @db.repeated_when_lost
    async def claim(self, *, transfer_id: str, secret: str, receiver_id: str, now: datetime) -> tuple[Transfer, Ticket]:
        async with db.transaction(self._pool) as conn:
            cur = await conn.execute(
                f"SELECT {TRANSFER_COLUMNS}, claim_secret FROM ticket_transfers WHERE transfer_id = %s FOR UPDATE",
                (transfer_id,),
            )
            row = await cur.fetchone()
            if row is None:
                raise _transfer_not_found(transfer_id)
            transfer = transfer_of(row)
            if transfer.state is TransferState.PENDING and not hmac.compare_digest(
                str(row[9]).encode(), secret.encode()
            ):
                raise _transfer_not_found(transfer_id)
            if transfer.state is not TransferState.PENDING:
                raise _ended(transfer)
            if transfer.sender_id == receiver_id:
                raise FailedPrecondition(
                    "this is your own transfer: the ticket stays yours until your friend claims it",
                    reason="TRANSFER_TO_SELF",
                    metadata={"transfer_id": transfer_id},
                )
            cur = await conn.execute("SELECT hold_id::text FROM tickets WHERE ticket_id = %s", (transfer.ticket_id,))
            hold = await cur.fetchone()
            assert hold is not None  # a foreign key
            await conn.execute("SELECT pg_advisory_xact_lock(hashtextextended(%s, 7))", (hold[0],))
            cur = await conn.execute(
                f"SELECT {TICKET_COLUMNS}, generation, source_event_id::text, transferred_at IS NOT NULL "
                "FROM tickets WHERE ticket_id = %s FOR UPDATE",
                (transfer.ticket_id,),
            )
            old_row = await cur.fetchone()
            assert old_row is not None
            old = ticket_of(old_row[:13])
            generation, source_event_id, transferred = int(old_row[13]), old_row[14], bool(old_row[15])
            cur = await conn.execute("SELECT state FROM holds WHERE hold_id = %s", (old.hold_id,))
            booking = await cur.fetchone()
            if old.voided_at is not None or (booking is not None and booking[0] != "CONFIRMED"):
                raise FailedPrecondition(
                    "the ticket is void: its booking was cancelled",
                    reason="TICKET_VOID",
                    metadata={"ticket_id": old.ticket_id},
                )
            if transferred or old.customer_id != transfer.sender_id:
                raise _ended(transfer)
            await _not_checked_in(conn, old.ticket_id)
            limit = await _check_event(conn, transfer.event_id, now)
            await conn.execute(
                "SELECT pg_advisory_xact_lock(hashtextextended(%s, 8))", (f"{transfer.event_id}:{receiver_id}",)
            )
            has = await _customer_tickets(conn, transfer.event_id, receiver_id, now)
            if has + 1 > limit:
                raise FailedPrecondition(
                    f"you have {has} tickets for this event, and its limit is {limit} per fan",
                    reason="TICKET_LIMIT_REACHED",
                    metadata={"limit": str(limit), "tickets": str(has)},
                )
            await conn.execute(
                "UPDATE tickets SET voided_at = %s, transferred_at = %s WHERE ticket_id = %s", (now, now, old.ticket_id)
            )
            new_id = str(uuid.uuid4())
            issued_at = self._codes.now()
            code = self._codes.sign(TicketClaims(new_id, old.event_id, old.section_id, old.seat_label, issued_at))
            await conn.execute(
                """
                INSERT INTO tickets (ticket_id, event_id, hold_id, unit, customer_id, section_id, seat_id, seat_label,
                                     payment_id, source_event_id, code, issued_at, generation, transferred_from)
                VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, to_timestamp(%s), %s, %s)
                """,
                (
                    new_id,
                    old.event_id,
                    old.hold_id,
                    old.unit,
                    receiver_id,
                    old.section_id,
                    old.seat_id,
                    old.seat_label,
                    old.payment_id,
                    source_event_id,
                    code,
                    issued_at,
                    generation + 1,
                    old.ticket_id,
                ),
            )
            cur = await conn.execute(
                f"""
                UPDATE ticket_transfers
                   SET state = 'CLAIMED', ended_at = %s, receiver_id = %s, new_ticket_id = %s, claim_secret = ''
                 WHERE transfer_id = %s
                RETURNING {TRANSFER_COLUMNS}
                """,
                (now, receiver_id, new_id, transfer_id),
            )
            claimed = await cur.fetchone()
            assert claimed is not None
            cur = await conn.execute(f"SELECT {TICKET_COLUMNS} FROM tickets WHERE ticket_id = %s", (new_id,))
            ticket = await cur.fetchone()
            assert ticket is not None
            return transfer_of(claimed), ticket_of(ticket)

    @db.repeated_when_lost
    async def cancel(self, *, transfer_id: str, sender_id: str, now: datetime) -> Transfer:
        async with db.transaction(self._pool) as conn:
            cur = await conn.execute(
                f"SELECT {TRANSFER_COLUMNS} FROM ticket_transfers WHERE transfer_id = %s FOR UPDATE", (transfer_id,)
            )
            row = await cur.fetchone()
            if row is None or row[3] != sender_id:
                raise _transfer_not_found(transfer_id)
            transfer = transfer_of(row)
            if transfer.state is TransferState.CLAIMED:
                raise _ended(transfer)
            if transfer.state is TransferState.CANCELLED:
                return transfer
            cur = await conn.execute(
                f"""
                UPDATE ticket_transfers SET state = 'CANCELLED', ended_at = %s, claim_secret = ''
                 WHERE transfer_id = %s
                RETURNING {TRANSFER_COLUMNS}
                """,
                (now, transfer_id),
            )
            cancelled = await cur.fetchone()
            assert cancelled is not None
            return transfer_of(cancelled)

    async def untold(self, limit: int, transfer_id: str | None = None) -> list[ClaimedTransfer]:
        async with db.transaction(self._pool) as conn:
            cur = await conn.execute(
                f"{_CLAIMED} AND (%s::uuid IS NULL OR x.transfer_id = %s::uuid) ORDER BY x.ended_at LIMIT %s",
                (transfer_id, transfer_id, limit),
            )
            return [_claimed(row) for row in await cur.fetchall()]

    async def mark_told(self, transfer_ids: Sequence[str]) -> None:
        if not transfer_ids:
            return
        async with db.transaction(self._pool) as conn:
            await _mark_told(conn, transfer_ids)

    @contextlib.asynccontextmanager
    async def cancelling_booking(self, hold_id: str) -> AsyncIterator[list[ClaimedTransfer]]:
        async with db.transaction(self._pool) as conn:
            # The lock a claim takes before it re-issues a ticket of the booking.
            await conn.execute("SELECT pg_advisory_xact_lock(hashtextextended(%s, 7))", (hold_id,))
            cur = await conn.execute(f"{_CLAIMED} AND t.hold_id = %s ORDER BY x.ended_at", (hold_id,))
            untold = [_claimed(row) for row in await cur.fetchall()]
            yield untold
            await _mark_told(conn, [t.transfer_id for t in untold])
            # Cancelled: offers of its tickets not claimed yet are withdrawn now.
            await conn.execute(
                """
                UPDATE ticket_transfers x SET state = 'CANCELLED', ended_at = now(), claim_secret = ''
                  FROM tickets t
                 WHERE t.ticket_id = x.ticket_id AND t.hold_id = %s AND x.state = 'PENDING'
                """,
                (hold_id,),
            )


# Claimed transfers BookingService has not acknowledged, with the booking,
# unit and generation of the ticket each re-issued.
_CLAIMED = """
SELECT x.transfer_id::text, x.event_id, t.hold_id::text, t.unit, t.generation, x.sender_id, x.receiver_id, x.ended_at
  FROM ticket_transfers x JOIN tickets t ON t.ticket_id = x.new_ticket_id
 WHERE x.state = 'CLAIMED' AND x.booking_told_at IS NULL
"""


def _claimed(row: Sequence[Any]) -> ClaimedTransfer:
    return ClaimedTransfer(
        transfer_id=str(row[0]),
        event_id=int(row[1]),
        hold_id=str(row[2]),
        unit=int(row[3]),
        generation=int(row[4]),
        sender_id=str(row[5]),
        receiver_id=str(row[6]),
        claimed_at=row[7],
    )


async def _mark_told(conn: psycopg.AsyncConnection[Any], transfer_ids: Sequence[str]) -> None:
    if transfer_ids:
        await conn.execute(
            "UPDATE ticket_transfers SET booking_told_at = now() "
            "WHERE transfer_id = ANY(%s::uuid[]) AND booking_told_at IS NULL",
            (list(transfer_ids),),
        )


def _compliance(store: PgTransferStore) -> TransferStore:
    return store
