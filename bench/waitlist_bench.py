"""The waiting list's costs on Postgres, each figure next to a baseline
measured in the same run (on a shared 2-core machine only ratios within one
run mean much).

One event with two seated sections: ``S00`` (seats for sale, nobody waits
for it) and ``W`` (``--returned`` seats free, ``--fans`` fans waiting for it,
one seat each).

1. HoldSeats of one seat in ``S00``, one call at a time, with the waiting
   list's guard as shipped (two index probes: does anyone wait for the
   section?) vs the same statement with the guard answering ``false`` at
   once (the hold statement without a waiting list).
2. One offer pass over the list: ``--returned`` offers, each a hold by the
   hold statement, in one transaction, vs as many lone HoldSeats of one seat.
3. The stock's read of the list (per section: anyone waiting, the seats and
   fans of open offers) vs the stock's read of the same event's counters.

Run: ``python -m bench.waitlist_bench [--fans 10000] [--returned 100] [--holds 300] [--rounds 3]``
Postgres: ``DATABASE_URL``'s server (default the local one); the bench makes
and drops its own database.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import statistics
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, datetime, timedelta

from bench.queue_common import private_database
from booking_svc import app as booking_app
from booking_svc.adapters.postgres import PgBookingStore
from booking_svc.config import BookingConfig
from booking_svc.model import (
    EventKind,
    EventSpec,
    Money,
    QuantitySelection,
    RefundPolicy,
    RowSpec,
    SectionKind,
    SectionSpec,
)
from boxoffice import db
from boxoffice.env import Env
from boxoffice.runtime import Pool

EVENT = 777_001
_GUARD_OFF = b"""
CREATE OR REPLACE FUNCTION booking_waitlist_waits(p_event_id bigint, p_section_id text)
RETURNS boolean LANGUAGE sql STABLE AS $$ SELECT false $$
"""


async def _seed(store: PgBookingStore, pool: Pool, fans: int, returned: int, seats: int) -> None:
    await store.create_event(
        EventSpec(
            event_id=EVENT,
            display_name="bench waiting list",
            kind=EventKind.CONCERT,
            starts_at=datetime.now(UTC) + timedelta(days=30),
            hold_ttl_seconds=3600,
            max_seats_per_customer=4,
            refund_policy=RefundPolicy(None, 0),
            sections=(
                SectionSpec("S00", "S00", SectionKind.SEATED, 0, 0, Money("EUR", 5000)),
                SectionSpec("W", "W", SectionKind.SEATED, 0, 0, Money("EUR", 5000)),
            ),
        )
    )
    for section, count in (("S00", seats), ("W", returned)):
        rows = [RowSpec(section, f"R{r}", 1, min(100, count - r * 100)) for r in range(-(-count // 100))]
        for start in range(0, len(rows), 50):
            await store.load_inventory(EVENT, rows[start : start + 50])
    async with db.transaction(pool) as conn:
        await conn.execute(
            b"""
            INSERT INTO waitlist_entries (event_id, customer_id, section_id, quantity, state, joined_at)
            SELECT %s, 'fan-' || n, 'W', 1, 'WAITING', now() FROM generate_series(1, %s) AS n
            """,
            (EVENT, fans),
        )
    async with pool.connection() as conn:
        await conn.execute(b"ANALYZE waitlist_entries")
        await conn.execute(b"ANALYZE seats")


async def _timed(call: Callable[[], Awaitable[object]]) -> float:
    began = time.perf_counter()
    await call()
    return time.perf_counter() - began


async def _holds(store: PgBookingStore, count: int, tag: str) -> float:
    """``count`` lone holds of one seat in S00; seconds per hold."""
    began = time.perf_counter()
    for n in range(count):
        await store.hold_seats(
            event_id=EVENT,
            customer_id=f"{tag}-{n}",
            selection=QuantitySelection("S00", 1),
            hold_id=uuid.uuid4(),
            request_id=None,
            fingerprint="",
            now=datetime.now(UTC),
        )
    return (time.perf_counter() - began) / count


@contextlib.asynccontextmanager
async def _store(url: str) -> AsyncIterator[tuple[PgBookingStore, Pool]]:
    """A store on its own pool (new connections: the hold statement is
    planned afresh, with the guard as it is now)."""
    config = BookingConfig.from_env(Env({"BOXOFFICE_BOOKING_HOLD_BATCH_MAX": "1"}))
    pool = db.create_pool(url, min_size=1, max_size=2, name="bench-waitlist")
    await pool.open()
    try:
        yield booking_app.build_store(pool, config), pool
    finally:
        await pool.close()


async def _one(pool: Pool, sql: bytes) -> object:
    async with pool.connection() as conn:
        cur = await conn.execute(sql)
        row = await cur.fetchone()
        return None if row is None else row[0]


async def _main(fans: int, returned: int, holds: int, rounds: int) -> None:
    async with private_database() as url:
        await db.migrate(url, booking_app.migrations())
        guarded: list[float] = []
        unguarded: list[float] = []
        async with _store(url) as (store, pool):
            await _seed(store, pool, fans, returned, holds * rounds * 2 + 100)
            shipped = str(await _one(pool, b"SELECT pg_get_functiondef('booking_waitlist_waits'::regproc)")).encode()
        for r in range(rounds):
            async with _store(url) as (store, pool):
                guarded.append(await _holds(store, holds, f"g{r}"))
                async with pool.connection() as conn:
                    await conn.execute(_GUARD_OFF)
            async with _store(url) as (store, pool):
                unguarded.append(await _holds(store, holds, f"u{r}"))
                async with pool.connection() as conn:
                    await conn.execute(shipped)
        async with _store(url) as (store, pool):
            now = datetime.now(UTC)
            counters = await _median(rounds, lambda: store.event_counters([EVENT]))
            reservations = await _median(rounds, lambda: store.waitlist_reservations([EVENT], now))
            offer_pass = await _timed(lambda: store.offer_pass(event_id=EVENT, now=datetime.now(UTC)))
            made = await _one(pool, b"SELECT count(*) FROM waitlist_entries WHERE state = 'OFFERED'")
            lone = await _holds(store, returned, "lone") * returned
        print(f"{fans:,} fans waiting for section W; {returned} seats of W free; {rounds} rounds, median")
        print(f"{'measure':<58} {'ms':>9} {'baseline ms':>12} {'ratio':>6}")
        _row(
            "1. HoldSeats in S00, guard as shipped vs guard off",
            statistics.median(guarded),
            statistics.median(unguarded),
        )
        _row(f"2. one offer pass ({made} offers) vs {returned} lone holds", offer_pass, lone)
        _row("3. the stock's read of the list vs of the counters", reservations, counters)


def _row(label: str, seconds: float, baseline: float) -> None:
    ratio = seconds / baseline if baseline else float("nan")
    print(f"{label:<58} {seconds * 1000:>9.2f} {baseline * 1000:>12.2f} {ratio:>6.2f}")


async def _median(rounds: int, call: Callable[[], Awaitable[object]]) -> float:
    return statistics.median([await _timed(call) for _ in range(max(rounds, 3))])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fans", type=int, default=10_000, help="fans waiting for section W")
    parser.add_argument("--returned", type=int, default=100, help="free seats of W the pass offers")
    parser.add_argument("--holds", type=int, default=300, help="lone holds per round and variant")
    parser.add_argument("--rounds", type=int, default=3, help="rounds (the median is reported)")
    args = parser.parse_args()
    asyncio.run(_main(args.fans, args.returned, args.holds, args.rounds))


if __name__ == "__main__":
    main()
