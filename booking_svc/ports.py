"""The booking service's ports: what the handlers need from storage and
from the seat gate, as Protocols. Adapters (``booking_svc.adapters``)
implement them; the handlers and jobs see only these."""

from __future__ import annotations

import secrets
import uuid
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Protocol

from booking_svc.model import (
    CatalogueEntry,
    CatalogueQuery,
    ClaimedTransfer,
    Event,
    EventSpec,
    Hold,
    Money,
    RowSpec,
    SeatMap,
    SectionCounterPage,
    SectionCounters,
    Selection,
    SweepResult,
)


class BookingStore(Protocol):
    """What the booking handlers need from storage."""

    async def create_event(self, spec: EventSpec) -> Event: ...

    async def get_event(self, event_id: int) -> Event: ...

    async def list_events(
        self, query: CatalogueQuery, *, limit: int, after: tuple[datetime, int] | None, now: datetime
    ) -> list[CatalogueEntry]:
        """Up to ``limit`` published events matching ``query`` (whose
        ``starts_after`` is set), in (starts_at, event_id) order after the
        cursor ``after``."""

    async def load_inventory(self, event_id: int, rows: Sequence[RowSpec]) -> int: ...

    async def seat_map(self, event_id: int, now: datetime) -> SeatMap: ...

    async def hold_seats(
        self,
        *,
        event_id: int,
        customer_id: str,
        selection: Selection,
        hold_id: uuid.UUID,
        request_id: str | None,
        fingerprint: str,
        now: datetime,
    ) -> tuple[Hold, bool]: ...

    async def get_hold(self, hold_id: uuid.UUID) -> Hold | None: ...

    async def list_holds(
        self, *, event_id: int, customer_id: str | None, limit: int, after: tuple[datetime, uuid.UUID] | None
    ) -> list[Hold]: ...

    async def release_hold(self, *, hold_id: uuid.UUID, customer_id: str, now: datetime) -> Hold: ...

    async def extend_hold(
        self, *, hold_id: uuid.UUID, customer_id: str, extend_by: timedelta, max_lifetime: timedelta, now: datetime
    ) -> Hold: ...

    async def restore_hold_expiry(
        self, *, hold_id: uuid.UUID, customer_id: str, expires_at: datetime, now: datetime
    ) -> Hold:
        """Move a HELD hold's expiry back to ``expires_at`` (never later);
        a hold no longer held is returned as it is."""

    async def confirm_hold(
        self, *, hold_id: uuid.UUID, idempotency_key: str, payment_id: str, amount_paid: Money, now: datetime
    ) -> Hold: ...

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
        """Cancel a confirmed booking: its seats go back, a BookingCancelled
        event carries the refund the event's policy grants. With
        ``refund_required`` a policy that grants nothing refuses the cancel
        (FAILED_PRECONDITION, REFUND_NOT_ALLOWED) and changes nothing. With
        ``refunded_at_provider`` the refund is zero (it was made at the provider).
        With ``quoted_refund`` the grant is at most the quote, and a policy
        that now grants less refuses the cancel and changes nothing (see
        :func:`booking_svc.cancellation.granted_for_quote`). With ``by_fan``
        (the buyer's own cancel) a booking one of whose tickets another fan
        holds by a claimed transfer is refused (FAILED_PRECONDITION,
        TICKETS_TRANSFERRED) and nothing changes. A booking cancelled already
        is returned as it is, with the refund it got."""

    async def record_transfer(self, transfer: ClaimedTransfer) -> bool:
        """Record a claimed transfer (idempotent by its id: True when it was
        recorded before); NOT_FOUND HOLD_NOT_FOUND for a booking not of its
        event, FAILED_PRECONDITION TRANSFER_RECORD_MISMATCH for its id with
        other details."""

    async def tickets_transferred_away(self, hold_id: uuid.UUID, buyer: str) -> int:
        """How many of the booking's tickets others than ``buyer`` hold by
        claimed transfers."""

    async def sweep(self, *, now: datetime, batch_size: int) -> SweepResult: ...

    async def forget_requests(self, *, older_than: datetime) -> int: ...

    async def section_counters(self, *, starting_after: datetime, limit: int) -> SectionCounterPage:
        """The counters of at most ``limit`` sections of events starting
        after ``starting_after``, the soonest events first."""
        ...

    async def event_counters(self, event_ids: Sequence[int]) -> list[SectionCounters]:
        """The counters of every section of these events (unknown ids are
        left out)."""
        ...


class SeatGate(Protocol):
    """A fast first "no" in front of HoldSeats for seats another attempt has
    just claimed; Postgres still decides every hold."""

    async def claim(self, event_id: int, seat_ids: Sequence[int], token: str) -> list[int]:
        """Claim the seats for one attempt; the ids another attempt holds
        (empty when the attempt may go on to Postgres)."""

    async def release(self, event_id: int, seat_ids: Sequence[int], token: str) -> None:
        """Drop the attempt's keys (it failed in Postgres)."""

    async def clear(self, event_id: int, seat_ids: Sequence[int]) -> None:
        """Drop the seats' keys, whoever set them (the seats are free again)."""


def attempt_token(customer_id: str, request_id: str | None) -> str:
    """The gate owner of one attempt; a retry with the same request id is the
    same owner, so it is not turned away by its own first try."""
    if request_id:
        return f"{customer_id}\x00{request_id}"
    return secrets.token_hex(8)
