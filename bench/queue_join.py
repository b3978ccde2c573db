"""JoinQueue req/s of one QueueService process against a bare grpc.aio echo
server, both driven by the same closed loop from one Python client process,
in interleaved rounds (the machine is shared: only same-run ratios count).
Every JoinQueue queues a new fan (one join script in Redis each).

Run: ``python -m bench.queue_join [--rounds 5] [--seconds 4] [--concurrency 64]``
(uses a private redis-server and a scratch database on DATABASE_URL's
server, default the local Postgres).
"""

from __future__ import annotations

import argparse
import asyncio
import secrets
import statistics
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import grpc

from bench.common import Row, ServerProcess, closed_loop, cpu_seconds, echo_call, echo_server, report
from bench.common import channel as channel_as
from bench.queue_common import create_event, event, private_database, private_redis, queue_app, queue_server
from boxoffice import caller
from gen.boxoffice.queue.v1 import queue_service_pb2 as pb
from gen.boxoffice.queue.v1 import queue_service_pb2_grpc as pb_grpc


@dataclass(frozen=True)
class Round:
    rps: float
    p50_ms: float
    p99_ms: float
    server_cpu_us: float
    errors: int


async def _measure(
    server: ServerProcess, call: Callable[[int], Awaitable[object]], *, concurrency: int, seconds: float
) -> Round:
    """A closed loop after a 1 s warm-up, with the server's CPU time."""
    await closed_loop(call, concurrency=concurrency, seconds=1.0, warmup_seconds=0.0)
    began = cpu_seconds(server.pid)
    figures = await closed_loop(call, concurrency=concurrency, seconds=seconds, warmup_seconds=0.0)
    used = cpu_seconds(server.pid) - began
    return Round(figures.rps, figures.p50_ms, figures.p99_ms, used / max(1, figures.calls) * 1e6, figures.errors)


async def _echo(concurrency: int, seconds: float) -> Round:
    with echo_server() as server:
        async with grpc.aio.insecure_channel(server.address) as channel:
            echo = echo_call(channel)
            payload = pb.JoinQueueRequest(event_id=123456, customer_id="fan-0000000").SerializeToString()
            return await _measure(server, lambda n: echo(payload), concurrency=concurrency, seconds=seconds)


async def _join(database_url: str, redis_url: str, concurrency: int, seconds: float) -> Round:
    event_id = 1 + secrets.randbelow(2**40)
    async with queue_app(database_url, redis_url) as queue:
        await create_event(queue, event(event_id, opens_at_ms=int(time.time() * 1000)))
    with queue_server(database_url, redis_url) as server:
        async with channel_as(server.address) as channel:
            stub = pb_grpc.QueueServiceStub(channel)
            run = secrets.token_hex(3)

            async def join(n: int) -> None:
                fan = f"fan-{run}-{n}"
                # The edge names the fan it acts for.
                await stub.JoinQueue(
                    pb.JoinQueueRequest(event_id=event_id), metadata=((caller.CUSTOMER_METADATA_KEY, fan),)
                )

            return await _measure(server, join, concurrency=concurrency, seconds=seconds)


async def _main(concurrency: int, seconds: float, rounds: int) -> None:
    echoes: list[Round] = []
    joins: list[Round] = []
    async with private_database() as database_url:
        with private_redis() as (redis_url, _):
            for _ in range(rounds):  # interleaved, so that both see the same machine
                echoes.append(await _echo(concurrency, seconds))
                joins.append(await _join(database_url, redis_url, concurrency, seconds))

    def median(values: list[float]) -> float:
        return statistics.median(values)

    per_round = " ".join(f"{j.rps / e.rps:.2f}" for j, e in zip(joins, echoes, strict=True))
    report(
        f"JoinQueue (a new fan each call), one server process vs bare grpc.aio echo;"
        f" one Python client, {concurrency} concurrent calls, median of {rounds} rounds of {seconds:g} s",
        [
            Row(
                "JoinQueue req/s (baseline: echo req/s)",
                median([j.rps for j in joins]),
                "/s",
                median([e.rps for e in echoes]),
                f">= 0.8; rounds {per_round}",
            ),
            Row(
                "server CPU per call",
                median([j.server_cpu_us for j in joins]),
                "us",
                median([e.server_cpu_us for e in echoes]),
                "",
                better="lower",
            ),
            Row(
                "p50 latency",
                median([j.p50_ms for j in joins]),
                "ms",
                median([e.p50_ms for e in echoes]),
                "",
                better="lower",
            ),
            Row(
                "p99 latency",
                median([j.p99_ms for j in joins]),
                "ms",
                median([e.p99_ms for e in echoes]),
                "",
                better="lower",
            ),
            Row(
                "errors, all rounds",
                sum(j.errors for j in joins),
                "",
                sum(e.errors for e in echoes),
                "goal 0",
                better="lower",
            ),
        ],
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--seconds", type=float, default=4.0)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    asyncio.run(_main(args.concurrency, args.seconds, args.rounds))


if __name__ == "__main__":
    main()
