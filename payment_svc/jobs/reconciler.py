"""Reconciliation (in the payment server's process): what a lost webhook or
a crashed call left half done.

Every interval: payments still PENDING, CAPTURED or REFUND_REQUIRED after a
while are settled (the provider is asked by key; captured money confirms the
hold or is refunded); refunds still PENDING are sent again (same key);
expired idempotency keys are deleted; the per-state payment gauge is
refreshed. Every step is safe on several replicas at once.
"""

from __future__ import annotations

import asyncio
import logging

import psycopg

from boxoffice import deadline
from boxoffice.errors import BoxofficeError
from payment_svc.handler import PaymentHandler
from payment_svc.metrics import ServerMetrics, state_label
from payment_svc.model import PaymentState
from payment_svc.ports import IdempotencyStore, PaymentStore

_log = logging.getLogger("payment_svc.reconciler")

_BATCH = 100
_STEP_SECONDS = 15.0


class Reconciler:
    def __init__(
        self,
        *,
        payments: PaymentHandler,
        store: PaymentStore,
        idempotency: IdempotencyStore,
        metrics: ServerMetrics,
        interval_seconds: float,
        after_seconds: float,
    ) -> None:
        self._payments = payments
        self._store = store
        self._idempotency = idempotency
        self._metrics = metrics
        self._interval = interval_seconds
        self._after = after_seconds

    async def reconcile_once(self) -> int:
        """One pass; the number of payments and refunds it settled."""
        settled = 0
        with deadline.scope(_STEP_SECONDS):
            payment_ids = await self._store.unsettled(self._after, _BATCH)
        for payment_id in payment_ids:
            try:
                with deadline.scope(_STEP_SECONDS):
                    await self._payments.settle(payment_id, submit_missing=False)
                settled += 1
            except BoxofficeError as err:
                _log.info("payment not settled yet", extra={"payment_id": payment_id, "reason": err.reason})
        with deadline.scope(_STEP_SECONDS):
            refunds = await self._store.pending_refunds(self._after, _BATCH)
        for refund in refunds:
            try:
                with deadline.scope(_STEP_SECONDS):
                    await self._payments.retry_refund(refund)
                settled += 1
            except BoxofficeError as err:
                _log.info("refund not settled yet", extra={"refund_id": refund.refund_id, "reason": err.reason})
        with deadline.scope(_STEP_SECONDS):
            await self._idempotency.purge_expired(1000)
            counts = await self._store.count_by_state()
        for state in PaymentState:
            self._metrics.payments.labels(state_label(state)).set(counts.get(state.value, 0))
        return settled

    async def run(self) -> None:
        while True:
            try:
                await self.reconcile_once()
            except (BoxofficeError, psycopg.Error, OSError) as err:
                _log.warning("reconciliation pass failed", extra={"error": repr(err)})
            await asyncio.sleep(self._interval)
