"""BookingService throughput, each figure next to a baseline measured in the
same run (on a shared 2-core machine only ratios within one run mean much).

1. HoldSeats req/s of one server process (explicit seats, mostly free) vs
   the bare grpc.aio echo (goal >= 0.7), and vs pgbench running the same
   conditional UPDATE straight against Postgres (reported).
2. Holds all on one section (one hot counter row) vs spread over 16
   sections (goal >= 0.8).
3. Best available under contention (64 callers on one section) with the
   partial index on available seats, then with the primary key only, each
   next to explicit-seat holds.
4. ConfirmHold of general-admission holds (one counter row, as a standing
   floor or a fare class has): on the fresh database, before anything else
   runs, and again at the end, after every other measure and ``--more-holds``
   further holds in the same section. Each figure is a fixed number of
   holds (``--confirms``) made, then confirmed, by ``--concurrency``
   callers; the rate of making them is reported too (HoldSeats in one
   general-admission section, fresh and with many holds).

The measures run in interleaved rounds and the median round is reported, so
that load from elsewhere on the machine falls on all of them alike.

Run: ``python -m bench.booking_bench [--seconds 5] [--rounds 3] [--concurrency 64]
[--confirms 4000] [--more-holds 10000]``
Postgres: ``BOXOFFICE_BENCH_DATABASE_URL``, else the local server (as
postgres), else an embedded one; the bench creates and drops its own
database. pgbench is skipped with a note when it is not installed.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import os
import re
import secrets
import shutil
import subprocess
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, cast
from urllib.parse import urlsplit, urlunsplit

import grpc
import psycopg

from bench.common import (
    LoadFigures,
    MeshStub,
    Row,
    closed_loop,
    echo_call,
    echo_server,
    report,
    server_process,
)
from bench.queue_common import private_redis
from booking_svc import app
from booking_svc.config import BookingConfig
from booking_svc.model import EventKind, EventSpec, Money, RefundPolicy, RowSpec, SectionKind, SectionSpec
from boxoffice import db
from boxoffice.clock import SystemClock
from boxoffice.config import Env, TokenConfig
from boxoffice.embedded import EmbeddedPostgres
from boxoffice.tokens import TokenSigner
from gen.boxoffice.booking.v1 import booking_service_pb2 as pb
from gen.boxoffice.booking.v1 import booking_service_pb2_grpc as pb_grpc

if TYPE_CHECKING:
    from gen.boxoffice.booking.v1.booking_service_pb2_grpc import BookingServiceAsyncStub

SEATS_PER_ROW = 1000
HOLD_EVENT, ONE_SECTION_EVENT, SIXTEEN_EVENT, BEST_EVENT, BEST_PK_EVENT, PGBENCH_EVENT = 1, 2, 3, 4, 5, 6
CONFIRM_EVENT = 7


def _with_database(url: str, name: str) -> str:
    parts = urlsplit(url)
    return urlunsplit((parts.scheme, parts.netloc, f"/{name}", parts.query, parts.fragment))


@contextlib.contextmanager
def admin_database() -> Iterator[str]:
    """BOXOFFICE_BENCH_DATABASE_URL, else the local server, else an embedded
    Postgres (the pgserver wheel) for the length of the run."""
    configured = os.environ.get("BOXOFFICE_BENCH_DATABASE_URL")
    if configured:
        yield configured
        return
    local = "postgresql://postgres@127.0.0.1:5432/postgres"
    try:
        psycopg.connect(local, connect_timeout=2).close()
    except psycopg.OperationalError:
        pass
    else:
        yield local
        return
    with tempfile.TemporaryDirectory(prefix="boxoffice-bench-") as tmp:
        embedded = EmbeddedPostgres(Path(tmp))
        try:
            yield embedded.start()
        finally:
            embedded.stop()


@contextlib.contextmanager
def bench_database(admin_url: str) -> Iterator[str]:
    name = f"boxoffice_bench_{secrets.token_hex(4)}"
    with psycopg.connect(admin_url, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"'.encode())
    try:
        yield _with_database(admin_url, name)
    finally:
        with psycopg.connect(admin_url, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'.encode())


async def seed(url: str, seats_per_event: int) -> None:
    """The bench events: each with ``seats_per_event`` seats, in one section
    or sixteen, ids 1..n in order."""
    pool = db.create_pool(url, min_size=1, max_size=2, name="bench-seed")
    await pool.open()
    try:
        store = app.build_store(pool, BookingConfig.from_env(Env({})))
        starts = datetime.now(UTC) + timedelta(days=30)
        layouts = {
            HOLD_EVENT: 1,
            ONE_SECTION_EVENT: 1,
            SIXTEEN_EVENT: 16,
            BEST_EVENT: 1,
            BEST_PK_EVENT: 1,
            PGBENCH_EVENT: 1,
        }
        await store.create_event(
            EventSpec(
                event_id=CONFIRM_EVENT,
                display_name="bench confirms",
                kind=EventKind.CONCERT,
                starts_at=starts,
                hold_ttl_seconds=3600,
                max_seats_per_customer=4,
                refund_policy=RefundPolicy(None, 0),
                sections=(SectionSpec("GA", "GA", SectionKind.GENERAL_ADMISSION, 5_000_000, 0, Money("EUR", 5000)),),
            )
        )
        for event_id, sections in layouts.items():
            names = [f"S{i:02d}" for i in range(sections)]
            await store.create_event(
                EventSpec(
                    event_id=event_id,
                    display_name=f"bench {event_id}",
                    kind=EventKind.CONCERT,
                    starts_at=starts,
                    hold_ttl_seconds=3600,
                    max_seats_per_customer=4,
                    refund_policy=RefundPolicy(None, 0),
                    sections=tuple(SectionSpec(n, n, SectionKind.SEATED, 0, 0, Money("EUR", 5000)) for n in names),
                )
            )
            rows_per_section = max(1, seats_per_event // sections // SEATS_PER_ROW)
            rows = [RowSpec(n, f"R{r}", 1, SEATS_PER_ROW) for n in names for r in range(rows_per_section)]
            for start in range(0, len(rows), 50):
                await store.load_inventory(event_id, rows[start : start + 50])
        async with pool.connection() as conn:
            await conn.execute("VACUUM ANALYZE seats")
            await conn.execute("VACUUM ANALYZE sections")
    finally:
        await pool.close()


async def seed_hold_event(url: str, event_id: int, seats: int, *, display_name: str = "bench holds") -> None:
    """One event of ``seats`` free seats (ids 1..n) in one seated section
    ``S00``, on an already migrated database."""
    pool = db.create_pool(url, min_size=1, max_size=2, name="bench-seed")
    await pool.open()
    try:
        store = app.build_store(pool, BookingConfig.from_env(Env({})))
        await store.create_event(
            EventSpec(
                event_id=event_id,
                display_name=display_name,
                kind=EventKind.CONCERT,
                starts_at=datetime.now(UTC) + timedelta(days=30),
                hold_ttl_seconds=3600,
                max_seats_per_customer=4,
                refund_policy=RefundPolicy(None, 0),
                sections=(SectionSpec("S00", "S00", SectionKind.SEATED, 0, 0, Money("EUR", 5000)),),
            )
        )
        rows = [RowSpec("S00", f"R{r}", 1, SEATS_PER_ROW) for r in range(max(1, -(-seats // SEATS_PER_ROW)))]
        for start in range(0, len(rows), 50):
            await store.load_inventory(event_id, rows[start : start + 50])
        async with pool.connection() as conn:
            await conn.execute("VACUUM ANALYZE seats")
    finally:
        await pool.close()


class Holder:
    """Makes HoldSeats calls as distinct customers (tokens signed ahead)."""

    def __init__(self, stub: BookingServiceAsyncStub, signer: TokenSigner) -> None:
        self._stub = stub
        self._signer = signer
        self._tokens: dict[tuple[int, int], str] = {}

    def token(self, event_id: int, customer: int) -> str:
        key = (event_id, customer)
        token = self._tokens.get(key)
        if token is None:
            token, _ = self._signer.issue(event_id=event_id, customer_id=f"bench-{customer}", ttl_seconds=3600)
            self._tokens[key] = token
        return token

    async def seat(self, event_id: int, n: int, seat_id: int) -> None:
        request = pb.HoldSeatsRequest(
            access_token=self.token(event_id, n), event_id=event_id, seats=pb.SeatSelection(seat_ids=[seat_id])
        )
        await self._stub.HoldSeats(request, timeout=10)

    async def best(self, event_id: int, n: int, section_id: str) -> pb.Hold:
        request = pb.HoldSeatsRequest(
            access_token=self.token(event_id, n),
            event_id=event_id,
            best_available=pb.BestAvailableSelection(section_id=section_id, quantity=1),
        )
        hold: pb.Hold = (await self._stub.HoldSeats(request, timeout=10)).hold
        return hold

    async def confirm(self, hold: pb.Hold) -> None:
        await self._stub.ConfirmHold(
            pb.ConfirmHoldRequest(
                hold_id=hold.hold_id,
                idempotency_key=f"bench-{hold.hold_id}",
                payment_id=str(uuid.uuid4()),
                amount_paid=hold.amount,
            ),
            timeout=30,
        )


async def each(calls: Sequence[Callable[[], Awaitable[object]]], concurrency: int) -> LoadFigures:
    """Run every call once, ``concurrency`` at a time: the rate over the
    whole run (and latencies; failures counted, not raised)."""
    latencies: list[float] = []
    errors = 0
    cursor = 0

    async def worker() -> None:
        nonlocal cursor, errors
        while cursor < len(calls):
            index = cursor
            cursor += 1
            began = time.perf_counter()
            try:
                await calls[index]()
            except Exception:
                errors += 1
                continue
            latencies.append(time.perf_counter() - began)

    began = time.monotonic()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    elapsed = time.monotonic() - began
    latencies.sort()

    def pct(p: float) -> float:
        return latencies[min(len(latencies) - 1, int(p * len(latencies)))] * 1000 if latencies else 0.0

    return LoadFigures(len(latencies), errors, elapsed, pct(0.5), pct(0.99))


async def confirms(
    holder: Holder, customers: Iterator[int], count: int, concurrency: int
) -> tuple[LoadFigures, LoadFigures]:
    """``count`` general-admission holds made, then confirmed: the figures
    of both."""
    holds, held = await gather_holds(holder, customers, count, concurrency)

    def confirming(hold: pb.Hold) -> Callable[[], Awaitable[None]]:
        return lambda: holder.confirm(hold)

    return held, await each([confirming(h) for h in holds], concurrency)


async def gather_holds(
    holder: Holder, customers: Iterator[int], count: int, concurrency: int
) -> tuple[list[pb.Hold], LoadFigures]:
    made: list[pb.Hold] = []

    async def one(n: int) -> None:
        made.append(await holder.best(CONFIRM_EVENT, n, "GA"))

    def holding(n: int) -> Callable[[], Awaitable[None]]:
        return lambda: one(n)

    figures = await each([holding(next(customers)) for _ in range(count)], concurrency)
    if figures.errors:
        raise RuntimeError(f"{figures.errors} of {count} holds for the confirm measure failed")
    return made, figures


async def measure(
    call: Callable[[int], Awaitable[object]], concurrency: int, seconds: float, server_pid: int | None = None
) -> LoadFigures:
    return await closed_loop(call, concurrency=concurrency, seconds=seconds, warmup_seconds=1.0, server_pid=server_pid)


def pgbench(url: str, seats: int, seconds: float, clients: int) -> tuple[float | None, str]:
    """tx/s of pgbench running HoldSeats' conditional UPDATE on random,
    mostly free seats; None (and why) when pgbench is missing or fails."""
    exe = shutil.which("pgbench")
    if exe is None:
        return None, "pgbench not installed (apt-get install postgresql-client)"
    script = (
        f"\\set seat random(1, {seats})\n"
        "UPDATE seats SET status = 'HELD', hold_id = gen_random_uuid(), hold_expires_at = now() + interval '5 minutes'\n"
        f" WHERE event_id = {PGBENCH_EVENT} AND seat_id = :seat\n"
        "   AND (status = 'AVAILABLE' OR (status = 'HELD' AND hold_expires_at < now()));\n"
    )
    with tempfile.NamedTemporaryFile("w", suffix=".sql", delete=False) as handle:
        handle.write(script)
        path = handle.name
    try:
        done = subprocess.run(
            [
                exe,
                "-n",
                "-M",
                "prepared",
                "-c",
                str(clients),
                "-j",
                "2",
                "-T",
                str(max(1, int(seconds))),
                "-f",
                path,
                url,
            ],
            capture_output=True,
            text=True,
            timeout=seconds + 60,
        )
    finally:
        os.unlink(path)
    found = re.search(r"tps = ([0-9.]+)", done.stdout)
    if done.returncode != 0 or found is None:
        return None, f"pgbench failed: {done.stderr.strip()[:200]}"
    return float(found.group(1)), f"{clients} clients, -M prepared"


@contextlib.asynccontextmanager
async def booking_stub(url: str) -> AsyncIterator[tuple[BookingServiceAsyncStub, int]]:
    """A stub of a BookingService server process, and that process's pid."""
    # BookingService reads the waiting room's ended sessions from Redis.
    with (
        private_redis() as (redis_url, _),
        server_process(
            ["-m", "bench.serve", "booking-svc"], env={"DATABASE_URL": url, "REDIS_URL": redis_url}, role="booking"
        ) as server,
    ):
        async with MeshStub(server.address, pb_grpc.BookingServiceStub) as stub:
            yield cast("BookingServiceAsyncStub", stub), server.pid


async def holds_in_database(url: str) -> int:
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        cur = await conn.execute("SELECT count(*) FROM holds")
        row = await cur.fetchone()
    return int(row[0]) if row else 0


def _median(figures: list[LoadFigures]) -> LoadFigures:
    """The round with the median req/s (rounds interleave the measures, so
    that load from elsewhere on the machine hits them alike)."""
    return sorted(figures, key=lambda f: f.rps)[len(figures) // 2]


async def main(
    seconds: float, concurrency: int, seats_per_event: int, rounds: int, confirm_count: int, more_holds: int
) -> None:
    signer_config = TokenConfig.from_env(Env(os.environ))
    signer = TokenSigner(signer_config.keys, signer_config.active_kid, SystemClock())
    per_section = seats_per_event // 16
    figures: dict[str, list[LoadFigures]] = {}

    pids: dict[str, int] = {}

    async def run(name: str, call: Callable[[int], Awaitable[object]]) -> None:
        pid = pids["echo" if name == "echo" else "booking"]
        figures.setdefault(name, []).append(await measure(call, concurrency, seconds, pid))

    with admin_database() as admin, bench_database(admin) as url:
        await db.migrate(url, app.migrations())
        await seed(url, seats_per_event)
        with echo_server() as echo_proc:
            async with grpc.aio.insecure_channel(echo_proc.address) as channel, booking_stub(url) as (stub, pid):
                pids.update(echo=echo_proc.pid, booking=pid)
                echo = echo_call(channel)
                holder = Holder(stub, signer)
                # Every call takes a seat no call took before.
                next_seat = {event_id: itertools.count(1) for event_id in range(1, 7)}
                confirm_customers = itertools.count(1)
                held_fresh, confirm_fresh = await confirms(holder, confirm_customers, confirm_count, concurrency)

                def seat(event_id: int) -> Callable[[int], Awaitable[None]]:
                    def call(_: int) -> Awaitable[None]:
                        n = next(next_seat[event_id])
                        return holder.seat(event_id, n, n)

                    return call

                def spread(_: int) -> Awaitable[None]:
                    # Consecutive calls go to different sections.
                    n = next(next_seat[SIXTEEN_EVENT])
                    return holder.seat(SIXTEEN_EVENT, n, (n % 16) * per_section + n // 16 + 1)

                def best(event_id: int) -> Callable[[int], Awaitable[object]]:
                    def call(_: int) -> Awaitable[object]:
                        return holder.best(event_id, next(next_seat[event_id]), "S00")

                    return call

                for _ in range(rounds):
                    await run("echo", lambda n: echo(b"x" * 160))
                    await run("holds", seat(HOLD_EVENT))
                    await run("sixteen", spread)
                    await run("one", seat(ONE_SECTION_EVENT))
                    await run("best", best(BEST_EVENT))
                # The same contention with the primary key only, next to
                # explicit-seat holds (which the partial index does not help).
                async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
                    await conn.execute("DROP INDEX seats_available")
                for _ in range(rounds):
                    await run("holds_pk_phase", seat(HOLD_EVENT))
                    await run("best_pk", best(BEST_PK_EVENT))
                await gather_holds(holder, confirm_customers, more_holds, concurrency)
                held_many, confirm_many = await confirms(holder, confirm_customers, confirm_count, concurrency)
                holds_made = await holds_in_database(url)
        tps, note = pgbench(url, seats_per_event, seconds, clients=8)

    m = {name: _median(values) for name, values in figures.items()}
    errors = {name: sum(f.errors for f in values) for name, values in figures.items()}
    report(
        f"HoldSeats, one server process, {concurrency} concurrent calls from one client process "
        f"(median of {rounds} interleaved rounds of {seconds:g} s)",
        [
            Row("bare grpc.aio echo req/s (baseline)", m["echo"].rps, "/s"),
            Row("HoldSeats req/s, explicit free seats", m["holds"].rps, "/s", m["echo"].rps, ">= 0.7 of echo"),
            Row("HoldSeats p50 latency", m["holds"].p50_ms, "ms", m["echo"].p50_ms, better="lower"),
            Row("HoldSeats p99 latency", m["holds"].p99_ms, "ms", m["echo"].p99_ms, better="lower"),
            Row(
                "server CPU per HoldSeats (baseline: per echo)",
                m["holds"].server_cpu_us,
                "us",
                m["echo"].server_cpu_us,
                "bench.cpu_per_call: <= 1.4 over mTLS",
                better="lower",
            ),
            Row("HoldSeats errors", errors["holds"], ""),
        ]
        + (
            [Row("pgbench, the same conditional UPDATE, tx/s", tps, "/s", m["holds"].rps, f"reported ({note})")]
            if tps is not None
            else []
        ),
    )
    if tps is None:
        print(f"  pgbench skipped: {note}")
    report(
        "one hot section vs holds spread over 16 sections (each section counts in 16 stripes)",
        [
            Row("HoldSeats req/s over 16 sections (baseline)", m["sixteen"].rps, "/s"),
            Row("HoldSeats req/s all on one section", m["one"].rps, "/s", m["sixteen"].rps, ">= 0.8 of 16"),
            Row("errors (one + sixteen)", errors["one"] + errors["sixteen"], ""),
        ],
    )
    report(
        f"best available under contention: {concurrency} callers on one section",
        [
            Row("explicit-seat holds req/s (baseline)", m["holds"].rps, "/s"),
            Row("best available req/s, partial index on free seats", m["best"].rps, "/s", m["holds"].rps),
            Row("explicit-seat holds req/s, second phase (baseline)", m["holds_pk_phase"].rps, "/s"),
            Row(
                "best available req/s, primary key only",
                m["best_pk"].rps,
                "/s",
                m["holds_pk_phase"].rps,
                "below the partial index's ratio",
            ),
            Row("best available errors (partial + pk)", errors["best"] + errors["best_pk"], ""),
        ],
    )
    report(
        f"ConfirmHold of general-admission holds, {confirm_count} confirms by {concurrency} callers each",
        [
            Row("ConfirmHold/s on the fresh database (baseline)", confirm_fresh.rps, "/s"),
            Row(
                f"ConfirmHold/s with {holds_made:,} holds in the database",
                confirm_many.rps,
                "/s",
                confirm_fresh.rps,
                "no slower with more data",
            ),
            Row("ConfirmHold p50 latency, fresh", confirm_fresh.p50_ms, "ms"),
            Row("ConfirmHold p50 latency, many holds", confirm_many.p50_ms, "ms", confirm_fresh.p50_ms, better="lower"),
            Row("ConfirmHold errors (fresh + many)", confirm_fresh.errors + confirm_many.errors, ""),
            Row("HoldSeats/s of those holds, fresh (baseline)", held_fresh.rps, "/s"),
            Row(
                "HoldSeats/s of those holds, many holds",
                held_many.rps,
                "/s",
                held_fresh.rps,
                "no slower with more data",
            ),
        ],
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--seats", type=int, default=96_000, help="seats per bench event")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds; medians are reported")
    parser.add_argument("--confirms", type=int, default=4000, help="holds confirmed for each ConfirmHold figure")
    parser.add_argument(
        "--more-holds", type=int, default=10_000, help="holds added to the confirm section before the second figure"
    )
    args = parser.parse_args()
    asyncio.run(main(args.seconds, args.concurrency, args.seats, args.rounds, args.confirms, args.more_holds))
