"""Provider webhook deliveries in Postgres (the :class:`~payment_svc.ports.WebhookStore`).

A delivery is recorded (RECEIVED, with a lock) before it is applied and
marked APPLIED after. Its claim is one statement: a new event is inserted
and owned; a RECEIVED one whose lock is free or whose lease lapsed (its
first application failed, or its owner died and stopped renewing) is taken
over; else the row says whether it is applied or in flight. The owner
renews the lease while it applies the event (:meth:`PgWebhookStore.renew`,
as the idempotency keys' holders do), so the lease can be seconds. Another
body under the same event id is INVALID_ARGUMENT.
"""

from __future__ import annotations

import uuid

from boxoffice import db
from boxoffice.errors import Aborted, InvalidArgument
from boxoffice.runtime import Pool
from payment_svc.ports import ClaimState, WebhookClaim, WebhookStore


class PgWebhookStore:
    def __init__(self, pool: Pool, *, lease_seconds: float) -> None:
        self._pool = pool
        self._lease = lease_seconds

    @db.repeated_when_lost
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
                   AND (w.lock_token IS NULL OR w.locked_at < now() - make_interval(secs => %(lease)s))
                RETURNING 1
                """,
                {
                    "id": event_id,
                    "type": event_type,
                    "payment": payment_id,
                    "sha": body_sha256,
                    "body": body,
                    "token": token,
                    "lease": self._lease,
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

    @db.repeated_when_lost
    async def applied(self, event_id: str, token: str) -> None:
        async with db.transaction(self._pool) as conn:
            await conn.execute(
                """
                UPDATE webhook_events SET state = 'APPLIED', applied_at = now(), lock_token = NULL
                 WHERE provider_event_id = %s AND lock_token = %s
                """,
                (event_id, token),
            )

    @db.repeated_when_lost
    async def renew(self, event_id: str, token: str) -> bool:
        async with db.transaction(self._pool) as conn:
            cur = await conn.execute(
                "UPDATE webhook_events SET locked_at = now() "
                "WHERE provider_event_id = %s AND lock_token = %s AND state = 'RECEIVED'",
                (event_id, token),
            )
            return cur.rowcount == 1

    @db.repeated_when_lost
    async def release(self, event_id: str, token: str) -> None:
        async with db.transaction(self._pool) as conn:
            await conn.execute(
                "UPDATE webhook_events SET lock_token = NULL WHERE provider_event_id = %s AND lock_token = %s",
                (event_id, token),
            )


def _compliance(store: PgWebhookStore) -> WebhookStore:
    return store
