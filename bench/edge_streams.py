"""Server-Sent Event streams of waiting fans on one edge process, against a
bare SSE endpoint in the same server stack (issue 9's second goal):

- ``--streams`` (20,000) fans, signed in through ``POST /v1/session`` and
  queued in a waiting room whose admission has not reached them, each
  watching ``GET /v1/events/{id}/queue/position:watch`` from client
  processes of their own (bench/edge_sse_client.py, raw asyncio streams,
  ``--clients`` processes). Goal: none fails;
- the edge's RSS per open stream (read before and after they open) against
  ``edge-bare``'s ``GET /sse`` (a StreamingResponse that sends an event at
  once and one more each time a shared asyncio.Event is set), goal <= 1.2x;
- ONE progress update (one admission of the fans ahead of everyone, in
  Redis, as the admitter does it) reaching every stream, against the bare
  fan-out (``POST /fire`` sets the event once), goal <= 1.5x: from the
  update's arrival at the server to the last client's event (the bench
  follows the event's WatchAdmissionProgress stream as the edge does and
  stamps the snapshot that carries the admission; the bare server's update
  arrives with ``POST /fire``), so that both sides time the same fan-out.
  Timed from the admission in Redis instead, the edge's figure also holds
  QueueService's read of Redis (every 50 ms here) and its stream, which
  the bare server has no counterpart of: reported beside it.

The edge is the one ``boxoffice edge`` runs (edge_svc.app.compose, in a
process of its own through ``python -m bench.serve edge``), calling the real
QueueService (``bench.serve queue-svc`` on a private Redis and a scratch
database, reading progress every 50 ms). On open, the edge reads each fan's
place once (GetQueuePosition) and answers from then on from its one
progress stream. Both servers raise their open-file limit to the hard
limit; when that cannot hold ``--streams`` connections plus the process's
own descriptors, the benchmark opens fewer and says so.

Run: ``python -m bench.edge_streams [--streams 20000] [--clients 4] [--rounds 2]
[--loop asyncio]``
"""

from __future__ import annotations

import argparse
import asyncio
import resource
import secrets
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

from bench.common import ServerProcess, pki, rss_bytes
from bench.common import channel as channel_as
from bench.edge_common import QUEUE_ENV, Figure, bare_server, edge_server, per_round, port_of, sign_in, table
from bench.edge_load import read_response, request_bytes
from bench.queue_common import (
    create_event,
    event,
    private_database,
    private_redis,
    queue_app,
    queue_fans,
    queue_server,
)
from boxoffice import access
from gen.boxoffice.queue.v1 import queue_service_pb2 as queue_pb
from gen.boxoffice.queue.v1 import queue_service_pb2_grpc as queue_grpc
from queue_svc.app import QueueApp

HEAD = 10  # fans ahead of every watcher, admitted by the measured update
# Descriptors a server process needs besides its streams (listener, gRPC,
# Redis, epoll, stdio, ...).
RESERVED_FDS = 100


@dataclass(frozen=True)
class StreamFigures:
    open_seconds: float
    opened: int
    failed: int
    failures: str
    rss_per_stream: float
    fan_out_seconds: float
    # From the update's arrival at the server (the edge: when QueueService's
    # progress stream carried it; the bare server: POST /fire) instead of
    # from the admission in Redis.
    arrival_fan_out_seconds: float
    spread_seconds: float
    delivered: int


async def _line(proc: asyncio.subprocess.Process, prefix: str) -> list[str]:
    assert proc.stdout is not None
    line = (await proc.stdout.readline()).decode()
    if not line.startswith(prefix):
        raise RuntimeError(f"client said {line!r}, expected {prefix}")
    return line.split()[1:]


async def _measure(
    server: ServerProcess,
    path: str,
    cookies: str,
    streams: int,
    clients: int,
    trigger: Callable[[], Awaitable[Callable[[], Awaitable[float]]]],
) -> StreamFigures:
    await asyncio.sleep(1.0)
    before = rss_bytes(server.pid)
    share = streams // clients
    began = time.monotonic()
    procs = [
        await asyncio.create_subprocess_exec(
            sys.executable, "-m", "bench.edge_sse_client", "--port", str(port_of(server)), "--path", path,
            "--cookies", cookies, "--cookie-offset", str(i * share),
            "--count", str(share if i < clients - 1 else streams - share * (clients - 1)),
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
        )
        for i in range(clients)
    ]  # fmt: skip
    try:
        opened = [await _line(proc, "OPEN") for proc in procs]
        open_seconds = time.monotonic() - began
        await asyncio.sleep(1.0)
        after = rss_bytes(server.pid)
        triggered = time.monotonic()
        arrival = await trigger()
        done = [await _line(proc, "DONE") for proc in procs]
        arrived = await arrival()
    finally:
        for proc in procs:
            if proc.stdin is not None:
                proc.stdin.close()
        for proc in procs:
            try:
                await asyncio.wait_for(proc.wait(), timeout=60)
            except TimeoutError:
                proc.kill()
                await proc.wait()
    ok = sum(int(o[0]) for o in opened)
    received = [d for d in done if int(d[2])]
    return StreamFigures(
        open_seconds=open_seconds,
        opened=ok,
        failed=sum(int(o[1]) for o in opened),
        failures=" ".join(o[2] for o in opened if o[2] != "-") or "none",
        rss_per_stream=(after - before) / max(1, ok),
        fan_out_seconds=max((float(d[1]) for d in received), default=triggered) - triggered,
        arrival_fan_out_seconds=max((float(d[1]) for d in received), default=arrived) - arrived,
        spread_seconds=max((float(d[1]) for d in received), default=0.0)
        - min((float(d[0]) for d in received), default=0.0),
        delivered=sum(int(d[2]) for d in done),
    )


async def _bare(loop: str, streams: int, clients: int, cookies: str) -> StreamFigures:
    with bare_server(loop) as server:

        async def trigger() -> Callable[[], Awaitable[float]]:
            sent = time.monotonic()
            reader, writer = await asyncio.open_connection("127.0.0.1", port_of(server))
            writer.write(request_bytes("POST", "/fire", port_of(server), cookie=None, body=b"{}"))
            status, _, _ = await read_response(reader)
            writer.close()
            assert status == 200, status

            async def arrived() -> float:
                return sent

            return arrived

        return await _measure(server, "/sse", cookies, streams, clients, trigger)


async def _edge(
    loop: str, queue: QueueApp, queue_addr: str, redis_url: str, streams: int, clients: int, cookies: str
) -> StreamFigures:
    store = queue.store
    event_id = 1 + secrets.randbelow(2**40)
    now_ms = int(time.time() * 1000)
    await create_event(queue, event(event_id, opens_at_ms=now_ms - 1000, rate=HEAD))
    await queue_fans(store, event_id, [f"fan-{i}" for i in range(HEAD + streams)], now_ms=now_ms)
    await store.admit(event_id, now_ms=now_ms, epoch=1)  # starts the rate clock
    with edge_server(loop, queue_addr, redis_url) as server:

        async def trigger() -> Callable[[], Awaitable[float]]:
            # The bench follows the event's progress stream as the edge does,
            # to time when QueueService sends the update (both its watchers
            # get the same tick's snapshot).
            channel = channel_as(queue_addr, access.EDGE)
            stub = queue_grpc.QueueServiceStub(channel)
            call = stub.WatchAdmissionProgress(queue_pb.WatchAdmissionProgressRequest(event_id=event_id))
            first = await call.read()
            assert isinstance(first, queue_pb.WatchAdmissionProgressResponse), first
            before = first.progress.admitted_total
            result = await store.admit(event_id, now_ms=int(time.time() * 1000), epoch=1)
            assert result is not None and result.admitted == HEAD, result

            async def watch() -> float:
                try:
                    while True:
                        reply = await call.read()
                        if not isinstance(reply, queue_pb.WatchAdmissionProgressResponse):
                            raise RuntimeError("the progress stream ended before the update")
                        if reply.progress.admitted_total > before:
                            return time.monotonic()
                finally:
                    call.cancel()
                    await channel.close()

            seen = asyncio.create_task(watch())

            async def arrived() -> float:
                return await seen

            return arrived

        path = f"/v1/events/{event_id}/queue/position:watch"
        return await _measure(server, path, cookies, streams, clients, trigger)


def _median(values: list[float]) -> float:
    return statistics.median(values)


async def _main(wanted: int, clients: int, rounds: int, loop: str) -> None:
    pki()
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    streams = min(wanted, hard - RESERVED_FDS)
    bare: list[StreamFigures] = []
    edge: list[StreamFigures] = []
    env = {"BOXOFFICE_QUEUE_WATCH_INTERVAL_SECONDS": "0.05", **QUEUE_ENV}
    async with private_database() as database_url:
        with (
            private_redis() as (redis_url, _),
            queue_server(database_url, redis_url, gc_freeze=True, **env) as queue_process,
            tempfile.TemporaryDirectory(prefix="edge-bench-") as folder,
        ):
            cookies = str(Path(folder) / "cookies")
            with edge_server(loop, queue_process.address, redis_url) as server:
                sign_ins = await sign_in(port_of(server), first=HEAD, count=streams, out=cookies)
            async with queue_app(database_url, redis_url) as queue:
                for n in range(rounds):  # interleaved, so that both see the same machine
                    bare.append(await _bare(loop, streams, clients, cookies))
                    edge.append(await _edge(loop, queue, queue_process.address, redis_url, streams, clients, cookies))
                    print(f"round {n + 1} of {rounds} done", flush=True)
    fan_out = [
        f"{e.fan_out_seconds * 1000:,.0f}/{b.fan_out_seconds * 1000:,.0f}" for e, b in zip(edge, bare, strict=True)
    ]
    arrival_fan_out = [
        f"{e.arrival_fan_out_seconds * 1000:,.0f}/{b.arrival_fan_out_seconds * 1000:,.0f}"
        for e, b in zip(edge, bare, strict=True)
    ]
    rss = [f"{e.rss_per_stream / 1024:.1f}/{b.rss_per_stream / 1024:.1f}" for e, b in zip(edge, bare, strict=True)]
    capped = f"; {wanted:,} asked, the open-file limit is {hard:,}" if streams < wanted else ""
    figures = [
        Figure("streams opened, worst round", min(e.opened for e in edge), min(b.opened for b in bare), "",
               note=f"of {streams:,}{capped}"),
        Figure("streams failed, all rounds", sum(e.failed for e in edge), sum(b.failed for b in bare), "",
               note="goal 0; " + "; ".join(sorted({e.failures for e in edge}))),
        Figure("time to open every stream", _median([e.open_seconds for e in edge]),
               _median([b.open_seconds for b in bare]), "s"),
        Figure("server RSS per open stream", _median([e.rss_per_stream for e in edge]) / 1024,
               _median([b.rss_per_stream for b in bare]) / 1024, "KB", "<=", 1.2, "rounds " + " ".join(rss),
               per_round([e.rss_per_stream for e in edge], [b.rss_per_stream for b in bare])),
        Figure("one update, from its arrival -> every stream's event",
               _median([e.arrival_fan_out_seconds for e in edge]) * 1000,
               _median([b.arrival_fan_out_seconds for b in bare]) * 1000, "ms", "<=", 1.5,
               "rounds " + " ".join(arrival_fan_out),
               per_round([e.arrival_fan_out_seconds for e in edge], [b.arrival_fan_out_seconds for b in bare])),
        Figure("one update, from the admission in Redis -> every stream's event",
               _median([e.fan_out_seconds for e in edge]) * 1000,
               _median([b.fan_out_seconds for b in bare]) * 1000, "ms", "", 0.0,
               "rounds " + " ".join(fan_out) + "; includes QueueService's read of Redis (every 50 ms) and its stream",
               per_round([e.fan_out_seconds for e in edge], [b.fan_out_seconds for b in bare])),
        Figure("first -> last stream's event", _median([e.spread_seconds for e in edge]) * 1000,
               _median([b.spread_seconds for b in bare]) * 1000, "ms"),
        Figure("streams that got the update, worst round", min(e.delivered for e in edge),
               min(b.delivered for b in bare), "", note=f"of {streams:,}"),
        Figure("fans signed in (POST /v1/session) per second", sign_ins, 0, "/s"),
    ]  # fmt: skip
    table(
        f"{streams:,} SSE streams on one edge process ({loop}) vs a bare SSE endpoint (uvicorn + httptools),"
        f" {clients} client processes, median of {rounds} interleaved rounds",
        figures,
    )
    if any(e.failed for e in edge) or min(e.delivered for e in edge) < streams:
        raise SystemExit(1)


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.edge_streams", description=__doc__)
    parser.add_argument("--streams", type=int, default=20_000)
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--loop", choices=("asyncio", "uvloop"), default="asyncio")
    args = parser.parse_args()
    asyncio.run(_main(args.streams, args.clients, args.rounds, args.loop))


if __name__ == "__main__":
    main()
