"""HandleProviderWebhook: verify, deduplicate by the provider's event id,
apply. A delivery is recorded (RECEIVED, with a lock) before it is applied
and marked APPLIED after; a later delivery of an APPLIED event changes
nothing, one that arrives while it is being applied is ABORTED (the provider
retries), and one whose first application failed applies it again."""

from __future__ import annotations

import enum
import hashlib
import uuid
from dataclasses import dataclass
from typing import Protocol

from boxoffice import db
from boxoffice.errors import Aborted, InvalidArgument, Unauthenticated
from boxoffice.runtime import Pool
from payment_svc.idempotency import detached
from payment_svc.metrics import ServerMetrics
from payment_svc.model import Payment
from payment_svc.payments import Payments
from payment_svc.webhooks import MAX_BODY_BYTES, WebhookVerifier, parse_event


class ClaimState(enum.Enum):
    OWNED = "owned"
    APPLIED = "applied"
    IN_FLIGHT = "in_flight"


@dataclass(frozen=True, slots=True)
class WebhookClaim:
    state: ClaimState
    token: str = ""


class WebhookStore(Protocol):
    async def claim(
        self, event_id: str, event_type: str, payment_id: str | None, body_sha256: bytes, body: bytes
    ) -> WebhookClaim:
        """Own the event's application, or learn it is applied or in flight."""

    async def applied(self, event_id: str, token: str) -> None: ...

    async def release(self, event_id: str, token: str) -> None: ...


class PgWebhookStore:
    def __init__(self, pool: Pool, *, lock_seconds: int) -> None:
        self._pool = pool
        self._lock = lock_seconds

    async def claim(
        self, event_id: str, event_type: str, payment_id: str | None, body_sha256: bytes, body: bytes
    ) -> WebhookClaim:
        token = str(uuid.uuid4())
        async with db.transaction(self._pool) as conn:
            cur = await conn.execute(
                """
                INSERT INTO webhook_events AS w
                       (provider_event_id, event_type, payment_id, body_sha256, body, state, lock_token, locked_at)
                VALUES (%(id)s, %(type)s, %(payment)s, %(sha)s, %(body)s, 'RECEIVED', %(token)s, now())
                ON CONFLICT (provider_event_id) DO UPDATE
                   SET lock_token = excluded.lock_token, locked_at = now(), deliveries = w.deliveries + 1
                 WHERE w.state = 'RECEIVED' AND w.body_sha256 = excluded.body_sha256
                   AND (w.lock_token IS NULL OR w.locked_at < now() - make_interval(secs => %(lock)s))
                RETURNING 1
                """,
                {
                    "id": event_id,
                    "type": event_type,
                    "payment": payment_id,
                    "sha": body_sha256,
                    "body": body,
                    "token": token,
                    "lock": self._lock,
                },
            )
            if await cur.fetchone() is not None:
                return WebhookClaim(ClaimState.OWNED, token)
            cur = await conn.execute(
                "SELECT state, body_sha256 FROM webhook_events WHERE provider_event_id = %s", (event_id,)
            )
            row = await cur.fetchone()
        if row is None:
            raise Aborted("the webhook event is changing; retry", reason="WEBHOOK_IN_FLIGHT")
        if bytes(row[1]) != body_sha256:
            raise InvalidArgument(
                "another body was delivered under this event id",
                reason="WEBHOOK_EVENT_CONFLICT",
                metadata={"provider_event_id": event_id},
            )
        return WebhookClaim(ClaimState.APPLIED if row[0] == "APPLIED" else ClaimState.IN_FLIGHT)

    async def applied(self, event_id: str, token: str) -> None:
        async with db.transaction(self._pool) as conn:
            await conn.execute(
                """
                UPDATE webhook_events SET state = 'APPLIED', applied_at = now(), lock_token = NULL
                 WHERE provider_event_id = %s AND lock_token = %s
                """,
                (event_id, token),
            )

    async def release(self, event_id: str, token: str) -> None:
        async with db.transaction(self._pool) as conn:
            await conn.execute(
                "UPDATE webhook_events SET lock_token = NULL WHERE provider_event_id = %s AND lock_token = %s",
                (event_id, token),
            )


@dataclass(frozen=True, slots=True)
class WebhookOutcome:
    provider_event_id: str
    duplicate: bool
    payment: Payment | None


class WebhookHandler:
    def __init__(
        self, *, verifier: WebhookVerifier, store: WebhookStore, payments: Payments, metrics: ServerMetrics
    ) -> None:
        self._verifier = verifier
        self._store = store
        self._payments = payments
        self._metrics = metrics

    async def handle(self, signature: str, body: bytes) -> WebhookOutcome:
        if len(body) > MAX_BODY_BYTES:
            raise InvalidArgument("the webhook body is larger than 64 KiB", reason="WEBHOOK_TOO_LARGE")
        try:
            self._verifier.verify(signature, body)
        except Unauthenticated as err:
            self._metrics.webhook_verification_failures.labels(err.reason).inc()
            raise
        event = parse_event(body)
        payment_id: str | None
        try:
            payment_id = str(uuid.UUID(event.payment_id))
        except ValueError:
            payment_id = None
        claim = await self._store.claim(event.event_id, event.type, payment_id, hashlib.sha256(body).digest(), body)
        if claim.state == ClaimState.APPLIED:
            self._metrics.webhooks.labels(event.type, "duplicate").inc()
            payment = None if payment_id is None else await self._payments.get_or_none(payment_id)
            return WebhookOutcome(event.event_id, True, payment)
        if claim.state == ClaimState.IN_FLIGHT:
            raise Aborted(
                "this event is being applied; retry later",
                reason="WEBHOOK_IN_FLIGHT",
                metadata={"provider_event_id": event.event_id},
            )
        try:
            payment = await self._payments.apply_webhook(event)
        except BaseException:
            await detached(self._store.release(event.event_id, claim.token))
            raise
        await detached(self._store.applied(event.event_id, claim.token))
        self._metrics.webhooks.labels(event.type, "applied").inc()
        return WebhookOutcome(event.event_id, False, payment)
