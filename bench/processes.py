"""One server process per pod against one per core: JoinQueue and HoldSeats
served by 1 and by N processes listening on one port (``SO_REUSEPORT``,
which the copies of one server role set, as ``BOXOFFICE_PROCESSES`` runs
them: the kernel spreads new connections over the listeners), driven by the
same load from several client processes.

A grpc.aio server runs its Python on one core (the event loop holds the
GIL; gRPC's own threads take a little more), so on a machine of two cores a
single process leaves part of the machine idle while calls wait. Each round
reports the calls answered per second, the servers' CPU per call (summed
over their processes) and how busy they kept the machine's cores; the rounds
interleave the process counts and the medians are reported.

On a shared 2-core machine the clients take their share of the cores too;
the figure that carries over to a pod of its own is whether the second
process turns idle core time into answered calls.

Run: ``python -m bench.processes [--processes 1,2] [--rounds 3]
[--seconds 4] [--clients 2] [--channels 4] [--concurrency 32]
[--methods JoinQueue,HoldSeats]``
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import json
import os
import secrets
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass

import grpc

from bench.common import Row, ServerProcess, channel, closed_loop, cpu_seconds, report, server_process
from bench.cpu_per_call import HOLD_EVENT, mesh_stores
from boxoffice import access, caller, loops
from boxoffice.clock import SystemClock
from boxoffice.config import Env, TokenConfig
from boxoffice.tokens import TokenSigner
from gen.boxoffice.booking.v1 import booking_service_pb2 as booking_pb
from gen.boxoffice.booking.v1 import booking_service_pb2_grpc as booking_grpc
from gen.boxoffice.queue.v1 import queue_service_pb2 as queue_pb
from gen.boxoffice.queue.v1 import queue_service_pb2_grpc as queue_grpc

METHODS = {"JoinQueue": ("queue-svc", "queue"), "HoldSeats": ("booking-svc", "booking")}
# Seats each client process may take per round (HoldSeats takes a new seat each call).
_SEATS_PER_CLIENT_ROUND = 10_000


@dataclass(frozen=True)
class Sample:
    rps: float
    cpu_us: float  # the servers' CPU per answered call
    busy_cores: float  # the servers' CPU seconds per second
    machine_cores: float  # the whole machine's (servers, clients, Redis, Postgres)
    errors: int
    split: tuple[float, ...]  # each server process's share of the CPU


def _machine_busy_seconds() -> float:
    """CPU seconds the whole machine has spent busy (Linux /proc/stat)."""
    with open("/proc/stat") as stat:
        fields = [int(x) for x in stat.readline().split()[1:]]
    idle = fields[3] + fields[4]  # idle, iowait
    return (sum(fields[:8]) - idle) / os.sysconf("SC_CLK_TCK")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


# -- the client process -------------------------------------------------------


async def _client(args: argparse.Namespace) -> dict[str, float | str]:
    signer_config = TokenConfig.from_env(Env(os.environ))
    signer = TokenSigner(signer_config.keys, signer_config.active_kid, SystemClock())
    role = access.EDGE
    channels = [channel(args.address, role, own_connection=True) for _ in range(args.channels)]
    numbers = itertools.count(args.first)
    calls: list[Callable[[int], Awaitable[object]]] = []
    for chan in channels:
        if args.method == "JoinQueue":
            queue_stub = queue_grpc.QueueServiceStub(chan)

            def join(n: int, stub: queue_grpc.QueueServiceAsyncStub = queue_stub) -> Awaitable[object]:
                fan = f"fan-{args.run}-{next(numbers)}"
                return stub.JoinQueue(
                    queue_pb.JoinQueueRequest(event_id=args.event), metadata=((caller.CUSTOMER_METADATA_KEY, fan),)
                )

            calls.append(join)
        else:
            booking_stub = booking_grpc.BookingServiceStub(chan)

            def hold(n: int, stub: booking_grpc.BookingServiceAsyncStub = booking_stub) -> Awaitable[object]:
                seat = next(numbers)
                token, _ = signer.issue(event_id=HOLD_EVENT, customer_id=f"bench-{args.run}-{seat}", ttl_seconds=3600)
                request = booking_pb.HoldSeatsRequest(
                    access_token=token, event_id=HOLD_EVENT, seats=booking_pb.SeatSelection(seat_ids=[seat])
                )
                return stub.HoldSeats(request, timeout=10)

            calls.append(hold)

    first_error: list[str] = []

    async def spread(n: int) -> object:
        try:
            return await calls[n % len(calls)](n)
        except grpc.aio.AioRpcError as err:
            if not first_error:
                first_error.append(f"{err.code().name}: {err.details()}")
            raise

    try:
        # Each channel connects before the clock starts.
        await asyncio.gather(*(chan.channel_ready() for chan in channels))
        print("READY", flush=True)
        sys.stdin.readline()  # the go-ahead, so that every client starts together
        figures = await closed_loop(spread, concurrency=args.concurrency, seconds=args.seconds, warmup_seconds=0.5)
    finally:
        for chan in channels:
            await chan.close()
    return {"calls": figures.calls, "errors": figures.errors, "seconds": figures.seconds, "error": "".join(first_error)}


# -- the run ------------------------------------------------------------------


@contextlib.contextmanager
def _servers(command: str, role: str, count: int, env: dict[str, str]) -> Iterator[list[ServerProcess]]:
    port = _free_port()
    with contextlib.ExitStack() as stack:
        servers = [
            stack.enter_context(
                server_process(
                    ["-m", "bench.serve", command],
                    # Copies of one server role (as BOXOFFICE_PROCESSES runs them): they alone share the port.
                    env={**env, "BOXOFFICE_GRPC_PORT": str(port), "BOXOFFICE_PROCESS_INDEX": str(index)},
                    role=role,
                )
            )
            for index in range(count)
        ]
        yield servers


def _start_clients(
    address: str, method: str, args: argparse.Namespace, event_id: int, first: int
) -> list[subprocess.Popen[str]]:
    run = secrets.token_hex(3)
    return [
        subprocess.Popen(
            [
                sys.executable, "-m", "bench.processes", "client",
                "--address", address, "--method", method, "--seconds", str(args.seconds),
                "--channels", str(args.channels), "--concurrency", str(args.concurrency),
                "--event", str(event_id), "--first", str(first + i * _SEATS_PER_CLIENT_ROUND), "--run", run,
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        for i in range(args.clients)
    ]  # fmt: skip


async def _round(
    servers: list[ServerProcess], method: str, args: argparse.Namespace, event_id: int, first: int
) -> Sample:
    clients = _start_clients(servers[0].address, method, args, event_id, first)
    try:
        for client in clients:
            assert client.stdout is not None
            if client.stdout.readline().strip() != "READY":
                raise RuntimeError("a client process did not connect")
        before = [cpu_seconds(s.pid) for s in servers]
        machine_before = _machine_busy_seconds()
        began = time.monotonic()
        for client in clients:
            assert client.stdin is not None
            client.stdin.write("go\n")
            client.stdin.flush()
        results = []
        for client in clients:
            assert client.stdout is not None
            results.append(json.loads(await asyncio.to_thread(client.stdout.readline)))
        elapsed = time.monotonic() - began
        used = [cpu_seconds(s.pid) - b for s, b in zip(servers, before, strict=True)]
        machine = _machine_busy_seconds() - machine_before
    finally:
        for client in clients:
            client.wait(timeout=60)
    for result in results:
        if result["error"]:
            print(f"  a {method} call failed: {result['error']}", file=sys.stderr)
    calls = sum(int(r["calls"]) for r in results)
    seconds = max(float(r["seconds"]) for r in results)
    # The warm-up is inside the CPU window: count its share of the calls too.
    answered_in_window = calls * elapsed / seconds
    total = sum(used)
    return Sample(
        rps=calls / seconds,
        cpu_us=total / max(1.0, answered_in_window) * 1e6,
        busy_cores=total / elapsed,
        machine_cores=machine / elapsed,
        errors=sum(int(r["errors"]) for r in results),
        split=tuple(u / total if total else 0.0 for u in used),
    )


async def _main(args: argparse.Namespace) -> None:
    counts = [int(c) for c in args.processes.split(",")]
    methods = [m for m in args.methods.split(",") if m]
    samples: dict[tuple[str, int], list[Sample]] = {}
    seats_needed = len(counts) * args.rounds * args.clients * _SEATS_PER_CLIENT_ROUND + 1
    async with mesh_stores(seats_needed if "HoldSeats" in methods else 1) as found:
        queue_url, booking_url, redis_url, event_id = found
        # HoldSeats takes a new seat each call: each of its rounds has its own range.
        firsts = {method: itertools.count(1, args.clients * _SEATS_PER_CLIENT_ROUND) for method in methods}
        for _ in range(args.rounds):
            for method in methods:
                command, role = METHODS[method]
                url = queue_url if method == "JoinQueue" else booking_url
                for count in counts:
                    with _servers(command, role, count, {"DATABASE_URL": url, "REDIS_URL": redis_url}) as servers:
                        sample = await _round(servers, method, args, event_id, next(firsts[method]))
                    samples.setdefault((method, count), []).append(sample)
    rows: list[Row] = []
    base = counts[0]
    for method in methods:
        for count in counts:
            got = samples[(method, count)]
            rps = statistics.median(s.rps for s in got)
            rows += [
                Row(
                    f"{method}, {count} process{'es' if count > 1 else ''}: req/s",
                    rps,
                    "/s",
                    None if count == base else statistics.median(s.rps for s in samples[(method, base)]),
                    "rounds " + " ".join(f"{s.rps:,.0f}" for s in got),
                ),
                Row(
                    "  servers' CPU per call",
                    statistics.median(s.cpu_us for s in got),
                    "us",
                    None if count == base else statistics.median(s.cpu_us for s in samples[(method, base)]),
                    better="lower",
                ),
                Row(
                    "  servers' busy cores",
                    statistics.median(s.busy_cores for s in got),
                    "",
                    None if count == base else statistics.median(s.busy_cores for s in samples[(method, base)]),
                    "each process's share: " + " / ".join(f"{x:.2f}" for x in got[len(got) // 2].split),
                ),
                Row(
                    "  the machine's busy cores (clients and stores too)",
                    statistics.median(s.machine_cores for s in got),
                    "",
                    None if count == base else statistics.median(s.machine_cores for s in samples[(method, base)]),
                    f"of {os.cpu_count()}",
                ),
                Row("  errors, all rounds", sum(s.errors for s in got), "", goal="goal 0"),
            ]
    report(
        f"one server process against several on one port (SO_REUSEPORT); {args.clients} client processes x "
        f"{args.channels} connections, {args.concurrency} concurrent calls each; {os.cpu_count()} cores; "
        f"median of {args.rounds} interleaved rounds of {args.seconds:g} s",
        rows,
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers(dest="command")
    client = sub.add_parser("client", help="one load-generating process (started by the benchmark)")
    client.add_argument("--address", required=True)
    client.add_argument("--method", choices=sorted(METHODS), required=True)
    client.add_argument("--seconds", type=float, required=True)
    client.add_argument("--channels", type=int, required=True)
    client.add_argument("--concurrency", type=int, required=True)
    client.add_argument("--event", type=int, required=True)
    client.add_argument("--first", type=int, required=True)
    client.add_argument("--run", required=True)
    parser.add_argument("--processes", default="1,2", help="comma-separated process counts; the first is the baseline")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=4.0)
    parser.add_argument("--clients", type=int, default=2)
    parser.add_argument("--channels", type=int, default=4, help="connections per client process")
    parser.add_argument("--concurrency", type=int, default=32, help="concurrent calls per client process")
    parser.add_argument("--methods", default="JoinQueue,HoldSeats")
    args = parser.parse_args()
    if args.command == "client":
        print(json.dumps(loops.run(_client(args), "uvloop")), flush=True)
        return
    asyncio.run(_main(args))


if __name__ == "__main__":
    main()
