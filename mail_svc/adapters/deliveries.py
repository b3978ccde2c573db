"""The mailer's records in Postgres (the :class:`~mail_svc.ports.DeliveryStore`):
its deliveries, and what a message tells of a booking and where it goes (read
from the tickets, payments and events tables of the same database; a
transfer's from payment's ticket_transfers, a waiting-list offer's from
booking's waitlist_entries, holds and hold_seats)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from boxoffice import db
from boxoffice.runtime import Pool
from mail_svc.model import (
    BookingMail,
    Delivery,
    DeliveryState,
    EventInfo,
    Kind,
    OfferMail,
    Recipient,
    TicketLine,
    TransferMail,
)
from mail_svc.ports import DeliveryStore, OfferMails, PendingDeliveries, TransferMails

_DELIVERY = "hold_id::text, kind, event_id, message_id, state, attempts, last_error, sent_at, updated_at"
# The kinds of a booking's own messages (its id is the delivery's hold_id).
# An operator's view and resend of a booking's e-mails are of these alone: a
# waiting-list offer's delivery has the same hold id once the offer is
# bought, but it is no message of the booking's.
_BOOKING_KINDS = "kind IN ('tickets', 'void')"


def _delivery(row: Sequence[Any]) -> Delivery:
    return Delivery(
        hold_id=row[0],
        kind=Kind(row[1]),
        event_id=int(row[2]),
        message_id=row[3],
        state=DeliveryState(row[4]),
        attempts=int(row[5]),
        last_error=row[6],
        sent_at=row[7],
        updated_at=row[8],
    )


def _route(origin: str | None, destination: str | None, code: str | None) -> str:
    if not origin or not destination:
        return ""
    return f"{code + ' ' if code else ''}{origin} → {destination}"


async def _event_info(conn: Any, event_id: int) -> EventInfo | None:
    cur = await conn.execute(
        """
        SELECT display_name, kind, starts_at, time_zone, venue_name, venue_city,
               flight_origin, flight_destination, flight_code
          FROM events WHERE event_id = %s
        """,
        (event_id,),
    )
    event = await cur.fetchone()
    if event is None:
        return None
    return EventInfo(
        event_id=event_id,
        name=event[0],
        kind=event[1],
        starts_at=event[2],
        time_zone=event[3],
        venue=", ".join(part for part in (event[4], event[5]) if part),
        route=_route(event[6], event[7], event[8]),
    )


class PgDeliveryStore:
    def __init__(self, pool: Pool) -> None:
        self._pool = pool

    async def open_delivery(self, hold_id: str, kind: Kind, event_id: int, message_id: str) -> Delivery:
        async with db.transaction(self._pool) as conn:
            await conn.execute(
                """
                INSERT INTO mail_deliveries (hold_id, kind, event_id, message_id, state)
                VALUES (%s, %s, %s, %s, 'PENDING') ON CONFLICT (hold_id, kind) DO NOTHING
                """,
                (hold_id, kind.value, event_id, message_id),
            )
            cur = await conn.execute(
                f"SELECT {_DELIVERY} FROM mail_deliveries WHERE hold_id = %s AND kind = %s", (hold_id, kind.value)
            )
            row = await cur.fetchone()
        assert row is not None
        return _delivery(row)

    async def recipient(self, hold_id: str) -> Recipient | None:
        async with db.transaction(self._pool) as conn:
            # The payment that paid (or, for a refund, was paid), as the
            # fan asked for it at StartPayment.
            cur = await conn.execute(
                """
                SELECT notify_email, notify_language FROM payments
                 WHERE hold_id = %s AND state NOT IN ('PENDING', 'DECLINED', 'FAILED')
                 ORDER BY attempt DESC LIMIT 1
                """,
                (hold_id,),
            )
            row = await cur.fetchone()
        if row is None or not row[0]:
            return None
        return Recipient(row[0], row[1] or "en")

    async def booking(self, hold_id: str) -> BookingMail | None:
        async with db.transaction(self._pool) as conn:
            # The booking's own tickets (a ticket re-issued to a friend is
            # the friend's, and its transferred original is not written to).
            cur = await conn.execute(
                "SELECT unit, code, section_id, seat_label, event_id FROM tickets "
                "WHERE hold_id = %s AND generation = 0 AND transferred_at IS NULL ORDER BY unit",
                (hold_id,),
            )
            rows = await cur.fetchall()
            if not rows:
                return None
            event_id = int(rows[0][4])
            event = await _event_info(conn, event_id)
            cur = await conn.execute(
                """
                SELECT amount_minor, currency FROM payments
                 WHERE hold_id = %s AND state <> 'PENDING' AND state <> 'DECLINED' AND state <> 'FAILED'
                 ORDER BY attempt DESC LIMIT 1
                """,
                (hold_id,),
            )
            payment = await cur.fetchone()
        if event is None:
            return None
        return BookingMail(
            hold_id=hold_id,
            event=event,
            tickets=tuple(TicketLine(int(r[0]), r[1], r[2], r[3]) for r in rows),
            amount_minor=int(payment[0]) if payment else 0,
            currency=payment[1] if payment else "EUR",
        )

    async def mark(self, hold_id: str, kind: Kind, state: str, *, error: str = "") -> None:
        async with db.transaction(self._pool) as conn:
            await conn.execute(
                """
                UPDATE mail_deliveries
                   SET state = %(state)s, attempts = attempts + 1, last_error = %(error)s, updated_at = now(),
                       sent_at = CASE WHEN %(state)s = 'SENT' THEN now() ELSE sent_at END
                 WHERE hold_id = %(hold)s AND kind = %(kind)s AND state <> 'SENT'
                """,
                {"state": state, "error": error[:500], "hold": hold_id, "kind": kind.value},
            )

    async def reopen(self, hold_id: str) -> list[Delivery]:
        async with db.transaction(self._pool) as conn:
            cur = await conn.execute(
                f"""
                UPDATE mail_deliveries SET state = 'PENDING', updated_at = now()
                 WHERE hold_id = %s AND state IN ('FAILED', 'NO_ADDRESS') AND {_BOOKING_KINDS}
                RETURNING {_DELIVERY}
                """,
                (hold_id,),
            )
            return [_delivery(row) for row in await cur.fetchall()]

    async def not_delivered(self, event_id: int) -> list[Delivery]:
        async with db.transaction(self._pool) as conn:
            cur = await conn.execute(
                f"""
                SELECT {_DELIVERY} FROM mail_deliveries
                 WHERE event_id = %s AND state IN ('FAILED', 'NO_ADDRESS') ORDER BY created_at, hold_id
                """,
                (event_id,),
            )
            return [_delivery(row) for row in await cur.fetchall()]

    async def pending(self, limit: int, *, older_than_seconds: float) -> list[Delivery]:
        """Claims the deliveries due a send: those an operator queued, and
        those left PENDING and untouched for ``older_than_seconds``. A claim
        touches them (and clears the queued mark), so that another sweep,
        here or in another replica, leaves them alone for as long."""
        async with db.transaction(self._pool) as conn:
            cur = await conn.execute(
                f"""
                WITH due AS (
                    SELECT hold_id, kind FROM mail_deliveries
                     WHERE state = 'PENDING'
                       AND (resend_at IS NOT NULL OR updated_at < now() - make_interval(secs => %s))
                     ORDER BY updated_at LIMIT %s
                       FOR UPDATE SKIP LOCKED
                )
                UPDATE mail_deliveries d SET resend_at = NULL, updated_at = now()
                  FROM due WHERE d.hold_id = due.hold_id AND d.kind = due.kind
                RETURNING {", ".join(f"d.{c.strip()}" for c in _DELIVERY.split(","))}
                """,
                (older_than_seconds, limit),
            )
            return [_delivery(row) for row in await cur.fetchall()]

    async def deliveries(self, hold_id: str) -> list[Delivery]:
        """The booking's deliveries, tickets first."""
        async with db.transaction(self._pool) as conn:
            cur = await conn.execute(
                f"SELECT {_DELIVERY} FROM mail_deliveries WHERE hold_id = %s AND {_BOOKING_KINDS} "
                "ORDER BY kind = 'void', kind",
                (hold_id,),
            )
            return [_delivery(row) for row in await cur.fetchall()]

    async def paid_event(self, hold_id: str) -> int | None:
        """The event of the booking's paid payment (None: none paid, or no such booking)."""
        async with db.transaction(self._pool) as conn:
            cur = await conn.execute(
                """
                SELECT event_id FROM payments
                 WHERE hold_id = %s AND state NOT IN ('PENDING', 'DECLINED', 'FAILED')
                 ORDER BY attempt DESC LIMIT 1
                """,
                (hold_id,),
            )
            row = await cur.fetchone()
        return None if row is None else int(row[0])

    async def queue_resend(self, hold_id: str, *, new_tickets: tuple[int, str] | None) -> list[Delivery]:
        """Queues the booking's deliveries that did not go out (FAILED,
        NO_ADDRESS, or still PENDING) for the sweep's next round, and opens a
        tickets delivery ``new_tickets`` = (event id, Message-ID) when the
        booking has none; the deliveries queued, as they are now."""
        async with db.transaction(self._pool) as conn:
            if new_tickets is not None:
                await conn.execute(
                    """
                    INSERT INTO mail_deliveries (hold_id, kind, event_id, message_id, state)
                    VALUES (%s, 'tickets', %s, %s, 'PENDING') ON CONFLICT (hold_id, kind) DO NOTHING
                    """,
                    (hold_id, *new_tickets),
                )
            cur = await conn.execute(
                f"""
                UPDATE mail_deliveries SET state = 'PENDING', resend_at = now(), updated_at = now()
                 WHERE hold_id = %s AND state IN ('PENDING', 'FAILED', 'NO_ADDRESS') AND {_BOOKING_KINDS}
                RETURNING {_DELIVERY}
                """,
                (hold_id,),
            )
            return [_delivery(row) for row in await cur.fetchall()]

    async def transfer(self, transfer_id: str) -> TransferMail | None:
        async with db.transaction(self._pool) as conn:
            cur = await conn.execute(
                """
                SELECT tr.event_id, t.section_id, t.seat_label, tr.email, tr.language, tr.claim_secret, tr.state
                  FROM ticket_transfers tr JOIN tickets t ON t.ticket_id = tr.ticket_id
                 WHERE tr.transfer_id = %s
                """,
                (transfer_id,),
            )
            row = await cur.fetchone()
            if row is None:
                return None
            event = await _event_info(conn, int(row[0]))
        if event is None:
            return None
        return TransferMail(
            transfer_id=transfer_id,
            event=event,
            section_id=row[1],
            seat_label=row[2],
            email=row[3],
            language=row[4],
            secret=row[5],
            pending=row[6] == "PENDING",
        )

    async def unsent_transfers(self, limit: int) -> list[tuple[str, int]]:
        async with db.transaction(self._pool) as conn:
            cur = await conn.execute(
                """
                SELECT tr.transfer_id::text, tr.event_id FROM ticket_transfers tr
                 WHERE tr.state = 'PENDING'
                   AND NOT EXISTS (SELECT 1 FROM mail_deliveries d
                                    WHERE d.hold_id = tr.transfer_id AND d.kind = 'transfer')
                 ORDER BY tr.created_at LIMIT %s
                """,
                (limit,),
            )
            return [(row[0], int(row[1])) for row in await cur.fetchall()]

    async def offer(self, hold_id: str) -> OfferMail | None:
        async with db.transaction(self._pool) as conn:
            cur = await conn.execute(
                """
                SELECT w.event_id, w.customer_id, h.section_id, h.quantity, h.amount_minor, h.currency,
                       h.expires_at, w.state = 'OFFERED' AND h.state = 'HELD' AND h.expires_at > now(),
                       w.notify_email, w.notify_language
                  FROM waitlist_entries w JOIN holds h ON h.hold_id = w.offer_hold_id
                 WHERE w.offer_hold_id = %s
                """,
                (hold_id,),
            )
            row = await cur.fetchone()
            if row is None:
                return None
            cur = await conn.execute(
                "SELECT label FROM hold_seats WHERE hold_id = %s ORDER BY row_label, seat_number, label", (hold_id,)
            )
            labels = tuple(str(r[0]) for r in await cur.fetchall())
            event = await _event_info(conn, int(row[0]))
        if event is None:
            return None
        return OfferMail(
            hold_id=hold_id,
            event=event,
            customer_id=row[1],
            section_id=row[2],
            quantity=int(row[3]),
            seat_labels=labels,
            amount_minor=int(row[4]),
            currency=row[5],
            expires_at=row[6],
            open=bool(row[7]),
            email=row[8] or None,
            language=row[9] or None,
        )

    async def fan_recipient(self, customer_id: str) -> Recipient | None:
        async with db.transaction(self._pool) as conn:
            # The address the edge asserted (verified) when the fan last
            # started a payment that named one.
            cur = await conn.execute(
                """
                SELECT notify_email, notify_language FROM payments
                 WHERE customer_id = %s AND notify_email IS NOT NULL
                 ORDER BY created_at DESC LIMIT 1
                """,
                (customer_id,),
            )
            row = await cur.fetchone()
        if row is None or not row[0]:
            return None
        return Recipient(row[0], row[1] or "en")

    async def unsent_offers(self, limit: int) -> list[tuple[str, int]]:
        async with db.transaction(self._pool) as conn:
            cur = await conn.execute(
                """
                SELECT w.offer_hold_id::text, w.event_id
                  FROM waitlist_entries w JOIN holds h ON h.hold_id = w.offer_hold_id
                 WHERE w.state = 'OFFERED' AND h.state = 'HELD' AND h.expires_at > now()
                   AND NOT EXISTS (SELECT 1 FROM mail_deliveries d
                                    WHERE d.hold_id = w.offer_hold_id AND d.kind = 'offer')
                 ORDER BY w.offered_at, w.place LIMIT %s
                """,
                (limit,),
            )
            return [(row[0], int(row[1])) for row in await cur.fetchall()]

    async def new_delivery(self, hold_id: str, kind: Kind, event_id: int, message_id: str) -> Delivery | None:
        async with db.transaction(self._pool) as conn:
            cur = await conn.execute(
                f"""
                INSERT INTO mail_deliveries (hold_id, kind, event_id, message_id, state)
                VALUES (%s, %s, %s, %s, 'PENDING') ON CONFLICT (hold_id, kind) DO NOTHING
                RETURNING {_DELIVERY}
                """,
                (hold_id, kind.value, event_id, message_id),
            )
            row = await cur.fetchone()
        return None if row is None else _delivery(row)


def _compliance(store: PgDeliveryStore) -> tuple[DeliveryStore, PendingDeliveries, TransferMails, OfferMails]:
    return store, store, store, store
