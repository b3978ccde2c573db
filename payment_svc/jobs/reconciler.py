"""Reconciliation (in the payment server's process): what a lost webhook or
a crashed call left half done.

Every interval: payments still PENDING, CAPTURED or REFUND_REQUIRED after a
while are settled (the provider is asked by key; captured money confirms the
hold or is refunded); refunds still PENDING are sent again (same key);
expired idempotency keys are deleted; the per-state payment gauge is
refreshed. Between passes, the charges in flight this process noted (a
provider that did not answer in time, a charge still processing) are asked
about at once and then at growing intervals (:mod:`payment_svc.inflight`),
so a slow provider's money is confirmed (or refunded) seconds after it
arrives, not an interval later. Every step is safe on several replicas at once.
"""

from __future__ import annotations

import asyncio
import logging

import psycopg

from boxoffice import deadline
from boxoffice.errors import BoxofficeError
from payment_svc.handler import PaymentHandler
from payment_svc.inflight import ChargesInFlight
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
        in_flight: ChargesInFlight,
        interval_seconds: float,
        after_seconds: float,
    ) -> None:
        self._payments = payments
        self._store = store
        self._idempotency = idempotency
        self._metrics = metrics
        self._in_flight = in_flight
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

    async def ask_in_flight(self) -> int:
        """Settle the charges in flight that are due; how many are known now."""
        known = 0
        for payment_id in self._in_flight.due():
            try:
                with deadline.scope(_STEP_SECONDS):
                    payment = await self._payments.settle(payment_id)
            except (BoxofficeError, psycopg.Error, OSError) as err:
                self._in_flight.later(payment_id)
                _log.info("charge in flight not known yet", extra={"payment_id": payment_id, "error": repr(err)})
                continue
            if payment.state == PaymentState.PENDING:
                self._in_flight.later(payment_id)
            else:
                self._in_flight.known(payment_id)
                known += 1
        return known

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            try:
                await self.reconcile_once()
            except (BoxofficeError, psycopg.Error, OSError) as err:
                _log.warning("reconciliation pass failed", extra={"error": repr(err)})
            next_pass = loop.time() + self._interval
            while (left := next_pass - loop.time()) > 0:
                await self._in_flight.wait(left)
                await self.ask_in_flight()
