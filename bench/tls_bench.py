"""What mutual TLS costs: JoinQueue and HoldSeats against servers with mTLS
on (the default: every call over TLS 1.3 with client certificates, the
caller read from the peer's certificate) and off (a sidecar's mTLS: plaintext
here, the caller read from the ``x-forwarded-client-cert`` header the client
sends as a sidecar would), in the same run, in interleaved rounds (goal: on
is at least 0.9 of off).

Four server processes run side by side, each idle while the others are
measured: QueueService and BookingService, each with mTLS on and off, on one
database and one private Redis. Each round measures all four, in an order
that alternates between rounds; the median round of each is reported.

Run: ``python -m bench.tls_bench [--seconds 4] [--rounds 5] [--concurrency 64]``
Postgres: ``BOXOFFICE_BENCH_DATABASE_URL``, else the local server (as
postgres), else an embedded one; the bench creates and drops its own
database and starts its own Redis.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import secrets
import statistics
import time
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

from bench.booking_bench import admin_database, bench_database, seed_hold_event
from bench.common import (
    LoadFigures,
    Row,
    ServerProcess,
    channel,
    closed_loop,
    report,
    server_process,
    tls_env,
    xfcc_metadata,
)
from bench.queue_common import create_event, event, private_redis, queue_app
from booking_svc import app as booking_app
from boxoffice import access, caller, db
from boxoffice.clock import SystemClock
from boxoffice.tokens import TokenSigner
from gen.boxoffice.booking.v1 import booking_service_pb2 as bpb
from gen.boxoffice.booking.v1 import booking_service_pb2_grpc as bpb_grpc
from gen.boxoffice.queue.v1 import queue_service_pb2 as qpb
from gen.boxoffice.queue.v1 import queue_service_pb2_grpc as qpb_grpc
from queue_svc import app as queue_app_module

HOLD_EVENT = 1
# The servers and the bench sign and verify with this key, not the development one.
TOKEN_KEY = f"bench:{secrets.token_hex(24)}"


@contextlib.contextmanager
def _server(command: str, role: str, env: dict[str, str], *, tls: bool) -> Iterator[ServerProcess]:
    with server_process(["-m", "bench.serve", command], env={**env, **tls_env(role, tls=tls)}) as server:
        yield server


def _metadata(tls: bool, customer: str) -> tuple[tuple[str, str], ...]:
    asserted = ((caller.CUSTOMER_METADATA_KEY, customer),)
    return asserted if tls else (*xfcc_metadata(access.EDGE), *asserted)


async def _main(concurrency: int, seconds: float, rounds: int, seats: int) -> None:
    signer = TokenSigner({"bench": TOKEN_KEY.split(":", 1)[1].encode()}, "bench", SystemClock())
    figures: dict[str, list[LoadFigures]] = {}
    with admin_database() as admin, bench_database(admin) as url, private_redis() as (redis_url, _):
        await db.migrate(url, [*queue_app_module.migrations(), *booking_app.migrations()])
        await seed_hold_event(url, HOLD_EVENT, seats, display_name="tls bench")
        join_event = 1 + secrets.randbelow(2**40)
        async with queue_app(url, redis_url) as queue:
            await create_event(queue, event(join_event, opens_at_ms=int(time.time() * 1000)))
        env = {"DATABASE_URL": url, "REDIS_URL": redis_url, "BOXOFFICE_TOKEN_KEYS": TOKEN_KEY}
        with (
            _server("queue-svc", access.QUEUE, env, tls=True) as queue_on,
            _server("queue-svc", access.QUEUE, env, tls=False) as queue_off,
            _server("booking-svc", access.BOOKING, env, tls=True) as booking_on,
            _server("booking-svc", access.BOOKING, env, tls=False) as booking_off,
        ):
            async with (
                channel(queue_on.address) as queue_on_channel,
                channel(queue_off.address, tls=False) as queue_off_channel,
                channel(booking_on.address) as booking_on_channel,
                channel(booking_off.address, tls=False) as booking_off_channel,
            ):
                run = secrets.token_hex(3)
                seat_ids = itertools.count(1)

                def join(stub: Any, tls: bool) -> Callable[[int], Awaitable[object]]:
                    def call(n: int) -> Awaitable[object]:
                        customer = f"fan-{run}-{tls}-{n}"
                        request = qpb.JoinQueueRequest(event_id=join_event, customer_id=customer)
                        return stub.JoinQueue(request, metadata=_metadata(tls, customer), timeout=10)  # type: ignore[no-any-return]

                    return call

                def hold(stub: Any, tls: bool) -> Callable[[int], Awaitable[object]]:
                    def call(n: int) -> Awaitable[object]:
                        seat = next(seat_ids)
                        customer = f"holder-{seat}"
                        token, _ = signer.issue(event_id=HOLD_EVENT, customer_id=customer, ttl_seconds=3600)
                        request = bpb.HoldSeatsRequest(
                            access_token=token, event_id=HOLD_EVENT, seats=bpb.SeatSelection(seat_ids=[seat])
                        )
                        return stub.HoldSeats(request, metadata=_metadata(tls, customer), timeout=10)  # type: ignore[no-any-return]

                    return call

                measures = {
                    "join on": join(qpb_grpc.QueueServiceStub(queue_on_channel), True),
                    "join off": join(qpb_grpc.QueueServiceStub(queue_off_channel), False),
                    "hold on": hold(bpb_grpc.BookingServiceStub(booking_on_channel), True),
                    "hold off": hold(bpb_grpc.BookingServiceStub(booking_off_channel), False),
                }
                pids = {
                    "join on": queue_on.pid,
                    "join off": queue_off.pid,
                    "hold on": booking_on.pid,
                    "hold off": booking_off.pid,
                }
                for i in range(rounds):
                    # Interleaved, each pair in alternating order, so that both
                    # sides of a ratio see the same machine.
                    order = ["join on", "join off", "hold on", "hold off"]
                    if i % 2:
                        order = ["join off", "join on", "hold off", "hold on"]
                    for name in order:
                        result = await closed_loop(
                            measures[name], concurrency=concurrency, seconds=seconds, server_pid=pids[name]
                        )
                        figures.setdefault(name, []).append(result)

    def median(name: str) -> LoadFigures:
        return sorted(figures[name], key=lambda f: f.rps)[len(figures[name]) // 2]

    def ratios(kind: str) -> str:
        pairs = zip(figures[f"{kind} on"], figures[f"{kind} off"], strict=True)
        return " ".join(f"{on.rps / off.rps:.2f}" for on, off in pairs if off.rps)

    rows: list[Row] = []
    for kind, label in (("join", "JoinQueue"), ("hold", "HoldSeats")):
        on, off = median(f"{kind} on"), median(f"{kind} off")
        rows += [
            Row(f"{label} req/s, mTLS on (baseline: off)", on.rps, "/s", off.rps, f">= 0.9; rounds {ratios(kind)}"),
            Row(
                f"{label} server CPU per call, on (baseline: off)",
                statistics.median(f.server_cpu_us for f in figures[f"{kind} on"]),
                "us",
                statistics.median(f.server_cpu_us for f in figures[f"{kind} off"]),
                better="lower",
            ),
            Row(f"{label} p50 latency, on (baseline: off)", on.p50_ms, "ms", off.p50_ms, better="lower"),
            Row(f"{label} p99 latency, on (baseline: off)", on.p99_ms, "ms", off.p99_ms, better="lower"),
            Row(
                f"{label} errors, all rounds, on (baseline: off)",
                sum(f.errors for f in figures[f"{kind} on"]),
                "",
                sum(f.errors for f in figures[f"{kind} off"]),
                "goal 0",
                better="lower",
            ),
        ]
    report(
        f"mTLS on vs off, one server process each, one Python client, {concurrency} concurrent calls,"
        f" median of {rounds} interleaved rounds of {seconds:g} s",
        rows,
    )


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.tls_bench", description=__doc__)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--seconds", type=float, default=4.0)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--seats", type=int, default=200_000, help="seats of the HoldSeats event (one per call)")
    args = parser.parse_args()
    asyncio.run(_main(args.concurrency, args.seconds, args.rounds, args.seats))


if __name__ == "__main__":
    main()
