"""Changes to a hold on Postgres: release, extend, confirm and cancel.
Each is one short transaction (confirm is one statement) that takes its
locks in the order every transaction takes them (hold row, seats by
ascending id, counter stripes in ascending order), so that no two wait on
each other in a cycle; a deadlock is retried once all the same."""

from __future__ import annotations

import json
import uuid
from datetime import datetime, timedelta
from typing import Any

from psycopg import AsyncConnection
from psycopg.rows import TupleRow

from booking_svc.adapters.postgres import outcomes
from booking_svc.adapters.postgres.base import PgBase, retry_deadlock_once, retry_tx_once
from booking_svc.adapters.postgres.transfers import transferred_away
from booking_svc.cancellation import granted_for_quote
from booking_svc.model import Hold, HoldState, Money, RefundPolicy
from boxoffice import deadline
from boxoffice.db import transaction
from boxoffice.errors import FailedPrecondition
from boxoffice.tracing import current_traceparent

_CONFIRM_SQL = b"SELECT outcome, in_flight, key_reused FROM booking_confirm_hold(%s, %s, %s, %s, %s, %s, %s, %s)"


class PgHoldChanges(PgBase):
    """Release, extend, confirm and cancel."""

    async def release_hold(self, *, hold_id: uuid.UUID, customer_id: str, now: datetime) -> Hold:
        async def work() -> Hold:
            async with transaction(self._pool) as conn:
                hold = await self._lock_hold(conn, hold_id)
                self._check_owner(hold, customer_id)
                if hold.state is HoldState.RELEASED:
                    return hold
                if hold.state is not HoldState.HELD:
                    raise FailedPrecondition(
                        f"the hold is {hold.state.value}, not HELD",
                        reason="HOLD_NOT_HELD",
                        metadata={"hold_id": str(hold_id), "state": hold.state.value},
                    )
                await conn.execute(
                    "UPDATE holds SET state = 'RELEASED', ended_at = %s WHERE hold_id = %s", (now, hold_id)
                )
                await self._free_held(conn, hold)
                return await self._read_hold(conn, hold_id)

        return await retry_tx_once(work)

    async def extend_hold(
        self, *, hold_id: uuid.UUID, customer_id: str, extend_by: timedelta, max_lifetime: timedelta, now: datetime
    ) -> Hold:
        async def work() -> Hold:
            async with transaction(self._pool) as conn:
                hold = await self._lock_hold(conn, hold_id)
                self._check_owner(hold, customer_id)
                state = hold.state_at(now)
                if state is HoldState.EXPIRED:
                    raise FailedPrecondition(
                        "the hold has expired", reason="HOLD_EXPIRED", metadata={"hold_id": str(hold_id)}
                    )
                if state is not HoldState.HELD:
                    raise FailedPrecondition(
                        f"the hold is {state.value}, not HELD",
                        reason="HOLD_NOT_HELD",
                        metadata={"hold_id": str(hold_id), "state": state.value},
                    )
                # Never shorter than it was; never longer than max_lifetime
                # from its creation, so that a hold cannot be kept forever.
                expires = min(max(hold.expires_at, now + extend_by), hold.created_at + max_lifetime)
                expires = max(expires, hold.expires_at)
                if expires != hold.expires_at:
                    await self._set_expiry(conn, hold, expires)
                return await self._read_hold(conn, hold_id)

        return await retry_tx_once(work)

    async def _set_expiry(self, conn: AsyncConnection[TupleRow], hold: Hold, expires: datetime) -> None:
        """The hold's and its held seats' expiry."""
        await conn.execute("UPDATE holds SET expires_at = %s WHERE hold_id = %s", (expires, hold.hold_id))
        await conn.execute(
            """
            WITH mine AS MATERIALIZED (
                SELECT s.seat_id FROM seats s
                 WHERE s.event_id = %(event)s AND s.seat_id = ANY (%(ids)s)
                   AND s.hold_id = %(hold)s AND s.status = 'HELD'
                 ORDER BY s.seat_id
                   FOR UPDATE
            )
            UPDATE seats s SET hold_expires_at = %(expires)s
              FROM mine WHERE s.event_id = %(event)s AND s.seat_id = mine.seat_id
            """,
            {
                "event": hold.event_id,
                "ids": [seat.seat_id for seat in hold.seats],
                "hold": hold.hold_id,
                "expires": expires,
            },
        )

    async def confirm_hold(
        self, *, hold_id: uuid.UUID, idempotency_key: str, payment_id: str, amount_paid: Money, now: datetime
    ) -> Hold:
        """HELD -> CONFIRMED, seats SOLD, counters moved, an outbox row: one
        statement (``booking_confirm_hold``), one transaction. The first answer for a key (a hold or an error) is
        stored with it and replayed; a twin in flight waits for it."""

        async def attempt() -> Hold:
            rows = await self._statement(
                _CONFIRM_SQL,
                (
                    hold_id,
                    idempotency_key,
                    payment_id,
                    amount_paid.amount_minor,
                    amount_paid.currency,
                    now,
                    deadline.statement_timeout_ms(),
                    # The outbox row carries the confirm's trace to the issuer.
                    current_traceparent(),
                ),
                # Idempotent by its key: a confirm sent again replays the
                # first one's answer.
                repeatable=True,
            )
            stored, in_flight, key_reused = rows[0]
            conflict = outcomes.confirm_conflict(in_flight=in_flight, key_reused=key_reused)
            if conflict is not None:
                raise conflict
            return outcomes.confirm_answer(stored)

        return await retry_deadlock_once(attempt)

    async def _outbox(
        self, conn: AsyncConnection[TupleRow], hold_id: uuid.UUID, kind: str, payload: dict[str, Any]
    ) -> None:
        await conn.execute(
            "INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload, traceparent) "
            "VALUES (%s, 'booking', %s, %s, %s, %s)",
            (uuid.uuid4(), str(hold_id), kind, json.dumps(payload), current_traceparent()),
        )

    async def restore_hold_expiry(
        self, *, hold_id: uuid.UUID, customer_id: str, expires_at: datetime, now: datetime
    ) -> Hold:
        async def work() -> Hold:
            async with transaction(self._pool) as conn:
                hold = await self._lock_hold(conn, hold_id)
                self._check_owner(hold, customer_id)
                if hold.state_at(now) is not HoldState.HELD or expires_at >= hold.expires_at:
                    return hold
                await self._set_expiry(conn, hold, expires_at)
                return await self._read_hold(conn, hold_id)

        return await retry_deadlock_once(work)

    async def cancel_booking(
        self,
        *,
        hold_id: uuid.UUID,
        customer_id: str,
        reason: str,
        now: datetime,
        refund_required: bool = False,
        refunded_at_provider: bool = False,
        quoted_refund: Money | None = None,
        by_fan: bool = False,
    ) -> tuple[Hold, int]:
        async def work() -> tuple[Hold, int]:
            async with transaction(self._pool) as conn:
                hold = await self._lock_hold(conn, hold_id)
                self._check_owner(hold, customer_id)
                if hold.state is HoldState.CANCELLED:
                    return hold, hold.refund_amount_minor or 0
                if hold.state is not HoldState.CONFIRMED:
                    raise FailedPrecondition(
                        f"the hold is {hold.state_at(now).value}, not a confirmed booking",
                        reason="BOOKING_NOT_CONFIRMED",
                        metadata={"hold_id": str(hold_id), "state": hold.state_at(now).value},
                    )
                if by_fan:
                    away = await transferred_away(conn, hold_id, hold.customer_id)
                    if away > 0:
                        raise FailedPrecondition(
                            "a friend claimed a ticket of this booking: cancelling it would void theirs",
                            reason="TICKETS_TRANSFERRED",
                            metadata={"hold_id": str(hold_id), "tickets": str(away)},
                        )
                cur = await conn.execute(
                    "SELECT refundable_until, refund_percent FROM events WHERE event_id = %s", (hold.event_id,)
                )
                policy_row = await cur.fetchone()
                policy = RefundPolicy(None, 0) if policy_row is None else RefundPolicy(policy_row[0], policy_row[1])
                refund = 0 if refunded_at_provider else policy.refund_for(hold.amount.amount_minor, now)
                if quoted_refund is not None and not refunded_at_provider:
                    # Checked under the booking's lock, at the cancel's own now.
                    refund = granted_for_quote(hold, policy, now, quoted_refund)
                if refund_required and refund <= 0:
                    raise FailedPrecondition(
                        "the event's refund policy grants nothing for cancelling this booking now",
                        reason="REFUND_NOT_ALLOWED",
                        metadata={"hold_id": str(hold_id)},
                    )
                returned: list[int] = []
                if hold.seats:
                    returned = await self._seats_of(conn, hold, "SOLD", "AVAILABLE")
                await conn.execute(
                    """
                    UPDATE holds SET state = 'CANCELLED', ended_at = %s, refund_amount_minor = %s, cancel_reason = %s
                     WHERE hold_id = %s
                    """,
                    (now, refund, reason, hold_id),
                )
                await self._outbox(
                    conn,
                    hold_id,
                    "BookingCancelled",
                    {
                        "event_id": hold.event_id,
                        "hold_id": str(hold_id),
                        "customer_id": hold.customer_id,
                        "payment_id": hold.payment_id,
                        "refund_amount_minor": refund,
                        "currency": hold.amount.currency,
                        "reason": reason,
                        # What went back to sale (for whoever offers returned
                        # seats first, such as a waiting list): the section,
                        # how many places and, for seats, which.
                        "section_id": hold.section_id,
                        "quantity": hold.quantity,
                        "returned_seat_ids": sorted(returned),
                    },
                )
                await self._move_counters(conn, hold, returned, held=0, sold=-1)
                return await self._read_hold(conn, hold_id), refund

        return await retry_tx_once(work)
