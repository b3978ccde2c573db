"""Ticket transfers: a fan offers one of their tickets to a friend by e-mail,
and the friend, signed in, claims it; the ticket is then re-issued to the
friend with a new id and a new signed code, and the old code is void at the
door. Only the ticket's current holder offers it; the event's ``transfers``
switch and its start bound when; the claimer's ticket limit counts it.

The friend's e-mail (a claim link with the transfer's secret) is the
mailer's: it finds the pending transfers it has not written to yet.

BookingService is told of each claimed transfer (RecordTicketTransfer) so
that its ticket limit counts the ticket against the receiver and a fan's own
cancel of the booking is refused. The claim's commit is the outbox: the
claim tells booking right after it commits, and a transfer booking has not
acknowledged (booking down, the call cut, the process gone) is sent again by
:meth:`TicketTransfers.run` every ``retry_seconds`` until booking answers;
booking records each transfer once, by its id.
Through the edge only: the fan is the edge's assertion, never a request's.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
from datetime import UTC, datetime

import psycopg

from boxoffice import caller, deadline
from boxoffice.clock import Clock
from boxoffice.errors import BoxofficeError
from boxoffice.tokens import asserted_customer
from payment_svc.model import Ticket, Transfer
from payment_svc.ports import BookingClient, TransferStore

_log = logging.getLogger("payment_svc.transfers")

# The claim secret's entropy, in bytes (written base64url in the link).
SECRET_BYTES = 32
_LANGUAGES = frozenset({"en", "vi", "pt-BR"})
# How many unacknowledged transfers one pass of the retry loop sends.
TELL_BATCH = 100
# How long a claim waits for booking's answer before leaving it to the loop.
TELL_SECONDS = 1.0


class TicketTransfers:
    """The transfer use cases, over the transfer store and a clock."""

    def __init__(self, store: TransferStore, clock: Clock, booking: BookingClient, retry_seconds: float = 2.0) -> None:
        self._store = store
        self._clock = clock
        self._booking = booking
        self._retry_seconds = retry_seconds

    def _now(self) -> datetime:
        return datetime.fromtimestamp(self._clock.now(), UTC)

    async def transfer(self, ticket_id: str, email: str) -> Transfer:
        """A pending transfer of the asserted fan's ticket to ``email``; the
        link is written in the fan's language."""
        fan = caller.current()
        language = fan.language if fan.language in _LANGUAGES else "en"
        return await self._store.create(
            ticket_id=ticket_id,
            sender_id=asserted_customer(),
            email=email,
            language=language or "en",
            secret=secrets.token_urlsafe(SECRET_BYTES),
            now=self._now(),
        )

    async def claim(self, transfer_id: str, secret: str) -> tuple[Transfer, Ticket]:
        claimed = await self._store.claim(
            transfer_id=transfer_id, secret=secret, receiver_id=asserted_customer(), now=self._now()
        )
        # Booking slow or down must not hold the fan's answer: a short try,
        # then the loop's.
        with deadline.scope(TELL_SECONDS):
            await self.tell_booking(transfer_id)
        return claimed

    async def tell_booking(self, transfer_id: str | None = None) -> int:
        """Tell BookingService of the claimed transfers it has not
        acknowledged (``transfer_id``: of that one only); how many it
        acknowledged now. A failure is logged and left for the next pass:
        the claim has committed either way."""
        told = 0
        try:
            for transfer in await self._store.untold(TELL_BATCH, transfer_id):
                await self._booking.record_ticket_transfer(transfer)
                await self._store.mark_told([transfer.transfer_id])
                told += 1
        except (BoxofficeError, psycopg.Error, OSError) as err:
            _log.warning("booking not told of a claimed transfer yet", extra={"error": repr(err)})
        return told

    async def run(self) -> None:
        """Tell booking of unacknowledged transfers, every ``retry_seconds``."""
        while True:
            await self.tell_booking()
            await asyncio.sleep(self._retry_seconds)

    async def cancel(self, transfer_id: str) -> Transfer:
        return await self._store.cancel(transfer_id=transfer_id, sender_id=asserted_customer(), now=self._now())
