"""WatchQueuePosition at scale, next to bare grpc.aio streams measured in
the same run (bench/echo_server.py's Watch/Tick):

- 30,000 streams opened in one burst: how many fail (goal: none);
- server RSS per open stream (goal: <= 1.2 x the bare stream);
- time for one admission tick to reach all 30,000 streams (goal: <= 1.5 x
  the bare fan-out of one message to 30,000 streams).

Both servers run with ``gc.freeze()`` after start. The queue server reads
progress every 50 ms here (BOXOFFICE_QUEUE_WATCH_INTERVAL_SECONDS=0.05), so
its tick-to-stream time includes up to 50 ms of polling.

Run: ``python -m bench.queue_streams [--streams 30000] [--clients 3] [--rounds 3]``
"""

from __future__ import annotations

import argparse
import asyncio
import secrets
import statistics
import subprocess
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import grpc

from bench.common import Row, echo_server, report, rss_bytes
from bench.queue_common import (
    create_event,
    event,
    private_database,
    private_redis,
    queue_app,
    queue_fans,
    queue_server,
    watch_clients,
)

HEAD = 10  # fans ahead of every watcher, admitted by the measured tick


@dataclass(frozen=True)
class StreamFigures:
    open_seconds: float
    opened: int
    failed: int
    failures: str
    rss_per_stream: float
    fan_out_seconds: float
    spread_seconds: float
    delivered: int


def _identity(data: bytes) -> bytes:
    return data


async def _line(proc: subprocess.Popen[str], prefix: str) -> list[str]:
    assert proc.stdout is not None
    line = await asyncio.get_running_loop().run_in_executor(None, proc.stdout.readline)
    if not line.startswith(prefix):
        raise RuntimeError(f"client said {line!r}, expected {prefix}")
    return line.split()[1:]


async def _measure(
    address: str, pid: int, kind: str, event_id: int, streams: int, clients: int, trigger: Callable[[], Awaitable[None]]
) -> StreamFigures:
    await asyncio.sleep(1.0)
    before = rss_bytes(pid)
    began = time.monotonic()
    with watch_clients(address, kind, event_id, first=HEAD, streams=streams, clients=clients) as procs:
        opened = [await _line(proc, "OPEN") for proc in procs]
        open_seconds = time.monotonic() - began
        ok = sum(int(o[0]) for o in opened)
        failed = sum(int(o[1]) for o in opened)
        failures = " ".join(o[2] for o in opened if o[2] != "-") or "none"
        await asyncio.sleep(1.0)
        after = rss_bytes(pid)
        began = time.monotonic()
        await trigger()
        done = [await _line(proc, "DONE") for proc in procs]
    first = min(float(d[0]) for d in done if int(d[2]))
    last = max(float(d[1]) for d in done)
    return StreamFigures(
        open_seconds=open_seconds,
        opened=ok,
        failed=failed,
        failures=failures,
        rss_per_stream=(after - before) / max(1, ok),
        fan_out_seconds=last - began,
        spread_seconds=last - first,
        delivered=sum(int(d[2]) for d in done),
    )


async def _bare(streams: int, clients: int) -> StreamFigures:
    with echo_server() as server:
        async with grpc.aio.insecure_channel(server.address) as channel:
            tick: grpc.aio.UnaryUnaryMultiCallable[bytes, bytes] = channel.unary_unary(
                "/bench.Echo/Tick", request_serializer=_identity, response_deserializer=_identity
            )

            async def trigger() -> None:
                await tick(b"tick")

            return await _measure(server.address, server.pid, "echo", 0, streams, clients, trigger)


async def _queue(streams: int, clients: int) -> StreamFigures:
    async with private_database() as database_url:
        with private_redis() as (redis_url, _):
            async with queue_app(database_url, redis_url) as queue:
                store = queue.store
                event_id = 1 + secrets.randbelow(2**40)
                now_ms = int(time.time() * 1000)
                await create_event(queue, event(event_id, opens_at_ms=now_ms - 1000, rate=HEAD))
                await queue_fans(store, event_id, [f"fan-{i}" for i in range(HEAD + streams)], now_ms=now_ms)
                await store.admit(event_id, now_ms=now_ms, epoch=1)  # starts the rate clock
                # Each client process opens streams / clients streams on one
                # connection: allow them (a server allows 10,000 per
                # connection by default).
                env = {
                    "BOXOFFICE_QUEUE_WATCH_INTERVAL_SECONDS": "0.05",
                    "BOXOFFICE_MAX_CONCURRENT_STREAMS": str(streams),
                    "BOXOFFICE_MAX_OPEN_STREAMS": str(streams + 1000),
                }
                with queue_server(database_url, redis_url, gc_freeze=True, **env) as server:

                    async def trigger() -> None:
                        result = await store.admit(event_id, now_ms=int(time.time() * 1000), epoch=1)
                        assert result is not None and result.admitted == HEAD, result

                    return await _measure(server.address, server.pid, "queue", event_id, streams, clients, trigger)


def _median(values: list[float]) -> float:
    return statistics.median(values)


async def _main(streams: int, clients: int, rounds: int) -> None:
    bare: list[StreamFigures] = []
    queue: list[StreamFigures] = []
    for _ in range(rounds):  # interleaved, so that both see the same machine
        bare.append(await _bare(streams, clients))
        queue.append(await _queue(streams, clients))
    fan_out = [
        f"{q.fan_out_seconds * 1000:,.0f}/{b.fan_out_seconds * 1000:,.0f}" for q, b in zip(queue, bare, strict=True)
    ]
    rss = [f"{q.rss_per_stream / 1024:.1f}/{b.rss_per_stream / 1024:.1f}" for q, b in zip(queue, bare, strict=True)]
    report(
        f"{streams:,} server streams opened in one burst by {clients} client processes, median of {rounds} rounds"
        " (baseline: bare grpc.aio streams of bench/echo_server.py)",
        [
            Row("streams opened, worst round", min(q.opened for q in queue), "", min(b.opened for b in bare), ""),
            Row(
                "streams failed, all rounds",
                sum(q.failed for q in queue),
                "",
                sum(b.failed for b in bare),
                "goal 0; " + "; ".join(sorted({q.failures for q in queue})),
                better="lower",
            ),
            Row(
                "time to open every stream",
                _median([q.open_seconds for q in queue]) * 1000,
                "ms",
                _median([b.open_seconds for b in bare]) * 1000,
                "",
                better="lower",
            ),
            Row(
                "server RSS per open stream",
                _median([q.rss_per_stream for q in queue]) / 1024,
                "KB",
                _median([b.rss_per_stream for b in bare]) / 1024,
                "<= 1.2; rounds " + " ".join(rss),
                better="lower",
            ),
            Row(
                "one tick -> every stream updated",
                _median([q.fan_out_seconds for q in queue]) * 1000,
                "ms",
                _median([b.fan_out_seconds for b in bare]) * 1000,
                "<= 1.5; rounds " + " ".join(fan_out),
                better="lower",
            ),
            Row(
                "first -> last stream updated",
                _median([q.spread_seconds for q in queue]) * 1000,
                "ms",
                _median([b.spread_seconds for b in bare]) * 1000,
                "",
                better="lower",
            ),
            Row(
                "streams updated by the tick, worst round",
                min(q.delivered for q in queue),
                "",
                min(b.delivered for b in bare),
                f"of {streams:,}",
            ),
        ],
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--streams", type=int, default=30_000)
    parser.add_argument("--clients", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    asyncio.run(_main(args.streams, args.clients, args.rounds))


if __name__ == "__main__":
    main()
