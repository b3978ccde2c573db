"""boxoffice.db when Postgres drops connections (pg_terminate_backend on
this test's own connections, found by their application name): a broken
pooled connection is replaced at BEGIN, the pool checks what it lends once
one broke, and work whose connection broke before it committed runs again,
once, on a fresh connection."""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator

import psycopg
import pytest

from boxoffice import db
from boxoffice.errors import Unavailable
from boxoffice.runtime import Pool
from tests.support import Stores


@pytest.fixture
async def named(stores: Stores) -> AsyncIterator[tuple[Pool, str]]:
    """A pool of four connections, all open, named for this test alone."""
    name = f"loss-{secrets.token_hex(4)}"
    pool = db.create_pool(stores.database_url, min_size=4, max_size=4, name=name, application_name=name)
    await pool.open(wait=True)
    async with pool.connection() as conn:
        await conn.execute("CREATE TABLE IF NOT EXISTS loss_probe (k text PRIMARY KEY, n int NOT NULL)")
    try:
        yield pool, name
    finally:
        await pool.close()


async def _terminate(stores: Stores, name: str) -> int:
    """End every session of ``name`` (this test's pool only); how many."""
    async with await psycopg.AsyncConnection.connect(stores.admin_url, autocommit=True) as admin:
        cur = await admin.execute(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE application_name = %s", (name,)
        )
        row = await cur.fetchone()
    assert row is not None
    return int(row[0])


async def _count(pool: Pool, key: str) -> int | None:
    async with db.transaction(pool) as conn:
        cur = await conn.execute("SELECT n FROM loss_probe WHERE k = %s", (key,))
        row = await cur.fetchone()
    return None if row is None else int(row[0])


async def test_every_idle_connection_dropped_costs_no_transaction(stores: Stores, named: tuple[Pool, str]) -> None:
    pool, name = named
    assert await _terminate(stores, name) == 4
    # Each transaction finds a working connection: the first BEGIN meets a
    # broken one and begins on another, which the pool (suspecting the
    # rest now) checked before lending it.
    for _ in range(8):
        async with db.transaction(pool) as conn:
            cur = await conn.execute("SELECT 1")
            assert await cur.fetchone() == (1,)
    assert isinstance(pool, db.CheckedPool) and pool.suspect


async def test_a_quiet_pool_checks_nothing_on_borrow(named: tuple[Pool, str]) -> None:
    pool, _ = named
    assert isinstance(pool, db.CheckedPool) and not pool.suspect
    async with db.transaction(pool) as conn:
        await conn.execute("SELECT 1")
    assert not pool.suspect


async def test_work_cut_before_commit_runs_again_once(stores: Stores, named: tuple[Pool, str]) -> None:
    pool, name = named
    key = secrets.token_hex(4)
    runs = 0

    async def work() -> None:
        nonlocal runs
        runs += 1
        async with db.transaction(pool) as conn:
            await conn.execute(
                "INSERT INTO loss_probe VALUES (%s, 1) ON CONFLICT (k) DO UPDATE SET n = loss_probe.n + 1", (key,)
            )
            if runs == 1:
                # The server drops every session, this one mid-transaction.
                await _terminate(stores, name)
                await conn.execute("SELECT 1")

    await db.retry_lost_once(work)
    # The first run's write was never committed; the second's was, once.
    assert runs == 2
    assert await _count(pool, key) == 1


async def test_a_second_loss_is_the_callers(stores: Stores, named: tuple[Pool, str]) -> None:
    pool, name = named
    runs = 0

    async def work() -> None:
        nonlocal runs
        runs += 1
        async with db.transaction(pool) as conn:
            await conn.execute("SELECT 1")
            await _terminate(stores, name)
            await conn.execute("SELECT 1")

    with pytest.raises(db.ConnectionLost) as lost:
        await db.retry_lost_once(work)
    assert runs == 2
    assert isinstance(lost.value, Unavailable) and lost.value.reason == "DATABASE_UNAVAILABLE"


async def test_other_errors_are_not_run_again(named: tuple[Pool, str]) -> None:
    pool, _ = named
    runs = 0

    async def work() -> None:
        nonlocal runs
        runs += 1
        async with db.transaction(pool) as conn:
            await conn.execute("SELECT 1/0")

    with pytest.raises(psycopg.errors.DivisionByZero):
        await db.retry_lost_once(work)
    assert runs == 1


async def test_a_repeated_method_inside_another_is_retried_once_in_all(stores: Stores, named: tuple[Pool, str]) -> None:
    pool, name = named
    runs = {"outer": 0, "inner": 0}

    @db.repeated_when_lost
    async def inner() -> None:
        runs["inner"] += 1
        async with db.transaction(pool) as conn:
            await conn.execute("SELECT 1")
            await _terminate(stores, name)
            await conn.execute("SELECT 1")

    @db.repeated_when_lost
    async def outer() -> None:
        runs["outer"] += 1
        await inner()

    with pytest.raises(db.ConnectionLost):
        await outer()
    # The outer retry covers the inner method: two runs of each, not four.
    assert runs == {"outer": 2, "inner": 2}
    # Alone, the inner method has its own retry.
    runs["inner"] = 0
    with pytest.raises(db.ConnectionLost):
        await inner()
    assert runs["inner"] == 2
