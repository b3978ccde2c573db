"""The ticket issuer: BookingConfirmed -> tickets, BookingCancelled -> void.

Idempotent by the outbox event id: the event is recorded in
``processed_stream_events`` in the transaction that writes its tickets, so
a redelivered entry finds it and changes nothing. Both kinds of event take
a per-booking advisory lock, so a confirmation and a cancellation of one
booking handled at once by two consumers end with void tickets. A seat may
have one valid ticket only (a partial UNIQUE index): a booking that would
ticket a seat someone else holds a valid ticket for fails and is retried
(the cancellation that frees it may not have been handled yet); the metric
``boxoffice_ticket_conflicts_total`` shows it.
"""

from __future__ import annotations

import base64
import json
import logging
import secrets
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

import psycopg

from boxoffice import db
from boxoffice.errors import Aborted, InvalidArgument
from boxoffice.runtime import Pool
from boxoffice.streams import StreamEntry
from payment_svc.metrics import IssuerMetrics
from payment_svc.model import Ticket

_log = logging.getLogger("payment_svc.issuer")

ISSUER_GROUP = "ticket-issuer"

_TICKET_COLUMNS = (
    "ticket_id::text, event_id, hold_id::text, unit, customer_id, section_id, seat_id, seat_label, payment_id, "
    "code, issued_at, voided_at"
)


def _ticket(row: Sequence[Any]) -> Ticket:
    return Ticket(*row)


def _ticket_code() -> str:
    return "TKT-" + secrets.token_hex(8).upper()


@dataclass(frozen=True, slots=True)
class _Unit:
    unit: int
    seat_id: int | None
    seat_label: str


def _units(payload: dict[str, Any]) -> list[_Unit]:
    seats = payload.get("seats") or []
    if seats:
        return [_Unit(i + 1, int(seat["seat_id"]), str(seat.get("label", ""))) for i, seat in enumerate(seats)]
    quantity = int(payload.get("quantity", 0))
    if quantity <= 0:
        raise ValueError("a confirmed booking without seats or quantity")
    return [_Unit(i + 1, None, "") for i in range(quantity)]


class TicketConflict(Aborted):
    """A seat of the booking already has a valid ticket."""


class TicketIssuer:
    """The issuer's entry handler."""

    def __init__(self, pool: Pool, metrics: IssuerMetrics, *, group: str = ISSUER_GROUP) -> None:
        self._pool = pool
        self._metrics = metrics
        self._group = group

    async def handle(self, entry: StreamEntry) -> None:
        try:
            if entry.type == "BookingConfirmed":
                await self._issue(entry)
            elif entry.type == "BookingCancelled":
                await self._void(entry)
            # Other event types are not the issuer's.
        except (KeyError, ValueError, TypeError) as err:
            # A malformed event can never succeed: recorded as processed (so
            # the relay's repair does not send it again) and logged loudly.
            self._metrics.consumer.rejected.inc()
            _log.error("malformed booking event refused", extra={"event_id": entry.event_id, "error": repr(err)})
            async with db.transaction(self._pool) as conn:
                await conn.execute(
                    "INSERT INTO processed_stream_events (consumer, event_id) VALUES (%s, %s) ON CONFLICT DO NOTHING",
                    (self._group, entry.event_id),
                )

    async def _claim_event(self, conn: psycopg.AsyncConnection[Any], entry: StreamEntry, hold_id: str) -> bool:
        await conn.execute("SELECT pg_advisory_xact_lock(hashtextextended(%s, 7))", (hold_id,))
        cur = await conn.execute(
            "INSERT INTO processed_stream_events (consumer, event_id) VALUES (%s, %s) ON CONFLICT DO NOTHING RETURNING 1",
            (self._group, entry.event_id),
        )
        return await cur.fetchone() is not None

    async def _issue(self, entry: StreamEntry) -> None:
        payload = entry.payload
        hold_id = str(uuid.UUID(str(payload.get("hold_id") or entry.aggregate_id)))
        units = _units(payload)
        issued = 0
        try:
            async with db.transaction(self._pool) as conn:
                if not await self._claim_event(conn, entry, hold_id):
                    return
                cur = await conn.execute("SELECT 1 FROM cancelled_bookings WHERE hold_id = %s", (hold_id,))
                cancelled = await cur.fetchone() is not None
                async with conn.cursor() as cur2:
                    await cur2.executemany(
                        """
                        INSERT INTO tickets (ticket_id, event_id, hold_id, unit, customer_id, section_id, seat_id,
                                             seat_label, payment_id, source_event_id, code, voided_at)
                        VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, CASE WHEN %s THEN now() END)
                        ON CONFLICT (hold_id, unit) DO NOTHING
                        """,
                        [
                            (
                                str(uuid.uuid4()),
                                int(payload["event_id"]),
                                hold_id,
                                unit.unit,
                                str(payload.get("customer_id", "")),
                                str(payload.get("section_id", "")),
                                unit.seat_id,
                                unit.seat_label,
                                str(payload.get("payment_id", "")),
                                entry.event_id,
                                _ticket_code(),
                                cancelled,
                            )
                            for unit in units
                        ],
                    )
                issued = len(units)
        except psycopg.errors.UniqueViolation as err:
            self._metrics.conflicts.inc()
            _log.error(
                "a seat of this booking already has a valid ticket; will retry",
                extra={"hold_id": hold_id, "event_id": entry.event_id},
            )
            raise TicketConflict(
                "a seat already has a valid ticket", reason="TICKET_CONFLICT", metadata={"hold_id": hold_id}
            ) from err
        self._metrics.tickets_issued.inc(issued)
        self._metrics.lag_seconds.observe(max(0.0, time.time() - entry.created_at))

    async def _void(self, entry: StreamEntry) -> None:
        payload = entry.payload
        hold_id = str(uuid.UUID(str(payload.get("hold_id") or entry.aggregate_id)))
        async with db.transaction(self._pool) as conn:
            if not await self._claim_event(conn, entry, hold_id):
                return
            await conn.execute(
                "INSERT INTO cancelled_bookings (hold_id, source_event_id) VALUES (%s, %s) ON CONFLICT DO NOTHING",
                (hold_id, entry.event_id),
            )
            await conn.execute(
                "UPDATE tickets SET voided_at = now() WHERE hold_id = %s AND voided_at IS NULL", (hold_id,)
            )


class TicketStore(Protocol):
    async def list_for_customer(
        self, *, event_id: int, customer_id: str, hold_id: str | None, page_size: int, page_token: str
    ) -> tuple[list[Ticket], str]: ...


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


class PgTicketStore:
    def __init__(self, pool: Pool) -> None:
        self._pool = pool

    async def list_for_customer(
        self, *, event_id: int, customer_id: str, hold_id: str | None, page_size: int, page_token: str
    ) -> tuple[list[Ticket], str]:
        after = _decode_cursor(page_token) if page_token else None
        async with db.transaction(self._pool) as conn:
            cur = await conn.execute(
                f"""
                SELECT {_TICKET_COLUMNS} FROM tickets
                 WHERE event_id = %(event)s AND customer_id = %(customer)s
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
            rows = [_ticket(row) for row in await cur.fetchall()]
        if len(rows) > page_size:
            rows = rows[:page_size]
            return rows, _encode_cursor(rows[-1])
        return rows, ""


def _compliance(store: PgTicketStore) -> TicketStore:
    return store
