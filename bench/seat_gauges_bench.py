"""BookingService's seat gauges on a large catalogue: how long a refresh
takes and the longest time it keeps the event loop from serving calls.

A scratch database of ``--events`` events (two sections each, the catalogue
benchmark's data) and one refresh of :class:`SeatGauges` at each bound:

- baseline: every section of the catalogue has series (what the gauges did
  before they were bounded, with the same hand-backs to the loop);
- the default bound (``BOXOFFICE_BOOKING_SEAT_GAUGE_SECTIONS``, 2,000
  sections of the soonest events).

A ticker task asks the loop for a wake-up every millisecond; the longest
gap between asking and waking is the stall a call would have met.

Run: ``python -m bench.seat_gauges_bench [--events 100000] [--rounds 3]``
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from datetime import timedelta

import psycopg
from prometheus_client import CollectorRegistry

from bench.queue_common import private_database
from booking_svc import app as booking_app
from booking_svc.config import BookingConfig
from booking_svc.jobs.gauges import SeatGauges
from booking_svc.metrics import BookingMetrics
from boxoffice import db
from boxoffice.env import Env
from tests.booking.catalogue_plans import START, fill
from tests.support import ManualClock


async def _measure(gauges: SeatGauges) -> tuple[float, float]:
    """One refresh: its seconds and the longest loop stall meanwhile."""
    stalls: list[float] = [0.0]
    done = asyncio.Event()

    async def tick() -> None:
        while not done.is_set():
            asked = time.perf_counter()
            await asyncio.sleep(0.001)
            stalls.append(time.perf_counter() - asked - 0.001)

    ticker = asyncio.get_running_loop().create_task(tick())
    await asyncio.sleep(0.01)
    began = time.perf_counter()
    await gauges.refresh()
    took = time.perf_counter() - began
    done.set()
    await ticker
    return took, max(stalls)


async def _main(events: int, rounds: int) -> None:
    default = BookingConfig.from_env(Env({})).seat_gauge_sections
    async with private_database() as url:
        await db.migrate(url, booking_app.migrations())
        async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
            await fill(conn, events)
            (sections,) = await (await conn.execute(b"SELECT count(*) FROM sections")).fetchone() or (0,)
        pool = db.create_pool(url, min_size=1, max_size=2, name="bench-gauges")
        await pool.open()
        try:
            store = booking_app.build_store(pool, BookingConfig.from_env(Env({})))
            clock = ManualClock((START - timedelta(days=1)).timestamp())
            print(f"{events:,} events, {sections:,} sections; {rounds} refreshes at each bound, each on fresh gauges")
            print(f"{'series of':<34} {'refresh s (median)':>19} {'longest stall ms (median)':>26}")
            for label, bound in (("every section (baseline)", sections), (f"{default:,} sections (default)", default)):
                took: list[float] = []
                stalled: list[float] = []
                for _ in range(rounds):
                    metrics = BookingMetrics.create(CollectorRegistry())
                    gauges = SeatGauges(store, metrics, clock, interval_seconds=5, sections=bound)
                    seconds, stall = await _measure(gauges)
                    took.append(seconds)
                    stalled.append(stall)
                print(f"{label:<34} {statistics.median(took):>19.3f} {statistics.median(stalled) * 1000:>26.1f}")
        finally:
            await pool.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=100_000, help="events of the catalogue (two sections each)")
    parser.add_argument("--rounds", type=int, default=3, help="refreshes at each bound")
    args = parser.parse_args()
    asyncio.run(_main(args.events, args.rounds))


if __name__ == "__main__":
    main()
