"""What the waiting room costs Redis, each figure next to a bare baseline
measured in the same run on a private redis-server:

- Redis commands per admit tick with 100 and with 10,000 open
  WatchQueuePosition streams (goal: the same);
- Redis bytes per queued fan, against a bare sorted set of the same
  members (goal: <= 140 B);
- the time one admit tick of 5,000 fans holds Redis (SLOWLOG), against a
  bare ZPOPMIN of 5,000 (goal: < 20 ms);
- Redis commands and busy time of an admit tick that drops 10 dead
  waiters (not seen for the presence grace) and admits 10, with 10,000
  waiting against 100 waiting (goal: the same commands, flat time).

Run: ``python -m bench.queue_redis``
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import secrets
import time
from typing import Any, cast

import redis.asyncio as aioredis

from bench.common import Row, report
from bench.queue_common import (
    NO_LIMITS,
    create_event,
    event,
    private_database,
    private_redis,
    queue_app,
    queue_fans,
    queue_server,
    watch_clients,
)
from queue_svc.adapters import EventKeys
from queue_svc.app import QueueApp
from queue_svc.model import Lane, LaneEntry
from queue_svc.ports import JoinLimits

TICK_SECONDS = 0.5
HEAD = 2000  # unwatched fans at the head, admitted one per tick
# The dead-waiter tick: this many dropped (and as many admitted) of this
# many waiting, few against many.
EXPIRY_DEAD = 10
EXPIRY_FEW = 100
EXPIRY_MANY = 10_000


async def _commands(client: aioredis.Redis) -> int:
    stats: dict[str, Any] = await client.info("commandstats")
    return sum(int(entry["calls"]) for entry in stats.values())


async def _commands_per_tick(database_url: str, redis_url: str, watchers: int, ticks: int) -> float:
    """Redis commands per admit tick (the admit script, the watchers'
    progress reads) while ``watchers`` streams are open."""
    async with queue_app(database_url, redis_url) as queue:
        client, store = queue.rt.redis(), queue.store
        event_id = 1 + secrets.randbelow(2**40)
        now_ms = int(time.time() * 1000)
        await create_event(queue, event(event_id, opens_at_ms=now_ms - 1000, rate=2))
        await queue_fans(store, event_id, [f"fan-{i}" for i in range(HEAD + watchers)], now_ms=now_ms)
        await store.admit(event_id, now_ms=now_ms, epoch=1)
        clients = 1 if watchers < 2000 else 2
        with (
            queue_server(database_url, redis_url) as server,
            watch_clients(server.address, "queue", event_id, first=HEAD, streams=watchers, clients=clients) as procs,
        ):
            for proc in procs:
                assert proc.stdout is not None
                line = await asyncio.get_running_loop().run_in_executor(None, proc.stdout.readline)
                assert line.startswith("OPEN") and line.split()[2] == "0", line
            await asyncio.sleep(1.0)
            before = await _commands(client)
            for _ in range(ticks):
                began = time.monotonic()
                await store.admit(event_id, now_ms=int(time.time() * 1000), epoch=1)
                await asyncio.sleep(max(0.0, TICK_SECONDS - (time.monotonic() - began)))
            # The reads made for the bench itself: one INFO before, one after.
            used = await _commands(client) - before - 1
    return used / ticks


async def _bytes_per_fan(queue: QueueApp, fans: int, limits: JoinLimits) -> tuple[float, float]:
    """(bytes per fan queued by the join script, bytes per member of a bare
    sorted set of the same ids and scores)."""
    client, store = queue.rt.redis(), queue.store
    event_id = 1 + secrets.randbelow(2**40)
    now_ms = int(time.time() * 1000)
    await store.put_config(event(event_id, opens_at_ms=now_ms - 1000))
    names = [f"cust-{i:09d}" for i in range(fans)]
    await client.memory_purge()
    before = int((await client.info("memory"))["used_memory"])
    for start in range(0, fans, 2000):
        await asyncio.gather(
            *(
                store.join(event_id, name, "", now_ms=now_ms, random_score=0, limits=limits)
                for name in names[start : start + 2000]
            )
        )
    after = int((await client.info("memory"))["used_memory"])
    keys = EventKeys.of(event_id)
    assert await client.zcard(keys.queue) == fans
    scores = cast(list[tuple[bytes, float]], await client.zrange(keys.queue, 0, -1, withscores=True))
    bare_key = f"bare:{event_id}"
    await client.memory_purge()
    bare_before = int((await client.info("memory"))["used_memory"])
    for start in range(0, fans, 5000):
        await client.zadd(bare_key, {member: score for member, score in scores[start : start + 5000]})
    bare_after = int((await client.info("memory"))["used_memory"])
    await client.delete(bare_key, *[k for k in (keys.queue, keys.progress, keys.sequence, keys.config)])
    return (after - before) / fans, (bare_after - bare_before) / fans


async def _slowlog_us(client: aioredis.Redis, command: str) -> int:
    entries = await client.slowlog_get(50)
    for entry in entries:
        words = entry["command"].split()
        if words and words[0].upper() == command.encode():
            return int(entry["duration"])
    raise RuntimeError(f"{command} not in the slow log")


async def _admit_tick_us(queue: QueueApp, fans: int) -> tuple[int, int, int]:
    """Redis time (us) of: an admit tick admitting ``fans``; a tick that
    also expires ``fans`` sessions; a bare ZPOPMIN of ``fans``."""
    client, store = queue.rt.redis(), queue.store
    event_id = 1 + secrets.randbelow(2**40)
    now_ms = int(time.time() * 1000)
    # Waiters stay (seen) for the whole measurement: dropping is measured apart.
    config = dataclasses.replace(
        event(event_id, opens_at_ms=now_ms - 1000, rate=fans), presence_grace_ms=24 * 3_600_000
    )
    await store.put_config(config)
    await queue_fans(store, event_id, [f"cust-{i:09d}" for i in range(3 * fans)], now_ms=now_ms)
    await store.admit(event_id, now_ms=now_ms, epoch=1)
    await client.config_set("slowlog-log-slower-than", 0)
    try:
        await client.slowlog_reset()
        result = await store.admit(event_id, now_ms=now_ms + 1000, epoch=1)
        assert result is not None and result.admitted == fans, result
        admit_us = await _slowlog_us(client, "EVALSHA")
        # Every admitted fan's claim window ends: the next tick expires them all and admits as many.
        claim_ms = config.claim_grace_ms
        await client.slowlog_reset()
        result = await store.admit(event_id, now_ms=now_ms + 2000 + claim_ms, epoch=1)
        assert result is not None and result.admitted == fans and result.expired == fans, result
        churn_us = await _slowlog_us(client, "EVALSHA")
        await client.slowlog_reset()
        await client.zpopmin(EventKeys.of(event_id).queue, fans)
        bare_us = await _slowlog_us(client, "ZPOPMIN")
    finally:
        await client.config_set("slowlog-log-slower-than", 10_000)
    return admit_us, churn_us, bare_us


async def _expiry_tick(queue: QueueApp, waiters: int, dead: int) -> tuple[int, int]:
    """(Redis commands, Redis us) of one admit tick that drops ``dead`` of
    ``waiters`` waiting fans (spread through the queue) and admits ``dead``."""
    client, store = queue.rt.redis(), queue.store
    event_id = 1 + secrets.randbelow(2**40)
    now_ms = int(time.time() * 1000)
    config = event(event_id, opens_at_ms=now_ms - 1000, rate=dead)
    await store.put_config(config)
    keys = EventKeys.of(event_id)
    names = [f"cust-{i:09d}" for i in range(waiters)]
    await queue_fans(store, event_id, names, now_ms=now_ms)
    await store.admit(event_id, now_ms=now_ms, epoch=1)
    # Everyone but ``dead`` of them was seen since; those were last seen at the join.
    later = now_ms + config.presence_grace_ms + 1000
    step = waiters // dead
    alive = [name for i, name in enumerate(names) if i % step or i // step >= dead]
    for start in range(0, len(alive), 1000):
        await store.record_presence(event_id, alive[start : start + 1000], now_ms=later - 500)
    await client.config_set("slowlog-log-slower-than", 0)
    try:
        await client.slowlog_reset()
        before = await _commands(client)
        result = await store.admit(event_id, now_ms=later, epoch=1)
        commands = await _commands(client) - before - 1  # the INFO before
        assert result is not None and result.dropped == dead and result.admitted == dead, result
        busy_us = await _slowlog_us(client, "EVALSHA")
    finally:
        await client.config_set("slowlog-log-slower-than", 10_000)
    await client.delete(*keys.common, keys.sequence)
    return commands, busy_us


async def _slowlog_total_us(client: aioredis.Redis, command: str) -> int:
    """The time of every ``command`` in the slow log, added up (a tick
    with lanes runs one admit script per lane)."""
    entries = await client.slowlog_get(200)
    return sum(int(entry["duration"]) for entry in entries if entry["command"].split()[:1] == [command.encode()])


LANES = (Lane("presale", LaneEntry.CODE, 30), Lane("members", LaneEntry.OPEN, 20))


class _SetClock:
    """A clock the benchmark sets (the admitter ticks at a chosen time)."""

    def __init__(self) -> None:
        self.at = time.time()

    def now(self) -> float:
        return self.at


async def _lanes_tick(queue: QueueApp, clock: _SetClock, waiters: int, dead: int, admit: int) -> tuple[int, int, int]:
    """A room with three lanes (the general one, presale, members):
    ``waiters`` fans spread over them, ``dead`` of whom were not seen for
    the presence grace; one admitter tick of up to ``admit`` fans. Its
    Redis commands, the Redis time of its scripts added up (us), and the
    fans it admitted."""
    client, store = queue.rt.redis(), queue.store
    event_id = 1 + secrets.randbelow(2**40)
    clock.at = time.time()
    now_ms = int(clock.now() * 1000)
    config = dataclasses.replace(event(event_id, opens_at_ms=now_ms - 1000, rate=admit), lanes=LANES)
    await queue.handler.create_waiting_room(config)
    await queue.admitter.refresh()
    lanes = ("", "presale", "members")
    names = [f"cust-{i:09d}" for i in range(waiters)]
    for start in range(0, waiters, 2000):
        await asyncio.gather(
            *(
                store.join(event_id, name, "", now_ms=now_ms, random_score=0, limits=NO_LIMITS, lane=lanes[i % 3])
                for i, name in enumerate(names[start : start + 2000], start)
            )
        )
    await queue.admitter.tick_event(event_id, epoch=1)  # the first tick starts the rate's clock
    # Everyone but ``dead`` of them (spread over the lanes) was seen since.
    later = now_ms + config.presence_grace_ms + 1000
    step = waiters // dead
    alive = [name for i, name in enumerate(names) if i % step or i // step >= dead]
    for start in range(0, len(alive), 1000):
        await store.record_presence(event_id, alive[start : start + 1000], now_ms=later - 500)
    clock.at = later / 1000  # the admitter's tick happens then
    await client.config_set("slowlog-log-slower-than", 0)
    try:
        await client.slowlog_reset()
        before = await _commands(client)
        result = await queue.admitter.tick_event(event_id, epoch=1)
        commands = await _commands(client) - before - 1  # the INFO before
        assert result is not None and result.dropped == dead, result
        busy_us = await _slowlog_total_us(client, "EVALSHA")
    finally:
        await client.config_set("slowlog-log-slower-than", 10_000)
    return commands, busy_us, result.admitted


async def _main(fans_for_memory: int, few: int, many: int, ticks: int) -> None:
    rows: list[Row] = []
    async with private_database() as database_url:
        with private_redis() as (redis_url, _):
            client = aioredis.Redis.from_url(redis_url)
            version = (await client.info("server"))["redis_version"]
            await client.aclose()
            few_per_tick = await _commands_per_tick(database_url, redis_url, few, ticks)
            many_per_tick = await _commands_per_tick(database_url, redis_url, many, ticks)
            rows.append(
                Row(
                    f"Redis commands per admit tick, {many:,} watchers*",
                    many_per_tick,
                    "",
                    few_per_tick,
                    f"same as with {few:,}",
                    better="lower",
                )
            )
            async with queue_app(database_url, redis_url) as queue:
                steady, bare = await _bytes_per_fan(queue, fans_for_memory, NO_LIMITS)
                rows.append(Row("Redis bytes per queued fan", steady, "B", bare, "<= 140 B", better="lower"))
                limited, bare_again = await _bytes_per_fan(
                    queue, fans_for_memory, JoinLimits(per_account=20, per_client=0, window_ms=10_000)
                )
                rows.append(
                    Row(
                        "  same, within a join-limit window (transient)",
                        limited,
                        "B",
                        bare_again,
                        "counters expire after 2 windows",
                        better="lower",
                    )
                )
                admit_us, churn_us, bare_us = await _admit_tick_us(queue, 5000)
                rows.append(
                    Row(
                        "Redis busy: admit tick of 5,000 fans",
                        admit_us / 1000,
                        "ms",
                        bare_us / 1000,
                        "< 20 ms",
                        "lower",
                    )
                )
                rows.append(
                    Row(
                        "Redis busy: tick expiring 5,000 + admitting 5,000",
                        churn_us / 1000,
                        "ms",
                        bare_us / 1000,
                        "< 20 ms",
                        "lower",
                    )
                )
                few_commands, few_us = await _expiry_tick(queue, EXPIRY_FEW, EXPIRY_DEAD)
                many_commands, many_us = await _expiry_tick(queue, EXPIRY_MANY, EXPIRY_DEAD)
                rows.append(
                    Row(
                        f"Redis commands: tick dropping {EXPIRY_DEAD} dead waiters, {EXPIRY_MANY:,} waiting**",
                        many_commands,
                        "",
                        few_commands,
                        f"same as with {EXPIRY_FEW} waiting",
                        better="lower",
                    )
                )
                rows.append(
                    Row(
                        f"Redis busy: the same tick, {EXPIRY_MANY:,} waiting",
                        many_us / 1000,
                        "ms",
                        few_us / 1000,
                        f"flat (baseline: {EXPIRY_FEW} waiting)",
                        "lower",
                    )
                )
            clock = _SetClock()
            async with queue_app(database_url, redis_url, clock=clock) as queue:
                few_commands, few_us, _ = await _lanes_tick(queue, clock, EXPIRY_FEW, EXPIRY_DEAD, EXPIRY_DEAD)
                many_commands, many_us, _ = await _lanes_tick(queue, clock, EXPIRY_MANY, EXPIRY_DEAD, EXPIRY_DEAD)
                rows.append(
                    Row(
                        f"Redis commands: 3-lane tick dropping {EXPIRY_DEAD} dead, {EXPIRY_MANY:,} waiting***",
                        many_commands,
                        "",
                        few_commands,
                        f"same as with {EXPIRY_FEW} waiting",
                        better="lower",
                    )
                )
                rows.append(
                    Row(
                        f"Redis busy: the same 3-lane tick, {EXPIRY_MANY:,} waiting",
                        many_us / 1000,
                        "ms",
                        few_us / 1000,
                        f"flat (baseline: {EXPIRY_FEW} waiting)",
                        "lower",
                    )
                )
                _, lanes_us, admitted = await _lanes_tick(queue, clock, 15_000 + 30, 30, 5000)
                rows.append(
                    Row(
                        f"Redis busy: 3-lane tick admitting {admitted:,} (and dropping 30)",
                        lanes_us / 1000,
                        "ms",
                        bare_us / 1000,
                        "< 20 ms",
                        "lower",
                    )
                )
    report(
        f"QueueService's Redis cost, private redis-server {version} (baseline: bare commands on the same server)",
        rows,
    )
    print(
        f"  * every command Redis ran in {ticks} ticks of {TICK_SECONDS:g} s (commands inside scripts included),"
        f" per tick; baseline: the same with {few:,} watchers"
    )
    print(
        f"  ** one tick dropping {EXPIRY_DEAD} fans not seen for the presence grace and admitting {EXPIRY_DEAD};"
        f" baseline: the same tick with {EXPIRY_FEW} waiting"
    )
    print(
        "  *** one admitter tick of a room with three lanes (general, presale 30%, members 20%): one admit script"
        f" per lane, {EXPIRY_DEAD} dead waiters dropped; baseline: the same with {EXPIRY_FEW} waiting"
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--fans", type=int, default=200_000, help="fans queued for the memory figure")
    parser.add_argument("--few", type=int, default=100)
    parser.add_argument("--many", type=int, default=10_000)
    parser.add_argument("--ticks", type=int, default=20)
    args = parser.parse_args()
    asyncio.run(_main(args.fans, args.few, args.many, args.ticks))


if __name__ == "__main__":
    main()
