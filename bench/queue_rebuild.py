"""A waiting room's rebuild after Redis lost its data, for a room of
``--fans`` fans (200,000 by default): the lifecycle read from Postgres and
folded into the room's state, and the whole rebuild into Redis.

- baseline: the whole history in one query, then folded (what the rebuild
  did before it read in pages);
- paged: the rebuild's own read, ``HISTORY_PAGE`` rows per query (keyset
  pagination by index), each page folded as it comes.

Each is timed (median of ``--rounds``, the two in turns, each from a
collected heap), and its peak of Python memory is
measured in a separate pass under tracemalloc (which slows it down). The
room: every fan joined after opening, one in ten admitted and claimed, one
in twenty left. Then the whole rebuild (read, fold, restore into a private
redis-server, marker) once.

Run: ``python -m bench.queue_rebuild [--fans 200000] [--rounds 3]``
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import statistics
import time
import tracemalloc
from collections.abc import Awaitable, Callable

import redis.asyncio as aioredis

from bench.common import Row, report
from bench.queue_common import create_event, event, private_database, private_redis, queue_app
from boxoffice import db
from boxoffice.runtime import Pool
from queue_svc.adapters.pg_generations import PgRoomGenerations
from queue_svc.jobs.lifecycle import LifecycleRow
from queue_svc.model import PRE_QUEUE_BAND
from queue_svc.rebuild import HISTORY_PAGE, Folder, RoomImage

_EVENT = 7


async def _fill(pool: Pool, fans: int, opens_ms: int) -> int:
    """The room's lifecycle in Postgres, as the recorder would have stored
    it; how many rows."""
    async with db.transaction(pool, default_seconds=600) as conn:
        await conn.execute(
            """
            INSERT INTO queue_lifecycle (event_id, idx, kind, at, customer_id, score, pre_queue)
            SELECT %(e)s, n, 'joined', to_timestamp((%(t)s + n) / 1000.0), 'fan-' || n, %(band)s + n + 1, false
              FROM generate_series(0, %(fans)s - 1) AS n
            """,
            {"e": _EVENT, "t": opens_ms, "band": PRE_QUEUE_BAND, "fans": fans},
        )
        # One in ten admitted and claimed, one in twenty left (after every join).
        await conn.execute(
            """
            INSERT INTO queue_lifecycle (event_id, idx, kind, at, customer_id, detail)
            SELECT %(e)s, %(fans)s + 2 * k + part, CASE part WHEN 0 THEN 'admitted' ELSE 'claimed' END,
                   to_timestamp((%(t)s + %(fans)s + k) / 1000.0), 'fan-' || (10 * k),
                   CASE part WHEN 0 THEN 'tick' END
              FROM generate_series(0, %(fans)s / 10 - 1) AS k, generate_series(0, 1) AS part
            """,
            {"e": _EVENT, "t": opens_ms, "fans": fans},
        )
        await conn.execute(
            """
            INSERT INTO queue_lifecycle (event_id, idx, kind, at, customer_id)
            SELECT %(e)s, %(fans)s + 2 * (%(fans)s / 10) + k, 'left',
                   to_timestamp((%(t)s + 2 * %(fans)s + k) / 1000.0), 'fan-' || (20 * k + 1)
              FROM generate_series(0, %(fans)s / 20 - 1) AS k
            """,
            {"e": _EVENT, "t": opens_ms, "fans": fans},
        )
        cur = await conn.execute("SELECT count(*) FROM queue_lifecycle WHERE event_id = %s", (_EVENT,))
        row = await cur.fetchone()
    async with db.transaction(pool, default_seconds=600) as conn:
        await conn.execute("ANALYZE queue_lifecycle")
    assert row is not None
    return int(row[0])


async def _whole(pool: Pool) -> Folder:
    """The baseline: one query for the whole history, then the fold."""
    async with db.transaction(pool, default_seconds=600) as conn:
        cur = await conn.execute(
            """
            SELECT idx, kind, (extract(epoch FROM at) * 1000)::bigint, customer_id, score, pre_queue, detail
              FROM queue_lifecycle WHERE event_id = %s ORDER BY idx
            """,
            (_EVENT,),
        )
        rows = await cur.fetchall()
    history = [LifecycleRow(int(i), str(k), int(a), str(c), s, p, d) for i, k, a, c, s, p, d in rows]
    folder = Folder()
    folder.add(history)
    return folder


async def _paged(generations: PgRoomGenerations) -> Folder:
    """The rebuild's read: a page at a time, folded as it comes."""
    folder = Folder()
    while True:
        page = await generations.history(_EVENT, after=folder.last_index, limit=HISTORY_PAGE)
        folder.add(page)
        if len(page) < HISTORY_PAGE:
            return folder


async def _interleaved(
    works: tuple[Callable[[], Awaitable[Folder]], Callable[[], Awaitable[Folder]]], rounds: int
) -> tuple[float, float]:
    """The median time of each of two reads, run in turns (so that the
    machine's load meets both alike), each from a collected heap with
    nothing of the other's kept (the garbage collector's passes grow with
    what is alive)."""
    times: tuple[list[float], list[float]] = ([], [])
    for _ in range(rounds):
        for which, work in enumerate(works):
            gc.collect()
            started = time.perf_counter()
            await work()
            times[which].append(time.perf_counter() - started)
    return statistics.median(times[0]), statistics.median(times[1])


async def _peak(work: Callable[[], Awaitable[Folder]]) -> float:
    """Peak Python memory (MB) while ``work`` runs, less what it keeps."""
    gc.collect()
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        before = tracemalloc.get_traced_memory()[0]
        await work()
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    return (peak - before) / 1e6


def _same(a: RoomImage, b: RoomImage) -> None:
    assert a.lanes == b.lanes and a.admitted == b.admitted and a.active == b.active and a.outcomes == b.outcomes


async def _main(fans: int, rounds: int) -> None:
    with private_redis() as (redis_url, _):
        async with private_database() as database_url, queue_app(database_url, redis_url) as queue:
            opens_ms = int(time.time() * 1000) - 60_000
            config = event(_EVENT, opens_at_ms=opens_ms)
            await create_event(queue, config)
            pool = queue.rt.pool()
            rows = await _fill(pool, fans, opens_ms)
            generations = queue.generations
            now_ms = opens_ms + 3 * fans

            whole_s, paged_s = await _interleaved((lambda: _whole(pool), lambda: _paged(generations)), rounds)
            _same(
                (await _whole(pool)).image(config, now_ms=now_ms),
                (await _paged(generations)).image(config, now_ms=now_ms),
            )
            whole_mb = await _peak(lambda: _whole(pool))
            paged_mb = await _peak(lambda: _paged(generations))

            client = aioredis.Redis.from_url(redis_url)
            try:
                await client.flushall()
                started = time.perf_counter()
                generation = await queue.rebuilder.rebuild(config, now_ms=now_ms)
                rebuild_s = time.perf_counter() - started
                assert generation == 2, generation
                waiting = await client.zcard(queue.store.keys(_EVENT).queue)
            finally:
                await client.aclose()

    report(
        f"waiting room rebuild: {fans:,} fans, {rows:,} lifecycle rows, pages of {HISTORY_PAGE:,}",
        [
            Row(
                "history read and folded (ms)",
                1000 * paged_s,
                "ms",
                1000 * whole_s,
                "paged vs one query",
                better="lower",
            ),
            Row("peak Python memory of the read and fold (MB)", paged_mb, "MB", whole_mb, "bounded", better="lower"),
            Row("whole rebuild into Redis (ms)", 1000 * rebuild_s, "ms", None, f"{waiting:,} fans queued again"),
        ],
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--fans", type=int, default=200_000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    asyncio.run(_main(args.fans, args.rounds))


if __name__ == "__main__":
    main()
