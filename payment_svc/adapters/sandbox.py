"""A sandbox payment provider that behaves like a real one.

Charges and refunds are keyed by idempotency key: a repeat returns the first
result and never moves money twice; the same key with other parameters is
refused. Answers come after a configurable delay. The payment method says
what happens, as with a real provider's test cards:

- ``pm_card_ok``: captured;
- ``pm_card_declined``: declined (``card_declined``);
- ``pm_card_fail``: failed (``processing_error``);
- ``pm_card_timeout``: the call hangs (the caller times out); the charge is
  captured at the provider a little later and announced by webhook;
- anything else: failed (``payment_method_unknown``).

Its records are kept in its own tables (``sandbox_*``), standing for the
provider's database: they outlive the service's processes and are shared by
its replicas. Every outcome is announced by a signed webhook that leaves late
(a random delay), sometimes twice, sometimes never, and so out of order;
:mod:`payment_svc.jobs.sandbox_webhooks` delivers them. In ``manual`` mode
nothing is delivered and tests take the events from :meth:`events`.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import random
import secrets
from collections.abc import Callable, Sequence
from typing import Any

import psycopg

from boxoffice import db
from boxoffice.clock import Clock
from boxoffice.runtime import Pool
from payment_svc.config import SandboxConfig
from payment_svc.ports import (
    ChargeRequest,
    ChargeResult,
    ChargeStatus,
    PaymentProvider,
    ProviderError,
    RefundRequest,
    RefundResult,
    RefundStatus,
)
from payment_svc.webhooks import WebhookEvent, parse_event, signature_header

PM_OK = "pm_card_ok"
PM_DECLINED = "pm_card_declined"
PM_FAIL = "pm_card_fail"
PM_TIMEOUT = "pm_card_timeout"

_OUTCOMES = {
    PM_OK: (ChargeStatus.CAPTURED, ""),
    PM_DECLINED: (ChargeStatus.DECLINED, "card_declined"),
    PM_FAIL: (ChargeStatus.FAILED, "processing_error"),
    PM_TIMEOUT: (ChargeStatus.PROCESSING, ""),
}

_CHARGE_COLUMNS = (
    "idempotency_key, charge_id, amount_minor, currency, status, failure_code, refunded_minor, metadata, fingerprint"
)


def _fingerprint(*parts: Any) -> bytes:
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).digest()


def _result(row: Sequence[Any]) -> ChargeResult:
    return ChargeResult(
        charge_id=row[1], status=ChargeStatus(row[4]), amount_minor=row[2], currency=row[3], failure_code=row[5]
    )


def _charge_data(row: Sequence[Any]) -> dict[str, Any]:
    return {
        "object": "charge",
        "id": row[1],
        "idempotency_key": row[0],
        "amount": row[2],
        "currency": row[3],
        "status": str(row[4]).lower(),
        "failure_code": row[5],
        "amount_refunded": row[6],
        "metadata": row[7],
    }


class SandboxProvider:
    """The provider, with its records in Postgres."""

    def __init__(self, config: SandboxConfig, clock: Clock, pool: Pool, *, rng: random.Random | None = None) -> None:
        self.config = config
        self._clock = clock
        self._pool = pool
        self._rng = rng or random.Random()
        # Calls made through this object (tests read them).
        self.charge_calls = 0
        self.refund_calls = 0
        # Test control: called (and awaited) inside every charge call.
        self.on_charge: Callable[[ChargeRequest], Any] | None = None

    # -- the provider API

    async def charge(self, request: ChargeRequest) -> ChargeResult:
        self.charge_calls += 1
        if self.on_charge is not None:
            outcome = self.on_charge(request)
            if asyncio.iscoroutine(outcome):
                await outcome
        if request.amount_minor <= 0:
            raise ProviderError("amount_invalid", "amount must be positive")
        fingerprint = _fingerprint(
            request.amount_minor, request.currency, request.payment_method, dict(request.metadata)
        )
        status, failure = _OUTCOMES.get(request.payment_method, (ChargeStatus.FAILED, "payment_method_unknown"))
        async with db.transaction(self._pool) as conn:
            # Recorded before answering: a caller that gives up has still charged.
            cur = await conn.execute(
                f"""
                INSERT INTO sandbox_charges (idempotency_key, charge_id, fingerprint, amount_minor, currency,
                                             payment_method, metadata, status, failure_code, settles_at)
                VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s,
                        CASE WHEN %s THEN now() + make_interval(secs => %s) END)
                ON CONFLICT (idempotency_key) DO NOTHING
                RETURNING {_CHARGE_COLUMNS}
                """,
                (
                    request.idempotency_key,
                    "ch_" + secrets.token_hex(12),
                    fingerprint,
                    request.amount_minor,
                    request.currency,
                    request.payment_method,
                    json.dumps(dict(request.metadata)),
                    status.value,
                    failure,
                    status == ChargeStatus.PROCESSING,
                    self.config.timeout_settle_seconds,
                ),
            )
            row = await cur.fetchone()
            created = row is not None
            if row is None:
                cur = await conn.execute(
                    f"SELECT {_CHARGE_COLUMNS} FROM sandbox_charges WHERE idempotency_key = %s",
                    (request.idempotency_key,),
                )
                row = await cur.fetchone()
                assert row is not None
                if bytes(row[8]) != fingerprint:
                    raise ProviderError("idempotency_key_reused", "the key was used with other parameters")
            elif status != ChargeStatus.PROCESSING:
                await self._emit_charge(conn, row)
        if created and status == ChargeStatus.PROCESSING:
            await self._sleep(self.config.hang_seconds)
            found = await self._lookup(request.idempotency_key)
            assert found is not None
            return found
        await self._sleep(self.config.delay_seconds)
        return _result(row)

    async def retrieve_charge(self, idempotency_key: str) -> ChargeResult | None:
        await self._sleep(self.config.delay_seconds)
        return await self._lookup(idempotency_key)

    async def refund(self, request: RefundRequest) -> RefundResult:
        self.refund_calls += 1
        fingerprint = _fingerprint(request.charge_id, request.amount_minor, request.currency)
        async with db.transaction(self._pool) as conn:
            # The charge's row lock serialises its refunds, repeats included.
            cur = await conn.execute(
                f"SELECT {_CHARGE_COLUMNS} FROM sandbox_charges WHERE charge_id = %s FOR UPDATE", (request.charge_id,)
            )
            charge = await cur.fetchone()
            cur = await conn.execute(
                "SELECT refund_id, status, amount_minor, failure_code, fingerprint FROM sandbox_refunds "
                "WHERE idempotency_key = %s",
                (request.idempotency_key,),
            )
            existing = await cur.fetchone()
            if existing is not None:
                if bytes(existing[4]) != fingerprint:
                    raise ProviderError("idempotency_key_reused", "the key was used with other parameters")
                result = RefundResult(existing[0], RefundStatus(existing[1]), existing[2], existing[3])
            else:
                if charge is None or charge[4] != ChargeStatus.CAPTURED.value:
                    raise ProviderError("charge_not_refundable", "no captured charge with this id")
                refund_id = "re_" + secrets.token_hex(12)
                if request.amount_minor <= 0 or request.amount_minor > charge[2] - charge[6]:
                    result = RefundResult(refund_id, RefundStatus.FAILED, request.amount_minor, "amount_too_large")
                else:
                    result = RefundResult(refund_id, RefundStatus.SUCCEEDED, request.amount_minor)
                    cur = await conn.execute(
                        f"UPDATE sandbox_charges SET refunded_minor = refunded_minor + %s WHERE charge_id = %s "
                        f"RETURNING {_CHARGE_COLUMNS}",
                        (request.amount_minor, request.charge_id),
                    )
                    charge = await cur.fetchone()
                    assert charge is not None
                await conn.execute(
                    "INSERT INTO sandbox_refunds (idempotency_key, refund_id, charge_id, fingerprint, amount_minor, "
                    "status, failure_code) VALUES (%s, %s, %s, %s, %s, %s, %s)",
                    (
                        request.idempotency_key,
                        refund_id,
                        request.charge_id,
                        fingerprint,
                        request.amount_minor,
                        result.status.value,
                        result.failure_code,
                    ),
                )
                data = {
                    **_charge_data(charge),
                    "refund": {
                        "id": refund_id,
                        "idempotency_key": request.idempotency_key,
                        "amount": request.amount_minor,
                        "status": result.status.value.lower(),
                    },
                }
                kind = "charge.refunded" if result.status == RefundStatus.SUCCEEDED else "refund.failed"
                await self._emit(conn, kind, data)
        await self._sleep(self.config.delay_seconds)
        return result

    # -- what the provider's own staff do (its dashboard): tests use them

    async def refund_at_provider(self, charge_id: str, amount_minor: int) -> str:
        """A refund made at the provider, not asked for by the service (no
        key of ours), announced by ``charge.refunded``; its id."""
        async with db.transaction(self._pool) as conn:
            cur = await conn.execute(
                f"UPDATE sandbox_charges SET refunded_minor = refunded_minor + %s "
                f"WHERE charge_id = %s AND status = 'CAPTURED' AND refunded_minor + %s <= amount_minor "
                f"RETURNING {_CHARGE_COLUMNS}",
                (amount_minor, charge_id, amount_minor),
            )
            charge = await cur.fetchone()
            if charge is None:
                raise ProviderError("charge_not_refundable", "no captured charge with this much left")
            refund_id = "re_" + secrets.token_hex(12)
            refund = {"id": refund_id, "idempotency_key": None, "amount": amount_minor, "status": "succeeded"}
            await self._emit(conn, "charge.refunded", {**_charge_data(charge), "refund": refund})
        return refund_id

    async def dispute(self, charge_id: str, reason: str = "fraudulent") -> str:
        """The card holder's bank disputes the whole charge (the money is
        taken back), announced by ``charge.dispute.created``; its id."""
        async with db.transaction(self._pool) as conn:
            cur = await conn.execute(
                f"SELECT {_CHARGE_COLUMNS} FROM sandbox_charges WHERE charge_id = %s AND status = 'CAPTURED'",
                (charge_id,),
            )
            charge = await cur.fetchone()
            if charge is None:
                raise ProviderError("charge_not_disputable", "no captured charge with this id")
            dispute_id = "dp_" + secrets.token_hex(12)
            data = {
                "object": "dispute",
                "id": dispute_id,
                "charge": charge_id,
                "amount": charge[2] - charge[6],
                "currency": charge[3],
                "reason": reason,
                "metadata": charge[7],
            }
            await self._emit(conn, "charge.dispute.created", data)
        return dispute_id

    # -- what the delivery loop and tests use

    async def settle_due(self, idempotency_key: str | None = None) -> int:
        """Capture the charges whose processing time is over (all, or the
        one with this key), announcing each; the number settled."""
        async with db.transaction(self._pool) as conn:
            cur = await conn.execute(
                f"""
                UPDATE sandbox_charges SET status = 'CAPTURED', settles_at = NULL
                 WHERE status = 'PROCESSING' AND settles_at <= now()
                   AND (%(key)s::text IS NULL OR idempotency_key = %(key)s)
                RETURNING {_CHARGE_COLUMNS}
                """,
                {"key": idempotency_key},
            )
            rows = await cur.fetchall()
            for row in rows:
                await self._emit_charge(conn, row)
        return len(rows)

    async def events(self, payment_id: str | None = None) -> list[WebhookEvent]:
        """Events the sandbox emitted (of one payment), oldest first."""
        async with db.transaction(self._pool) as conn:
            cur = await conn.execute(
                "SELECT body FROM sandbox_webhooks WHERE %(p)s::text IS NULL OR payment_id = %(p)s ORDER BY seq",
                {"p": payment_id},
            )
            return [parse_event(bytes(row[0])) for row in await cur.fetchall()]

    async def charged_minor(self, idempotency_key: str) -> int:
        """Money taken with this key and not given back."""
        async with db.transaction(self._pool) as conn:
            cur = await conn.execute(
                "SELECT amount_minor - refunded_minor FROM sandbox_charges "
                "WHERE idempotency_key = %s AND status = 'CAPTURED'",
                (idempotency_key,),
            )
            row = await cur.fetchone()
        return 0 if row is None else int(row[0])

    async def refunds_of(self, idempotency_key: str) -> int:
        """Refunds made of the charge with this key."""
        async with db.transaction(self._pool) as conn:
            cur = await conn.execute(
                "SELECT count(*) FROM sandbox_refunds r JOIN sandbox_charges c ON c.charge_id = r.charge_id "
                "WHERE c.idempotency_key = %s AND r.status = 'SUCCEEDED'",
                (idempotency_key,),
            )
            row = await cur.fetchone()
        return 0 if row is None else int(row[0])

    def sign(self, body: bytes, *, timestamp: int | None = None) -> str:
        when = int(self._clock.now()) if timestamp is None else timestamp
        return signature_header([self.config.signing_secret], when, body)

    # -- internals

    async def _lookup(self, idempotency_key: str) -> ChargeResult | None:
        await self.settle_due(idempotency_key)
        async with db.transaction(self._pool) as conn:
            cur = await conn.execute(
                f"SELECT {_CHARGE_COLUMNS} FROM sandbox_charges WHERE idempotency_key = %s", (idempotency_key,)
            )
            row = await cur.fetchone()
        return None if row is None else _result(row)

    async def _emit_charge(self, conn: psycopg.AsyncConnection[Any], row: Sequence[Any]) -> None:
        kind = "charge.succeeded" if row[4] == ChargeStatus.CAPTURED.value else "charge.failed"
        await self._emit(conn, kind, _charge_data(row))

    async def _emit(self, conn: psycopg.AsyncConnection[Any], kind: str, data: dict[str, Any]) -> None:
        event = WebhookEvent("evt_" + secrets.token_hex(12), kind, int(self._clock.now()), data)
        config = self.config
        dropped = self._rng.random() < config.webhook_drop_probability
        copies = 2 if self._rng.random() < config.webhook_duplicate_probability else 1
        done = dropped or config.webhook_mode != "auto"
        await conn.execute(
            """
            INSERT INTO sandbox_webhooks (provider_event_id, event_type, payment_id, body, deliver_after,
                                          copies_left, dropped, done_at)
            VALUES (%s, %s, %s, %s, now() + make_interval(secs => %s), %s, %s, CASE WHEN %s THEN now() END)
            """,
            (
                event.event_id,
                kind,
                event.payment_id,
                event.to_body(),
                self._rng.uniform(0, config.webhook_delay_seconds),
                copies,
                dropped,
                done,
            ),
        )

    @staticmethod
    async def _sleep(seconds: float) -> None:
        if seconds > 0:
            await asyncio.sleep(seconds)


def _compliance(provider: SandboxProvider) -> PaymentProvider:
    return provider
