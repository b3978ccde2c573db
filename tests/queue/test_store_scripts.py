"""The queue's Lua scripts, on the suite's Redis and on the embedded Redis
6.2: joins, places, admission, expiry, epochs, limits."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
import redis.asyncio as aioredis

from queue_svc.app import QueueApp
from queue_svc.model import PRE_QUEUE_BAND, QueueState, TickResult
from queue_svc.ports import FanOp, JoinLimits, JoinStatus, QueueStore
from tests.queue.harness import MINUTE_MS, NO_LIMITS, keys_of, new_event_id, queue_app, room_config
from tests.support import Stores

NOW = 1_900_000_000_000  # a fixed clock (ms): every script takes the time as an argument


@pytest.fixture(params=["suite-redis", "embedded-redis-6.2"])
async def redis_url(request: pytest.FixtureRequest, stores: Stores) -> str:
    if request.param == "suite-redis":
        return stores.redis_url
    url = request.getfixturevalue("embedded_redis_url")
    assert isinstance(url, str)
    return url


@pytest.fixture
async def queue(stores: Stores, redis_url: str) -> AsyncIterator[QueueApp]:
    """The app on that Redis."""
    async with queue_app(stores, redis_url=redis_url) as queue:
        yield queue


@pytest.fixture
def store(queue: QueueApp) -> QueueStore:
    return queue.store


@pytest.fixture
def client(queue: QueueApp) -> aioredis.Redis:
    return queue.rt.redis()


async def _open_event(store: QueueStore, **changes: object) -> int:
    event_id = new_event_id()
    await store.put_config(room_config(event_id, opens_at_ms=NOW - MINUTE_MS, **changes))
    return event_id


async def _join(store: QueueStore, event_id: int, customer: str, *, now: int = NOW, score: int = 7) -> int:
    reply = await store.join(event_id, customer, "", now_ms=now, random_score=score, limits=NO_LIMITS)
    assert reply.status is JoinStatus.WAITING, reply
    return reply.score


async def test_join_is_idempotent_and_after_opening_in_arrival_order(store: QueueStore) -> None:
    event_id = await _open_event(store)
    first = await store.join(event_id, "ann", "", now_ms=NOW, random_score=5, limits=NO_LIMITS)
    second = await store.join(event_id, "bob", "", now_ms=NOW, random_score=3, limits=NO_LIMITS)
    again = await store.join(event_id, "ann", "", now_ms=NOW + 5, random_score=1, limits=NO_LIMITS)
    assert first.newly_joined and second.newly_joined and not again.newly_joined
    assert first.score == again.score == PRE_QUEUE_BAND + 1  # the random score is ignored after opening
    assert second.score == PRE_QUEUE_BAND + 2
    assert (first.ahead, second.ahead, again.ahead) == (0, 1, 0)


async def test_pre_queue_places_are_random_and_below_every_later_place(store: QueueStore) -> None:
    event_id = new_event_id()
    await store.put_config(room_config(event_id, opens_at_ms=NOW + MINUTE_MS))
    early = await _join(store, event_id, "early", score=12345)
    assert early == 12345
    progress = await store.progress(event_id, now_ms=NOW)
    assert progress is not None and progress.pre_queue_joined == 1
    late = await _join(store, event_id, "late", now=NOW + MINUTE_MS, score=1)
    assert late == PRE_QUEUE_BAND + 1 > early


async def test_join_before_the_pre_queue_window_is_refused(store: QueueStore) -> None:
    event_id = new_event_id()
    await store.put_config(room_config(event_id, opens_at_ms=NOW + 60 * MINUTE_MS, pre_queue_window_ms=MINUTE_MS))
    reply = await store.join(event_id, "eager", "", now_ms=NOW, random_score=1, limits=NO_LIMITS)
    assert reply.status is JoinStatus.NOT_OPEN
    place = await store.fan(event_id, "eager", now_ms=NOW, op=FanOp.LOOK)
    assert place is not None and place.state is QueueState.NOT_IN_QUEUE


async def test_unknown_event_is_reported_by_every_script(store: QueueStore) -> None:
    event_id = new_event_id()
    reply = await store.join(event_id, "x", "", now_ms=NOW, random_score=1, limits=NO_LIMITS)
    assert reply.status is JoinStatus.UNKNOWN_EVENT
    assert await store.fan(event_id, "x", now_ms=NOW, op=FanOp.LOOK) is None
    assert await store.admit(event_id, now_ms=NOW, epoch=1) is None
    assert await store.progress(event_id, now_ms=NOW) is None


async def test_admit_respects_the_cap_and_the_rate(store: QueueStore) -> None:
    event_id = await _open_event(
        store, admission_rate_per_second=10, max_active_shoppers=25, claim_grace_ms=10 * MINUTE_MS
    )
    for i in range(100):
        await _join(store, event_id, f"fan{i:03d}")
    first = await store.admit(event_id, now_ms=NOW, epoch=1)
    assert first is not None and first.admitted == 0  # the first tick starts the clock of the rate
    after_half_second = await store.admit(event_id, now_ms=NOW + 500, epoch=1)
    assert after_half_second is not None and after_half_second.admitted == 5
    # A long gap banks at most one second's worth.
    later = await store.admit(event_id, now_ms=NOW + 60_000, epoch=1)
    assert later is not None and later.admitted == 10
    result: TickResult | None = later
    for step in range(1, 6):
        result = await store.admit(event_id, now_ms=NOW + 60_000 + step * 1000, epoch=1)
        assert result is not None and result.active_shoppers <= 25
    assert result is not None
    assert result.active_shoppers == 25 and result.admitted_total == 25
    assert result.queue_length == 75


async def test_admission_pops_the_head_and_records_progress(store: QueueStore) -> None:
    event_id = await _open_event(store, admission_rate_per_second=3)
    scores = [await _join(store, event_id, f"fan{i}") for i in range(5)]
    await store.admit(event_id, now_ms=NOW, epoch=1)
    result = await store.admit(event_id, now_ms=NOW + 1000, epoch=1)
    assert result is not None and result.admitted == 3
    assert result.admitted_through_score == scores[2]
    states = [(await store.fan(event_id, f"fan{i}", now_ms=NOW + 1000, op=FanOp.LOOK)) for i in range(5)]
    assert [p.state for p in states if p] == [QueueState.ADMITTED] * 3 + [QueueState.WAITING] * 2
    progress = await store.progress(event_id, now_ms=NOW + 1000)
    assert progress is not None
    assert (progress.admitted_total, progress.queue_length, progress.active_shoppers) == (3, 2, 3)
    assert progress.rate_at_last_tick > 0


async def test_stale_epoch_is_refused_and_changes_nothing(store: QueueStore, client: aioredis.Redis) -> None:
    event_id = await _open_event(store, admission_rate_per_second=10)
    for i in range(20):
        await _join(store, event_id, f"fan{i}")
    assert (await store.admit(event_id, now_ms=NOW, epoch=5)) is not None
    keys = keys_of(event_id)
    queue_before = await client.zcard(keys.queue)
    stale = await store.admit(event_id, now_ms=NOW + 5000, epoch=4)
    assert stale is not None and stale.stale_epoch and stale.highest_epoch == 5 and stale.admitted == 0
    assert await client.zcard(keys.queue) == queue_before
    newer = await store.admit(event_id, now_ms=NOW + 5000, epoch=6)
    assert newer is not None and not newer.stale_epoch and newer.admitted == 10 and newer.highest_epoch == 6
    # Once a newer leader wrote, the former one (5) is refused too.
    again = await store.admit(event_id, now_ms=NOW + 6000, epoch=5)
    assert again is not None and again.stale_epoch


async def test_unclaimed_admissions_are_released_after_the_grace(store: QueueStore) -> None:
    event_id = await _open_event(store, admission_rate_per_second=2, max_active_shoppers=2, claim_grace_ms=5_000)
    for name in ("ann", "bob", "cat"):
        await _join(store, event_id, name)
    await store.admit(event_id, now_ms=NOW, epoch=1)
    admitted = await store.admit(event_id, now_ms=NOW + 1000, epoch=1)
    assert admitted is not None and admitted.admitted == 2
    # ann claims (starts her session); bob never does.
    claimed = await store.fan(event_id, "ann", now_ms=NOW + 2000, op=FanOp.CLAIM)
    assert claimed is not None and claimed.claimed_now and claimed.expires_at_ms == NOW + 2000 + 10 * MINUTE_MS
    full = await store.admit(event_id, now_ms=NOW + 3000, epoch=1)
    assert full is not None and full.admitted == 0 and full.active_shoppers == 2
    released = await store.admit(event_id, now_ms=NOW + 7000, epoch=1)
    assert released is not None and released.expired == 1 and released.admitted == 1
    bob = await store.fan(event_id, "bob", now_ms=NOW + 7000, op=FanOp.LOOK)
    cat = await store.fan(event_id, "cat", now_ms=NOW + 7000, op=FanOp.LOOK)
    ann = await store.fan(event_id, "ann", now_ms=NOW + 7000, op=FanOp.CLAIM)
    assert bob is not None and bob.state is QueueState.EXPIRED
    assert cat is not None and cat.state is QueueState.ADMITTED
    assert ann is not None and ann.state is QueueState.ADMITTED and not ann.claimed_now


async def test_sessions_expire_and_a_late_claim_finds_them_expired(store: QueueStore) -> None:
    event_id = await _open_event(store, admission_rate_per_second=5, session_length_ms=20_000, claim_grace_ms=5_000)
    for name in ("ann", "bob"):
        await _join(store, event_id, name)
    await store.admit(event_id, now_ms=NOW, epoch=1)
    await store.admit(event_id, now_ms=NOW + 1000, epoch=1)
    await store.fan(event_id, "ann", now_ms=NOW + 1000, op=FanOp.CLAIM)
    late = await store.fan(event_id, "bob", now_ms=NOW + 6001, op=FanOp.CLAIM)
    assert late is not None and late.state is QueueState.EXPIRED
    ended = await store.admit(event_id, now_ms=NOW + 21_001, epoch=1)
    assert ended is not None and ended.expired == 1 and ended.active_shoppers == 0
    ann = await store.fan(event_id, "ann", now_ms=NOW + 21_001, op=FanOp.LOOK)
    assert ann is not None and ann.state is QueueState.EXPIRED
    # An expired fan may queue again, at the back.
    assert await _join(store, event_id, "ann", now=NOW + 22_000) == PRE_QUEUE_BAND + 3


async def test_leave_and_end_session(store: QueueStore) -> None:
    event_id = await _open_event(store, admission_rate_per_second=1)
    for name in ("ann", "bob", "cat"):
        await _join(store, event_id, name)
    await store.admit(event_id, now_ms=NOW, epoch=1)
    await store.admit(event_id, now_ms=NOW + 1000, epoch=1)  # ann
    left = await store.fan(event_id, "bob", now_ms=NOW + 1000, op=FanOp.LEAVE)
    assert left is not None and left.state is QueueState.LEFT and left.changed
    again = await store.fan(event_id, "bob", now_ms=NOW + 1000, op=FanOp.LEAVE)
    assert again is not None and again.state is QueueState.LEFT and not again.changed
    cat = await store.fan(event_id, "cat", now_ms=NOW + 1000, op=FanOp.LOOK)
    assert cat is not None and cat.ahead == 0
    not_admitted = await store.fan(event_id, "cat", now_ms=NOW + 1000, op=FanOp.END)
    assert not_admitted is not None and not_admitted.state is QueueState.WAITING and not not_admitted.changed
    admitted_leaves = await store.fan(event_id, "ann", now_ms=NOW + 1000, op=FanOp.LEAVE)
    assert admitted_leaves is not None and admitted_leaves.state is QueueState.ADMITTED
    ended = await store.fan(event_id, "ann", now_ms=NOW + 1000, op=FanOp.END)
    assert ended is not None and ended.state is QueueState.COMPLETED and ended.changed
    progress = await store.progress(event_id, now_ms=NOW + 1000)
    assert progress is not None and progress.active_shoppers == 0 and progress.queue_length == 1
    # Re-joining after leaving queues at the back.
    assert await _join(store, event_id, "bob") == PRE_QUEUE_BAND + 4


async def test_pause_stops_admission(store: QueueStore) -> None:
    event_id = await _open_event(store, admission_rate_per_second=10, paused=True)
    await _join(store, event_id, "ann")
    await store.admit(event_id, now_ms=NOW, epoch=1)
    paused = await store.admit(event_id, now_ms=NOW + 5000, epoch=1)
    assert paused is not None and paused.admitted == 0
    await store.put_config(room_config(event_id, opens_at_ms=NOW - MINUTE_MS, admission_rate_per_second=10, version=2))
    resumed = await store.admit(event_id, now_ms=NOW + 6000, epoch=1)
    assert resumed is not None and resumed.admitted == 1


async def test_join_limits_per_account_and_per_client(store: QueueStore) -> None:
    event_id = await _open_event(store)
    limits = JoinLimits(per_account=3, per_client=5, window_ms=10_000)
    statuses = [
        (await store.join(event_id, "ann", "", now_ms=NOW, random_score=1, limits=limits)).status for _ in range(4)
    ]
    assert statuses == [JoinStatus.WAITING] * 3 + [JoinStatus.ACCOUNT_LIMITED]
    by_client = [
        (await store.join(event_id, f"bot{i}", "10.0.0.9", now_ms=NOW, random_score=1, limits=limits)).status
        for i in range(6)
    ]
    assert by_client == [JoinStatus.WAITING] * 5 + [JoinStatus.CLIENT_LIMITED]
    # The next window starts afresh.
    later = await store.join(event_id, "ann", "", now_ms=NOW + 10_000, random_score=1, limits=limits)
    assert later.status is JoinStatus.WAITING


async def test_config_mirror_keeps_the_newest_version(store: QueueStore, client: aioredis.Redis) -> None:
    event_id = new_event_id()
    assert await store.put_config(room_config(event_id, opens_at_ms=NOW, admission_rate_per_second=7, version=2))
    assert not await store.put_config(room_config(event_id, opens_at_ms=NOW, admission_rate_per_second=9, version=1))
    assert await client.hget(keys_of(event_id).config, "rate") == b"7"
