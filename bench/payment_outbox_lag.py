"""Outbox-to-ticket lag: from a BookingConfirmed row's commit to its
tickets' commit, through `boxoffice relay` and `boxoffice issuer` running as
their own processes, each figure next to a baseline of the same run.

1. Lag at a trickle (baseline) vs lag under a steady load of confirmations.
2. A burst: how fast the relay and the issuer drain a backlog, in bookings
   per second, vs the rate at which the bench itself commits outbox rows.

Run: ``python -m bench.payment_outbox_lag [--rate 300] [--seconds 10] [--burst 5000]``
Postgres: ``BOXOFFICE_BENCH_DATABASE_URL`` (default the local server as
postgres; the bench creates and drops its own database); Redis:
``BOXOFFICE_BENCH_REDIS_URL`` (default database 12; the bench uses a stream
of its own).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager

from bench.common import Row, report
from bench.payment_bench import bench_database
from booking_svc import app as booking_app
from boxoffice import db
from boxoffice.runtime import Pool
from payment_svc import app as payment_app

EVENT_ID = 7


@contextmanager
def processes(env: dict[str, str]) -> Iterator[None]:
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "boxoffice_cli", command],
            env={**os.environ, **env},
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for command in ("relay", "issuer")
    ]
    try:
        yield
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()


class Writer:
    """Commits BookingConfirmed outbox rows as booking does, one per
    transaction, two seats each."""

    def __init__(self, pool: Pool) -> None:
        self._pool = pool
        self._next_seat = 1

    async def confirm(self, tag: str) -> None:
        hold_id = str(uuid.uuid4())
        seats = [{"seat_id": self._next_seat, "label": "s"}, {"seat_id": self._next_seat + 1, "label": "s"}]
        self._next_seat += 2
        payload = {
            "event_id": EVENT_ID,
            "hold_id": hold_id,
            "customer_id": tag,
            "section_id": "A",
            "seats": seats,
            "quantity": 2,
            "payment_id": str(uuid.uuid4()),
            "amount_minor": 100,
            "currency": "EUR",
        }
        async with db.transaction(self._pool) as conn:
            await conn.execute(
                "INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload) "
                "VALUES (%s, 'booking', %s, 'BookingConfirmed', %s)",
                (str(uuid.uuid4()), hold_id, json.dumps(payload)),
            )

    async def steady(self, tag: str, rate: float, seconds: float) -> int:
        """Rows at ``rate`` per second for ``seconds``; the count written."""
        began = time.monotonic()
        written = 0
        while (elapsed := time.monotonic() - began) < seconds:
            due = int(elapsed * rate) + 1
            while written < due:
                await self.confirm(tag)
                written += 1
            await asyncio.sleep(max(0.0, (written / rate) - (time.monotonic() - began)))
        return written


async def _lag(pool: Pool, tag: str) -> tuple[int, float, float, float]:
    """(bookings ticketed, p50, p99, max lag in ms) of the rows tagged ``tag``."""
    async with db.transaction(pool, default_seconds=60) as conn:
        cur = await conn.execute(
            """
            SELECT count(*),
                   percentile_cont(0.5) WITHIN GROUP (ORDER BY lag),
                   percentile_cont(0.99) WITHIN GROUP (ORDER BY lag),
                   max(lag)
              FROM (SELECT extract(epoch FROM min(t.issued_at) - o.created_at) * 1000 AS lag
                      FROM outbox o JOIN tickets t ON t.source_event_id = o.id
                     WHERE o.payload->>'customer_id' = %s
                     GROUP BY o.id, o.created_at) per_booking
            """,
            (tag,),
        )
        row = await cur.fetchone()
    assert row is not None
    return int(row[0]), float(row[1] or 0), float(row[2] or 0), float(row[3] or 0)


async def _wait_ticketed(pool: Pool, tag: str, expected: int, timeout_seconds: float = 300) -> float:
    """Seconds until every row tagged ``tag`` has its tickets."""
    began = time.monotonic()
    while time.monotonic() - began < timeout_seconds:
        done, *_ = await _lag(pool, tag)
        if done >= expected:
            return time.monotonic() - began
        await asyncio.sleep(0.05)
    raise RuntimeError(f"{tag}: tickets did not catch up within {timeout_seconds} s")


async def main(rate: float, seconds: float, burst: int) -> None:
    admin = os.environ.get("BOXOFFICE_BENCH_DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/postgres")
    redis_url = os.environ.get("BOXOFFICE_BENCH_REDIS_URL", "redis://127.0.0.1:6379/12")
    with bench_database(admin) as url:
        await db.migrate(url, [*booking_app.migrations(), *payment_app.migrations()])
        env = {
            "DATABASE_URL": url,
            "REDIS_URL": redis_url,
            "BOXOFFICE_TICKET_STREAM": f"ticket-issued-bench-{uuid.uuid4().hex[:8]}",
            "BOXOFFICE_METRICS_PORT": "0",
            "BOXOFFICE_LOG_LEVEL": "warning",
        }
        pool = db.create_pool(url, min_size=2, max_size=8, name="bench-writer")
        await pool.open()
        try:
            writer = Writer(pool)
            with processes(env):
                await writer.confirm("warmup")
                await _wait_ticketed(pool, "warmup", 1, timeout_seconds=60)
                trickle_rows = await writer.steady("trickle", 10, min(seconds, 5))
                await _wait_ticketed(pool, "trickle", trickle_rows)
                loaded_rows = await writer.steady("load", rate, seconds)
                await _wait_ticketed(pool, "load", loaded_rows)
                # A backlog: written with the relay and issuer running, as fast as
                # the bench can commit; then drained.
                began = time.monotonic()
                for start in range(0, burst, 50):
                    await asyncio.gather(*(writer.confirm("burst") for _ in range(min(50, burst - start))))
                write_seconds = time.monotonic() - began
                drain_seconds = write_seconds + await _wait_ticketed(pool, "burst", burst)
            trickle = await _lag(pool, "trickle")
            loaded = await _lag(pool, "load")
        finally:
            await pool.close()
    report(
        "outbox -> relay -> Redis Stream -> issuer -> tickets, one relay and one issuer process",
        [
            Row("lag p50 at 10 bookings/s (baseline)", trickle[1], "ms", better="lower"),
            Row(f"lag p50 at {rate:g} bookings/s", loaded[1], "ms", trickle[1], "<= 3x trickle", better="lower"),
            Row("lag p99 at 10 bookings/s (baseline)", trickle[2], "ms", better="lower"),
            Row(f"lag p99 at {rate:g} bookings/s", loaded[2], "ms", trickle[2], "reported", better="lower"),
            Row(f"lag max at {rate:g} bookings/s", loaded[3], "ms", better="lower"),
            Row(f"steady load achieved, bookings/s ({loaded_rows} rows)", loaded_rows / seconds, "/s"),
            Row("bench commits outbox rows, rows/s (baseline)", burst / write_seconds, "/s"),
            Row(
                f"backlog of {burst} drained to tickets, bookings/s",
                burst / drain_seconds,
                "/s",
                burst / write_seconds,
                "reported",
            ),
        ],
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--rate", type=float, default=300.0, help="bookings per second of the steady load")
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--burst", type=int, default=5000)
    args = parser.parse_args()
    asyncio.run(main(args.rate, args.seconds, args.burst))
