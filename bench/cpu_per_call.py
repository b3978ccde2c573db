"""Server CPU per call: JoinQueue and HoldSeats next to a bare grpc.aio
echo's, on each event loop.

CPU per call (the server process's user + system time over the calls it
answered) is the steady figure on a shared machine: requests per second swing
with whatever else runs, the CPU a call costs much less. Every server runs in
its own process and stays up for the whole run; the rounds interleave them,
so that load from elsewhere falls on all alike, and the medians are reported.

- echo, plaintext: the bare baseline of the other benchmarks;
- echo over mutual TLS, with a mesh certificate: the same transport as the
  services (TLS is paid per byte and per record by both), the baseline the
  goals are set against;
- JoinQueue (a new fan every call: the join script in Redis) and HoldSeats
  (one free seat every call: the hold statement in Postgres), each on
  asyncio's loop and on uvloop.

Run: ``python -m bench.cpu_per_call [--rounds 5] [--seconds 3]
[--concurrency 64] [--loops uvloop,asyncio] [--seats 200000]`` (a private
redis-server and scratch databases on the local Postgres, or
``BOXOFFICE_BENCH_DATABASE_URL``'s server).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import os
import secrets
import statistics
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass

import grpc

from bench.booking_bench import admin_database, bench_database, seed_hold_event
from bench.common import Row, ServerProcess, channel, closed_loop, cpu_seconds, echo_call, echo_server, report
from bench.common import server_process as process_of
from bench.queue_common import create_event, event, private_redis, queue_app, queue_server
from booking_svc import app as booking_app
from boxoffice import access, caller, db, loops
from boxoffice.clock import SystemClock
from boxoffice.config import Env, TokenConfig
from boxoffice.tokens import TokenSigner
from gen.boxoffice.booking.v1 import booking_service_pb2 as booking_pb
from gen.boxoffice.booking.v1 import booking_service_pb2_grpc as booking_grpc
from gen.boxoffice.queue.v1 import queue_service_pb2 as queue_pb
from gen.boxoffice.queue.v1 import queue_service_pb2_grpc as queue_grpc
from queue_svc import app as queue_svc_app

HOLD_EVENT = 1
# The goals of issue 12 (CPU per call against echo's over the same transport).
GOALS = {"JoinQueue": 1.15, "HoldSeats": 1.4}


@dataclass(frozen=True)
class Sample:
    rps: float
    cpu_us: float
    errors: int


@dataclass
class Target:
    """A server under measure and how to call it."""

    name: str
    server: ServerProcess
    call: Callable[[int], Awaitable[object]]
    samples: list[Sample]


async def _sample(target: Target, concurrency: int, seconds: float) -> Sample:
    await closed_loop(target.call, concurrency=concurrency, seconds=0.5, warmup_seconds=0.0)
    began = cpu_seconds(target.server.pid)
    figures = await closed_loop(target.call, concurrency=concurrency, seconds=seconds, warmup_seconds=0.0)
    used = cpu_seconds(target.server.pid) - began
    return Sample(figures.rps, used / max(1, figures.calls) * 1e6, figures.errors)


@contextlib.asynccontextmanager
async def mesh_stores(seats: int) -> AsyncIterator[tuple[str, str, str, int]]:
    """Scratch stores for the services' benchmarks: (the queue's database,
    booking's database with :data:`HOLD_EVENT` of ``seats`` free seats, a
    private Redis, an open waiting room's event id)."""
    event_id = 1 + secrets.randbelow(2**40)
    with contextlib.ExitStack() as stack:
        admin = stack.enter_context(admin_database())
        queue_url = stack.enter_context(bench_database(admin))
        booking_url = stack.enter_context(bench_database(admin))
        redis_url, _ = stack.enter_context(private_redis())
        await db.migrate(queue_url, queue_svc_app.migrations())
        await db.migrate(booking_url, booking_app.migrations())
        await seed_hold_event(booking_url, HOLD_EVENT, seats)
        async with queue_app(queue_url, redis_url) as queue:
            await create_event(queue, event(event_id, opens_at_ms=int(time.time() * 1000)))
        yield queue_url, booking_url, redis_url, event_id


@contextlib.contextmanager
def _booking_server(url: str, redis_url: str, loop: str) -> Iterator[ServerProcess]:
    argv = ["-m", "bench.serve", "booking-svc", "--loop", loop]
    with process_of(argv, env={"DATABASE_URL": url, "REDIS_URL": redis_url}, role="booking") as server:
        yield server


@contextlib.asynccontextmanager
async def _targets(loop_names: list[str], seats: int) -> AsyncIterator[list[Target]]:
    signer_config = TokenConfig.from_env(Env(os.environ))
    signer = TokenSigner(signer_config.keys, signer_config.active_kid, SystemClock())
    seat_numbers = itertools.count(1)
    customers = itertools.count(1)
    run = secrets.token_hex(3)
    # A JoinQueueRequest of the size the calls send.
    join_payload = queue_pb.JoinQueueRequest(event_id=(1 << 40) - 1, customer_id="fan-0000000").SerializeToString()
    async with mesh_stores(seats) as found, contextlib.AsyncExitStack() as channels:
        with contextlib.ExitStack() as stack:
            queue_url, booking_url, redis_url, event_id = found
            targets: list[Target] = []

            async def dial(address: str, role: str | None) -> grpc.aio.Channel:
                chan = grpc.aio.insecure_channel(address) if role is None else channel(address, role)
                return await channels.enter_async_context(chan)

            plain = stack.enter_context(echo_server())
            echo = echo_call(await dial(plain.address, None))
            targets.append(Target("echo", plain, lambda n: echo(join_payload), []))
            secure = stack.enter_context(echo_server(tls_role="queue"))
            echo_tls = echo_call(await dial(secure.address, access.EDGE))
            targets.append(Target("echo-tls", secure, lambda n: echo_tls(join_payload), []))
            for loop in loop_names:
                queue_proc = stack.enter_context(queue_server(queue_url, redis_url, loop=loop))
                queue_stub = queue_grpc.QueueServiceStub(await dial(queue_proc.address, access.EDGE))

                def join(n: int, stub: queue_grpc.QueueServiceAsyncStub = queue_stub) -> Awaitable[object]:
                    fan = f"fan-{run}-{next(customers)}"
                    return stub.JoinQueue(
                        queue_pb.JoinQueueRequest(event_id=event_id), metadata=((caller.CUSTOMER_METADATA_KEY, fan),)
                    )

                targets.append(Target(f"JoinQueue/{loop}", queue_proc, join, []))
                booking_proc = stack.enter_context(_booking_server(booking_url, redis_url, loop))
                booking_stub = booking_grpc.BookingServiceStub(await dial(booking_proc.address, access.EDGE))

                def hold(n: int, stub: booking_grpc.BookingServiceAsyncStub = booking_stub) -> Awaitable[object]:
                    seat = next(seat_numbers)
                    token, _ = signer.issue(event_id=HOLD_EVENT, customer_id=f"bench-{run}-{seat}", ttl_seconds=3600)
                    return stub.HoldSeats(
                        booking_pb.HoldSeatsRequest(
                            access_token=token, event_id=HOLD_EVENT, seats=booking_pb.SeatSelection(seat_ids=[seat])
                        ),
                        timeout=10,
                    )

                targets.append(Target(f"HoldSeats/{loop}", booking_proc, hold, []))
            yield targets


async def _main(rounds: int, seconds: float, concurrency: int, loop_names: list[str], seats: int) -> None:
    async with _targets(loop_names, seats) as targets:
        for _ in range(rounds):
            for target in targets:
                target.samples.append(await _sample(target, concurrency, seconds))
    by_name = {t.name: t for t in targets}

    def cpu(name: str) -> float:
        return statistics.median(s.cpu_us for s in by_name[name].samples)

    def rps(name: str) -> float:
        return statistics.median(s.rps for s in by_name[name].samples)

    def per_round(name: str, base: str) -> str:
        pairs = zip(by_name[name].samples, by_name[base].samples, strict=True)
        return " ".join(f"{a.cpu_us / b.cpu_us:.2f}" for a, b in pairs)

    rows = [
        Row(
            "echo over mTLS, CPU per call (baseline: plaintext echo)",
            cpu("echo-tls"),
            "us",
            cpu("echo"),
            better="lower",
        )
    ]
    for loop in loop_names:
        for method in ("JoinQueue", "HoldSeats"):
            name = f"{method}/{loop}"
            rows += [
                Row(
                    f"{method} on {loop}, CPU per call (baseline: echo over mTLS)",
                    cpu(name),
                    "us",
                    cpu("echo-tls"),
                    f"<= {GOALS[method]}; rounds {per_round(name, 'echo-tls')}",
                    better="lower",
                ),
                Row("  the same against plaintext echo", cpu(name), "us", cpu("echo"), better="lower"),
                Row(f"  {method} on {loop} req/s (baseline: echo over mTLS)", rps(name), "/s", rps("echo-tls")),
            ]
    rows.append(Row("errors, all rounds", sum(s.errors for t in targets for s in t.samples), "", goal="goal 0"))
    report(
        f"server CPU per call, one server process each, {concurrency} concurrent calls from one client process"
        f" (median of {rounds} interleaved rounds of {seconds:g} s)",
        rows,
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--loops", default=",".join(loops.LOOPS), help="comma-separated: uvloop, asyncio")
    parser.add_argument("--seats", type=int, default=200_000, help="free seats for HoldSeats (one per call)")
    args = parser.parse_args()
    names = [n for n in args.loops.split(",") if n]
    for name in names:
        if name not in loops.LOOPS:
            parser.error(f"--loops: {name!r} is not one of {', '.join(loops.LOOPS)}")
    asyncio.run(_main(args.rounds, args.seconds, args.concurrency, names, args.seats))


if __name__ == "__main__":
    main()
