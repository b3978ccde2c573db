"""The door on a real Postgres: the check-in handler and store, tickets
written as the issuer writes them."""

from __future__ import annotations

import secrets
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime

import pytest
from prometheus_client import CollectorRegistry

from boxoffice import db, ticketcodes
from boxoffice.runtime import Pool
from boxoffice.ticketcodes import TicketClaims, TicketCodeSigner, TicketCodeVerifier
from checkin_svc.adapters.postgres import PgCheckInStore
from checkin_svc.handler import CheckInHandler
from checkin_svc.metrics import CheckInMetrics
from checkin_svc.model import Direction, Scan
from tests.payment.harness import open_pool
from tests.support import ManualClock, Stores

KEYS = ticketcodes.parse_keys("c1:" + "c4" * 32)


class EventsAllowing:
    """The events that allow something (static codes, re-entry; None: every
    event), as the door's rules ask; the events' own settings are not read
    by the door yet."""

    def __init__(self, events: set[int] | None = None) -> None:
        self.events = events

    async def allowed(self, event_id: int) -> bool:
        return self.events is None or event_id in self.events


@dataclass
class Door:
    pool: Pool
    handler: CheckInHandler
    signer: TicketCodeSigner
    clock: ManualClock
    static: EventsAllowing
    reentry: EventsAllowing
    metrics: CheckInMetrics

    async def ticket(self, event_id: int, *, code: str | None = None, seat: str = "row A, seat 1") -> tuple[str, str]:
        """A ticket of ``event_id`` as the issuer writes it: (id, code)."""
        ticket_id = str(uuid.uuid4())
        issued = self.signer.now()
        code = code or self.signer.sign(TicketClaims(ticket_id, event_id, "A", seat, issued))
        async with db.transaction(self.pool) as conn:
            await conn.execute(
                """
                INSERT INTO tickets (ticket_id, event_id, hold_id, unit, customer_id, section_id, seat_label,
                                     source_event_id, code, issued_at)
                VALUES (%s, %s, %s, 1, 'fan', 'A', %s, %s, %s, to_timestamp(%s))
                """,
                (ticket_id, event_id, str(uuid.uuid4()), seat, str(uuid.uuid4()), code, issued),
            )
        return ticket_id, code

    def scan(
        self, event_id: int, code: str, gate: str = "north-1", device: str = "d1", direction: Direction = Direction.IN
    ) -> Scan:
        return Scan(event_id, code, gate, device, datetime.now(UTC), direction)


@pytest.fixture
async def door(stores: Stores) -> AsyncIterator[Door]:
    async with open_pool(stores, max_size=20) as pool:
        clock = ManualClock()
        static = EventsAllowing()
        metrics = CheckInMetrics.create(CollectorRegistry())
        verifier = TicketCodeVerifier(KEYS.public, clock)
        reentry = EventsAllowing(set())
        handler = CheckInHandler(PgCheckInStore(pool), verifier, clock, static, metrics, reentry)
        yield Door(pool, handler, TicketCodeSigner(lambda: KEYS, clock), clock, static, reentry, metrics)


def new_event() -> int:
    return 10_000_000 + secrets.randbelow(1_000_000_000)
