"""Through a transaction-mode PgBouncer (scripts/pgbouncer_test.sh): the
pool works without prepared statements, and the leader election's session
lock lives on a connection straight to Postgres (DATABASE_DIRECT_URL),
never on one of PgBouncer's server connections, which other clients share
between transactions."""

from __future__ import annotations

import asyncio
import os
import uuid
from urllib.parse import urlsplit, urlunsplit

import psycopg
import pytest

from boxoffice import db
from boxoffice.config import Env
from boxoffice.leader import LeaderTimings, PostgresLock, advisory_keys
from boxoffice.runtime import Runtime
from tests.support import Stores

pytestmark = pytest.mark.skipif(
    not os.environ.get("BOXOFFICE_TEST_DATABASE_DIRECT_URL"), reason="runs behind PgBouncer (scripts/pgbouncer_test.sh)"
)

TIMINGS = LeaderTimings(lease_seconds=6.0, renew_deadline_seconds=4.0, retry_seconds=0.5)


async def _pooler_server_pids() -> set[int]:
    """The Postgres backends behind PgBouncer's server connections (its
    admin console's SHOW SERVERS)."""
    parts = urlsplit(os.environ["BOXOFFICE_TEST_DATABASE_URL"])
    admin = urlunsplit((parts.scheme, parts.netloc, "/pgbouncer", "", ""))
    async with await psycopg.AsyncConnection.connect(admin, autocommit=True, prepare_threshold=None) as conn:
        cur = conn.cursor(row_factory=psycopg.rows.dict_row)
        await cur.execute("SHOW SERVERS", prepare=False)
        return {int(row["remote_pid"]) for row in await cur.fetchall()}


async def _lock_holder(stores: Stores, name: str) -> int:
    classid, objid = advisory_keys(name)
    async with await psycopg.AsyncConnection.connect(stores.admin_url, autocommit=True, prepare_threshold=None) as conn:
        cur = await conn.execute(
            "SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND granted AND classid = %s::oid "
            "AND objid = %s::oid AND objsubid = 2",
            (classid, objid),
        )
        rows = await cur.fetchall()
    assert len(rows) == 1, rows
    return int(rows[0][0])


async def test_the_pool_works_through_pgbouncer_without_prepared_statements(stores: Stores) -> None:
    pool = db.create_pool(stores.database_url, min_size=2, max_size=6, name="pooled", prepared_statements=False)
    await pool.open(wait=True)
    try:
        async with db.transaction(pool) as conn:
            await conn.execute("CREATE TABLE IF NOT EXISTS pooled_probe (k text PRIMARY KEY, n int NOT NULL)")

        async def worker(k: str) -> None:
            # The same statement, far past psycopg's prepare threshold.
            for _ in range(40):
                async with db.transaction(pool) as conn:
                    await conn.execute(
                        "INSERT INTO pooled_probe VALUES (%s, 1) ON CONFLICT (k) DO UPDATE SET n = pooled_probe.n + 1",
                        (k,),
                    )

        keys = [f"{uuid.uuid4().hex}-{i}" for i in range(8)]
        await asyncio.gather(*(worker(k) for k in keys))
        async with db.transaction(pool) as conn:
            cur = await conn.execute("SELECT sum(n) FROM pooled_probe WHERE k = ANY (%s)", (keys,))
            row = await cur.fetchone()
        assert row is not None and row[0] == 8 * 40
    finally:
        await pool.close()


def _runtime(stores: Stores, extra: dict[str, str]) -> Runtime:
    direct = urlsplit(os.environ["BOXOFFICE_TEST_DATABASE_DIRECT_URL"])
    pooled = urlsplit(stores.database_url)
    env = Env(
        {
            "DATABASE_URL": stores.database_url,
            "DATABASE_DIRECT_URL": urlunsplit((direct.scheme, direct.netloc, pooled.path, direct.query, "")),
            **extra,
        }
    )
    return Runtime.from_env(env, database_url=stores.database_url, redis_url="redis://127.0.0.1:1/0")


async def test_the_leader_lock_is_held_on_a_direct_session(stores: Stores) -> None:
    rt = _runtime(stores, {})
    assert rt.direct_database_url != rt.database_url
    name = f"pgb-{uuid.uuid4().hex[:8]}"
    lock = PostgresLock(
        database_url=rt.direct_database_url,
        name=name,
        identity="direct",
        timings=TIMINGS,
        session_bound_seconds=TIMINGS.session_bound_seconds,
    )
    try:
        assert await lock.try_acquire() is not None
        holder = await _lock_holder(stores, name)
        assert holder == lock.backend_pid
        assert holder not in await _pooler_server_pids()
        assert await lock.renew()
    finally:
        await lock.close()


async def test_control_a_lock_taken_through_pgbouncer_lands_on_a_shared_server_connection(stores: Stores) -> None:
    """What DATABASE_DIRECT_URL avoids: through the pooler the session lock
    is held by whichever server connection ran the statement, one that
    PgBouncer hands to other clients next."""
    name = f"pgb-{uuid.uuid4().hex[:8]}"
    lock = PostgresLock(
        database_url=stores.database_url,
        name=name,
        identity="pooled",
        timings=TIMINGS,
        session_bound_seconds=None,
    )
    try:
        assert await lock.try_acquire() is not None
        holder = await _lock_holder(stores, name)
        assert holder in await _pooler_server_pids()
        # The client's idea of its session is not the session that holds it.
        assert holder != lock.backend_pid
    finally:
        await lock.close()
        # The lock stays with the server connection: free it.
        async with await psycopg.AsyncConnection.connect(stores.admin_url, autocommit=True) as conn:
            await conn.execute("SELECT pg_terminate_backend(%s)", (holder,))
