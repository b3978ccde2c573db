"""A crowd through a relay that takes 100 messages a second: 1,000 paid
bookings (a ticket each) handed to the ticket stream at once, two
mailers sharing the relay's pace in Redis, a real relay (aiosmtpd with
STARTTLS and AUTH), real Postgres. Every booking gets exactly one message,
and the whole takes no less than the rate allows (the pace is the relay's,
not each mailer's: two mailers on a pace of their own would take half the
time) and no more than a generous multiple of it."""

from __future__ import annotations

import asyncio
import contextlib
import time

import pytest
import redis.asyncio as aioredis

from boxoffice.runtime import Pool
from mail_svc.model import DeliveryState, Kind
from tests.e2e.harness import eventually
from tests.mail.harness import Booking, mailer_of, make_booking, publish
from tests.mail.relay import RelayState
from tests.support import Stores

BOOKINGS = 1000
RATE = 100
# The pace lets a second's worth through at once, then one every 1/RATE s.
FLOOR_SECONDS = (BOOKINGS - RATE) / RATE
# Generous: this one process renders for both mailers and runs the relay,
# on a machine it shares with the stores (bench/mail_bench.py measures the
# mailer's own rate).
CEILING_SECONDS = 10 * BOOKINGS / RATE


async def _bookings(pool: Pool) -> list[Booking]:
    slots = asyncio.Semaphore(8)

    async def one() -> Booking:
        async with slots:
            return await make_booking(pool, seats=1)

    return list(await asyncio.gather(*(one() for _ in range(BOOKINGS))))


async def _all_sent(pool: Pool, bookings: list[Booking]) -> bool | None:
    async with pool.connection() as conn:
        cur = await conn.execute(
            "SELECT count(*) FROM mail_deliveries WHERE hold_id = ANY(%s::uuid[]) AND state = 'SENT'",
            ([b.hold_id for b in bookings],),
        )
        row = await cur.fetchone()
    return True if row is not None and row[0] == BOOKINGS else None


async def _delivered(pool: Pool, bookings: list[Booking]) -> dict[str, tuple[str, int]]:
    async with pool.connection() as conn:
        cur = await conn.execute(
            "SELECT hold_id::text, state, attempts FROM mail_deliveries WHERE hold_id = ANY(%s::uuid[]) AND kind = %s",
            ([b.hold_id for b in bookings], Kind.TICKETS.value),
        )
        return {row[0]: (row[1], row[2]) for row in await cur.fetchall()}


@pytest.mark.apart(
    reason="its ceiling is a throughput: 1,000 messages rendered and relayed by this one process, "
    "which another test worker beside it would halve"
)
async def test_a_thousand_bookings_through_a_relay_of_100_a_second_arrive_once_each_at_its_pace(
    stores: Stores, pool: Pool, redis: aioredis.Redis, relay: tuple[int, RelayState], environ: dict[str, str]
) -> None:
    _, state = relay
    bookings = await _bookings(pool)
    paced = {**environ, "BOXOFFICE_MAIL_RATE": str(RATE), "BOXOFFICE_CONSUMER_BATCH_SIZE": "50"}
    async with mailer_of(stores, paced, name="one") as one, mailer_of(stores, paced, name="two") as two:
        for booking in bookings:
            await publish(redis, one.config.stream, booking)
        start = time.monotonic()
        loops = [asyncio.create_task(role.consumer.run()) for role in (one, two)]
        try:
            with contextlib.suppress(AssertionError):
                await eventually(lambda: _all_sent(pool, bookings), "every message sent", seconds=CEILING_SECONDS)
            elapsed = time.monotonic() - start
        finally:
            for loop in loops:
                loop.cancel()
            await asyncio.gather(*loops, return_exceptions=True)
    messages = state.messages()
    assert len(messages) == BOOKINGS, f"{len(messages)} of {BOOKINGS} delivered in {elapsed:.1f} s"
    assert len({m["Message-ID"] for m in messages}) == BOOKINGS
    delivered = await _delivered(pool, bookings)
    assert delivered == {b.hold_id: (DeliveryState.SENT.value, 1) for b in bookings}
    assert FLOOR_SECONDS <= elapsed <= CEILING_SECONDS, elapsed
