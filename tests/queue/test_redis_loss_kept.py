"""What the waiting room keeps besides the fans' places when Redis loses
its data (FLUSHDB on a Redis of the test's own, then the admitter's
rebuild): an operator's flags and pause, the refusal counters, the staff
passes' bindings, and the pre-queue's placements the draw had not copied
yet; and the rebuild reads the room's history a page at a time."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, cast

import pytest
import redis.asyncio as aioredis
from prometheus_client import CollectorRegistry

from boxoffice import db, draw
from boxoffice.errors import BoxofficeError
from queue_svc.adapters.pg_generations import PgRoomGenerations
from queue_svc.adapters.redis_rebuild import RedisRoomImages
from queue_svc.app import QueueApp
from queue_svc.jobs.admitter import Admitter
from queue_svc.jobs.lifecycle import LifecycleRow
from queue_svc.metrics import AdmitterMetrics, RebuildMetrics
from queue_svc.model import Lane, LaneEntry, QueueState, WaitingRoomConfig
from queue_svc.rebuild import Rebuilder, RoomGenerations
from tests.queue.harness import MINUTE_MS, AlwaysLeader, keys_of, members, new_event_id, queue_app, room_config
from tests.support import Stores

pytestmark = pytest.mark.slow

_LANES = (Lane("presale", LaneEntry.CODE, 30), Lane("staff", LaneEntry.STAFF, 10))


@contextlib.asynccontextmanager
async def _queue(stores: Stores, redis_url: str) -> AsyncIterator[tuple[QueueApp, aioredis.Redis]]:
    client = aioredis.Redis.from_url(redis_url)
    try:
        async with queue_app(stores, redis_url=redis_url) as queue:
            yield queue, client
    finally:
        await client.aclose()


async def _room(queue: QueueApp, *, opens_in_ms: int = -1000) -> int:
    event_id = new_event_id()
    now_ms = int(queue.rt.clock.now() * 1000)
    await queue.handler.create_waiting_room(room_config(event_id, opens_at_ms=now_ms + opens_in_ms, lanes=_LANES))
    return event_id


async def _lose_and_rebuild(
    queue: QueueApp, client: aioredis.Redis, event_id: int, *, rebuilder: Rebuilder | None = None
) -> None:
    """Copy the lifecycle, lose Redis's data, rebuild the room as the
    admitter does on its next tick (with the app's rebuilder, or ``rebuilder``)."""
    await queue.lifecycle_recorder.pass_once()
    await client.flushdb()
    config = await queue.rooms.get(event_id)
    assert config is not None
    generation = await (rebuilder or queue.rebuilder).rebuild(config, now_ms=int(queue.rt.clock.now() * 1000))
    assert generation == 2


async def _refused(call: Any) -> BoxofficeError:
    with pytest.raises(BoxofficeError) as caught:
        await call
    return caught.value


async def _refusals(queue: QueueApp, event_id: int) -> dict[str, int]:
    async with db.transaction(queue.rt.pool()) as conn:
        cur = await conn.execute("SELECT reason, refused FROM queue_refusals WHERE event_id = %s", (event_id,))
        return {str(reason): int(refused) for reason, refused in await cur.fetchall()}


async def test_flags_the_pause_and_the_refusal_counts_survive_a_flush(stores: Stores, embedded_redis_url: str) -> None:
    async with _queue(stores, embedded_redis_url) as (queue, client):
        event_id = await _room(queue)
        fans = [f"fan-{n}" for n in range(4)]
        for fan in fans:
            await queue.handler.join(event_id, fan, "")
        now_ms = int(queue.rt.clock.now() * 1000)
        # Flagged while waiting; flagged and taken out again; flagged before joining.
        assert await queue.store.flag(event_id, "fan-1", flagged=True, now_ms=now_ms)
        assert await queue.store.flag(event_id, "fan-2", flagged=True, now_ms=now_ms)
        assert await queue.store.flag(event_id, "fan-2", flagged=False, now_ms=now_ms)
        assert await queue.store.flag(event_id, "later", flagged=True, now_ms=now_ms)
        await queue.handler.set_paused(event_id, True)
        for n in range(2):
            err = await _refused(queue.handler.join(event_id, f"guess-{n}", "", lane="presale", access_code="X" * 16))
            assert err.reason in ("ACCESS_CODE_INVALID",)
        await queue.lifecycle_recorder.pass_once()
        assert await _refusals(queue, event_id) == {"access_code_invalid": 2}

        await _lose_and_rebuild(queue, client, event_id)

        keys = keys_of(event_id)
        assert await members(client, keys.queue) == fans
        assert await client.smembers(keys.shadow) == {b"fan-1", b"later"}
        assert await client.hget(keys.config, "paused") == b"1"
        assert await client.hgetall(keys.refusals) == {b"access_code_invalid": b"2"}
        # Counted on from the stored total, not from nothing.
        await _refused(queue.handler.join(event_id, "guess-2", "", lane="presale", access_code="X" * 16))
        await queue.lifecycle_recorder.pass_once()
        assert await _refusals(queue, event_id) == {"access_code_invalid": 3}


async def test_a_staff_pass_stays_its_first_holders_after_a_flush(stores: Stores, embedded_redis_url: str) -> None:
    async with _queue(stores, embedded_redis_url) as (queue, client):
        event_id = await _room(queue)
        staff_pass, found = queue.staff_passes.issue(event_id, "stage manager", 10 * MINUTE_MS)
        joined = await queue.handler.join(event_id, "crew-a", "", lane="staff", staff_pass=staff_pass)
        assert joined.position.lane == "staff"

        await _lose_and_rebuild(queue, client, event_id)

        # Redis forgot the binding; Postgres did not: another account is refused
        # (and Redis is put right), the holder still joins.
        err = await _refused(queue.handler.join(event_id, "crew-b", "", lane="staff", staff_pass=staff_pass))
        assert err.reason == "STAFF_PASS_INVALID" and err.metadata.get("check") in (None, "bound")
        binding = await client.get(f"{{ev:{event_id}}}:staffpass:{found.pass_id}")
        assert binding == b"crew-a"
        again = await queue.handler.join(event_id, "crew-a", "", lane="staff", staff_pass=staff_pass)
        assert again.position.lane == "staff"


async def _draw_entries(queue: QueueApp, event_id: int) -> tuple[set[str], int]:
    async with db.transaction(queue.rt.pool()) as conn:
        cur = await conn.execute("SELECT pseudonym FROM queue_draw_entries WHERE event_id = %s", (event_id,))
        pseudonyms = {str(row[0]) for row in await cur.fetchall()}
        cur = await conn.execute("SELECT recorded FROM queue_draws WHERE event_id = %s", (event_id,))
        row = await cur.fetchone()
    assert row is not None
    return pseudonyms, int(row[0])


async def test_pre_queue_placements_not_copied_to_the_draw_come_back(stores: Stores, embedded_redis_url: str) -> None:
    async with _queue(stores, embedded_redis_url) as (queue, client):
        event_id = await _room(queue, opens_in_ms=10 * MINUTE_MS)
        early = [f"early-{n}" for n in range(6)]
        late = [f"late-{n}" for n in range(4)]
        for fan in early:
            await queue.handler.join(event_id, fan, "")
        await queue.draw_recorder.pass_once()
        copied, recorded = await _draw_entries(queue, event_id)
        assert len(copied) == recorded == len(early)
        for fan in late:
            await queue.handler.join(event_id, fan, "")
        # The late placements reach the lifecycle's copy, not the draw's.

        # The draw's copy is read in pages of four (here two pages).
        paged = Rebuilder(
            generations=queue.generations, images=RedisRoomImages(queue.batcher), store=queue.store, page_size=4
        )
        await _lose_and_rebuild(queue, client, event_id, rebuilder=paged)

        keys = keys_of(event_id)
        assert await client.llen(keys.pre_queue_log) == len(early) + len(late)
        await queue.handler.join(event_id, "after", "")
        await queue.draw_recorder.pass_once()
        pseudonyms, recorded = await _draw_entries(queue, event_id)
        async with db.transaction(queue.rt.pool()) as conn:
            cur = await conn.execute("SELECT pseudonym_key FROM queue_draws WHERE event_id = %s", (event_id,))
            row = await cur.fetchone()
        assert row is not None
        key = bytes(row[0])
        assert pseudonyms == {draw.pseudonym(key, event_id, fan) for fan in [*early, *late, "after"]}
        assert recorded == len(early) + len(late) + 1


class _CountedHistory:
    """The room's real generations (Postgres), counting the pages of
    history a rebuild reads and the most rows one page held."""

    def __init__(self, inner: PgRoomGenerations) -> None:
        self._inner = inner
        self.pages = 0
        self.largest = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    async def history(self, event_id: int, *, after: int, limit: int) -> list[LifecycleRow]:
        page = await self._inner.history(event_id, after=after, limit=limit)
        self.pages += 1
        self.largest = max(self.largest, len(page))
        return page


async def test_the_history_is_read_in_pages_and_rebuilds_the_same_room(stores: Stores, embedded_redis_url: str) -> None:
    async with _queue(stores, embedded_redis_url) as (queue, client):
        event_id = await _room(queue)
        fans = [f"paged-{n}" for n in range(9)]
        for fan in fans:
            await queue.handler.join(event_id, fan, "")
        now_ms = int(queue.rt.clock.now() * 1000)
        await queue.store.flag(event_id, "paged-4", flagged=True, now_ms=now_ms)
        await queue.handler.leave(event_id, "paged-7")
        await queue.lifecycle_recorder.pass_once()
        await client.flushdb()
        config = await queue.rooms.get(event_id)
        assert config is not None
        history = _CountedHistory(PgRoomGenerations(queue.rt.pool()))
        registry = CollectorRegistry()
        rebuilder = Rebuilder(
            generations=cast(RoomGenerations, history),
            images=RedisRoomImages(queue.batcher),
            store=queue.store,
            page_size=2,
            metrics=RebuildMetrics.create(registry),
        )
        assert registry.get_sample_value("boxoffice_queue_rebuilds_total") == 0
        assert await rebuilder.rebuild(config, now_ms=int(queue.rt.clock.now() * 1000)) == 2
        # Counted: one rebuild, its time, the 8 fans waiting put back (one of them flagged).
        assert registry.get_sample_value("boxoffice_queue_rebuilds_total") == 1
        assert registry.get_sample_value("boxoffice_queue_rebuild_seconds_count") == 1
        assert registry.get_sample_value("boxoffice_queue_rebuild_fans_restored_total") == 8
        # 11 rows (9 joins, a flag, a leave): 6 pages of at most 2 rows.
        assert (history.pages, history.largest) == (6, 2)
        keys = keys_of(event_id)
        assert await members(client, keys.queue) == [fan for fan in fans if fan != "paged-7"]
        assert await client.smembers(keys.shadow) == {b"paged-4"}
        assert await client.hget(keys.outcomes, "paged-7") == b"L"


class _FlushDuringRefresh:
    """The admitter's rebuilder, with a hook run right after the refresh has
    read the rooms' generations and before it mirrors them: what happens
    there happens between the admitter's read of Postgres and its write to
    Redis."""

    def __init__(self, inner: Rebuilder, hook: Callable[[], Awaitable[None]]) -> None:
        self._inner = inner
        self._hook: Callable[[], Awaitable[None]] | None = hook

    async def generations(self) -> dict[int, tuple[int, int]]:
        read = await self._inner.generations()
        hook, self._hook = self._hook, None
        if hook is not None:
            await hook()
        return read

    async def rebuild(self, config: WaitingRoomConfig, *, now_ms: int) -> int | None:
        return await self._inner.rebuild(config, now_ms=now_ms)


async def test_a_flush_while_the_admitter_refreshes_strands_nobody(stores: Stores, embedded_redis_url: str) -> None:
    """The admitter read the room as one with nothing to rebuild; then its
    first joins were copied and Redis lost its data; then it mirrored the
    room. The fans come back with the rebuild of its next tick (a mirror
    that marked the room as it read it would have left it empty)."""
    async with _queue(stores, embedded_redis_url) as (queue, client):
        event_id = await _room(queue)
        fans = [f"early-{n}" for n in range(3)]

        async def joined_copied_then_lost() -> None:
            for fan in fans:
                await queue.handler.join(event_id, fan, "")
            await queue.lifecycle_recorder.pass_once()
            await client.flushdb()

        admitter = Admitter(
            store=queue.store,
            rooms=queue.rooms,
            clock=queue.rt.clock,
            settings=queue.settings,
            metrics=AdmitterMetrics.create(CollectorRegistry()),
            leadership=AlwaysLeader(1),
            rebuilder=_FlushDuringRefresh(queue.rebuilder, joined_copied_then_lost),
        )
        await admitter.tick(1)  # refresh (and the loss inside it), then the room's tick
        for fan in fans:
            state = (await queue.handler.position(event_id, fan)).state
            assert state in (QueueState.WAITING, QueueState.ADMITTED), (fan, state)
        assert await client.get(keys_of(event_id).generation) == b"2"
