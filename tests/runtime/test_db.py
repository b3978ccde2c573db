"""boxoffice.db.transaction against a real Postgres: commit, rollback,
savepoints, the deadline as statement_timeout, migrations."""

from __future__ import annotations

from collections.abc import AsyncIterator

import psycopg
import pytest

from boxoffice import db, deadline
from boxoffice.errors import DeadlineExceeded
from boxoffice.runtime import Pool
from tests.support import Stores


@pytest.fixture
async def pool(stores: Stores) -> AsyncIterator[Pool]:
    p = db.create_pool(stores.database_url, min_size=1, max_size=2, name="test-db")
    await p.open(wait=True)
    async with p.connection() as conn:
        await conn.execute("CREATE TABLE IF NOT EXISTS tx_probe (k text PRIMARY KEY, v int NOT NULL)")
        await conn.execute("TRUNCATE tx_probe")
    yield p
    await p.close()


async def _rows(pool: Pool) -> list[tuple[str, int]]:
    async with pool.connection() as conn:
        cur = await conn.execute("SELECT k, v FROM tx_probe ORDER BY k")
        return [(str(r[0]), int(r[1])) for r in await cur.fetchall()]


async def test_commit_and_rollback(
    pool: Pool,
) -> None:
    async with db.transaction(pool) as conn:
        await conn.execute("INSERT INTO tx_probe VALUES ('a', 1)")
    with pytest.raises(RuntimeError):
        async with db.transaction(pool) as conn:
            await conn.execute("INSERT INTO tx_probe VALUES ('b', 2)")
            raise RuntimeError("boom")
    with pytest.raises(psycopg.errors.UniqueViolation):
        async with db.transaction(pool) as conn:
            await conn.execute("INSERT INTO tx_probe VALUES ('c', 3)")
            await conn.execute("INSERT INTO tx_probe VALUES ('a', 9)")
    assert await _rows(pool) == [("a", 1)]


async def test_swallowed_error_never_commits(
    pool: Pool,
) -> None:
    with pytest.raises(psycopg.errors.InFailedSqlTransaction):
        async with db.transaction(pool) as conn:
            await conn.execute("INSERT INTO tx_probe VALUES ('d', 4)")
            try:
                await conn.execute("SELECT 1/0")
            except psycopg.errors.DivisionByZero:
                pass
    assert await _rows(pool) == []


async def test_savepoints_nest(pool: Pool) -> None:
    async with db.transaction(pool) as conn:
        await conn.execute("INSERT INTO tx_probe VALUES ('e', 5)")
        with pytest.raises(psycopg.errors.UniqueViolation):
            async with conn.transaction():
                await conn.execute("INSERT INTO tx_probe VALUES ('e', 6)")
        await conn.execute("INSERT INTO tx_probe VALUES ('f', 7)")
    assert await _rows(pool) == [("e", 5), ("f", 7)]


async def test_deadline_becomes_statement_timeout(
    pool: Pool,
) -> None:
    with deadline.scope(0.3):
        async with db.transaction(pool) as conn:
            cur = await conn.execute("SELECT current_setting('statement_timeout')")
            row = await cur.fetchone()
            assert row is not None
            assert row[0].endswith("ms") and 0 < int(row[0][:-2]) <= 300
    with pytest.raises(DeadlineExceeded), deadline.scope(0.2):
        async with db.transaction(pool) as conn:
            await conn.execute("SELECT pg_sleep(5)")
    # The connection went back clean: the next transaction works and the
    # session setting did not leak.
    async with db.transaction(pool, default_seconds=7) as conn:
        cur = await conn.execute("SELECT current_setting('statement_timeout')")
        row = await cur.fetchone()
        assert row is not None and row[0] in ("7s", "7000ms")
    async with pool.connection() as conn:
        cur = await conn.execute("SELECT current_setting('statement_timeout')")
        row = await cur.fetchone()
        assert row is not None and row[0] == "0"


async def test_migrations_apply_once_and_detect_edits(stores: Stores) -> None:
    first = db.Migration("probe", 1, "0001_probe.sql", "CREATE TABLE migration_probe (x int)")
    assert await db.migrate(stores.database_url, [first]) == ["probe/0001_probe.sql"]
    assert await db.migrate(stores.database_url, [first]) == []
    edited = db.Migration("probe", 1, "0001_probe.sql", "CREATE TABLE migration_probe (x bigint)")
    with pytest.raises(RuntimeError, match="changed after it was applied"):
        await db.migrate(stores.database_url, [edited])
