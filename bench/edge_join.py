"""Joins through the edge against a bare pass-through in the same server
stack, on the asyncio and the uvloop event loops (issue 9's first goal).

- baseline: ``edge-bare``'s ``POST /forward``: uvicorn + httptools, a plain
  ASGI callable over Starlette, forwarding each body to a grpc.aio echo over
  mTLS and answering the reply as JSON;
- (b) ``POST /v1/events/{id}/queue:join`` on the edge, as signed-in fans
  (a different fan's session cookie on every request), against a bare
  grpc.aio QueueService with a canned answer over the same mTLS
  (``edge-upstream``): the edge's own cost. Goal: >= 0.8 of the baseline;
- (a) the same against the real QueueService (``bench.serve queue-svc`` on a
  private Redis and a scratch database, a new waiting room per
  measurement, so that every join queues a new fan): reported.

Load comes from client processes of their own (bench/edge_load.py, raw
HTTP/1.1 keep-alive on uvloop), ``--connections`` in all; the server's CPU
time per request is read from /proc over the measured window. Rounds
interleave every server on both loops so that all see the same machine.
The first round also drives the baseline from two client processes: when
that is no faster, the client is not what limits it.

Run: ``python -m bench.edge_join [--rounds 3] [--seconds 5] [--connections 64]
[--loops asyncio,uvloop]`` (a private redis-server and a scratch database on
DATABASE_URL's server, default the local Postgres).
"""

from __future__ import annotations

import argparse
import asyncio
import secrets
import statistics
import tempfile
import time
from collections import defaultdict
from pathlib import Path

from bench.common import pki
from bench.edge_common import (
    QUEUE_ENV,
    Figure,
    Load,
    Shape,
    bare_server,
    edge_server,
    load,
    per_round,
    port_of,
    ratios,
    sign_in,
    table,
    upstream_server,
)
from bench.queue_common import create_event, event, private_database, private_redis, queue_app, queue_server
from queue_svc.app import QueueApp

FANS = 15_000


def _join_path(event_id: int) -> str:
    return f"/v1/events/{event_id}/queue:join"


async def _new_event(queue: QueueApp) -> int:
    event_id = 1 + secrets.randbelow(2**40)
    await create_event(queue, event(event_id, opens_at_ms=int(time.time() * 1000) - 1000))
    return event_id


async def _main(rounds: int, seconds: float, connections: int, loops: list[str]) -> None:
    pki()
    runs: dict[tuple[str, str], list[Load]] = defaultdict(list)
    shape = Shape(connections, seconds)
    check: tuple[Load, Load] | None = None
    async with private_database() as database_url:
        with (
            private_redis() as (redis_url, _),
            queue_server(database_url, redis_url, gc_freeze=True, **QUEUE_ENV) as queue,
            upstream_server() as upstream,
            tempfile.TemporaryDirectory(prefix="edge-bench-") as folder,
        ):
            cookies = str(Path(folder) / "cookies")
            async with queue_app(database_url, redis_url) as queue_objects:
                with edge_server(loops[0], upstream.address, redis_url) as edge:
                    sign_ins = await sign_in(port_of(edge), first=0, count=FANS, out=cookies)
                for n in range(rounds):
                    for loop in loops:
                        with bare_server(loop, upstream.address) as bare:
                            runs[loop, "bare"].append(await load(bare, shape, method="POST", path="/forward"))
                            if check is None:
                                two = await load(bare, shape, method="POST", path="/forward", clients=2)
                                check = (runs[loop, "bare"][-1], two)
                        with edge_server(loop, upstream.address, redis_url) as edge:
                            runs[loop, "canned"].append(
                                await load(
                                    edge, shape, method="POST", path=_join_path(7), cookies=cookies, cookie_count=FANS
                                )
                            )
                        event_id = await _new_event(queue_objects)
                        with edge_server(loop, queue.address, redis_url) as edge:
                            runs[loop, "queue"].append(
                                await load(
                                    edge,
                                    shape,
                                    method="POST",
                                    path=_join_path(event_id),
                                    cookies=cookies,
                                    cookie_count=FANS,
                                )
                            )
                    print(f"round {n + 1} of {rounds} done", flush=True)

    def med(loop: str, kind: str, attr: str) -> float:
        return statistics.median(float(getattr(run, attr)) for run in runs[loop, kind])

    def paired(loop: str, kind: str, base_loop: str, base: str, attr: str) -> tuple[float, ...]:
        return per_round(
            [float(getattr(r, attr)) for r in runs[loop, kind]],
            [float(getattr(r, attr)) for r in runs[base_loop, base]],
        )

    figures: list[Figure] = []
    for loop in loops:
        bare_rps = [r.rps for r in runs[loop, "bare"]]
        figures += [
            Figure(
                f"{loop}: join via the edge, canned QueueService (b)",
                med(loop, "canned", "rps"), med(loop, "bare", "rps"), "/s", ">=", 0.8,
                "rounds " + ratios([r.rps for r in runs[loop, "canned"]], bare_rps),
                paired(loop, "canned", loop, "bare", "rps"),
            ),
            Figure(
                f"{loop}: join via the edge, real QueueService (a)",
                med(loop, "queue", "rps"), med(loop, "bare", "rps"), "/s", "", 0.0,
                "rounds " + ratios([r.rps for r in runs[loop, "queue"]], bare_rps),
                paired(loop, "queue", loop, "bare", "rps"),
            ),
            Figure(
                f"{loop}: server CPU per join (b) vs per forward",
                med(loop, "canned", "server_us"), med(loop, "bare", "server_us"), "us",
                rounds=paired(loop, "canned", loop, "bare", "server_us"),
            ),
            Figure(
                f"{loop}: server CPU per join (a) vs per forward",
                med(loop, "queue", "server_us"), med(loop, "bare", "server_us"), "us",
                rounds=paired(loop, "queue", loop, "bare", "server_us"),
            ),
            Figure(f"{loop}: p50 latency (b) vs forward", med(loop, "canned", "p50_ms"), med(loop, "bare", "p50_ms"), "ms"),
            Figure(f"{loop}: p99 latency (b) vs forward", med(loop, "canned", "p99_ms"), med(loop, "bare", "p99_ms"), "ms"),
            Figure(f"{loop}: p50 latency (a) vs forward", med(loop, "queue", "p50_ms"), med(loop, "bare", "p50_ms"), "ms"),
        ]  # fmt: skip
    if len(loops) == 2:
        a, b = loops
        for kind, label in (("canned", "join (b)"), ("queue", "join (a)"), ("bare", "bare forward")):
            figures.append(
                Figure(
                    f"{b} vs {a}: {label} req/s", med(b, kind, "rps"), med(a, kind, "rps"), "/s",
                    note="rounds " + " ".join(f"{r:.2f}" for r in paired(b, kind, a, kind, "rps")),
                    rounds=paired(b, kind, a, kind, "rps"),
                )
            )  # fmt: skip
    failed = sum(r.failed for runs_ in runs.values() for r in runs_)
    reused = sum(r.cookies_reused for runs_ in runs.values() for r in runs_)
    statuses = sorted({code for runs_ in runs.values() for r in runs_ for code in r.statuses})
    assert check is not None
    figures += [
        Figure(
            "client check: forward from 2 client processes vs 1",
            check[1].rps, check[0].rps, "/s", "", 0.0,
            f"client CPU {check[0].client_cpu_s / max(1, check[0].ok) * 1e6:.0f} us per request",
        ),
        Figure("requests failed, all rounds", failed, 0, "", "", 0.0, f"statuses seen: {', '.join(statuses)}"),
        Figure("requests that reused a fan's cookie", reused, 0, ""),
        Figure("fans signed in (POST /v1/session) per second", sign_ins, 0, "/s"),
    ]  # fmt: skip
    table(
        f"Join through the edge vs a bare pass-through (uvicorn + httptools, mTLS upstreams), {connections} connections,"
        f" median of {rounds} interleaved rounds of {seconds:g} s",
        figures,
    )


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.edge_join", description=__doc__)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--connections", type=int, default=64)
    parser.add_argument("--loops", default="asyncio,uvloop")
    args = parser.parse_args()
    asyncio.run(_main(args.rounds, args.seconds, args.connections, args.loops.split(",")))


if __name__ == "__main__":
    main()
