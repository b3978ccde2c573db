"""Ticket transfers: a fan offers one of their tickets to a friend by e-mail,
and the friend, signed in, claims it; the ticket is then re-issued to the
friend with a new id and a new signed code, and the old code is void at the
door. Only the ticket's current holder offers it; the event's ``transfers``
switch and its start bound when; the claimer's ticket limit counts it.

The friend's e-mail (a claim link with the transfer's secret) is the
mailer's: it finds the pending transfers it has not written to yet.
Through the edge only: the fan is the edge's assertion, never a request's.
"""

from __future__ import annotations

import secrets
from datetime import UTC, datetime

from boxoffice import caller
from boxoffice.clock import Clock
from boxoffice.tokens import asserted_customer
from payment_svc.model import Ticket, Transfer
from payment_svc.ports import TransferStore

# The claim secret's entropy, in bytes (written base64url in the link).
SECRET_BYTES = 32
_LANGUAGES = frozenset({"en", "vi", "pt-BR"})


class TicketTransfers:
    """The transfer use cases, over the transfer store and a clock."""

    def __init__(self, store: TransferStore, clock: Clock) -> None:
        self._store = store
        self._clock = clock

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
        return await self._store.claim(
            transfer_id=transfer_id, secret=secret, receiver_id=asserted_customer(), now=self._now()
        )

    async def cancel(self, transfer_id: str) -> Transfer:
        return await self._store.cancel(transfer_id=transfer_id, sender_id=asserted_customer(), now=self._now())
