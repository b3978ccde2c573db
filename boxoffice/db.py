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
import functools
import hashlib
import logging
import re
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Iterator, Sequence
from contextvars import ContextVar
from dataclasses import dataclass
from importlib import resources
from importlib.resources.abc import Traversable
from typing import Any, ParamSpec, TypeVar

import psycopg
from psycopg import AsyncConnection
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from psycopg.pq import TransactionStatus
from psycopg.rows import TupleRow
from psycopg_pool import AsyncConnectionPool

from boxoffice import deadline
from boxoffice.errors import DeadlineExceeded, Unavailable

_log = logging.getLogger("boxoffice.db")

T = TypeVar("T")
P = ParamSpec("P")

# How long after a connection broke the pool checks each connection it lends.
SUSPECT_SECONDS = 10.0
# How long a check on borrow waits for its empty query.
_BORROW_CHECK_SECONDS = 2.0

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
    discarded when it returns. Once one has broken, the pool checks every
    connection it lends for a while (:class:`CheckedPool`): a database that
    dropped its connections has usually dropped the idle ones too. ``prepared_statements=False`` is for a
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
    coincidence at a time.

    Also, after a connection came back broken (the server terminated it,
    restarted, or the network dropped it), every connection the pool lends
    for the next :data:`SUSPECT_SECONDS` is checked first (an empty query,
    one round trip): a broken one is discarded and another lent, so the
    connections that died idle beside the broken one fail their check, not
    the caller's statement. Outside that window a borrow costs nothing more.
    """

    checking = 0
    suspect_until = 0.0

    def _maybe_grow_pool(self) -> None:
        if self.checking:
            return
        super()._maybe_grow_pool()

    @property
    def suspect(self) -> bool:
        """Whether connections are checked on borrow now."""
        return time.monotonic() < self.suspect_until

    async def getconn(self, timeout: float | None = None) -> AsyncConnection[TupleRow]:  # noqa: ASYNC109 (the pool's signature)
        give_up_at = time.monotonic() + (self.timeout if timeout is None else timeout)
        # Each failed check discards a connection: at most every connection
        # the pool holds, then a new one, which is lent.
        for _ in range(self.max_size + 1):
            conn = await super().getconn(timeout=max(give_up_at - time.monotonic(), 0.001))
            if not self.suspect:
                return conn
            try:
                async with asyncio.timeout(min(_BORROW_CHECK_SECONDS, max(give_up_at - time.monotonic(), 0.001))):
                    await conn.execute(b"")
            except (psycopg.Error, TimeoutError):
                _log.info("a pooled connection failed its check on borrow", extra={"pool": self.name})
                await self.putconn(conn)
                continue
            return conn
        return await super().getconn(timeout=max(give_up_at - time.monotonic(), 0.001))

    async def putconn(self, conn: AsyncConnection[TupleRow]) -> None:
        if conn.broken:
            self.suspect_until = time.monotonic() + SUSPECT_SECONDS
        await super().putconn(conn)


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


# Whether a :func:`repeated_when_lost` method is running (its retry covers
# the methods it calls).
_RETRYING: ContextVar[bool] = ContextVar("boxoffice_db_retrying", default=False)


class ConnectionLost(Unavailable):
    """The database connection broke while the work had not committed: the
    server kept nothing of it, so it may run again on a fresh connection
    (:func:`retry_lost_once`). On the wire it is UNAVAILABLE
    ``DATABASE_UNAVAILABLE``, like any lost database."""

    def __init__(self, message: str = "database connection lost") -> None:
        super().__init__(message, reason="DATABASE_UNAVAILABLE")


def terminated(err: BaseException) -> bool:
    """Whether the server answered a statement by ending the session
    (SQLSTATE class 57: terminated by an operator, a crash or a shutdown):
    the statement did not run to its end, so it did not commit."""
    return isinstance(err, psycopg.Error) and (err.sqlstate or "").startswith("57P")


def lost(conn: AsyncConnection[TupleRow], err: BaseException, *, repeatable: bool) -> Unavailable:
    """The error a failed statement on ``conn`` becomes: :class:`ConnectionLost`
    when the connection broke and the work is safe to run again (it did not
    commit: the server said it ended the session, or the work is
    ``repeatable``: a read, or a write that is idempotent by a key), else
    plain UNAVAILABLE."""
    if conn.broken and (repeatable or terminated(err)):
        return ConnectionLost()
    return Unavailable("database unavailable", reason="DATABASE_UNAVAILABLE")


async def retry_lost_once(work: Callable[[], Awaitable[T]]) -> T:
    """Run ``work``; once more, on a fresh connection, if its connection was
    lost before it committed (:class:`ConnectionLost`) and the call's
    deadline leaves time. Anything else is the caller's."""
    try:
        return await work()
    except ConnectionLost:
        try:
            deadline.remaining()
        except DeadlineExceeded:
            raise ConnectionLost("database connection lost, and no time is left to try again") from None
        _log.info("database connection lost; the work runs again on another")
    return await work()


def repeated_when_lost(method: Callable[P, Coroutine[Any, Any, T]]) -> Callable[P, Coroutine[Any, Any, T]]:
    """``method`` under :func:`retry_lost_once`: for a store's method whose
    work is its own transactions and nothing outside the database, so that
    running it again after its connection broke before it committed is safe.
    A method that calls another such method keeps its own retry only
    (the inner one runs once), so the work is retried once, not once per level."""

    @functools.wraps(method)
    async def run(*args: P.args, **kwargs: P.kwargs) -> T:
        if _RETRYING.get():
            return await method(*args, **kwargs)
        token = _RETRYING.set(True)
        try:
            return await retry_lost_once(lambda: method(*args, **kwargs))
        finally:
            _RETRYING.reset(token)

    return run


async def _begin(
    pool: AsyncConnectionPool[AsyncConnection[TupleRow]], default_seconds: float
) -> AsyncConnection[TupleRow]:
    """A connection of ``pool`` in a new transaction bounded by the call's
    deadline (``BEGIN`` and the ``statement_timeout`` in one round trip).
    A connection found broken by the ``BEGIN`` is given back (the pool
    discards it) and the ``BEGIN`` sent once more on another: nothing ran."""
    for attempt in range(2):
        conn = await pool.getconn(timeout=deadline.remaining(default_seconds))
        try:
            timeout_ms = deadline.statement_timeout_ms(default_seconds)
            await conn.execute(f"BEGIN; SET LOCAL statement_timeout = {int(timeout_ms)}".encode())
        except BaseException as err:
            broken = conn.broken
            await pool.putconn(conn)
            if attempt == 0 and broken and isinstance(err, psycopg.OperationalError):
                _log.info("a pooled connection was broken; beginning on another", extra={"pool": pool.name})
                continue
            raise
        return conn
    raise AssertionError("unreachable")


@contextlib.asynccontextmanager
async def transaction(
    pool: AsyncConnectionPool[AsyncConnection[TupleRow]], *, default_seconds: float = deadline.FALLBACK_SECONDS
) -> AsyncIterator[AsyncConnection[TupleRow]]:
    """A connection in a transaction whose statements end at the call's
    deadline. A lost database answers UNAVAILABLE; a connection lost before
    the ``COMMIT`` was sent (or answered by the server ending the session)
    answers :class:`ConnectionLost`, which :func:`retry_lost_once` runs
    again. A connection found broken at ``BEGIN`` is replaced at once.

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
    conn: AsyncConnection[TupleRow] | None = None
    committing = False
    try:
        async with deadline.bounded(default_seconds):
            conn = await _begin(pool, default_seconds)
            try:
                try:
                    yield conn
                except BaseException:
                    if conn.info.transaction_status in (TransactionStatus.INTRANS, TransactionStatus.INERROR):
                        with contextlib.suppress(psycopg.Error):
                            await conn.execute(b"ROLLBACK")
                    raise
                if conn.info.transaction_status == TransactionStatus.INERROR:
                    await conn.execute(b"ROLLBACK")
                    raise psycopg.errors.InFailedSqlTransaction(
                        "a statement failed inside the transaction; rolled back"
                    )
                committing = True
                await conn.execute(b"COMMIT")
            finally:
                await pool.putconn(conn)
    except psycopg.errors.QueryCanceled as err:
        raise DeadlineExceeded("database statement exceeded the deadline", reason="DEADLINE_EXCEEDED") from err
    except psycopg.OperationalError as err:
        if conn is None:
            raise Unavailable("database unavailable", reason="DATABASE_UNAVAILABLE") from err
        raise lost(conn, err, repeatable=not committing) from err


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
