"""Small pieces without a server: the deadlock retry, the refund policy,
a hold's JSON round trip (stored confirm answers), the seat map cache."""

from __future__ import annotations

import asyncio
import uuid
from datetime import UTC, datetime, timedelta

import psycopg
import pytest

from booking_svc.adapters.postgres import retry_deadlock_once
from booking_svc.model import Hold, HoldState, Money, RefundPolicy, SeatMap, SeatRef
from booking_svc.seatmap import SeatMapCache
from boxoffice import deadline
from boxoffice.errors import DeadlineExceeded, Unavailable
from tests.support import ManualClock


async def test_a_deadlock_is_retried_once_and_only_once() -> None:
    calls = 0

    async def deadlocks_once() -> str:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise psycopg.errors.DeadlockDetected("deadlock detected")
        return "held"

    assert await retry_deadlock_once(deadlocks_once) == "held" and calls == 2

    calls = 0

    async def deadlocks_inside_a_transaction() -> str:
        # boxoffice.db.transaction turns it into UNAVAILABLE, cause kept.
        nonlocal calls
        calls += 1
        try:
            raise psycopg.errors.DeadlockDetected("deadlock detected")
        except psycopg.errors.DeadlockDetected as err:
            raise Unavailable("database unavailable", reason="DATABASE_UNAVAILABLE") from err

    with pytest.raises(Unavailable):
        await retry_deadlock_once(deadlocks_inside_a_transaction)
    assert calls == 2

    async def down() -> str:
        raise Unavailable("database unavailable", reason="DATABASE_UNAVAILABLE")

    with pytest.raises(Unavailable):
        await retry_deadlock_once(down)


def test_refund_policy() -> None:
    until = datetime(2030, 1, 1, tzinfo=UTC)
    policy = RefundPolicy(until, 80)
    assert policy.refund_for(10_001, until) == 8000
    assert policy.refund_for(10_000, until + timedelta(seconds=1)) == 0
    assert RefundPolicy(None, 100).refund_for(10_000, until) == 0


def test_a_hold_survives_its_json_round_trip() -> None:
    now = datetime.now(UTC)
    hold = Hold(
        hold_id=uuid.uuid4(),
        event_id=7,
        customer_id="c",
        section_id="A",
        quantity=2,
        state=HoldState.CONFIRMED,
        amount=Money("EUR", 100),
        expires_at=now,
        created_at=now - timedelta(minutes=1),
        confirmed_at=now,
        payment_id="p",
        refund_amount_minor=None,
        seats=(SeatRef(1, "A", 1, "A-A-1"), SeatRef(2, "A", 2, "A-A-2")),
    )
    assert Hold.from_json(hold.to_json()) == hold
    assert hold.state_at(now + timedelta(days=1)) is HoldState.CONFIRMED
    held = Hold.from_json({**hold.to_json(), "state": "HELD"})
    assert held.state_at(now) is HoldState.EXPIRED and held.state_at(now - timedelta(seconds=1)) is HoldState.HELD


class _CountingStore:
    def __init__(self) -> None:
        self.reads = 0
        self.release = asyncio.Event()

    async def seat_map(self, event_id: int, now: datetime) -> SeatMap:
        self.reads += 1
        await self.release.wait()
        return SeatMap(event_id, (), now)


async def test_concurrent_seat_map_misses_share_one_read() -> None:
    store = _CountingStore()
    cache = SeatMapCache(store, ManualClock(), max_age_seconds=60)  # type: ignore[arg-type]
    waiting = [asyncio.ensure_future(cache.get(5)) for _ in range(20)]
    await asyncio.sleep(0.01)
    store.release.set()
    maps = await asyncio.gather(*waiting)
    assert store.reads == 1 and len({id(m) for m in maps}) == 1
    await cache.get(5)
    assert store.reads == 1


class _BudgetStore(_CountingStore):
    """Records the deadline the shared read runs under."""

    def __init__(self) -> None:
        super().__init__()
        self.budgets: list[float] = []

    async def seat_map(self, event_id: int, now: datetime) -> SeatMap:
        self.budgets.append(deadline.remaining())
        return await super().seat_map(event_id, now)


async def test_a_short_deadline_never_fails_the_others_sharing_a_seat_map_read() -> None:
    """The defect: the shared read ran on the first caller's context, so a
    caller with a 3 ms deadline failed concurrent callers with seconds left."""
    store = _BudgetStore()
    cache = SeatMapCache(store, ManualClock(), max_age_seconds=60, load_seconds=5.0)  # type: ignore[arg-type]

    async def asking(seconds: float) -> SeatMap:
        with deadline.scope(seconds):
            return await cache.get(9)

    hurried = asyncio.ensure_future(asking(0.003))
    patient = [asyncio.ensure_future(asking(2.0)) for _ in range(3)]
    with pytest.raises(DeadlineExceeded):
        # (bounded, so that a cache that waits past the deadline fails here
        # instead of hanging)
        await asyncio.wait_for(hurried, 10)
    store.release.set()
    maps = await asyncio.gather(*patient)
    assert len({id(m) for m in maps}) == 1 and store.reads == 1
    # The read had its own budget, not the 3 ms of the caller who started it.
    assert store.budgets[0] > 4.0
