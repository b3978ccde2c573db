"""Staff passes' bindings, durable in Postgres (``ports.StaffPassBindings``;
table ``queue_staff_pass_bindings``).

A pass belongs to the first account that joins with it, and that must
survive Redis losing its data (else a pass shared after the loss would let
a second account in). Redis answers first (a pass bound to another account
there is refused without a query); a pass Redis holds for this account,
or holds for nobody, is decided by Postgres: one statement binds it or
names the account it already belongs to, and Redis is put right when it
disagrees."""

from __future__ import annotations

from typing import Protocol

from boxoffice import db
from boxoffice.runtime import Pool
from queue_svc.ports import StaffPassBindings


class StaffPassCache(Protocol):
    """The Redis side (``RedisQueueStore``)."""

    async def bind_staff_pass(self, event_id: int, pass_id: str, customer_id: str, *, keep_ms: int) -> bool:
        """Binds unless another's there; whether it is this account's there."""

    async def put_staff_pass(self, event_id: int, pass_id: str, customer_id: str, *, keep_ms: int) -> None:
        """Binds to ``customer_id`` whoever it was bound to there."""


class PgStaffPassBindings:
    def __init__(self, pool: Pool, cache: StaffPassCache) -> None:
        self._pool = pool
        self._cache = cache

    async def owner(self, event_id: int, pass_id: str, customer_id: str, *, keep_ms: int) -> str:
        """The account the pass belongs to: ``customer_id`` if it had none."""
        async with db.transaction(self._pool) as conn:
            cur = await conn.execute(
                """
                INSERT INTO queue_staff_pass_bindings AS b (event_id, pass_id, customer_id, expires_at)
                VALUES (%s, %s, %s, now() + make_interval(secs => %s))
                ON CONFLICT (event_id, pass_id) DO UPDATE SET expires_at = b.expires_at
                RETURNING b.customer_id
                """,
                (event_id, pass_id, customer_id, max(1, keep_ms) / 1000),
            )
            row = await cur.fetchone()
        assert row is not None
        return str(row[0])

    async def bind_staff_pass(self, event_id: int, pass_id: str, customer_id: str, *, keep_ms: int) -> bool:
        if not await self._cache.bind_staff_pass(event_id, pass_id, customer_id, keep_ms=keep_ms):
            return False
        owner = await self.owner(event_id, pass_id, customer_id, keep_ms=keep_ms)
        if owner == customer_id:
            return True
        await self._cache.put_staff_pass(event_id, pass_id, owner, keep_ms=keep_ms)
        return False


def _compliance(bindings: PgStaffPassBindings) -> StaffPassBindings:
    return bindings
