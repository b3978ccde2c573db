"""Delivery of the sandbox provider's webhooks, as a real provider delivers
them: each one late by a random delay (so they overtake each other), some
twice, some never, each attempt freshly signed, refused ones retried with
backoff, a charge that hung settled when its time comes. Safe on several
replicas (due rows are taken with SKIP LOCKED). Runs in the payment server's
process when ``BOXOFFICE_SANDBOX_WEBHOOK_MODE`` is ``auto``.
"""

from __future__ import annotations

import asyncio
import logging
import random

import psycopg

from boxoffice import db, deadline
from boxoffice.errors import BoxofficeError
from boxoffice.runtime import Pool
from payment_svc.adapters.sandbox import SandboxProvider
from payment_svc.ports import WebhookSink

_log = logging.getLogger("payment_svc.sandbox")

_DELIVERY_ATTEMPTS = 6
_DELIVERY_BATCH = 20


class WebhookDelivery:
    """Sends the sandbox's due webhooks to a sink (see the module docstring)."""

    def __init__(
        self, provider: SandboxProvider, sink: WebhookSink, pool: Pool, *, rng: random.Random | None = None
    ) -> None:
        self._provider = provider
        self._sink = sink
        self._pool = pool
        self._rng = rng or random.Random()
        self.delivered = 0
        self.refused = 0

    async def deliver_due(self) -> int:
        """Send what is due; the number of webhooks attempted."""
        async with db.transaction(self._pool, default_seconds=30) as conn:
            cur = await conn.execute(
                """
                SELECT provider_event_id, body, copies_left, attempts FROM sandbox_webhooks
                 WHERE done_at IS NULL AND deliver_after <= now()
                 ORDER BY deliver_after LIMIT %s
                   FOR UPDATE SKIP LOCKED
                """,
                (_DELIVERY_BATCH,),
            )
            rows = await cur.fetchall()
            outcomes = await asyncio.gather(*(self._send(bytes(row[1])) for row in rows))
            for (event_id, _, copies_left, attempts), delivered in zip(rows, outcomes, strict=True):
                if delivered:
                    self.delivered += 1
                    copies_left -= 1
                    attempts = 0
                else:
                    self.refused += 1
                    attempts += 1
                finished = copies_left <= 0 or attempts >= _DELIVERY_ATTEMPTS
                if attempts >= _DELIVERY_ATTEMPTS:
                    _log.warning("sandbox gave up delivering a webhook", extra={"provider_event_id": event_id})
                # The second copy of a duplicate leaves later, as does a retry.
                wait = (
                    self._rng.uniform(0, self._provider.config.webhook_delay_seconds)
                    if delivered
                    else 0.2 * 2**attempts * (1 + self._rng.random())
                )
                await conn.execute(
                    """
                    UPDATE sandbox_webhooks
                       SET copies_left = %s, attempts = %s, deliver_after = now() + make_interval(secs => %s),
                           done_at = CASE WHEN %s THEN now() END
                     WHERE provider_event_id = %s
                    """,
                    (copies_left, attempts, wait, finished, event_id),
                )
        return len(rows)

    async def _send(self, body: bytes) -> bool:
        try:
            await self._sink.deliver(self._provider.sign(body), body)
            return True
        except Exception:  # the receiver refused or was unreachable: retried later
            return False

    async def run(self) -> None:
        while True:
            try:
                with deadline.scope(30):
                    await self._provider.settle_due()
                    sent = await self.deliver_due()
            except (BoxofficeError, psycopg.Error, OSError) as err:
                _log.warning("sandbox webhook delivery failed; retrying", extra={"error": repr(err)})
                sent = 0
            if sent < _DELIVERY_BATCH:
                await asyncio.sleep(0.05)
