"""Leader election on a real Postgres: advisory lock on a dedicated session,
epoch from ``leader_epochs``, a server-side bound on a silent leader's
session, and a renew deadline after which a leader steps down.

Timings are short (lease 6 s, renew deadline 2 s, retry 0.25 s, so the
server ends a silent session after 4 s); the only time bounds asserted are
generous multiples of the lease.
"""

from __future__ import annotations

import asyncio
import os
import secrets
import signal
import time

import psycopg
from prometheus_client import CollectorRegistry

from boxoffice.leader import Elector, LeaderMetrics, LeaderTimings, PostgresLock
from tests.leader.support import BlackholeProxy, Candidates, ChildCandidate, Timeline, timing_env, wait_until
from tests.support import Stores

LEASE, RENEW, RETRY = 6.0, 2.0, 0.25
TIMINGS = timing_env(LEASE, RENEW, RETRY)
GENEROUS = 3 * LEASE


def _name() -> str:
    return f"test-{secrets.token_hex(4)}"


async def _sessions(stores: Stores, name: str) -> int:
    async with await psycopg.AsyncConnection.connect(stores.database_url, autocommit=True) as conn:
        cur = await conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s", (f"boxoffice-leader:{name}",)
        )
        row = await cur.fetchone()
    return int(row[0]) if row else 0


async def _epoch(stores: Stores, name: str) -> int | None:
    async with await psycopg.AsyncConnection.connect(stores.database_url, autocommit=True) as conn:
        cur = await conn.execute("SELECT epoch FROM leader_epochs WHERE name = %s", (name,))
        row = await cur.fetchone()
    return None if row is None else int(row[0])


async def test_one_of_three_leads_and_cancelling_hands_over(stores: Stores) -> None:
    name = _name()
    timeline = Timeline()
    candidates = Candidates(timeline)
    try:
        for who in ("a", "b", "c"):
            candidates.start(who, stores.database_url, TIMINGS, name=name)
        await wait_until(lambda: timeline.leader() is not None, GENEROUS, "a leader")
        first = timeline.running()[0]
        # Many retry periods later there is still exactly one.
        await asyncio.sleep(12 * RETRY)
        assert [t.who for t in timeline.terms] == [first.who]
        assert await _epoch(stores, name) == first.epoch
        rt = candidates.runtimes[first.who]
        assert rt.registry.get_sample_value("boxoffice_leader_is_leader", {"name": name}) == 1.0
        assert rt.registry.get_sample_value("boxoffice_leader_epoch", {"name": name}) == first.epoch

        # Cancelling the leader ends its work and frees the lock at once.
        await candidates.stop(first.who)
        assert first.stopped is not None
        assert rt.registry.get_sample_value("boxoffice_leader_is_leader", {"name": name}) == 0.0
        await wait_until(lambda: len(timeline.terms) == 2 and timeline.leader() is not None, LEASE, "a successor")
        second = timeline.terms[1]
        assert second.who != first.who
        assert second.epoch > first.epoch
        assert timeline.overlaps() == []
    finally:
        await candidates.stop_all()
    # Nothing keeps running or connected once every candidate is cancelled.
    assert timeline.running() == []
    for _ in range(int(LEASE / 0.05)):  # the server notices closed sessions promptly
        if await _sessions(stores, name) == 0:
            break
        await asyncio.sleep(0.05)
    assert await _sessions(stores, name) == 0


async def test_cancelling_a_standby_stops_it_cleanly(stores: Stores) -> None:
    name = _name()
    timeline = Timeline()
    candidates = Candidates(timeline)
    try:
        candidates.start("a", stores.database_url, TIMINGS, name=name)
        await wait_until(lambda: timeline.leader() == "a", GENEROUS, "a leads")
        candidates.start("b", stores.database_url, TIMINGS, name=name)
        await asyncio.sleep(4 * RETRY)
        await candidates.stop("b")
        assert timeline.leader() == "a"
        assert [t.who for t in timeline.terms] == ["a"]
    finally:
        await candidates.stop_all()


async def test_work_that_fails_gives_the_role_up_and_raises(stores: Stores) -> None:
    name = _name()
    timeline = Timeline()
    candidates = Candidates(timeline)
    try:
        candidates.start("a", stores.database_url, TIMINGS, name=name, fail_after=0.2)
        await wait_until(lambda: timeline.last_of("a") is not None, GENEROUS, "a leads")
        candidates.start("b", stores.database_url, TIMINGS, name=name)
        task = candidates.tasks["a"]
        await wait_until(task.done, GENEROUS, "a's run ends")
        assert isinstance(task.exception(), RuntimeError)
        await wait_until(lambda: timeline.leader() == "b", LEASE, "b takes over")
        assert timeline.terms[-1].epoch > timeline.terms[0].epoch
        candidates.tasks.pop("a")
    finally:
        await candidates.stop_all()


async def test_sigkilled_leader_is_replaced_within_the_lease(stores: Stores) -> None:
    name = _name()
    timeline = Timeline()
    candidates = Candidates(timeline)
    child = await ChildCandidate.start(
        database_url=stores.database_url, name=name, identity="child", lease=LEASE, renew=RENEW, retry=RETRY
    )
    try:
        await wait_until(child.leading, GENEROUS, "the child leads")
        child_epoch = child.events[-1]["epoch"]
        candidates.start("b", stores.database_url, TIMINGS, name=name)
        await asyncio.sleep(4 * RETRY)
        assert timeline.terms == []
        os.kill(child.pid, signal.SIGKILL)
        killed_at = time.monotonic()
        await wait_until(lambda: timeline.leader() == "b", GENEROUS, "b takes over")
        assert timeline.terms[0].started - killed_at < LEASE
        assert timeline.terms[0].epoch > child_epoch
    finally:
        await candidates.stop_all()
        await child.close()


async def test_sigstopped_leader_is_deposed_with_a_lower_epoch(stores: Stores) -> None:
    name = _name()
    timeline = Timeline()
    candidates = Candidates(timeline)
    child = await ChildCandidate.start(
        database_url=stores.database_url, name=name, identity="child", lease=LEASE, renew=RENEW, retry=RETRY
    )
    try:
        await wait_until(child.leading, GENEROUS, "the child leads")
        child_epoch = child.events[-1]["epoch"]
        candidates.start("b", stores.database_url, TIMINGS, name=name)
        os.kill(child.pid, signal.SIGSTOP)
        stopped_at = time.monotonic()
        # The paused leader's session goes silent; the server ends it and the
        # lock is free for the standby, within the lease.
        await wait_until(lambda: timeline.leader() == "b", GENEROUS, "b takes over from the paused leader")
        assert timeline.terms[0].started - stopped_at < LEASE + 2 * RETRY
        assert timeline.terms[0].epoch > child_epoch
        # Woken up, the old leader finds out and stops its work.
        os.kill(child.pid, signal.SIGCONT)
        await wait_until(lambda: child.event("stopped") is not None, GENEROUS, "the woken leader steps down")
        await asyncio.sleep(4 * RETRY)
        assert not child.leading()
        assert timeline.leader() == "b"
    finally:
        await candidates.stop_all()
        await child.close()


def _through(proxy: BlackholeProxy, name: str, *, session_bound: float | None) -> Elector:
    """A candidate through the proxy, with its lock built by hand (so that a
    control can change the server-side bound)."""
    timings = LeaderTimings(lease_seconds=LEASE, renew_deadline_seconds=RENEW, retry_seconds=RETRY)
    lock = PostgresLock(
        database_url=proxy.url, name=name, identity="a", timings=timings, session_bound_seconds=session_bound
    )
    return Elector(lock, name=name, identity="a", timings=timings, metrics=LeaderMetrics.create(CollectorRegistry()))


async def _partitioned_leader(stores: Stores, *, session_bound: float | None, wait: float) -> Timeline:
    """``a`` leads through a proxy that then black-holes; ``b`` (direct)
    campaigns. The timeline after ``wait`` seconds or b's first term."""
    name = _name()
    timeline = Timeline()
    candidates = Candidates(timeline)
    proxy = BlackholeProxy(stores.database_url)
    await proxy.start()
    a = _through(proxy, name, session_bound=session_bound)
    a_task = asyncio.create_task(a.run(timeline.lead_for("a")))
    try:
        await wait_until(lambda: timeline.leader() == "a", GENEROUS, "a leads")
        candidates.start("b", stores.database_url, TIMINGS, name=name)
        await asyncio.sleep(4 * RETRY)
        proxy.blackhole()
        try:
            await wait_until(lambda: timeline.last_of("b") is not None, wait, "b takes over")
        except AssertionError:
            pass
        return timeline
    finally:
        a_task.cancel()
        await asyncio.gather(a_task, return_exceptions=True)
        await candidates.stop_all()
        await proxy.close()


async def test_partitioned_leader_steps_down_before_its_successor_starts(stores: Stores) -> None:
    bound = LeaderTimings(LEASE, RENEW, RETRY).session_bound_seconds
    timeline = await _partitioned_leader(stores, session_bound=bound, wait=GENEROUS)
    a, b = timeline.last_of("a"), timeline.last_of("b")
    assert a is not None and b is not None, timeline.terms
    assert a.stopped is not None
    assert b.epoch > a.epoch
    assert timeline.overlaps() == []


async def test_control_without_the_server_side_bound_the_lock_is_never_freed(stores: Stores) -> None:
    # The partitioned leader steps down all the same, but its session (and
    # lock) lives on in the server: nobody leads any more.
    timeline = await _partitioned_leader(stores, session_bound=None, wait=2 * LEASE)
    a = timeline.last_of("a")
    assert a is not None and a.stopped is not None
    assert timeline.last_of("b") is None


async def test_control_a_bound_shorter_than_the_renew_deadline_lets_two_lead(stores: Stores) -> None:
    # The order of the two bounds is what keeps terms apart: a server that
    # frees the lock before the leader's renew deadline lets the successor
    # start while the old leader still runs its work.
    timeline = await _partitioned_leader(stores, session_bound=0.5, wait=GENEROUS)
    assert timeline.last_of("b") is not None
    assert timeline.overlaps() != []
