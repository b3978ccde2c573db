"""Postgres through a psycopg async pool; ordered SQL migrations; one
transaction helper that bounds every statement by the call's deadline."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import re
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from importlib import resources
from importlib.resources.abc import Traversable

import psycopg
from psycopg import AsyncConnection
from psycopg.pq import TransactionStatus
from psycopg.rows import TupleRow
from psycopg_pool import AsyncConnectionPool

from boxoffice import deadline
from boxoffice.errors import DeadlineExceeded, Unavailable

_log = logging.getLogger("boxoffice.db")

_MIGRATION_NAME = re.compile(r"^(\d{4})_[a-z0-9_]+\.sql$")

# Any fixed number shared by every process that migrates this database.
_MIGRATION_LOCK_KEY = 0x626F78_6F6666


def create_pool(
    url: str, *, min_size: int, max_size: int, name: str, prepared_statements: bool = True
) -> AsyncConnectionPool[AsyncConnection[TupleRow]]:
    """A pool that is opened by the owner's ``start()`` (``open=False``).

    Connections are not checked on every checkout (that is one more round
    trip per transaction on the hot path); :class:`PoolComponent` checks the
    idle ones periodically instead, and a connection that breaks in use is
    discarded when it returns. ``prepared_statements=False`` is for a
    transaction-pooling PgBouncer older than 1.21.
    """
    return AsyncConnectionPool(
        url,
        min_size=min_size,
        max_size=max(min_size, max_size),
        open=False,
        name=name,
        kwargs={"autocommit": True, "prepare_threshold": 5 if prepared_statements else None},
    )


class PoolComponent:
    """Opens and closes a pool with the process, and checks its idle
    connections every ``check_interval_seconds``."""

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
                await self.pool.check()
            except Exception:
                _log.warning("idle connection check failed", exc_info=True)

    async def stop(self, grace_seconds: float) -> None:
        if self._checker is not None:
            self._checker.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._checker
        await self.pool.close(timeout=max(grace_seconds, 1.0))


@contextlib.asynccontextmanager
async def transaction(
    pool: AsyncConnectionPool[AsyncConnection[TupleRow]], *, default_seconds: float = deadline.FALLBACK_SECONDS
) -> AsyncIterator[AsyncConnection[TupleRow]]:
    """A connection in a transaction whose statements end at the call's
    deadline. A lost database answers UNAVAILABLE.

    ``BEGIN`` and the ``statement_timeout`` travel in one round trip;
    ``conn.transaction()`` inside makes savepoints as usual.
    """
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
    component: str
    version: int
    name: str
    sql: str

    @property
    def checksum(self) -> str:
        return hashlib.sha256(self.sql.encode()).hexdigest()


def load_migrations(component: str, package: str) -> list[Migration]:
    """The ``NNNN_name.sql`` files of ``package``'s ``migrations`` folder, in order."""
    folder: Traversable = resources.files(package).joinpath("migrations")
    found: list[Migration] = []
    if not folder.is_dir():
        return found
    for entry in folder.iterdir():
        match = _MIGRATION_NAME.match(entry.name)
        if match:
            found.append(Migration(component, int(match.group(1)), entry.name, entry.read_text()))
    found.sort(key=lambda m: m.version)
    versions = [m.version for m in found]
    if len(set(versions)) != len(versions):
        raise RuntimeError(f"{package}: two migrations share a version number")
    return found


async def migrate(url: str, migrations: Sequence[Migration]) -> list[str]:
    """Apply what is not applied yet, each in its own transaction, under an
    advisory lock so that replicas starting together migrate once. An
    applied migration whose file changed is an error."""
    applied_now: list[str] = []
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        await conn.execute("SELECT pg_advisory_lock(%s)", (_MIGRATION_LOCK_KEY,))
        try:
            await conn.execute(
                """
                CREATE TABLE IF NOT EXISTS schema_migrations (
                    component  text        NOT NULL,
                    version    integer     NOT NULL,
                    name       text        NOT NULL,
                    checksum   text        NOT NULL,
                    applied_at timestamptz NOT NULL DEFAULT now(),
                    PRIMARY KEY (component, version)
                )
                """
            )
            cur = await conn.execute("SELECT component, version, checksum FROM schema_migrations")
            done = {(row[0], row[1]): row[2] for row in await cur.fetchall()}
            for migration in migrations:
                key = (migration.component, migration.version)
                if key in done:
                    if done[key] != migration.checksum:
                        raise RuntimeError(
                            f"migration {migration.component}/{migration.name} changed after it was applied"
                        )
                    continue
                async with conn.transaction():
                    await conn.execute(migration.sql.encode())
                    await conn.execute(
                        "INSERT INTO schema_migrations (component, version, name, checksum) VALUES (%s, %s, %s, %s)",
                        (migration.component, migration.version, migration.name, migration.checksum),
                    )
                applied_now.append(f"{migration.component}/{migration.name}")
                _log.info("migration applied", extra={"migration": f"{migration.component}/{migration.name}"})
        finally:
            await conn.execute("SELECT pg_advisory_unlock(%s)", (_MIGRATION_LOCK_KEY,))
    return applied_now
