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


async def _functions(stores: Stores, *names: str) -> dict[str, str]:
    async with await psycopg.AsyncConnection.connect(stores.database_url) as conn:
        cur = await conn.execute("SELECT proname, prosrc FROM pg_proc WHERE proname = ANY (%s)", (list(names),))
        return {str(r[0]): str(r[1]) for r in await cur.fetchall()}


async def test_repeatables_reapply_on_change_only_after_versioned(stores: Stores) -> None:
    table = db.Migration("rprobe", 1, "0001_t.sql", "CREATE TABLE rprobe (x int)")
    # b_ names a view that needs the function a_ defines: name order.
    fn = db.Migration.repeatable(
        "rprobe", "a_fn.sql", "CREATE OR REPLACE FUNCTION rprobe_fn() RETURNS int LANGUAGE sql AS 'SELECT 1'"
    )
    view = db.Migration.repeatable(
        "rprobe", "b_view.sql", "CREATE OR REPLACE VIEW rprobe_v AS SELECT rprobe_fn() AS f, x FROM rprobe"
    )
    # Given in list order with the repeatables first: versioned still run first.
    assert await db.migrate(stores.database_url, [fn, view, table]) == [
        "rprobe/0001_t.sql",
        "rprobe/a_fn.sql",
        "rprobe/b_view.sql",
    ]
    assert await db.migrate(stores.database_url, [table, fn, view]) == []
    changed = db.Migration.repeatable(
        "rprobe", "a_fn.sql", "CREATE OR REPLACE FUNCTION rprobe_fn() RETURNS int LANGUAGE sql AS 'SELECT 2'"
    )
    assert await db.migrate(stores.database_url, [table, changed, view]) == ["rprobe/a_fn.sql"]
    assert (await _functions(stores, "rprobe_fn"))["rprobe_fn"].strip() == "SELECT 2"
    async with await psycopg.AsyncConnection.connect(stores.database_url) as conn:
        cur = await conn.execute("SELECT checksum FROM schema_repeatables WHERE component = 'rprobe' ORDER BY name")
        assert [r[0] for r in await cur.fetchall()] == [changed.checksum, view.checksum]


async def test_failing_repeatable_rolls_back_and_is_named(stores: Stores) -> None:
    good = db.Migration.repeatable(
        "fprobe", "a_good.sql", "CREATE OR REPLACE FUNCTION fprobe_a() RETURNS int LANGUAGE sql AS 'SELECT 1'"
    )
    bad = db.Migration.repeatable(
        "fprobe",
        "b_bad.sql",
        "CREATE OR REPLACE FUNCTION fprobe_b() RETURNS int LANGUAGE sql AS 'SELECT 1';\n"
        "CREATE OR REPLACE FUNCTION fprobe_c() RETURNS int LANGUAGE sql AS 'SELECT no_such_column'",
    )
    with pytest.raises(db.MigrationFailed, match=r"fprobe/b_bad\.sql") as failed:
        await db.migrate(stores.database_url, [good, bad])
    assert failed.value.migration == bad
    # The good file stays applied; nothing of the bad one is left or recorded.
    assert set(await _functions(stores, "fprobe_a", "fprobe_b", "fprobe_c")) == {"fprobe_a"}
    fixed = db.Migration.repeatable(
        "fprobe", "b_bad.sql", "CREATE OR REPLACE FUNCTION fprobe_b() RETURNS int LANGUAGE sql AS 'SELECT 1'"
    )
    assert await db.migrate(stores.database_url, [good, fixed]) == ["fprobe/b_bad.sql"]


async def test_baseline_stands_for_the_history_it_replaces(stores: Stores) -> None:
    old = [
        db.Migration("bprobe", 1, "0001_a.sql", "CREATE TABLE bprobe_a (x int)"),
        db.Migration("bprobe", 2, "0002_b.sql", "CREATE TABLE bprobe_b (x int); INSERT INTO bprobe_b VALUES (7)"),
    ]
    assert len(await db.migrate(stores.database_url, old)) == 2
    baseline_sql = (
        "-- the schema of 1-2\n-- replaces: 0001-0002\nCREATE TABLE bprobe_a (x int); CREATE TABLE bprobe_b (x int)"
    )
    baseline = db.Migration("bprobe", 3, "0003_baseline.sql", baseline_sql, replaces=(1, 2))
    later = db.Migration("bprobe", 4, "0004_c.sql", "ALTER TABLE bprobe_b ADD COLUMN y int")
    # An old database: the baseline is recorded, not run; what follows runs.
    assert await db.migrate(stores.database_url, [baseline, later]) == ["bprobe/0004_c.sql"]
    async with await psycopg.AsyncConnection.connect(stores.database_url) as conn:
        cur = await conn.execute("SELECT x FROM bprobe_b")
        assert await cur.fetchall() == [(7,)]
        cur = await conn.execute("SELECT version FROM schema_migrations WHERE component = 'bprobe' ORDER BY 1")
        assert [r[0] for r in await cur.fetchall()] == [3, 4]
    assert await db.migrate(stores.database_url, [baseline, later]) == []
    # A fresh component runs its baseline.
    fresh = db.Migration("cprobe", 3, "0003_baseline.sql", "CREATE TABLE cprobe (x int)", replaces=(1, 2))
    assert await db.migrate(stores.database_url, [fresh]) == ["cprobe/0003_baseline.sql"]
    # Part way through the old history: refused.
    partial = [db.Migration("dprobe", 1, "0001_a.sql", "CREATE TABLE dprobe (x int)")]
    await db.migrate(stores.database_url, partial)
    dbase = db.Migration("dprobe", 3, "0003_baseline.sql", "CREATE TABLE dprobe (x int)", replaces=(1, 2))
    with pytest.raises(RuntimeError, match="only some of them"):
        await db.migrate(stores.database_url, [dbase])


def test_load_migrations_reads_the_baseline_header_and_sql_folder() -> None:
    loaded = db.load_migrations("booking", "booking_svc")
    versioned = [m for m in loaded if not m.is_repeatable]
    repeatable = [m for m in loaded if m.is_repeatable]
    assert versioned and versioned[0].replaces == tuple(range(1, 11))
    assert repeatable and [m.name for m in repeatable] == sorted(m.name for m in repeatable)
    assert loaded == versioned + repeatable
