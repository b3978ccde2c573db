"""The waiting list's use cases (BookingService.JoinWaitlist,
GetWaitlistEntry, LeaveWaitlist) and its offer pass.

A fan is always the asserted one (the edge's sign-in), never a name in a
request. An offer is a hold in the fan's name; while it is open the fan's
entry carries an access token for the event, valid until the offer lapses,
so that they pay for it as an admitted fan pays for any hold.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from dataclasses import replace
from datetime import datetime
from typing import Protocol

import psycopg

from booking_svc.metrics import BookingMetrics
from booking_svc.model import HoldState, utc
from booking_svc.waitlist_model import OfferPass, WaitlistEntry, WaitlistState, WaitlistStats
from boxoffice import caller, deadline
from boxoffice.clock import Clock
from boxoffice.errors import BoxofficeError
from boxoffice.tokens import TokenSigner, asserted_customer

_log = logging.getLogger("booking_svc.waitlist")

# Budget of one event's offer pass.
_PASS_SECONDS = 10.0


class WaitlistStore(Protocol):
    """What the waiting list needs from storage."""

    async def join_waitlist(
        self,
        *,
        event_id: int,
        customer_id: str,
        section_id: str | None,
        quantity: int,
        now: datetime,
        email: str | None = None,
        language: str | None = None,
    ) -> tuple[WaitlistEntry, bool]:
        """The fan's entry (a new one at the back, or theirs as it is with
        the wish updated while waiting) and whether it is new; ``email`` and
        ``language`` are where the offer's message goes."""

    async def waitlist_entry(self, *, event_id: int, customer_id: str) -> WaitlistEntry: ...

    async def leave_waitlist(self, *, event_id: int, customer_id: str, now: datetime) -> WaitlistEntry: ...

    async def waitlist_events(self) -> list[int]: ...

    async def offer_pass(self, *, event_id: int, now: datetime) -> OfferPass: ...

    async def waitlist_stats(self, event_id: int) -> WaitlistStats: ...


class HoldReleaser(Protocol):
    """Ends a declined offer's hold (the store's ReleaseHold)."""

    async def release_hold(self, *, hold_id: uuid.UUID, customer_id: str, now: datetime) -> object: ...


class Waitlist:
    """The RPCs' use cases."""

    def __init__(self, store: WaitlistStore, releaser: HoldReleaser, signer: TokenSigner, clock: Clock) -> None:
        self._store = store
        self._releaser = releaser
        self._signer = signer
        self._clock = clock

    def now(self) -> datetime:
        return utc(self._clock.now())

    async def join(self, *, event_id: int, section_id: str | None, quantity: int) -> tuple[WaitlistEntry, str, bool]:
        customer_id = asserted_customer()
        # The verified address and language the edge asserts with the fan:
        # where the offer's message goes.
        fan = caller.current()
        entry, newly = await self._store.join_waitlist(
            event_id=event_id,
            customer_id=customer_id,
            section_id=section_id,
            quantity=quantity,
            now=self.now(),
            email=fan.email,
            language=fan.language,
        )
        return entry, self._token(entry), newly

    async def get(self, *, event_id: int) -> tuple[WaitlistEntry, str]:
        entry = await self._store.waitlist_entry(event_id=event_id, customer_id=asserted_customer())
        return self._shown(entry), self._token(entry)

    async def leave(self, *, event_id: int) -> WaitlistEntry:
        customer_id = asserted_customer()
        entry = await self._store.leave_waitlist(event_id=event_id, customer_id=customer_id, now=self.now())
        # A declined offer (the entry left with its hold still held) gives
        # its seats back at once: the next pass offers them to the next fan.
        offer = entry.offer
        if entry.state is WaitlistState.LEFT and offer is not None and offer.state is HoldState.HELD:
            try:
                await self._releaser.release_hold(hold_id=offer.hold_id, customer_id=customer_id, now=self.now())
            except BoxofficeError as err:
                # Bought or ended meanwhile: the hold is as it is.
                _log.info("declined offer's hold not released", extra={"error": repr(err)})
            entry = await self._store.waitlist_entry(event_id=event_id, customer_id=customer_id)
        return entry

    async def stats(self, event_id: int) -> WaitlistStats:
        return await self._store.waitlist_stats(event_id)

    def _shown(self, entry: WaitlistEntry) -> WaitlistEntry:
        """An offer whose hold lapsed reads as lapsed before the pass says so."""
        offer = entry.offer
        if entry.state is WaitlistState.OFFERED and offer is not None and self._lapsed(offer.state, offer.expires_at):
            return replace(entry, state=WaitlistState.LAPSED)
        return entry

    def _lapsed(self, state: HoldState, expires_at: datetime) -> bool:
        return state is not HoldState.CONFIRMED and (state is not HoldState.HELD or expires_at <= self.now())

    def _token(self, entry: WaitlistEntry) -> str:
        """An access token for an open offer, valid until it lapses."""
        offer = entry.offer
        if entry.state is not WaitlistState.OFFERED or offer is None or offer.state is not HoldState.HELD:
            return ""
        seconds = int((offer.expires_at - self.now()).total_seconds())
        if seconds <= 0:
            return ""
        token, _ = self._signer.issue(event_id=entry.event_id, customer_id=entry.customer_id, ttl_seconds=seconds)
        return token


class WaitlistOfferer:
    """The offer pass over every event with open entries, every
    ``interval_seconds`` (each replica; an event is passed over by one at a
    time)."""

    def __init__(self, store: WaitlistStore, clock: Clock, metrics: BookingMetrics, *, interval_seconds: float) -> None:
        self._store = store
        self._clock = clock
        self._metrics = metrics
        self._interval = interval_seconds

    async def pass_once(self) -> list[OfferPass]:
        """One pass over every event with open entries; what each did."""
        with deadline.scope(_PASS_SECONDS):
            events = await self._store.waitlist_events()
        done: list[OfferPass] = []
        for event_id in events:
            with deadline.scope(_PASS_SECONDS):
                result = await self._store.offer_pass(event_id=event_id, now=utc(self._clock.now()))
            done.append(result)
            self._metrics.waitlist.labels("offered").inc(len(result.offers))
            self._metrics.waitlist.labels("taken").inc(result.taken)
            self._metrics.waitlist.labels("lapsed").inc(result.lapsed)
            self._metrics.waitlist.labels("passed_over").inc(len(result.passed_over))
            for offer in result.offers:
                _log.info(
                    "waiting-list offer",
                    extra={"event_id": offer.event_id, "section_id": offer.section_id, "quantity": offer.quantity},
                )
        return done

    async def run(self) -> None:
        """The body of the offer pass's background loop."""
        while True:
            try:
                await self.pass_once()
            except (BoxofficeError, psycopg.Error, OSError) as err:
                _log.warning("waiting-list pass failed", extra={"error": repr(err)})
            await asyncio.sleep(self._interval)
