"""The admitter's epoch, read where the leader election keeps it: the
``leader_epochs`` row of the role (Postgres backend), incremented in the
transaction that takes the role's lock (the Kubernetes election's record is
its Lease: ``boxoffice.leader.lease_epochs``). Redis keeps only a copy of it
(the admit script's fence), and a Redis failover can lose that copy."""

from __future__ import annotations

from psycopg import AsyncConnection
from psycopg.rows import TupleRow
from psycopg_pool import AsyncConnectionPool

from boxoffice import db


class PgLeaderEpochs:
    """The current epoch of one elected role."""

    def __init__(self, pool: AsyncConnectionPool[AsyncConnection[TupleRow]], role: str) -> None:
        self._pool = pool
        self._role = role

    async def current(self) -> int | None:
        """The epoch of the role's latest term; None before its first."""
        async with db.transaction(self._pool) as conn:
            cur = await conn.execute("SELECT epoch FROM leader_epochs WHERE name = %s", (self._role,))
            row = await cur.fetchone()
        return None if row is None else int(row[0])
