"""Check-in at the door: online scans per second, and a device's offline
verification per code.

- Online, over gRPC: one real check-in process (``python -m bench.serve
  checkin``, as ``boxoffice checkin`` composes it: mTLS, a gate device's key
  in the metadata, the events' settings) scanned by a closed loop as the
  edge, every scan a ticket not scanned before; once with the role's pool
  budget (one Postgres connection), once with a pool of half the
  concurrency. Then the door's handler and its store alone in this process
  (no wire). The baseline is pgbench running the same statement (by ticket
  id, prepared) in the same run.
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
from collections.abc import Callable, Iterator
from datetime import UTC, datetime

import jwt
import psycopg
from prometheus_client import CollectorRegistry

from bench.booking_bench import admin_database, bench_database
from bench.common import LoadFigures, Row, channel, closed_loop, report, server_process
from boxoffice import access, db, ticketcodes
from boxoffice.clock import SystemClock
from boxoffice.config import POOL_BUDGETS
from boxoffice.ticketcodes import TicketClaims, TicketCodeSigner, TicketCodeVerifier
from checkin_svc.adapters import postgres as checkin_store
from checkin_svc.adapters.postgres import PgCheckInStore
from checkin_svc.gate import DEVICE_KEY_METADATA_KEY
from checkin_svc.handler import CheckInHandler
from checkin_svc.metrics import CheckInMetrics
from checkin_svc.model import Scan, ScanResult
from gen.boxoffice.checkin.v1 import checkin_service_pb2 as pb
from gen.boxoffice.checkin.v1 import checkin_service_pb2_grpc as pb_grpc
from tests.checkin.harness import EventsAllowing
from tests.support import all_migrations

EVENT = 1
KEYS_TEXT = "bench:" + "be" * 32
KEYS = ticketcodes.parse_keys(KEYS_TEXT)


def _seed(url: str, tickets: int) -> None:
    """EVENT, a flight (its boarding passes are static codes, which it
    admits), and ``tickets`` tickets of it, ticket n's id md5(n)::uuid."""
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(
            """
            INSERT INTO events (event_id, display_name, kind, starts_at, hold_ttl_seconds, max_seats_per_customer)
            VALUES (%s, 'Bench flight', 'FLIGHT', now() + interval '1 day', 600, 4)
            """,
            (EVENT,),
        )
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


async def _over_grpc(url: str, codes: Iterator[str], pool_size: int, seconds: float, concurrency: int) -> LoadFigures:
    """Scans of ``codes`` (each ADMITTED) by ``concurrency`` callers, as the
    edge with a gate device's key, against one check-in process whose pool
    holds ``pool_size`` connections."""
    env = {
        "DATABASE_URL": url,
        "BOXOFFICE_CHECKIN_KEYS": KEYS_TEXT,
        "BOXOFFICE_DB_POOL_MIN": "1",
        "BOXOFFICE_DB_POOL_MAX": str(pool_size),
    }
    with server_process(["-m", "bench.serve", "checkin"], env=env, role=access.CHECKIN) as server:
        async with channel(server.address, access.OPERATOR) as operator, channel(server.address) as edge:
            made = await pb_grpc.CheckInAdminServiceStub(operator).CreateGateDevice(
                pb.CreateGateDeviceRequest(event_id=EVENT, name="Bench gate")
            )
            door = pb_grpc.CheckInServiceStub(edge)
            metadata = ((DEVICE_KEY_METADATA_KEY, made.key),)

            async def scan(_: int) -> None:
                answer = await door.Scan(
                    pb.ScanRequest(event_id=EVENT, code=next(codes), gate_id="g"), metadata=metadata, timeout=10
                )
                if answer.result != pb.SCAN_RESULT_ADMITTED:
                    raise RuntimeError(pb.ScanResult.Name(answer.result))

            return await closed_loop(scan, concurrency=concurrency, seconds=seconds, server_pid=server.pid)


def _per_code_us(check: Callable[[str], object], codes: list[str]) -> float:
    began = time.perf_counter()
    for code in codes:
        check(code)
    return (time.perf_counter() - began) / len(codes) * 1e6


async def main(seconds: float, concurrency: int, tickets: int) -> None:
    clock = SystemClock()
    signer = TicketCodeSigner(lambda: KEYS, clock)
    verifier = TicketCodeVerifier(KEYS.public, clock)
    # A quarter of the tickets for each online run, the last for pgbench.
    quarter = tickets // 4
    with admin_database() as admin, bench_database(admin) as url:
        await db.migrate(url, all_migrations())
        _seed(url, tickets)
        now = signer.now()
        ids = _ticket_ids(url, 1, 3 * quarter)
        every = [signer.sign(TicketClaims(i, EVENT, "A", f"seat {n}", now)) for n, i in enumerate(ids, 1)]
        budget = POOL_BUDGETS["checkin-server"][1]
        grpc_budget = await _over_grpc(url, iter(every[:quarter]), budget, seconds, concurrency)
        grpc_pool = await _over_grpc(url, iter(every[quarter : 2 * quarter]), concurrency // 2, seconds, concurrency)
        codes = every[2 * quarter :]
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
        base, how = _pgbench(url, 3 * quarter + 1, tickets, seconds, concurrency // 2)

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
        Row(
            f"online scans/s over gRPC, one process, pool {budget} (its budget)",
            grpc_budget.rps,
            "/s",
            base,
            f"vs pgbench: {how}",
        ),
        Row("  its p99", grpc_budget.p99_ms, "ms", None, f"{grpc_budget.errors} errors", better="lower"),
        Row(
            f"online scans/s over gRPC, one process, pool {concurrency // 2}",
            grpc_pool.rps,
            "/s",
            base,
            f"vs pgbench: {how}",
        ),
        Row("  its p99", grpc_pool.p99_ms, "ms", None, f"{grpc_pool.errors} errors", better="lower"),
        Row(
            "online scans/s (handler + Postgres in this process, no wire)", online.rps, "/s", base, f"vs pgbench: {how}"
        ),
        Row("  its p99", online.p99_ms, "ms", None, f"{online.errors} errors", better="lower"),
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
