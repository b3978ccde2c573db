"""The ticket issuer (role ``issuer``): a consumer of booking's outbox
stream that turns BookingConfirmed into tickets and BookingCancelled into
void tickets, idempotently (see :mod:`payment_svc.adapters.tickets`).

A booking that would ticket a seat someone else holds a valid ticket for
stays pending and is retried (the cancellation that frees the seat may not
have been handled yet); ``boxoffice_ticket_conflicts_total`` counts them. A
malformed event can never succeed: it is recorded as processed (so the
relay's repair does not send it again) and logged loudly.

Each entry is handled in a consumer span, child of (and linked to) the
span of the call that wrote its outbox row (the entry's ``traceparent``):
a ticket's issuance is in the trace of its booking's confirm.
"""

from __future__ import annotations

import logging
import time
import uuid
from typing import Any

from boxoffice.streams import StreamEntry
from boxoffice.tracing import Tracing
from payment_svc.metrics import IssuerMetrics
from payment_svc.ports import ConfirmedBooking, TicketConflict, TicketStore, TicketUnit

_log = logging.getLogger("payment_svc.issuer")

ISSUER_GROUP = "ticket-issuer"


def _hold_id(entry: StreamEntry) -> str:
    return str(uuid.UUID(str(entry.payload.get("hold_id") or entry.aggregate_id)))


def _units(payload: dict[str, Any]) -> tuple[TicketUnit, ...]:
    seats = payload.get("seats") or []
    if seats:
        return tuple(
            TicketUnit(i + 1, int(seat["seat_id"]), str(seat.get("label", ""))) for i, seat in enumerate(seats)
        )
    quantity = int(payload.get("quantity", 0))
    if quantity <= 0:
        raise ValueError("a confirmed booking without seats or quantity")
    return tuple(TicketUnit(i + 1, None, "") for i in range(quantity))


def confirmed_booking(entry: StreamEntry) -> ConfirmedBooking:
    """The booking a BookingConfirmed entry tells of; ValueError, KeyError or
    TypeError when it is malformed."""
    payload = entry.payload
    return ConfirmedBooking(
        source_event_id=entry.event_id,
        event_id=int(payload["event_id"]),
        hold_id=_hold_id(entry),
        customer_id=str(payload.get("customer_id", "")),
        section_id=str(payload.get("section_id", "")),
        payment_id=str(payload.get("payment_id", "")),
        units=_units(payload),
    )


class TicketIssuer:
    """The issuer's entry handler."""

    def __init__(
        self,
        tickets: TicketStore,
        metrics: IssuerMetrics,
        *,
        group: str = ISSUER_GROUP,
        tracing: Tracing | None = None,
    ) -> None:
        self._tickets = tickets
        self._metrics = metrics
        self._group = group
        self._tracing = tracing or Tracing.off()

    async def handle(self, entry: StreamEntry) -> None:
        attributes = {
            "messaging.system": "redis",
            "messaging.message.id": entry.event_id,
            "boxoffice.event_type": entry.type,
        }
        with self._tracing.consuming(f"issue {entry.type}", entry.traceparent, attributes):
            await self._handle(entry)

    async def _handle(self, entry: StreamEntry) -> None:
        try:
            if entry.type == "BookingConfirmed":
                await self._issue(confirmed_booking(entry), entry.created_at)
            elif entry.type == "BookingCancelled":
                await self._tickets.void(self._group, entry.event_id, _hold_id(entry))
            # Other event types are not the issuer's.
        except (KeyError, ValueError, TypeError) as err:
            self._metrics.consumer.rejected.inc()
            _log.error("malformed booking event refused", extra={"event_id": entry.event_id, "error": repr(err)})
            await self._tickets.mark_processed(self._group, entry.event_id)

    async def _issue(self, booking: ConfirmedBooking, created_at: float) -> None:
        try:
            issued = await self._tickets.issue(self._group, booking)
        except TicketConflict:
            self._metrics.conflicts.inc()
            _log.error(
                "a seat of this booking already has a valid ticket; will retry",
                extra={"hold_id": booking.hold_id, "event_id": booking.source_event_id},
            )
            raise
        if issued:
            self._metrics.tickets_issued.inc(issued)
            self._metrics.lag_seconds.observe(max(0.0, time.time() - created_at))
