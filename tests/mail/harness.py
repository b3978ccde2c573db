"""Bookings for the mailer's tests: an event, a paid booking and its issued
tickets in the real stores, and its outbox events on a stream of the test's
own; the mailer built through its composition root against a real relay."""

from __future__ import annotations

import contextlib
import json
import secrets
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime

import redis.asyncio as aioredis

from boxoffice import db, ticketcodes
from boxoffice.clock import SystemClock
from boxoffice.config import Env
from boxoffice.runtime import Pool
from boxoffice.streams import ConsumerHooks
from mail_svc import app as mail_app
from mail_svc.jobs.mailer import MailHooks
from mail_svc.model import EventInfo
from mail_svc.ports import Relay
from payment_svc.adapters.tickets import PgTicketStore
from payment_svc.jobs.issuer import ISSUER_GROUP
from payment_svc.ports import ConfirmedBooking, TicketUnit
from tests.mail.relay import USER
from tests.support import Stores, make_runtime, running

# A flight (a route, no venue) whose name wants escaping in HTML, for the
# templates' tests.
FLIGHT = EventInfo(
    event_id=7,
    name="Zero-fare <flight>",
    kind="FLIGHT",
    starts_at=datetime(2027, 5, 1, 23, 45, tzinfo=UTC),
    time_zone="America/Sao_Paulo",
    venue="",
    route="VJ123 SGN → GRU",
)


@dataclass(frozen=True)
class Booking:
    hold_id: str
    event_id: int
    codes: tuple[str, ...]


async def make_booking(
    pool: Pool, *, seats: int = 2, email: str | None = "fan@example.test", language: str = "en"
) -> Booking:
    """A paid booking with its tickets issued (by the issuer's own store)."""
    event_id = secrets.randbelow(2**40) + 1_000_000
    hold_id = str(uuid.uuid4())
    payment_id = str(uuid.uuid4())
    async with db.transaction(pool) as conn:
        await conn.execute(
            """
            INSERT INTO events (event_id, display_name, kind, starts_at, hold_ttl_seconds, max_seats_per_customer,
                                time_zone, venue_name, venue_city)
            VALUES (%s, 'Sơn Tùng M-TP <Live>', 'CONCERT', '2027-03-01 12:30:00+00', 300, 4,
                    'Asia/Ho_Chi_Minh', 'Mỹ Đình Stadium', 'Hà Nội')
            """,
            (event_id,),
        )
        await conn.execute(
            """
            INSERT INTO payments (payment_id, hold_id, attempt, event_id, customer_id, amount_minor, currency,
                                  payment_method, state, provider_idempotency_key, notify_email, notify_language)
            VALUES (%s, %s, 1, %s, 'fan-1', %s, 'EUR', 'pm_card_ok', 'SUCCEEDED', %s, %s, %s)
            """,
            (payment_id, hold_id, event_id, 6900 * seats, f"mail-test-{hold_id}", email, language if email else None),
        )
    signer = ticketcodes.TicketCodeSigner(ticketcodes.read_keys(Env({})).get, SystemClock())
    await PgTicketStore(pool, codes=signer).issue(
        ISSUER_GROUP,
        ConfirmedBooking(
            source_event_id=str(uuid.uuid4()),
            event_id=event_id,
            hold_id=hold_id,
            customer_id="fan-1",
            section_id="A",
            payment_id=payment_id,
            units=tuple(TicketUnit(i + 1, event_id * 10 + i, f"A-{i + 1}") for i in range(seats)),
        ),
    )
    async with db.transaction(pool) as conn:
        cur = await conn.execute("SELECT code FROM tickets WHERE hold_id = %s ORDER BY unit", (hold_id,))
        codes = tuple(row[0] for row in await cur.fetchall())
    return Booking(hold_id, event_id, codes)


async def publish(redis: aioredis.Redis, stream: str, booking: Booking, kind: str = "BookingConfirmed") -> None:
    """The booking's outbox event, as booking's relay publishes it."""
    payload = {"hold_id": booking.hold_id, "event_id": booking.event_id}
    await redis.xadd(
        stream,
        {
            "event_id": str(uuid.uuid4()),
            "aggregatetype": "booking",
            "aggregateid": booking.hold_id,
            "type": kind,
            "payload": json.dumps(payload),
            "created_at": f"{time.time():.6f}",
            "seq": "1",
        },
    )


def relay_environ(stores: Stores, port: int, stream: str, password_file: str) -> dict[str, str]:
    return {
        "BOXOFFICE_SMTP_URL": f"smtp://{USER}@127.0.0.1:{port}",
        "BOXOFFICE_SMTP_PASSWORD_FILE": password_file,
        "BOXOFFICE_SMTP_CA_FILE": str(stores.pki.files("edge").ca),
        "BOXOFFICE_MAIL_FROM": "Boxoffice <tickets@boxoffice.example>",
        "BOXOFFICE_TICKET_STREAM": stream,
        "BOXOFFICE_MAIL_BUSY_BACKOFF_SECONDS": "0.01",
        "BOXOFFICE_MAIL_TICKETS_WAIT_SECONDS": "0.2",
        "BOXOFFICE_CONSUMER_BLOCK_MS": "50",
        "BOXOFFICE_MAIL_RATE": "1000",
    }


@contextlib.asynccontextmanager
async def mailer_of(
    stores: Stores,
    environ: dict[str, str],
    *,
    name: str | None = None,
    relay: Relay | None = None,
    hooks: MailHooks | None = None,
    consumer_hooks: ConsumerHooks | None = None,
) -> AsyncIterator[mail_app.MailerRole]:
    rt = make_runtime(stores, environ={"BOXOFFICE_DB_POOL_MIN": "1", "BOXOFFICE_DB_POOL_MAX": "4", **environ})
    role = mail_app.compose_mailer(rt, relay=relay, name=name, hooks=hooks, consumer_hooks=consumer_hooks)
    async with running(rt.infrastructure()):
        await role.consumer.prepare()
        try:
            yield role
        finally:
            await role.relay.close()
