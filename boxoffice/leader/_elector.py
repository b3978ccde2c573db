"""The campaign-and-lead loop both backends share.

A backend is an :class:`ElectionLock`: one attempt to take the role, one
confirmation that it is still held, a release. :class:`Elector` turns it
into a leadership with client-go's timings: a standby tries every retry
period; a leader confirms every retry period, each confirmation bounded by
what is left of its renew deadline, and stops leading (cancels and awaits
its work) as soon as it has gone a renew deadline without one - before any
standby can have taken over.

Neither backend is fencing by itself: a leader that was paused can wake up
and run a little longer than its lease. The epoch given to the leader's work
grows with every term, and the store its work writes to rejects a lower one.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Protocol

from prometheus_client import CollectorRegistry, Counter, Gauge

from boxoffice import deadline
from boxoffice.leader._config import LeaderTimings
from boxoffice.lifecycle import cancel_and_wait

_log = logging.getLogger("boxoffice.leader")

# Spread of a standby's attempts (client-go jitters by up to 1.2 x the period;
# a smaller spread keeps the worst-case handover within the lease).
_JITTER = 0.2


class ElectionLock(Protocol):
    """One backend of the election: a lock that names its holder and counts
    its terms."""

    async def try_acquire(self) -> int | None:
        """Take the role if it is free (or its lease ran out): the new
        term's epoch, larger than any before; None while another holds it."""

    async def renew(self) -> bool:
        """Confirm (and extend) this candidate's hold: False when it is lost
        for certain; an exception when it could not be confirmed this time."""

    async def release(self) -> None:
        """Give the role up if this candidate may still hold it, so that a
        standby need not wait for the lease to run out. Best effort."""

    async def close(self) -> None:
        """Release what the lock holds (connections, clients)."""


@dataclass(frozen=True)
class LeaderMetrics:
    """``boxoffice_leader_*``: whether this process leads, its epoch, and
    how often it gained and lost the role."""

    is_leader: Gauge
    epoch: Gauge
    acquired: Counter
    stepped_down: Counter

    @classmethod
    def create(cls, registry: CollectorRegistry) -> LeaderMetrics:
        try:
            return cls._build(registry)
        except ValueError:
            # A second election on one registry (several candidates in one
            # test process): its figures stay out of the exposition.
            _log.warning("leader metrics already registered; this election's are not exported")
            return cls._build(None)

    @classmethod
    def _build(cls, registry: CollectorRegistry | None) -> LeaderMetrics:
        return cls(
            is_leader=Gauge(
                "boxoffice_leader_is_leader", "1 while this process leads the role.", ("name",), registry=registry
            ),
            epoch=Gauge(
                "boxoffice_leader_epoch",
                "Epoch (fencing token) of this process's latest term.",
                ("name",),
                registry=registry,
            ),
            acquired=Counter(
                "boxoffice_leader_acquired", "Terms this process started as leader.", ("name",), registry=registry
            ),
            stepped_down=Counter(
                "boxoffice_leader_stepped_down",
                "Terms this process ended, by reason (lost, renew_deadline, lead_ended, shutdown).",
                ("name", "reason"),
                registry=registry,
            ),
        )


class _Confirmed:
    """Monotonic time of the start of the latest successful confirmation."""

    def __init__(self, at: float) -> None:
        self.at = at


class Elector:
    """A :class:`boxoffice.leader.Leadership` over any :class:`ElectionLock`."""

    def __init__(
        self,
        lock: ElectionLock,
        *,
        name: str,
        identity: str,
        timings: LeaderTimings,
        metrics: LeaderMetrics,
    ) -> None:
        self._lock = lock
        self._name = name
        self._identity = identity
        self._timings = timings
        self._metrics = metrics
        self._random = random.Random()
        self._log_extra = {"leader": name, "identity": identity}

    async def run(self, lead: Callable[[int], Awaitable[None]]) -> None:
        """Campaign until cancelled; while leading, run ``lead(epoch)`` in a
        task, cancelled (and awaited) when leadership is lost.

        ``lead`` should run until cancelled. If it returns, this process
        gives the role up and campaigns again; if it raises, the role is
        given up and ``run`` raises the same error.
        """
        self._metrics.is_leader.labels(self._name).set(0)
        try:
            while True:
                epoch, acquired_at = await self._campaign()
                await self._lead(lead, epoch, acquired_at)
                await asyncio.sleep(self._retry_with_jitter())
        finally:
            try:
                with deadline.scope(min(self._timings.renew_deadline_seconds, 5.0)):
                    await self._lock.close()
            except Exception:
                _log.warning("closing the election lock failed", extra=self._log_extra, exc_info=True)

    def _retry_with_jitter(self) -> float:
        return self._timings.retry_seconds * (1.0 + _JITTER * self._random.random())

    async def _campaign(self) -> tuple[int, float]:
        failing = False
        while True:
            started = time.monotonic()
            budget = self._timings.renew_deadline_seconds
            epoch: int | None = None
            try:
                with deadline.scope(budget):
                    async with asyncio.timeout(budget):
                        epoch = await self._lock.try_acquire()
                failing = False
            except Exception as err:
                if not failing:  # once per outage, not every retry period
                    _log.warning(
                        "cannot reach the election lock: %s", str(err) or type(err).__name__, extra=self._log_extra
                    )
                failing = True
            if epoch is not None:
                return epoch, started
            await asyncio.sleep(self._retry_with_jitter())

    async def _lead(self, lead: Callable[[int], Awaitable[None]], epoch: int, acquired_at: float) -> None:
        name = self._name
        self._metrics.acquired.labels(name).inc()
        self._metrics.epoch.labels(name).set(epoch)
        self._metrics.is_leader.labels(name).set(1)
        _log.info("leading", extra={**self._log_extra, "epoch": epoch})
        confirmed = _Confirmed(acquired_at)
        work = asyncio.create_task(_call(lead, epoch), name=f"lead:{name}:{epoch}")
        renewer = asyncio.create_task(self._renew(confirmed), name=f"renew:{name}:{epoch}")
        reason = "shutdown"
        try:
            while True:
                left = confirmed.at + self._timings.renew_deadline_seconds - time.monotonic()
                if left <= 0:
                    reason = "renew_deadline"
                    break
                done, _ = await asyncio.wait((work, renewer), timeout=left, return_when=asyncio.FIRST_COMPLETED)
                if work in done:
                    reason = "lead_ended"
                    break
                if renewer in done:
                    reason = "lost"
                    break
        finally:
            # The work stops before anything else happens: only then may the
            # role be handed on. It is cancelled again while it runs on (the
            # admitter's database calls can swallow one cancellation).
            await cancel_and_wait(work)
            await cancel_and_wait(renewer)
            if not renewer.cancelled() and renewer.exception() is not None:
                _log.error("leadership renewal failed", extra=self._log_extra, exc_info=renewer.exception())
            self._metrics.is_leader.labels(name).set(0)
            self._metrics.stepped_down.labels(name, reason).inc()
            log = _log.info if reason in ("shutdown", "lead_ended") else _log.warning
            log("stopped leading", extra={**self._log_extra, "epoch": epoch, "reason": reason})
            if reason != "lost":
                await self._release()
        if not work.cancelled():
            failure = work.exception()
            if failure is not None:
                raise failure

    async def _renew(self, confirmed: _Confirmed) -> None:
        """Confirm every retry period; return once the role is lost for certain."""
        while True:
            await asyncio.sleep(self._timings.retry_seconds)
            started = time.monotonic()
            budget = confirmed.at + self._timings.renew_deadline_seconds - started
            if budget <= 0:
                continue  # past the renew deadline: the leader is stepping down
            try:
                with deadline.scope(budget):
                    async with asyncio.timeout(budget):
                        held = await self._lock.renew()
            except Exception as err:
                _log.warning("could not confirm leadership: %s", str(err) or type(err).__name__, extra=self._log_extra)
                continue
            if not held:
                return
            confirmed.at = started

    async def _release(self) -> None:
        budget = min(self._timings.renew_deadline_seconds, 5.0)
        try:
            with deadline.scope(budget):
                async with asyncio.timeout(budget):
                    await self._lock.release()
        except Exception as err:
            _log.warning("could not release leadership: %s", str(err) or type(err).__name__, extra=self._log_extra)


async def _call(lead: Callable[[int], Awaitable[None]], epoch: int) -> None:
    await lead(epoch)
