"""Payments and refunds in Postgres (the :class:`~payment_svc.ports.PaymentStore`).

Every change of a payment's state is one conditional UPDATE from the states
it may come from: two settlers racing on one payment (a webhook and a
ConfirmPayment, say) cannot both make the same move, and the loser re-reads.
Refunds reserve their amount under the payment's row lock, so concurrent
refunds never give back more than was taken. Each method is its own
transactions and nothing else, so one whose connection broke before it
committed runs once more on a fresh connection (``db.repeated_when_lost``),
as do the idempotency keys', webhook deliveries' and tickets' stores.
"""

from __future__ import annotations

import uuid
from collections.abc import Collection, Sequence
from datetime import datetime
from typing import Any

import psycopg

from boxoffice import db
from boxoffice.errors import FailedPrecondition, InvalidArgument, NotFound
from boxoffice.runtime import Pool
from payment_svc.model import (
    Payment,
    PaymentState,
    Refund,
    RefundOrder,
    RefundSource,
    RefundState,
    provider_key,
    refund_provider_key,
)
from payment_svc.ports import PaymentStore

_PAYMENT_COLUMNS = (
    "payment_id::text, hold_id::text, attempt, event_id, customer_id, amount_minor, currency, payment_method, "
    "state, provider_idempotency_key, coalesce(provider_payment_id, ''), failure_reason, refunded_minor, "
    "created_at, updated_at, traceparent, hold_expires_at, provider"
)
_REFUND_COLUMNS = (
    "refund_id::text, payment_id::text, request_key, amount_minor, currency, reason, source, state, "
    "coalesce(provider_refund_id, ''), failure_reason"
)

LIVE_STATES = (
    PaymentState.PENDING,
    PaymentState.CAPTURED,
    PaymentState.SUCCEEDED,
    PaymentState.PARTIALLY_REFUNDED,
)
_REFUNDABLE = (PaymentState.SUCCEEDED, PaymentState.PARTIALLY_REFUNDED, PaymentState.REFUND_REQUIRED)


def _payment(row: Sequence[Any]) -> Payment:
    return Payment(
        payment_id=row[0],
        hold_id=row[1],
        attempt=row[2],
        event_id=row[3],
        customer_id=row[4],
        amount_minor=row[5],
        currency=row[6],
        payment_method=row[7],
        state=PaymentState(row[8]),
        provider_idempotency_key=row[9],
        provider_payment_id=row[10],
        failure_reason=row[11],
        refunded_minor=row[12],
        created_at=row[13],
        updated_at=row[14],
        traceparent=row[15],
        hold_expires_at=row[16],
        provider=row[17],
    )


def _refund(row: Sequence[Any]) -> Refund:
    return Refund(
        refund_id=row[0],
        payment_id=row[1],
        request_key=row[2],
        amount_minor=row[3],
        currency=row[4],
        reason=row[5],
        source=RefundSource(row[6]),
        state=RefundState(row[7]),
        provider_refund_id=row[8],
        failure_reason=row[9],
    )


class PgPaymentStore:
    def __init__(self, pool: Pool) -> None:
        self._pool = pool

    @db.repeated_when_lost
    async def create(
        self,
        *,
        hold_id: str,
        event_id: int,
        customer_id: str,
        amount_minor: int,
        currency: str,
        payment_method: str,
        traceparent: str = "",
        hold_expires_at: datetime | None = None,
        provider: str = "sandbox",
        notify_email: str | None = None,
        notify_language: str | None = None,
    ) -> tuple[Payment, bool]:
        for attempt in range(3):
            if attempt > 0:
                existing = await self.live_for_hold(hold_id)
                if existing is not None:
                    return existing, False
            payment_id = str(uuid.uuid4())
            try:
                async with db.transaction(self._pool) as conn:
                    cur = await conn.execute(
                        "SELECT coalesce(max(attempt), 0) + 1 FROM payments WHERE hold_id = %s", (hold_id,)
                    )
                    row = await cur.fetchone()
                    attempt = int(row[0]) if row else 1
                    cur = await conn.execute(
                        f"""
                        INSERT INTO payments (payment_id, hold_id, attempt, event_id, customer_id, amount_minor,
                                              currency, payment_method, state, provider_idempotency_key,
                                              traceparent, hold_expires_at, provider, notify_email,
                                              notify_language)
                        VALUES (%s, %s, %s, %s, %s, %s, %s, %s, 'PENDING', %s, %s, %s, %s, %s, %s)
                        RETURNING {_PAYMENT_COLUMNS}
                        """,
                        (
                            payment_id,
                            hold_id,
                            attempt,
                            event_id,
                            customer_id,
                            amount_minor,
                            currency,
                            payment_method,
                            provider_key(hold_id, attempt),
                            traceparent,
                            hold_expires_at,
                            provider,
                            notify_email,
                            notify_language if notify_email else None,
                        ),
                    )
                    created = await cur.fetchone()
                    assert created is not None
                    return _payment(created), True
            except psycopg.errors.UniqueViolation:
                continue  # a concurrent start for the same hold won: answer with its payment
        raise FailedPrecondition("the hold's payment is changing; retry", reason="PAYMENT_CONTENDED")

    @db.repeated_when_lost
    async def get(self, payment_id: str) -> Payment | None:
        async with db.transaction(self._pool) as conn:
            cur = await conn.execute(f"SELECT {_PAYMENT_COLUMNS} FROM payments WHERE payment_id = %s", (payment_id,))
            row = await cur.fetchone()
        return None if row is None else _payment(row)

    @db.repeated_when_lost
    async def by_provider_payment_id(self, provider_payment_id: str) -> Payment | None:
        async with db.transaction(self._pool) as conn:
            cur = await conn.execute(
                f"SELECT {_PAYMENT_COLUMNS} FROM payments WHERE provider_payment_id = %s "
                "ORDER BY created_at DESC LIMIT 1",
                (provider_payment_id,),
            )
            row = await cur.fetchone()
        return None if row is None else _payment(row)

    @db.repeated_when_lost
    async def paid_for_hold(self, hold_id: str) -> Payment | None:
        # The live payment that succeeded; else one refunded in full since it
        # succeeded (a payment refunded because it could not buy the hold
        # carries the failure that made it so).
        async with db.transaction(self._pool) as conn:
            cur = await conn.execute(
                f"""
                SELECT {_PAYMENT_COLUMNS} FROM payments
                 WHERE hold_id = %s AND failure_reason = ''
                   AND state IN ('SUCCEEDED', 'PARTIALLY_REFUNDED', 'REFUNDED')
                 ORDER BY state = 'REFUNDED', updated_at DESC
                 LIMIT 1
                """,
                (hold_id,),
            )
            row = await cur.fetchone()
        return None if row is None else _payment(row)

    @db.repeated_when_lost
    async def live_for_hold(self, hold_id: str) -> Payment | None:
        async with db.transaction(self._pool) as conn:
            cur = await conn.execute(
                f"SELECT {_PAYMENT_COLUMNS} FROM payments WHERE hold_id = %s AND state = ANY(%s)",
                (hold_id, [s.value for s in LIVE_STATES]),
            )
            row = await cur.fetchone()
        return None if row is None else _payment(row)

    @db.repeated_when_lost
    async def transition(
        self,
        payment_id: str,
        sources: Collection[PaymentState],
        target: PaymentState,
        *,
        provider_payment_id: str | None = None,
        failure_reason: str | None = None,
    ) -> Payment | None:
        async with db.transaction(self._pool) as conn:
            cur = await conn.execute(
                f"""
                UPDATE payments
                   SET state = %s,
                       provider_payment_id = coalesce(%s, provider_payment_id),
                       failure_reason = coalesce(%s, failure_reason),
                       updated_at = now()
                 WHERE payment_id = %s AND state = ANY(%s)
                RETURNING {_PAYMENT_COLUMNS}
                """,
                (target.value, provider_payment_id, failure_reason, payment_id, [s.value for s in sources]),
            )
            row = await cur.fetchone()
        return None if row is None else _payment(row)

    @db.repeated_when_lost
    async def unsettled(self, older_than_seconds: float, limit: int) -> list[str]:
        async with db.transaction(self._pool) as conn:
            cur = await conn.execute(
                """
                SELECT payment_id::text FROM payments
                 WHERE state IN ('PENDING', 'CAPTURED', 'REFUND_REQUIRED')
                   AND updated_at < now() - make_interval(secs => %s)
                 ORDER BY updated_at
                 LIMIT %s
                """,
                (older_than_seconds, limit),
            )
            return [row[0] for row in await cur.fetchall()]

    @db.repeated_when_lost
    async def count_by_state(self) -> dict[str, int]:
        async with db.transaction(self._pool) as conn:
            cur = await conn.execute("SELECT state, count(*) FROM payments GROUP BY state")
            return {row[0]: int(row[1]) for row in await cur.fetchall()}

    @db.repeated_when_lost
    async def reserve_refund(self, order: RefundOrder) -> Refund:
        payment_id, request_key, currency = order.payment_id, order.request_key, order.currency
        async with db.transaction(self._pool) as conn:
            # The row lock serialises refunds of one payment: what is left to
            # refund is read and reserved without a concurrent refund between.
            cur = await conn.execute(
                f"SELECT {_PAYMENT_COLUMNS} FROM payments WHERE payment_id = %s FOR UPDATE", (payment_id,)
            )
            row = await cur.fetchone()
            if row is None:
                raise NotFound("no such payment", reason="PAYMENT_NOT_FOUND", metadata={"payment_id": payment_id})
            payment = _payment(row)
            cur = await conn.execute(
                f"SELECT {_REFUND_COLUMNS} FROM refunds WHERE payment_id = %s AND request_key = %s",
                (payment_id, request_key),
            )
            existing = await cur.fetchone()
            source = order.source
            if existing is None and source == RefundSource.BOOKING_CANCELLED:
                # A booking is cancelled once: its refund too, whoever asks
                # (RefundPayment, or the BookingCancelled event after it).
                cur = await conn.execute(
                    f"SELECT {_REFUND_COLUMNS} FROM refunds "
                    "WHERE payment_id = %s AND source = 'BOOKING_CANCELLED' AND state <> 'FAILED'",
                    (payment_id,),
                )
                cancellation = await cur.fetchone()
                if cancellation is not None:
                    if order.adopts_cancellation_refund:
                        return _refund(cancellation)
                    source = RefundSource.REQUEST
            if existing is not None:
                return _refund(existing)
            if payment.state not in _REFUNDABLE:
                raise FailedPrecondition(
                    f"a {payment.state.value} payment cannot be refunded",
                    reason="PAYMENT_NOT_REFUNDABLE",
                    metadata={"payment_id": payment_id, "state": payment.state.value},
                )
            if currency is not None and currency != payment.currency:
                raise InvalidArgument(
                    "the refund's currency is not the payment's",
                    reason="CURRENCY_MISMATCH",
                    metadata={"currency": currency, "payment_currency": payment.currency},
                )
            cur = await conn.execute(
                "SELECT coalesce(sum(amount_minor), 0) FROM refunds WHERE payment_id = %s AND state <> 'FAILED'",
                (payment_id,),
            )
            total = await cur.fetchone()
            reserved = int(total[0]) if total else 0
            left = payment.amount_minor - reserved
            amount = left if order.amount_minor is None else order.amount_minor
            if left <= 0:
                raise FailedPrecondition(
                    "the payment is already fully refunded",
                    reason="NOTHING_TO_REFUND",
                    metadata={"payment_id": payment_id},
                )
            if amount > left:
                raise FailedPrecondition(
                    "the refund exceeds what is left to refund",
                    reason="REFUND_EXCEEDS_PAYMENT",
                    metadata={"payment_id": payment_id, "left_minor": str(left), "amount_minor": str(amount)},
                )
            cur = await conn.execute(
                f"""
                INSERT INTO refunds (refund_id, payment_id, request_key, amount_minor, currency, reason, source, state)
                VALUES (%s, %s, %s, %s, %s, %s, %s, 'PENDING')
                RETURNING {_REFUND_COLUMNS}
                """,
                (
                    str(uuid.uuid4()),
                    payment_id,
                    request_key,
                    amount,
                    payment.currency,
                    order.reason,
                    source.value,
                ),
            )
            created = await cur.fetchone()
            assert created is not None
            return _refund(created)

    @db.repeated_when_lost
    async def finish_refund(
        self, refund_id: str, *, succeeded: bool, provider_refund_id: str, failure_reason: str = ""
    ) -> Payment:
        async with db.transaction(self._pool) as conn:
            cur = await conn.execute(
                """
                UPDATE refunds SET state = %s, provider_refund_id = %s, failure_reason = %s, updated_at = now()
                 WHERE refund_id = %s AND state = 'PENDING'
                RETURNING payment_id::text, amount_minor
                """,
                ("SUCCEEDED" if succeeded else "FAILED", provider_refund_id, failure_reason, refund_id),
            )
            moved = await cur.fetchone()
            if moved is not None and succeeded:
                await conn.execute(
                    """
                    UPDATE payments
                       SET refunded_minor = refunded_minor + %s,
                           state = CASE
                               WHEN refunded_minor + %s >= amount_minor THEN 'REFUNDED'
                               WHEN state = 'REFUND_REQUIRED' THEN 'REFUND_REQUIRED'
                               ELSE 'PARTIALLY_REFUNDED' END,
                           updated_at = now()
                     WHERE payment_id = %s
                    """,
                    (moved[1], moved[1], moved[0]),
                )
            cur = await conn.execute(
                f"SELECT {_PAYMENT_COLUMNS} FROM payments WHERE payment_id = "
                "(SELECT payment_id FROM refunds WHERE refund_id = %s)",
                (refund_id,),
            )
            row = await cur.fetchone()
        assert row is not None
        return _payment(row)

    @db.repeated_when_lost
    async def refund_by_provider_key(self, request_key: str) -> Refund | None:
        """The refund whose provider key (:func:`refund_provider_key`) is given."""
        refund_id = request_key.removeprefix(refund_provider_key(""))
        try:
            uuid.UUID(refund_id)
        except ValueError:
            return None
        async with db.transaction(self._pool) as conn:
            cur = await conn.execute(f"SELECT {_REFUND_COLUMNS} FROM refunds WHERE refund_id = %s", (refund_id,))
            row = await cur.fetchone()
        return None if row is None else _refund(row)

    @db.repeated_when_lost
    async def cancellation_refund(self, payment_id: str) -> Refund | None:
        async with db.transaction(self._pool) as conn:
            cur = await conn.execute(
                f"SELECT {_REFUND_COLUMNS} FROM refunds "
                "WHERE payment_id = %s AND source = 'BOOKING_CANCELLED' AND state <> 'FAILED'",
                (payment_id,),
            )
            row = await cur.fetchone()
        return None if row is None else _refund(row)

    @db.repeated_when_lost
    async def pending_refunds(self, older_than_seconds: float, limit: int) -> list[Refund]:
        async with db.transaction(self._pool) as conn:
            cur = await conn.execute(
                f"""
                SELECT {_REFUND_COLUMNS} FROM refunds
                 WHERE state = 'PENDING' AND updated_at < now() - make_interval(secs => %s)
                 ORDER BY updated_at LIMIT %s
                """,
                (older_than_seconds, limit),
            )
            return [_refund(row) for row in await cur.fetchall()]


def _compliance(store: PgPaymentStore) -> PaymentStore:
    return store
