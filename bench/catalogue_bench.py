"""The catalogue (``GET /v1/events``) through the edge, against the progress
document as the baseline (issue 21's bench item), on a database of N events.

- baseline: the edge's ``GET /v1/events/{id}/queue/progress`` (a public
  document answered from the edge's memory);
- ``hot 10``: the catalogue asked with 10 distinct queries in turn (a flash
  crowd on the home page and a few searches);
- ``distinct 1000``: 1,000 distinct queries in turn (words, kinds, routes,
  local dates, start ranges), each loaded from BookingService at most once
  per max age (5 s) whatever the number of callers.

Each measurement runs on a fresh edge (an empty cache) over real QueueService
and BookingService processes on a scratch database of ``--events`` events
(default 100,000); the edge counts its loads from BookingService
(``boxoffice_edge_catalogue_loads``). Then the plan and cost Postgres gives
each kind of search at that size (no sequential scan).

BookingService's seat gauges run as in production (bounded to the sections
of the soonest events: ``bench/seat_gauges_bench.py`` measures them).

Run: ``python -m bench.catalogue_bench [--rounds 3] [--seconds 5] [--connections 64]
[--events 100000] [--loop uvloop]``
"""

from __future__ import annotations

import argparse
import asyncio
import random
import re
import statistics
import tempfile
from collections import defaultdict
from datetime import timedelta
from pathlib import Path
from urllib.parse import urlencode

import httpx
import psycopg

from bench.common import pki, server_process
from bench.edge_common import QUEUE_ENV, Figure, Load, Shape, edge_server, load, port_of, table
from bench.edge_join import _new_event
from bench.queue_common import private_database, private_redis, queue_app, queue_server
from booking_svc import app as booking_app
from boxoffice import db
from tests.booking.catalogue_plans import START, fill, plans

_WORDS = ["summer", "rock", "jazz", "opera", "festival", "live", "noite", "mua he", "ha noi", "sao paulo"]
_AIRPORTS = ["SGN", "HAN", "DAD", "GRU", "GIG", "LIS", "OPO", "CDG", "FRA", "KIX", "NRT", "SIN"]


def _iso(days: float) -> str:
    return (START + timedelta(days=days)).isoformat().replace("+00:00", "Z")


def queries(count: int, seed: int) -> list[str]:
    """``count`` distinct catalogue paths, as fans' searches look."""
    rng = random.Random(seed)
    found: set[str] = set()
    while len(found) < count:
        params: dict[str, str] = {"startsAfter": _iso(rng.randint(0, 300))}
        shape = rng.randrange(5)
        if shape == 0:
            params["q"] = rng.choice(_WORDS)
        elif shape == 1:
            origin, destination = rng.sample(_AIRPORTS, 2)
            params |= {"kind": "flight", "origin": origin, "destination": destination}
        elif shape == 2:
            params["date"] = (START + timedelta(days=rng.randint(1, 340))).date().isoformat()
        elif shape == 3:
            params["kind"] = rng.choice(["concert", "flight"])
        found.add("/v1/events?" + urlencode(params))
    return sorted(found)


async def _loads(port: int) -> float:
    async with httpx.AsyncClient() as client:
        text = (await client.get(f"http://127.0.0.1:{port}/metrics")).text
    found = re.search(r"^boxoffice_edge_catalogue_loads_total (\S+)$", text, re.M)
    return float(found.group(1)) if found else float("nan")


async def _main(rounds: int, seconds: float, connections: int, events: int, loop: str) -> None:
    pki()
    shape = Shape(connections, seconds)
    runs: dict[str, list[Load]] = defaultdict(list)
    loads: dict[str, list[float]] = defaultdict(list)
    folder = Path(tempfile.mkdtemp(prefix="boxoffice-catalogue-bench-"))
    files = {"hot 10": folder / "hot.txt", "distinct 1000": folder / "distinct.txt"}
    files["hot 10"].write_text("\n".join(queries(10, 1)) + "\n")
    files["distinct 1000"].write_text("\n".join(queries(1000, 2)) + "\n")
    async with private_database() as database_url:
        await db.migrate(database_url, booking_app.migrations())
        with (
            private_redis() as (redis_url, _),
            queue_server(database_url, redis_url, gc_freeze=True, **QUEUE_ENV) as queue,
            server_process(
                ["-m", "bench.serve", "booking-svc"],
                env={"DATABASE_URL": database_url, "REDIS_URL": redis_url},
                role="booking",
            ) as booking,
        ):
            async with await psycopg.AsyncConnection.connect(database_url, autocommit=True) as conn:
                await fill(conn, events)
                found = await plans(conn)
            async with queue_app(database_url, redis_url) as queue_objects:
                event_id = await _new_event(queue_objects)
            progress = f"/v1/events/{event_id}/queue/progress"
            for n in range(rounds):
                for kind in ("progress", "hot 10", "distinct 1000"):
                    with edge_server(loop, queue.address, redis_url, "--booking-addr", booking.address) as edge:
                        if kind == "progress":
                            runs[kind].append(await load(edge, shape, method="GET", path=progress))
                        else:
                            runs[kind].append(await load(edge, shape, method="GET", path="/", paths=str(files[kind])))
                            loads[kind].append(await _loads(port_of(edge)))
                print(f"round {n + 1} of {rounds} done", flush=True)

    def med(kind: str, attr: str) -> float:
        return statistics.median(float(getattr(r, attr)) for r in runs[kind])

    def per_round(kind: str) -> tuple[float, ...]:
        return tuple(r.rps / b.rps for r, b in zip(runs[kind], runs["progress"], strict=True))

    figures: list[Figure] = []
    for kind in ("hot 10", "distinct 1000"):
        # Loads over the warm-up and the measured window together.
        per_s = statistics.median(loads[kind]) / (shape.seconds + shape.warmup)
        figures += [
            Figure(
                f"{kind}: catalogue req/s vs progress document", med(kind, "rps"), med("progress", "rps"), "/s",
                note="rounds " + " ".join(f"{r:.2f}" for r in per_round(kind)), rounds=per_round(kind),
            ),
            Figure(f"{kind}: server CPU per request", med(kind, "server_us"), med("progress", "server_us"), "us"),
            Figure(f"{kind}: p99 latency", med(kind, "p99_ms"), med("progress", "p99_ms"), "ms"),
            Figure(f"{kind}: loads from BookingService per second", per_s, 0, "/s", "", 0.0,
                   f"median {statistics.median(loads[kind]):.0f} loads in {shape.seconds + shape.warmup:g} s"),
        ]  # fmt: skip
    failed = sum(r.failed for rs in runs.values() for r in rs)
    figures.append(Figure("requests failed, all rounds", failed, 0, "", "", 0.0, ""))
    table(
        f"GET /v1/events through the edge vs the progress document ({loop}), {connections} connections, "
        f"{events:,} events, median of {rounds} interleaved rounds of {seconds:g} s",
        figures,
    )
    print(f"\nPostgres plans at {events:,} events (page of 20; total cost in the planner's units):")
    for plan in found:
        print(f"  {plan.name:38} {plan.cost:9.1f}  {' > '.join(plan.nodes)}")
    sequential = [p.name for p in found if p.sequential]
    print(f"  sequential scans: {', '.join(sequential) if sequential else 'none'}")


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.catalogue_bench", description=__doc__)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--connections", type=int, default=64)
    parser.add_argument("--events", type=int, default=100_000)
    parser.add_argument("--loop", default="uvloop")
    args = parser.parse_args()
    asyncio.run(_main(args.rounds, args.seconds, args.connections, args.events, args.loop))


if __name__ == "__main__":
    main()
