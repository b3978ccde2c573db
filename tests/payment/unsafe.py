"""Stores that get it wrong, for control tests only: they show that the
tests catch the bugs they are written for.

- Idempotency keys without an in-flight claim: a request finds the key's
  stored answer or runs, so every duplicate that arrives while the first
  runs runs too. Answers are stored after the work, as the real store
  stores them."""

from __future__ import annotations

import uuid

from boxoffice import db
from boxoffice.errors import BoxofficeError
from boxoffice.runtime import Pool
from payment_svc.adapters.idempotency import PgIdempotencyStore
from payment_svc.ports import Claimed, IdempotencyStore, Stored


class NoInFlightClaimStore:
    """Claims by reading a stored answer only: no in-flight marker. Built
    as :class:`PgIdempotencyStore` is."""

    def __init__(self, pool: Pool, *, retention_seconds: int, lease_seconds: float) -> None:
        self._pool = pool
        self._recorder = PgIdempotencyStore(pool, retention_seconds=retention_seconds, lease_seconds=lease_seconds)

    async def claim(self, scope: str, key: str, fingerprint: bytes) -> Claimed | Stored:
        async with db.transaction(self._pool) as conn:
            cur = await conn.execute(
                "SELECT response FROM payment_idempotency_keys WHERE scope = %s AND key = %s AND status_code = 0",
                (scope, key),
            )
            row = await cur.fetchone()
        return Claimed(str(uuid.uuid4())) if row is None else Stored(response=bytes(row[0]))

    async def complete(self, scope: str, key: str, token: str, outcome: bytes | BoxofficeError) -> None:
        await self._recorder.complete(scope, key, token, outcome)

    async def renew(self, scope: str, key: str, token: str) -> bool:
        return await self._recorder.renew(scope, key, token)

    async def release(self, scope: str, key: str, token: str) -> None:
        await self._recorder.release(scope, key, token)

    async def purge_expired(self, limit: int) -> int:
        return await self._recorder.purge_expired(limit)


def _compliance(store: NoInFlightClaimStore) -> IdempotencyStore:
    return store
