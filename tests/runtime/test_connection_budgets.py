"""Postgres connection budgets: each role of the mesh, run as its own
process on the default settings, names its connections and holds no more
than its budget, an idle pool does not creep up with its periodic checks,
and the whole mesh on defaults fits in half of a default Postgres (50 of
max_connections=100)."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import psycopg
import pytest

from boxoffice import db
from boxoffice.config import DEFAULT_POOL_BUDGET, POOL_BUDGETS, ConfigError, Env, StoreConfig
from boxoffice.db import PoolComponent
from tests.runtime.processes import COMMANDS, role_processes
from tests.support import Stores

# Half of a default Postgres's max_connections.
HALF_OF_DEFAULT_POSTGRES = 50
# Roles that hold a session of their own besides the pool (the leader
# election's advisory lock).
ELECTED = {"queue-admitter"}


def _role_key(command: str) -> str:
    from boxoffice_cli.main import commands, service_modules

    module, role = commands(service_modules())[command]
    return f"{module.COMPONENT}-{role}"


def test_every_role_has_a_budget_and_the_mesh_fits_in_half_of_postgres() -> None:
    from boxoffice_cli.main import commands, service_modules

    database_roles = {
        f"{module.COMPONENT}-{role}"
        for command, (module, role) in commands(service_modules()).items()
        if "postgres" in getattr(module, "STORES", ("postgres", "redis"))
    }
    assert database_roles == set(POOL_BUDGETS)
    one_of_each = sum(high for _, high in POOL_BUDGETS.values()) + len(ELECTED)
    # A second replica of every server role too.
    servers = sum(high for key, (_, high) in POOL_BUDGETS.items() if key.endswith("-server"))
    assert one_of_each + servers <= HALF_OF_DEFAULT_POSTGRES, (one_of_each, servers)
    for key, (low, high) in POOL_BUDGETS.items():
        config = StoreConfig.from_env(Env({}), role=key)
        assert (config.db_pool_min, config.db_pool_max) == (low, high)
        assert config.db_application_name == f"boxoffice-{key}"
    up = StoreConfig.from_env(Env({}))
    assert (up.db_pool_min, up.db_pool_max) == DEFAULT_POOL_BUDGET


def test_pool_settings_are_validated() -> None:
    env = Env({"BOXOFFICE_DB_POOL_MAX": "2"})
    assert StoreConfig.from_env(env, role="booking-server").db_pool_min == 2
    assert StoreConfig.from_env(env, role="booking-server").db_pool_max == 2
    for settings, message in (
        ({"BOXOFFICE_DB_POOL_MIN": "3"}, "BOXOFFICE_DB_POOL_MIN=3 must be <= BOXOFFICE_DB_POOL_MAX (2)"),
        ({"BOXOFFICE_DB_POOL_MAX": "0"}, "BOXOFFICE_DB_POOL_MAX=0 must be >= 1"),
        ({"BOXOFFICE_DB_POOL_MAX": "many"}, "BOXOFFICE_DB_POOL_MAX='many' is not an integer"),
        ({"BOXOFFICE_DB_CHECK_SECONDS": "0"}, "BOXOFFICE_DB_CHECK_SECONDS=0.0 must be >= 0.05"),
        (
            {"DATABASE_URL": "postgresql://db/x", "DATABASE_DIRECT_URL": "db:5432"},
            "DATABASE_DIRECT_URL='db:5432' is not a URL",
        ),
        ({"DATABASE_DIRECT_URL": "postgresql://db/x"}, "DATABASE_DIRECT_URL is set without DATABASE_URL"),
    ):
        with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
            StoreConfig.from_env(Env(settings), role="booking-sweeper")
    direct = StoreConfig.from_env(Env({"DATABASE_URL": "postgresql://pgbouncer/x"}))
    assert direct.direct_url == "postgresql://pgbouncer/x"
    both = {"DATABASE_URL": "postgresql://pgbouncer/x", "DATABASE_DIRECT_URL": "postgresql://db/x"}
    assert StoreConfig.from_env(Env(both)).direct_url == "postgresql://db/x"


async def _count(admin_url: str, database: str, name: str) -> int:
    async with await psycopg.AsyncConnection.connect(admin_url, autocommit=True) as conn:
        cur = await conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = %s AND application_name = %s", (database, name)
        )
        row = await cur.fetchone()
        return int(row[0]) if row else 0


async def test_a_checkout_during_a_check_waits_for_the_checked_connection_instead_of_growing(
    stores: Stores,
) -> None:
    """The idle check holds a pool's only free connection for one round
    trip; a caller arriving then is handed that connection when the check
    returns it. (The control: the same caller outside a check grows the
    pool by one, the creep the check once caused in idle roles.)"""
    database = stores.database_url.rsplit("/", 1)[1]
    name = f"boxoffice-test-check-{time.monotonic_ns()}"
    pool = db.create_pool(stores.database_url, min_size=1, max_size=4, name="checked", application_name=name)
    assert isinstance(pool, db.CheckedPool)
    await pool.open(wait=True, timeout=10)

    async def queued() -> None:
        for _ in range(100_000):  # loop turns, until the caller waits in the queue
            if pool.get_stats().get("requests_waiting", 0):
                return
            await asyncio.sleep(0)
        raise AssertionError("the caller never queued")

    try:
        checked = await pool.getconn(timeout=5)
        pool.checking += 1  # as PoolComponent.check_idle does while it checks
        waiter = asyncio.create_task(pool.getconn(timeout=10))
        await asyncio.wait_for(queued(), 10)
        assert pool.get_stats()["pool_size"] == 1
        pool.checking -= 1
        await pool.putconn(checked)
        handed = await waiter
        assert handed is checked
        assert await _count(stores.admin_url, database, name) == 1
        # The control: a caller who finds no connection free otherwise grows the pool.
        other = asyncio.create_task(pool.getconn(timeout=10))
        await asyncio.wait_for(other, 10)
        assert pool.get_stats()["pool_size"] == 2
        await pool.putconn(other.result())
        await pool.putconn(handed)
    finally:
        await pool.close()


async def test_an_idle_pool_keeps_its_size_through_its_checks(stores: Stores) -> None:
    database = stores.database_url.rsplit("/", 1)[1]
    name = f"boxoffice-test-idle-{time.monotonic_ns()}"
    pool = db.create_pool(stores.database_url, min_size=1, max_size=6, name="idle", application_name=name)
    component = PoolComponent(pool, check_interval_seconds=3600)
    await component.start()
    try:
        assert await _count(stores.admin_url, database, name) == 1
        for _ in range(5):
            assert await component.check_idle() == 1
        assert await _count(stores.admin_url, database, name) == 1
        # A broken idle connection is replaced, not kept.
        async with await psycopg.AsyncConnection.connect(stores.admin_url, autocommit=True) as admin:
            await admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = %s", (name,)
            )
        await component.check_idle()
        async with pool.connection(timeout=10) as conn:
            assert (await (await conn.execute("SELECT 1")).fetchone()) == (1,)
        # The control: the pool's own check empties the pool and asks it to
        # grow, one connection more each time (what idle roles did).
        before = await _count(stores.admin_url, database, name)
        await pool.check()
        for _ in range(200):
            if await _count(stores.admin_url, database, name) > before:
                break
            await asyncio.sleep(0.05)
        assert await _count(stores.admin_url, database, name) == before + 1
    finally:
        await component.stop(1.0)


@pytest.mark.slow
@pytest.mark.apart(reason="every role on its default pool: up to 50 of the Postgres server's 100 connections")
async def test_the_mesh_on_defaults_holds_its_budgets(stores: Stores, tmp_path: Path) -> None:
    """Every role of the mesh as its own process, on the default pool
    settings, with the idle check every 0.1 s: once each role's pool has
    been checked three times over, each holds no more than its budget (its
    minimum while idle, give or take what its loops use at once) and all of
    them no more than 50."""
    database = stores.database_url.rsplit("/", 1)[1]
    keys = {command: _role_key(command) for command in COMMANDS}
    names = {f"boxoffice-{key}": key for key in keys.values()}
    fast = {"BOXOFFICE_DB_CHECK_SECONDS": "0.1", "BOXOFFICE_BOOKING_ADDR": "127.0.0.1:1"}
    async with role_processes(stores, [(command, fast) for command in COMMANDS], tmp_path) as roles:
        async with await psycopg.AsyncConnection.connect(stores.admin_url, autocommit=True) as admin:

            async def snapshot() -> dict[str, tuple[int, float]]:
                """Connections per role, and the newest idle check's time."""
                cur = await admin.execute(
                    "SELECT application_name, count(*), "
                    "coalesce(extract(epoch FROM max(query_start) FILTER (WHERE query = '')), 0) "
                    "FROM pg_stat_activity WHERE datname = %s GROUP BY 1",
                    (database,),
                )
                return {str(r[0]): (int(r[1]), float(r[2])) for r in await cur.fetchall()}

            async def checked_since(mark: float) -> dict[str, tuple[int, float]]:
                seen: set[str] = set()
                for _ in range(1200):
                    for role in roles:
                        assert role.process.returncode is None, f"{role.command} ended: {role.stderr()}"
                    now = await snapshot()
                    seen |= {name for name in names if now.get(name, (0, 0.0))[1] > mark}
                    if seen == set(names):
                        return now
                    await asyncio.sleep(0.02)
                raise AssertionError(f"the idle checks never came round: {sorted(set(names) - seen)}")

            async def server_now() -> float:
                cur = await admin.execute("SELECT extract(epoch FROM clock_timestamp())")
                row = await cur.fetchone()
                assert row is not None
                return float(row[0])

            first = await checked_since(0.0)
            rounds: dict[str, list[int]] = {key: [] for key in names.values()}
            for _ in range(3):
                last = await checked_since(await server_now())
                for name, key in names.items():
                    rounds[key].append(last.get(name, (0, 0.0))[0])
    held = {names[name]: count for name, (count, _) in last.items() if name in names}
    leaders = sum(count for name, (count, _) in last.items() if name.startswith("boxoffice-leader:"))
    for key, count in held.items():
        _, high = POOL_BUDGETS[key]
        assert count <= high, (key, count, high)
        # Each role's pool stays within its budget in every round. (That
        # the checks themselves open nothing is the deterministic test
        # above: a role's pool also grows, within its budget, when its own
        # loops happen to need connections at once.)
        assert all(count <= high for count in (first[f"boxoffice-{key}"][0], *rounds[key])), (key, rounds, high)
    assert leaders == len(ELECTED)
    assert sum(held.values()) + leaders <= HALF_OF_DEFAULT_POSTGRES
    # The figure for the report: what an idle mesh holds.
    print(f"idle mesh: {sum(held.values()) + leaders} connections, {held}, leaders {leaders}")
