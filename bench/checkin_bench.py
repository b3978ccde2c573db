"""Check-in at the door: online scans per second, and a device's offline
verification per code.

- Online: the door's handler (signature check, then the one statement that
  admits a ticket once) in this process against Postgres, every scan a
  ticket not scanned before; the baseline is pgbench running the same
  statement (by ticket id, prepared) in the same run. CheckInService is not
  a gRPC process yet, so this is the handler and its store, without the wire.
- Offline: verifying one code with the public key alone (EdDSA, as a gate
  device does); the baseline is PyJWT verifying an HS256 token of the same
  claims (a shared-secret code a device could not be trusted with).

Run: ``python -m bench.checkin_bench [--seconds 5] [--concurrency 32] [--tickets 100000]``
Postgres: ``BOXOFFICE_BENCH_DATABASE_URL``, else the local server, else an
embedded one; the bench creates and drops its own database.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import os
import re
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime

import jwt
import psycopg
from prometheus_client import CollectorRegistry

from bench.booking_bench import admin_database, bench_database
from bench.common import Row, closed_loop, report
from boxoffice import db, ticketcodes
from boxoffice.clock import SystemClock
from boxoffice.ticketcodes import TicketClaims, TicketCodeSigner, TicketCodeVerifier
from checkin_svc.adapters import postgres as checkin_store
from checkin_svc.adapters.postgres import PgCheckInStore
from checkin_svc.handler import CheckInHandler
from checkin_svc.metrics import CheckInMetrics
from checkin_svc.model import Scan, ScanResult
from tests.checkin.harness import EventsAllowing
from tests.support import all_migrations

EVENT = 1
KEYS = ticketcodes.parse_keys("bench:" + "be" * 32)


def _seed(url: str, tickets: int) -> None:
    """``tickets`` tickets of EVENT, ticket n's id md5(n)::uuid."""
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(
            """
            INSERT INTO tickets (ticket_id, event_id, hold_id, unit, customer_id, section_id, seat_label,
                                 source_event_id, code)
            SELECT md5(n::text)::uuid, %s, gen_random_uuid(), 1, 'fan-' || n, 'A', 'seat ' || n,
                   gen_random_uuid(), 'bench-' || n
              FROM generate_series(1, %s::int) AS n
            """,
            (EVENT, tickets),
        )


def _ticket_ids(url: str, first: int, last: int) -> list[str]:
    with psycopg.connect(url) as conn:
        rows = conn.execute(
            "SELECT md5(n::text)::uuid::text FROM generate_series(%s::int, %s::int) AS n ORDER BY n", (first, last)
        ).fetchall()
    return [str(row[0]) for row in rows]


def _pgbench(url: str, first: int, last: int, seconds: float, clients: int) -> tuple[float | None, str]:
    exe = shutil.which("pgbench")
    if exe is None:
        return None, "pgbench not installed"
    statement = checkin_store._BY_ID.replace("%(ticket)s", "md5(:n::text)")
    statement = statement.replace("%(event)s", str(EVENT)).replace("%(gate)s", "'g'").replace("%(device)s", "'d'")
    statement = statement.replace("%(at)s", "now()")
    script = f"\\set n random({first}, {last})\n" + " ".join(statement.split()) + ";\n"
    with tempfile.NamedTemporaryFile("w", suffix=".sql", delete=False) as handle:
        handle.write(script)
        path = handle.name
    try:
        args = [exe, "-n", "-M", "prepared", "-c", str(clients), "-j", "2", "-T", str(max(1, int(seconds)))]
        done = subprocess.run([*args, "-f", path, url], capture_output=True, text=True, timeout=seconds + 60)
    finally:
        os.unlink(path)
    found = re.search(r"tps = ([0-9.]+)", done.stdout)
    if done.returncode != 0 or found is None:
        return None, f"pgbench failed: {done.stderr.strip()[:200]}"
    return float(found.group(1)), f"{clients} clients, -M prepared"


def _per_code_us(check: Callable[[str], object], codes: list[str]) -> float:
    began = time.perf_counter()
    for code in codes:
        check(code)
    return (time.perf_counter() - began) / len(codes) * 1e6


async def main(seconds: float, concurrency: int, tickets: int) -> None:
    clock = SystemClock()
    signer = TicketCodeSigner(lambda: KEYS, clock)
    verifier = TicketCodeVerifier(KEYS.public, clock)
    half = tickets // 2
    with admin_database() as admin, bench_database(admin) as url:
        await db.migrate(url, all_migrations())
        _seed(url, tickets)
        ids = _ticket_ids(url, 1, half)
        now = signer.now()
        codes = [signer.sign(TicketClaims(i, EVENT, "A", f"seat {n}", now)) for n, i in enumerate(ids, 1)]
        pool = db.create_pool(url, min_size=concurrency // 2, max_size=concurrency // 2, name="bench-checkin")
        await pool.open(wait=True)
        try:
            metrics = CheckInMetrics.create(CollectorRegistry())
            handler = CheckInHandler(
                PgCheckInStore(pool), verifier, clock, EventsAllowing(), metrics, EventsAllowing(set())
            )
            unused = iter(codes)
            admitted = itertools.count()

            async def scan(_: int) -> None:
                outcome = await handler.scan(Scan(EVENT, next(unused), "g", "d", datetime.now(UTC)))
                if outcome.result is not ScanResult.ADMITTED:
                    raise RuntimeError(outcome.result.value)
                next(admitted)

            online = await closed_loop(scan, concurrency=concurrency, seconds=seconds)
        finally:
            await pool.close()
        base, how = _pgbench(url, half + 1, tickets, seconds, concurrency // 2)

    sample = codes[:5000]
    secret = b"bench-shared-secret-0123456789abcdef"
    hs = [jwt.encode({"sub": c.split(".")[0][:36], "ev": EVENT, "iat": now}, secret, algorithm="HS256") for c in sample]

    def eddsa(code: str) -> object:
        return verifier.verify(code)

    def hs256(token: str) -> object:
        return jwt.decode(token, secret, algorithms=["HS256"])

    offline = _per_code_us(eddsa, sample)
    baseline_offline = _per_code_us(hs256, hs)
    rows: list[Row] = [
        Row("online scans/s (handler + Postgres, each ADMITTED)", online.rps, "/s", base, f"vs pgbench: {how}"),
        Row("online scan p99", online.p99_ms, "ms", None, f"{online.errors} errors", better="lower"),
        Row("offline verify per code (EdDSA)", offline, "us", baseline_offline, "vs HS256 verify", better="lower"),
    ]
    report(f"check-in ({tickets:,} tickets, {concurrency} concurrent scans, {seconds:.0f} s)", rows)
    print(f"  code length: {len(codes[0])} characters")


def run() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--tickets", type=int, default=100_000)
    args = parser.parse_args()
    asyncio.run(main(args.seconds, args.concurrency, args.tickets))


if __name__ == "__main__":
    run()
