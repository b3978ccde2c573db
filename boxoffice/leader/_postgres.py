"""The Postgres backend: a session advisory lock on a dedicated connection.

The lock lives as long as the session that took it, so the session is kept
on its own connection (never one from the pool) and given server-side
bounds: ``idle_session_timeout`` ends it once the leader has been silent for
longer than its renew deadline (a paused or cut-off leader), TCP keepalives
and ``tcp_user_timeout`` end it when the peer is gone. The epoch is a row of
``leader_epochs`` incremented in the transaction that takes the lock.

The connection must reach Postgres itself or a session-mode pooler: a
transaction-mode pooler (PgBouncer ``pool_mode=transaction``) would hand the
lock's session to others. It is ``DATABASE_DIRECT_URL`` (else ``DATABASE_URL``),
or ``BOXOFFICE_LEADER_DATABASE_URL`` for the election alone.
"""

from __future__ import annotations

import hashlib
import math

import psycopg
from psycopg import AsyncConnection
from psycopg.rows import TupleRow

from boxoffice import deadline
from boxoffice.leader._config import LeaderTimings

# idle_session_timeout exists from Postgres 14 on; older servers rely on the
# keepalive and tcp_user_timeout bounds alone.
_IDLE_SESSION_TIMEOUT_SINCE = 140000

_TAKE = """
INSERT INTO leader_epochs AS e (name, epoch, holder) VALUES (%s, 1, %s)
ON CONFLICT (name) DO UPDATE SET epoch = e.epoch + 1, holder = EXCLUDED.holder, acquired_at = now()
RETURNING epoch
"""

_CHECK = """
SELECT
    EXISTS (
        SELECT 1 FROM pg_locks
        WHERE locktype = 'advisory' AND pid = pg_backend_pid() AND granted
          AND classid = %s::oid AND objid = %s::oid AND objsubid = 2
    ),
    (SELECT epoch FROM leader_epochs WHERE name = %s)
"""


def advisory_keys(name: str) -> tuple[int, int]:
    """The two non-negative int4 keys of the role's advisory lock, the same
    in every process."""
    digest = hashlib.blake2b(f"boxoffice.leader:{name}".encode(), digest_size=8).digest()
    return int.from_bytes(digest[:4], "big") & 0x7FFF_FFFF, int.from_bytes(digest[4:], "big") & 0x7FFF_FFFF


class PostgresLock:
    """An :class:`ElectionLock` on a session
    advisory lock. ``session_bound_seconds`` is how long the server keeps a
    silent session (normally ``timings.session_bound_seconds``); None leaves
    the server's bounds unset (tests show what that costs)."""

    def __init__(
        self,
        *,
        database_url: str,
        name: str,
        identity: str,
        timings: LeaderTimings,
        session_bound_seconds: float | None,
    ) -> None:
        self._url = database_url
        self._name = name
        self._identity = identity
        self._timings = timings
        self._session_bound = session_bound_seconds
        self._keys = advisory_keys(name)
        self._conn: AsyncConnection[TupleRow] | None = None
        self._epoch: int | None = None

    @property
    def backend_pid(self) -> int | None:
        """The server process of the lock's session (None without one)."""
        conn = self._conn
        return None if conn is None or conn.closed else conn.info.backend_pid

    async def _session(self) -> AsyncConnection[TupleRow]:
        conn = self._conn
        if conn is not None and not conn.closed and not conn.broken:
            return conn
        await self._drop()
        timings = self._timings
        keepalive_idle = max(1, math.floor(timings.retry_seconds))
        conn = await psycopg.AsyncConnection.connect(
            self._url,
            autocommit=True,
            prepare_threshold=None,
            application_name=f"boxoffice-leader:{self._name}"[:63],
            connect_timeout=max(2, math.ceil(deadline.remaining())),
            # The client's side: notice a dead server within the renew deadline.
            keepalives=1,
            keepalives_idle=keepalive_idle,
            keepalives_interval=1,
            keepalives_count=max(1, math.floor(timings.renew_deadline_seconds) - keepalive_idle),
            tcp_user_timeout=int(timings.renew_deadline_seconds * 1000),
        )
        try:
            settings: list[tuple[str, str]] = [
                ("statement_timeout", str(int(timings.renew_deadline_seconds * 1000))),
            ]
            bound = self._session_bound
            if bound is not None:
                # The server's side: end a silent leader's session (and free
                # its lock) after its renew deadline, within the lease.
                bound_ms = int(bound * 1000)
                if conn.info.server_version >= _IDLE_SESSION_TIMEOUT_SINCE:
                    settings.append(("idle_session_timeout", str(bound_ms)))
                server_idle = max(1, math.floor(timings.retry_seconds))
                settings += [
                    ("tcp_keepalives_idle", str(server_idle)),
                    ("tcp_keepalives_interval", "1"),
                    ("tcp_keepalives_count", str(max(1, math.floor(bound) - server_idle))),
                    ("tcp_user_timeout", str(bound_ms)),
                ]
            query = "SELECT " + ", ".join("set_config(%s, %s, false)" for _ in settings)
            await conn.execute(query.encode(), [value for pair in settings for value in pair])
        except BaseException:
            await conn.close()
            raise
        self._conn = conn
        return conn

    async def _drop(self) -> None:
        """Close the session: the server frees every lock it holds."""
        conn, self._conn, self._epoch = self._conn, None, None
        if conn is not None and not conn.closed:
            await conn.close()

    async def try_acquire(self) -> int | None:
        conn = await self._session()
        try:
            async with conn.transaction():
                cur = await conn.execute("SELECT pg_try_advisory_lock(%s, %s)", self._keys)
                row = await cur.fetchone()
                if row is None or not row[0]:
                    return None
                cur = await conn.execute(_TAKE, (self._name, self._identity))
                row = await cur.fetchone()
        except BaseException:
            # A session lock outlives a rolled-back transaction: end the
            # session so that a failed attempt holds nothing.
            await self._drop()
            raise
        if row is None:
            await self._drop()
            raise RuntimeError("taking the leader epoch returned no row")
        self._epoch = int(row[0])
        return self._epoch

    async def renew(self) -> bool:
        conn = self._conn
        if conn is None or conn.closed or conn.broken or self._epoch is None:
            return False
        try:
            cur = await conn.execute(_CHECK, (*self._keys, self._name))
            row = await cur.fetchone()
        except psycopg.OperationalError:
            if conn.closed or conn.broken:
                # The session is gone, and its lock with it.
                await self._drop()
                return False
            raise
        held = row is not None and bool(row[0]) and row[1] == self._epoch
        if not held:
            await self._drop()
        return held

    async def release(self) -> None:
        await self._drop()

    async def close(self) -> None:
        await self._drop()
