"""Postgres through a psycopg async pool; schema migrations; one transaction
helper that bounds every statement by the call's deadline.

Migrations come from two folders of a package (:func:`load_migrations`):

- ``migrations/NNNN_name.sql``, *versioned*: applied once each, in version
  order, and never edited afterwards (an applied file whose checksum changed
  is an error). They hold the schema: tables, indexes, constraints, types.
  They never call a function or read a view of ``sql/``: those are applied
  after them and may not exist yet.
- ``sql/name.sql``, *repeatable* (Flyway's repeatable migrations): one
  function, view or other replaceable object per file, with every setting it
  needs in the same file (``CREATE OR REPLACE FUNCTION ... SET ...``).
  A file is applied again whenever its checksum differs from the one
  recorded, and not otherwise. History lives in git, not in copies.

:func:`migrate` takes one advisory lock (replicas starting together migrate
once), applies every pending versioned migration of every component, each in
its own transaction, then every changed repeatable one, each in its own
transaction, in the order given: :func:`load_migrations` gives a component's
files in name order, so a repeatable object that another one needs at
creation time (a view or an SQL-language function; plpgsql bodies are
resolved only when they run) is named to sort before it. A failing file
rolls back alone and stops the run with an error that names it. Versioned
migrations are recorded in ``schema_migrations``, repeatable ones in
``schema_repeatables`` with their checksums.

A *baseline* collapses a component's history: a versioned file whose first
lines declare ``-- replaces: 0001-0010`` holds the schema those versions
built. On a database where all of those versions are recorded the baseline
is recorded as applied without running, and the rows of the versions it
replaces are removed (their files are gone); on a database with none of
them it runs like any migration; a database with only some of them is part
way through the old history, and migrating it is an error (run a release
that still has those files first). Dropping a repeatable object that is no
longer wanted takes a versioned migration (``DROP FUNCTION IF EXISTS``).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import re
from collections.abc import AsyncIterator, Iterator, Sequence
from contextvars import ContextVar
from dataclasses import dataclass
from importlib import resources
from importlib.resources.abc import Traversable

import psycopg
from psycopg import AsyncConnection
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from psycopg.pq import TransactionStatus
from psycopg.rows import TupleRow
from psycopg_pool import AsyncConnectionPool

from boxoffice import deadline
from boxoffice.errors import DeadlineExceeded, Unavailable

_log = logging.getLogger("boxoffice.db")

_MIGRATION_NAME = re.compile(r"^(\d{4})_[a-z0-9_]+\.sql$")
_REPEATABLE_NAME = re.compile(r"^[a-z0-9_]+\.sql$")
_REPLACES = re.compile(r"^--\s*replaces:\s*(\d+)-(\d+)\s*$", re.MULTILINE)

# Any fixed number shared by every process that migrates this database.
_MIGRATION_LOCK_KEY = 0x626F78_6F6666


def create_pool(
    url: str,
    *,
    min_size: int,
    max_size: int,
    name: str,
    prepared_statements: bool = True,
    application_name: str | None = None,
) -> AsyncConnectionPool[AsyncConnection[TupleRow]]:
    """A pool that is opened by the owner's ``start()`` (``open=False``).

    Connections are not checked on every checkout (that is one more round
    trip per transaction on the hot path); :class:`PoolComponent` checks the
    idle ones periodically instead, and a connection that breaks in use is
    discarded when it returns. ``prepared_statements=False`` is for a
    transaction-pooling PgBouncer without ``max_prepared_statements`` (older
    than 1.21, or with it off). ``application_name`` names the connections
    in ``pg_stat_activity`` unless the URL names them itself.
    """
    if min_size > max_size:
        raise ValueError(f"pool {name}: min_size {min_size} is more than max_size {max_size}")
    kwargs: dict[str, object] = {"autocommit": True, "prepare_threshold": 5 if prepared_statements else None}
    if application_name is not None and "application_name" not in conninfo_to_dict(url):
        kwargs["application_name"] = application_name[:63]
    return CheckedPool(url, min_size=min_size, max_size=max_size, open=False, name=name, kwargs=kwargs)


class CheckedPool(AsyncConnectionPool[AsyncConnection[TupleRow]]):
    """A pool that does not grow for the sake of its idle check: while
    :class:`PoolComponent` holds a connection to check it (one round trip),
    a caller that finds no other connection free waits for that one instead
    of opening another. Otherwise a caller arriving during a check grew the
    pool by one, and an idle role's pool crept towards its maximum, one
    coincidence at a time."""

    checking = 0

    def _maybe_grow_pool(self) -> None:
        if self.checking:
            return
        super()._maybe_grow_pool()


class PoolComponent:
    """Opens and closes a pool with the process, and checks its idle
    connections every ``check_interval_seconds``.

    The check takes the idle connections one at a time, as a transaction
    would, and runs an empty query on each: a broken one is discarded (and
    replaced) when it returns. It does not use ``AsyncConnectionPool.check``:
    that empties the pool while it checks and asks it to grow, so every check
    of an idle pool opened one more connection, which stayed until the pool's
    idle limit (10 minutes) took one back; idle roles crept up to their
    maximum (15-17 of 20 after six minutes)."""

    def __init__(
        self, pool: AsyncConnectionPool[AsyncConnection[TupleRow]], *, check_interval_seconds: float = 30.0
    ) -> None:
        self.name = f"pool:{pool.name}"
        self.pool = pool
        self._check_interval = check_interval_seconds
        self._checker: asyncio.Task[None] | None = None

    async def start(self) -> None:
        await self.pool.open(wait=True, timeout=30)
        self._checker = asyncio.create_task(self._check_idle(), name=f"{self.name}:check")

    async def _check_idle(self) -> None:
        while True:
            await asyncio.sleep(self._check_interval)
            try:
                await self.check_idle()
            except Exception:
                _log.warning("idle connection check failed", exc_info=True)

    async def check_idle(self) -> int:
        """Check each connection idle now, without the pool growing; answers
        how many were checked. A connection in use is not waited for."""
        checked = 0
        for _ in range(self.pool.get_stats().get("pool_available", 0)):
            if self.pool.get_stats().get("pool_available", 0) == 0:
                break  # the rest are in use: they are checked by their use
            conn = await self.pool.getconn(timeout=5.0)
            pool = self.pool if isinstance(self.pool, CheckedPool) else None
            if pool is not None:
                pool.checking += 1
            try:
                with contextlib.suppress(psycopg.OperationalError, TimeoutError):
                    async with asyncio.timeout(5.0):
                        await conn.execute(b"")
                checked += 1
            finally:
                if pool is not None:
                    pool.checking -= 1
                # A broken connection is closed here and replaced by the pool;
                # a caller waiting meanwhile gets this one (or its replacement).
                await self.pool.putconn(conn)
        return checked

    async def stop(self, grace_seconds: float) -> None:
        if self._checker is not None:
            self._checker.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._checker
        await self.pool.close(timeout=max(grace_seconds, 1.0))


# The transaction that transactions on a pool join, while one is bound
# (see :func:`joining`).
_ENCLOSING: ContextVar[tuple[object, AsyncConnection[TupleRow]] | None] = ContextVar(
    "boxoffice_db_enclosing", default=None
)


@contextlib.contextmanager
def joining(pool: AsyncConnectionPool[AsyncConnection[TupleRow]], conn: AsyncConnection[TupleRow]) -> Iterator[None]:
    """Within the block, :func:`transaction` on ``pool`` joins ``conn``'s
    open transaction (as a savepoint) instead of taking a connection of its
    own: the work of code that knows nothing of the enclosing transaction
    commits with it or not at all (an audited admin action, its change and
    its audit row)."""
    token = _ENCLOSING.set((pool, conn))
    try:
        yield
    finally:
        _ENCLOSING.reset(token)


@contextlib.asynccontextmanager
async def transaction(
    pool: AsyncConnectionPool[AsyncConnection[TupleRow]], *, default_seconds: float = deadline.FALLBACK_SECONDS
) -> AsyncIterator[AsyncConnection[TupleRow]]:
    """A connection in a transaction whose statements end at the call's
    deadline. A lost database answers UNAVAILABLE.

    ``BEGIN`` and the ``statement_timeout`` travel in one round trip;
    ``conn.transaction()`` inside makes savepoints as usual. Inside
    :func:`joining` for this pool it is a savepoint of the bound transaction.
    """
    enclosing = _ENCLOSING.get()
    if enclosing is not None and enclosing[0] is pool:
        try:
            async with deadline.bounded(default_seconds), enclosing[1].transaction():
                yield enclosing[1]
        except psycopg.errors.QueryCanceled as err:
            raise DeadlineExceeded("database statement exceeded the deadline", reason="DEADLINE_EXCEEDED") from err
        except psycopg.OperationalError as err:
            raise Unavailable("database unavailable", reason="DATABASE_UNAVAILABLE") from err
        return
    budget = deadline.remaining(default_seconds)
    try:
        async with deadline.bounded(default_seconds), pool.connection(timeout=budget) as conn:
            timeout_ms = deadline.statement_timeout_ms(default_seconds)
            await conn.execute(f"BEGIN; SET LOCAL statement_timeout = {int(timeout_ms)}".encode())
            try:
                yield conn
            except BaseException:
                if conn.info.transaction_status in (TransactionStatus.INTRANS, TransactionStatus.INERROR):
                    with contextlib.suppress(psycopg.Error):
                        await conn.execute(b"ROLLBACK")
                raise
            if conn.info.transaction_status == TransactionStatus.INERROR:
                await conn.execute(b"ROLLBACK")
                raise psycopg.errors.InFailedSqlTransaction("a statement failed inside the transaction; rolled back")
            await conn.execute(b"COMMIT")
    except psycopg.errors.QueryCanceled as err:
        raise DeadlineExceeded("database statement exceeded the deadline", reason="DEADLINE_EXCEEDED") from err
    except psycopg.OperationalError as err:
        raise Unavailable("database unavailable", reason="DATABASE_UNAVAILABLE") from err


@dataclass(frozen=True)
class Migration:
    """One SQL file: versioned (``version`` set) or repeatable
    (``version`` None, see :meth:`repeatable`). ``replaces`` lists the
    versions a baseline stands for."""

    component: str
    version: int | None
    name: str
    sql: str
    replaces: tuple[int, ...] = ()

    @classmethod
    def repeatable(cls, component: str, name: str, sql: str) -> Migration:
        return cls(component, None, name, sql)

    @property
    def is_repeatable(self) -> bool:
        return self.version is None

    @property
    def label(self) -> str:
        return f"{self.component}/{self.name}"

    @property
    def checksum(self) -> str:
        return hashlib.sha256(self.sql.encode()).hexdigest()


def _replaced_versions(sql: str) -> tuple[int, ...]:
    head = "\n".join(sql.splitlines()[:5])
    match = _REPLACES.search(head)
    if match is None:
        return ()
    first, last = int(match.group(1)), int(match.group(2))
    if first > last:
        raise RuntimeError(f"a baseline replaces an empty range {first}-{last}")
    return tuple(range(first, last + 1))


def load_migrations(component: str, package: str) -> list[Migration]:
    """``package``'s versioned ``migrations/NNNN_name.sql`` files in version
    order, then its repeatable ``sql/name.sql`` files in name order."""
    root: Traversable = resources.files(package)
    versioned: list[Migration] = []
    folder = root.joinpath("migrations")
    if folder.is_dir():
        for entry in folder.iterdir():
            match = _MIGRATION_NAME.match(entry.name)
            if match:
                sql = entry.read_text()
                versioned.append(
                    Migration(component, int(match.group(1)), entry.name, sql, replaces=_replaced_versions(sql))
                )
    versioned.sort(key=lambda m: m.version or 0)
    versions = [m.version for m in versioned]
    if len(set(versions)) != len(versions):
        raise RuntimeError(f"{package}: two migrations share a version number")
    repeatable: list[Migration] = []
    folder = root.joinpath("sql")
    if folder.is_dir():
        for entry in folder.iterdir():
            if _REPEATABLE_NAME.match(entry.name):
                repeatable.append(Migration.repeatable(component, entry.name, entry.read_text()))
    repeatable.sort(key=lambda m: m.name)
    return versioned + repeatable


class MigrationFailed(RuntimeError):
    """A migration file failed; its transaction was rolled back."""

    def __init__(self, migration: Migration, err: psycopg.Error) -> None:
        super().__init__(f"migration {migration.label} failed: {err}")
        self.migration = migration


async def migrate(url: str, migrations: Sequence[Migration]) -> list[str]:
    """Apply what is pending under the migration lock: versioned migrations
    not recorded yet, then repeatable ones whose checksum changed. Answers
    the files applied (``component/name``), in order."""
    applied_now: list[str] = []
    if "application_name" not in conninfo_to_dict(url):
        url = make_conninfo(url, application_name="boxoffice-migrate")
    # The lock is a session's: ``url`` must reach Postgres itself (or a
    # session-mode pooler), never a transaction-mode one.
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        await conn.execute("SELECT pg_advisory_lock(%s)", (_MIGRATION_LOCK_KEY,))
        try:
            await conn.execute(_SCHEMA_TABLES)
            cur = await conn.execute("SELECT component, version, checksum FROM schema_migrations")
            done = {(row[0], row[1]): row[2] for row in await cur.fetchall()}
            for migration in migrations:
                if not migration.is_repeatable and await _apply_versioned(conn, migration, done):
                    applied_now.append(migration.label)
            cur = await conn.execute("SELECT component, name, checksum FROM schema_repeatables")
            current = {(row[0], row[1]): row[2] for row in await cur.fetchall()}
            for migration in migrations:
                if migration.is_repeatable and current.get((migration.component, migration.name)) != migration.checksum:
                    await _run(conn, migration, _RECORD_REPEATABLE, (migration.component, migration.name))
                    applied_now.append(migration.label)
        finally:
            await conn.execute("SELECT pg_advisory_unlock(%s)", (_MIGRATION_LOCK_KEY,))
    return applied_now


_SCHEMA_TABLES = b"""
CREATE TABLE IF NOT EXISTS schema_migrations (
    component  text        NOT NULL,
    version    integer     NOT NULL,
    name       text        NOT NULL,
    checksum   text        NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (component, version)
);
CREATE TABLE IF NOT EXISTS schema_repeatables (
    component  text        NOT NULL,
    name       text        NOT NULL,
    checksum   text        NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (component, name)
)
"""

_RECORD_VERSIONED = b"""
INSERT INTO schema_migrations (component, version, name, checksum) VALUES (%s, %s, %s, %s)
"""

_RECORD_REPEATABLE = b"""
INSERT INTO schema_repeatables (component, name, checksum) VALUES (%s, %s, %s)
ON CONFLICT (component, name) DO UPDATE SET checksum = excluded.checksum, applied_at = now()
"""


async def _apply_versioned(
    conn: AsyncConnection[TupleRow], migration: Migration, done: dict[tuple[str, int], str]
) -> bool:
    """Apply one versioned migration unless it is recorded (or, for a
    baseline, stands for recorded history); True when it ran."""
    key = (migration.component, migration.version)
    if key in done:
        if done[key] != migration.checksum:
            raise RuntimeError(f"migration {migration.label} changed after it was applied")
        return False
    if migration.replaces:
        present = [v for v in migration.replaces if (migration.component, v) in done]
        if len(present) == len(migration.replaces):
            async with conn.transaction():
                await conn.execute(
                    "DELETE FROM schema_migrations WHERE component = %s AND version = ANY (%s)",
                    (migration.component, list(migration.replaces)),
                )
                await conn.execute(
                    _RECORD_VERSIONED, (migration.component, migration.version, migration.name, migration.checksum)
                )
            _log.info("baseline recorded over its history", extra={"migration": migration.label})
            return False
        if present:
            missing = sorted(set(migration.replaces) - set(present))
            raise RuntimeError(
                f"migration {migration.label} replaces versions {migration.replaces[0]}-{migration.replaces[-1]}, "
                f"but this database has only some of them (missing {missing}): "
                "migrate it with a release that still has those files first"
            )
    await _run(conn, migration, _RECORD_VERSIONED, (migration.component, migration.version, migration.name))
    return True


async def _run(
    conn: AsyncConnection[TupleRow], migration: Migration, record: bytes, key: tuple[str | int | None, ...]
) -> None:
    try:
        async with conn.transaction():
            await conn.execute(migration.sql.encode())
            await conn.execute(record, (*key, migration.checksum))
    except psycopg.Error as err:
        raise MigrationFailed(migration, err) from err
    _log.info("migration applied", extra={"migration": migration.label})
