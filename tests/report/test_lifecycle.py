"""The queue's lifecycle log: every change of a fan's state is appended by
the script that makes it, and the recorder copies it to Postgres exactly
once (two recorders, a crash between insert and trim), and keeps the
retention."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from boxoffice import db
from boxoffice.config import ConfigError, Env
from queue_svc.app import QueueApp
from queue_svc.config import QueueSettings
from queue_svc.jobs.lifecycle import LifecycleMetrics, LifecycleRecorder, LifecycleRow, PgLifecycleRepository, parse
from queue_svc.model import PRE_QUEUE_BAND
from queue_svc.ports import FanOp, JoinLimits, JoinStatus
from tests.queue.harness import MINUTE_MS, NO_LIMITS, keys_of, new_event_id, queue_app, room_config
from tests.support import Stores

NOW = 1_900_000_000_000


def _recorder(queue: QueueApp, *, batch: int = 2000, retention_days: int = 90) -> LifecycleRecorder:
    from prometheus_client import CollectorRegistry

    return LifecycleRecorder(
        source=queue.store,
        repository=PgLifecycleRepository(queue.rt.pool()),
        clock=queue.rt.clock,
        interval_seconds=1.0,
        retention_days=retention_days,
        metrics=LifecycleMetrics.create(CollectorRegistry()),
        batch=batch,
    )


async def _rows(queue: QueueApp, event_id: int) -> list[tuple[Any, ...]]:
    async with db.transaction(queue.rt.pool()) as conn:
        cur = await conn.execute(
            """
            SELECT idx, kind, (extract(epoch FROM at) * 1000)::bigint, customer_id, score, pre_queue, detail
              FROM queue_lifecycle WHERE event_id = %s ORDER BY idx
            """,
            (event_id,),
        )
        return list(await cur.fetchall())


async def test_every_change_of_a_fan_is_logged_and_recorded_once(stores: Stores) -> None:
    async with queue_app(stores) as queue:
        store, client = queue.store, queue.rt.redis()
        event_id = new_event_id()
        opens = NOW + MINUTE_MS
        config = room_config(
            event_id,
            opens_at_ms=opens,
            max_active_shoppers=4,
            claim_grace_ms=1000,
            session_length_ms=5000,
            presence_grace_ms=10 * MINUTE_MS,
        )
        await store.put_config(config)
        limits = JoinLimits(per_account=1, per_client=0, window_ms=10_000)
        # Before opening: two in the pre-queue, one refused by the account limit.
        for name, score in (("pre-a", 5), ("pre-b", 9)):
            reply = await store.join(event_id, name, "", now_ms=NOW, random_score=score, limits=limits)
            assert reply.status is JoinStatus.WAITING
        assert (await store.join(event_id, "pre-a", "", now_ms=NOW, random_score=5, limits=limits)).status is (
            JoinStatus.ACCOUNT_LIMITED
        )
        # After opening: three at the back.
        t1 = opens + 10
        for name in ("back-c", "back-d", "back-e"):
            await store.join(event_id, name, "", now_ms=t1, random_score=0, limits=NO_LIMITS)
        assert await store.admit(event_id, now_ms=t1, epoch=1) is not None  # banks the rate from here
        await store.flag(event_id, "back-e", flagged=True, now_ms=t1)
        # back-d leaves while waiting.
        await store.fan(event_id, "back-d", now_ms=t1 + 1, op=FanOp.LEAVE)
        t2 = t1 + 1000
        tick = await store.admit(event_id, now_ms=t2, epoch=1)
        assert tick is not None and tick.admitted == 3
        # pre-a claims and ends (revoked); pre-b claims and its session expires; back-c never claims.
        await store.fan(event_id, "pre-a", now_ms=t2 + 5, op=FanOp.CLAIM)
        await store.fan(event_id, "pre-a", now_ms=t2 + 6, op=FanOp.END, reason="revoked")
        await store.fan(event_id, "pre-b", now_ms=t2 + 7, op=FanOp.CLAIM)
        t3 = t2 + 6000
        tick = await store.admit(event_id, now_ms=t3, epoch=1)
        assert tick is not None and tick.expired == 2
        # Unflagging puts back-e in the queue; not seen for the grace, it is dropped.
        await store.flag(event_id, "back-e", flagged=False, now_ms=t3)
        await store.put_config(
            room_config(
                event_id,
                opens_at_ms=opens,
                max_active_shoppers=4,
                presence_grace_ms=10 * MINUTE_MS,
                paused=True,
                version=2,
            )
        )
        tick = await store.admit(event_id, now_ms=t3 + 10 * MINUTE_MS + 1, epoch=1)
        assert tick is not None and tick.dropped == 1

        stored = await _recorder(queue, batch=4).record(event_id)
        rows = await _rows(queue, event_id)
        back = PRE_QUEUE_BAND
        assert [r[1:] for r in rows] == [
            ("joined", NOW, "pre-a", 5, True, None),
            ("joined", NOW, "pre-b", 9, True, None),
            ("joined", t1, "back-c", back + 1, False, None),
            ("joined", t1, "back-d", back + 2, False, None),
            ("joined", t1, "back-e", back + 3, False, None),
            ("flagged", t1, "back-e", None, None, None),
            ("left", t1 + 1, "back-d", None, None, None),
            ("admitted", t2, "pre-a", None, None, "tick"),
            ("admitted", t2, "pre-b", None, None, "tick"),
            ("admitted", t2, "back-c", None, None, "tick"),
            ("shadowed", t2, "back-e", None, None, None),
            ("claimed", t2 + 5, "pre-a", None, None, None),
            ("ended", t2 + 6, "pre-a", None, None, "revoked"),
            ("claimed", t2 + 7, "pre-b", None, None, None),
            ("no_show", t3, "back-c", None, None, None),
            ("expired", t3, "pre-b", None, None, None),
            ("unshadowed", t3, "back-e", None, None, None),
            ("dropped", t3 + 10 * MINUTE_MS + 1, "back-e", None, None, None),
        ]
        assert [r[0] for r in rows] == list(range(len(rows))) and stored == len(rows)
        # Copied and trimmed: the Redis log is empty, its trimmed count is the rows'.
        keys = keys_of(event_id)
        assert await client.llen(keys.lifecycle) == 0
        assert await client.get(keys.lifecycle_trimmed) == str(len(rows)).encode()
        async with db.transaction(queue.rt.pool()) as conn:
            cur = await conn.execute(
                "SELECT reason, refused FROM queue_refusals WHERE event_id = %s ORDER BY reason", (event_id,)
            )
            assert await cur.fetchall() == [("account_limit", 1)]
        # A second pass stores nothing more.
        assert await _recorder(queue).record(event_id) == 0
        assert len(await _rows(queue, event_id)) == len(rows)


async def test_the_safety_net_and_a_lapsed_admission_at_join_are_logged(stores: Stores) -> None:
    async with queue_app(stores) as queue:
        store = queue.store
        event_id = new_event_id()
        await store.put_config(room_config(event_id, opens_at_ms=NOW - MINUTE_MS, safety_net=True, claim_grace_ms=1000))
        reply = await store.join(event_id, "net", "", now_ms=NOW, random_score=0, limits=NO_LIMITS)
        assert reply.status is JoinStatus.ADMITTED
        # Past the claim deadline, joining again records the no-show and joins anew.
        await store.join(event_id, "net", "", now_ms=NOW + 2000, random_score=0, limits=NO_LIMITS)
        await _recorder(queue).record(event_id)
        kinds = [(r[1], r[3], r[6]) for r in await _rows(queue, event_id)]
        assert kinds[:3] == [("joined", "net", None), ("admitted", "net", "net"), ("no_show", "net", None)]
        assert kinds[3][0] in ("joined", "admitted")


async def test_two_recorders_and_a_crash_between_insert_and_trim_store_each_entry_once(stores: Stores) -> None:
    async with queue_app(stores) as queue:
        store, client = queue.store, queue.rt.redis()
        event_id = new_event_id()
        await store.put_config(room_config(event_id, opens_at_ms=NOW - MINUTE_MS))
        names = [f"fan-{i:04d}" for i in range(500)]
        await asyncio.gather(
            *(store.join(event_id, n, "", now_ms=NOW, random_score=0, limits=NO_LIMITS) for n in names[:250])
        )
        # A crash after the insert, before the trim: rows stored, log untouched.
        log = await store.lifecycle_log(event_id, count=100)
        assert log is not None and log.start == 0
        repository = PgLifecycleRepository(queue.rt.pool())
        rows = [row for i, e in enumerate(log.entries) if (row := parse(log.start + i, e)) is not None]
        assert await repository.record(event_id, rows) == 100
        assert await client.llen(keys_of(event_id).lifecycle) == 250
        # Two recorders at once, while more fans join.
        first, second = _recorder(queue, batch=37), _recorder(queue, batch=53)
        await asyncio.gather(
            first.record(event_id),
            second.record(event_id),
            *(store.join(event_id, n, "", now_ms=NOW, random_score=0, limits=NO_LIMITS) for n in names[250:]),
        )
        await first.record(event_id)
        recorded = await _rows(queue, event_id)
        assert [r[0] for r in recorded] == list(range(500))
        assert sorted(r[3] for r in recorded) == names
        assert await client.llen(keys_of(event_id).lifecycle) == 0
        # A trim from a stale start does nothing.
        assert not await store.trim_lifecycle(event_id, start=0, count=1)


async def test_retention_deletes_old_rows_and_its_setting_is_validated(stores: Stores) -> None:
    for bad in ("0", "-3", "x", "4000"):
        with pytest.raises(ConfigError):
            QueueSettings.from_env(Env({"BOXOFFICE_QUEUE_LIFECYCLE_RETENTION_DAYS": bad}))
    assert QueueSettings.from_env(Env({"BOXOFFICE_QUEUE_LIFECYCLE_RETENTION_DAYS": "7"})).lifecycle_retention_days == 7
    async with queue_app(stores) as queue:
        store = queue.store
        now_ms = int(queue.rt.clock.now() * 1000)
        event_id = new_event_id()
        await queue.rooms.create(room_config(event_id, opens_at_ms=now_ms - MINUTE_MS))
        await store.put_config(room_config(event_id, opens_at_ms=now_ms - MINUTE_MS))
        old = now_ms - 8 * 86_400_000
        # A row of eight days ago (stored as a recorder would have then), one of now.
        repository = PgLifecycleRepository(queue.rt.pool())
        assert await repository.record(event_id, [LifecycleRow(10**9, "joined", old, "old", 1, False)]) == 1
        await store.join(event_id, "new", "", now_ms=now_ms, random_score=0, limits=NO_LIMITS)
        recorder = _recorder(queue, retention_days=7)
        assert await recorder.pass_once() >= 1  # the first pass records, then keeps the retention
        assert [r[3] for r in await _rows(queue, event_id)] == ["new"]
