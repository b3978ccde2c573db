"""The public progress document of the edge against a bare static answer in
the same server stack, on the asyncio and the uvloop event loops (issue 9's
third goal).

- baseline: ``edge-bare``'s ``GET /static``: constant bytes of a progress
  document's size with its headers (Cache-Control public, an ETag, a
  request id), from uvicorn + httptools and a plain ASGI callable over
  Starlette, as the edge is served;
- the edge's ``GET /v1/events/{id}/queue/progress``, answered from its one
  admission-progress stream of the event (the real QueueService on a
  private Redis and a scratch database). Goal: >= 0.8 requests/s.

Closed loops from a client process of its own (bench/edge_load.py), the
server's CPU per request from /proc.

Run: ``python -m bench.edge_progress [--rounds 3] [--seconds 5] [--connections 64]
[--loops asyncio,uvloop]``
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
from collections import defaultdict

from bench.common import pki
from bench.edge_common import QUEUE_ENV, Figure, Load, Shape, bare_server, edge_server, load, per_round, ratios, table
from bench.edge_join import _new_event
from bench.queue_common import private_database, private_redis, queue_app, queue_server


async def _main(rounds: int, seconds: float, connections: int, loops: list[str]) -> None:
    pki()
    runs: dict[tuple[str, str], list[Load]] = defaultdict(list)
    shape = Shape(connections, seconds)
    async with private_database() as database_url:
        with (
            private_redis() as (redis_url, _),
            queue_server(database_url, redis_url, gc_freeze=True, **QUEUE_ENV) as queue,
        ):
            async with queue_app(database_url, redis_url) as queue_objects:
                event_id = await _new_event(queue_objects)
            path = f"/v1/events/{event_id}/queue/progress"
            for n in range(rounds):
                for loop in loops:
                    with bare_server(loop) as bare:
                        runs[loop, "bare"].append(await load(bare, shape, method="GET", path="/static"))
                    with edge_server(loop, queue.address, redis_url) as edge:
                        runs[loop, "edge"].append(await load(edge, shape, method="GET", path=path))
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
        figures += [
            Figure(
                f"{loop}: progress document req/s vs static",
                med(loop, "edge", "rps"), med(loop, "bare", "rps"), "/s", ">=", 0.8,
                "rounds " + ratios([r.rps for r in runs[loop, "edge"]], [r.rps for r in runs[loop, "bare"]]),
                paired(loop, "edge", loop, "bare", "rps"),
            ),
            Figure(
                f"{loop}: server CPU per request", med(loop, "edge", "server_us"), med(loop, "bare", "server_us"), "us",
                rounds=paired(loop, "edge", loop, "bare", "server_us"),
            ),
            Figure(f"{loop}: p50 latency", med(loop, "edge", "p50_ms"), med(loop, "bare", "p50_ms"), "ms"),
            Figure(f"{loop}: p99 latency", med(loop, "edge", "p99_ms"), med(loop, "bare", "p99_ms"), "ms"),
        ]  # fmt: skip
    if len(loops) == 2:
        a, b = loops
        for kind, label in (("edge", "progress document"), ("bare", "bare static")):
            figures.append(
                Figure(
                    f"{b} vs {a}: {label} req/s", med(b, kind, "rps"), med(a, kind, "rps"), "/s",
                    note="rounds " + " ".join(f"{r:.2f}" for r in paired(b, kind, a, kind, "rps")),
                    rounds=paired(b, kind, a, kind, "rps"),
                )
            )  # fmt: skip
    failed = sum(r.failed for runs_ in runs.values() for r in runs_)
    figures += [
        Figure("requests failed, all rounds", failed, 0, "", "", 0.0, ""),
    ]  # fmt: skip
    table(
        f"The progress document vs a bare static answer (uvicorn + httptools), {connections} connections,"
        f" median of {rounds} interleaved rounds of {seconds:g} s",
        figures,
    )


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.edge_progress", description=__doc__)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--connections", type=int, default=64)
    parser.add_argument("--loops", default="asyncio,uvloop")
    args = parser.parse_args()
    asyncio.run(_main(args.rounds, args.seconds, args.connections, args.loops.split(",")))


if __name__ == "__main__":
    main()
