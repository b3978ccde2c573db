"""The lanes' access codes, durable in Postgres
(``ports.AccessCodeRepository``; tables ``queue_access_code_batches``,
``queue_access_codes``, ``queue_access_code_uses``). Only a code's SHA-256
is stored; a use binds the account to the code once, under the code's row
lock, so concurrent uses never bind more accounts than it allows."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta

from boxoffice import db
from boxoffice.runtime import Pool
from queue_svc.ports import CodeBatch, CodeUse

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def _at(ms: int) -> datetime:
    return _EPOCH + timedelta(milliseconds=ms)


# Codes are written in chunks of this many rows per statement.
_CHUNK = 5_000


class PgAccessCodeRepository:
    def __init__(self, pool: Pool) -> None:
        self._pool = pool

    async def create(self, batch: CodeBatch, code_hashes: Sequence[bytes]) -> int:
        async with db.transaction(self._pool) as conn:
            cur = await conn.execute(
                """
                INSERT INTO queue_access_code_batches (event_id, lane, max_uses, valid_from, valid_until, label)
                VALUES (%s, %s, %s, %s, %s, %s)
                RETURNING batch_id
                """,
                (
                    batch.event_id,
                    batch.lane,
                    batch.max_uses,
                    _at(batch.valid_from_ms),
                    _at(batch.valid_until_ms),
                    batch.label,
                ),
            )
            row = await cur.fetchone()
            assert row is not None
            batch_id = int(row[0])
            for start in range(0, len(code_hashes), _CHUNK):
                chunk = list(code_hashes[start : start + _CHUNK])
                await conn.execute(
                    "INSERT INTO queue_access_codes (code_hash, batch_id) SELECT unnest(%s::bytea[]), %s",
                    (chunk, batch_id),
                )
        return batch_id

    async def lane_of(self, event_id: int, code_hash: bytes) -> str | None:
        async with db.transaction(self._pool) as conn:
            cur = await conn.execute(
                """
                SELECT b.lane FROM queue_access_codes c JOIN queue_access_code_batches b USING (batch_id)
                 WHERE c.code_hash = %s AND b.event_id = %s
                """,
                (code_hash, event_id),
            )
            row = await cur.fetchone()
        return None if row is None else str(row[0])

    async def use(
        self, event_id: int, lane: str, code_hash: bytes, customer_id: str, *, now_ms: int
    ) -> tuple[CodeUse, int]:
        async with db.transaction(self._pool) as conn:
            cur = await conn.execute(
                """
                SELECT c.uses, b.max_uses, b.valid_from <= %(now)s AND %(now)s < b.valid_until
                  FROM queue_access_codes c JOIN queue_access_code_batches b USING (batch_id)
                 WHERE c.code_hash = %(hash)s AND b.event_id = %(event)s AND b.lane = %(lane)s
                   FOR UPDATE OF c
                """,
                {"now": _at(now_ms), "hash": code_hash, "event": event_id, "lane": lane},
            )
            row = await cur.fetchone()
            if row is None:
                return CodeUse.INVALID, 0
            uses, max_uses, valid_now = int(row[0]), int(row[1]), bool(row[2])
            if not valid_now:
                return CodeUse.INVALID, max_uses
            cur = await conn.execute(
                "SELECT 1 FROM queue_access_code_uses WHERE code_hash = %s AND customer_id = %s",
                (code_hash, customer_id),
            )
            if await cur.fetchone() is not None:
                return CodeUse.ACCEPTED, max_uses
            if uses >= max_uses:
                return CodeUse.USED_UP, max_uses
            await conn.execute(
                "INSERT INTO queue_access_code_uses (code_hash, customer_id) VALUES (%s, %s)",
                (code_hash, customer_id),
            )
            await conn.execute("UPDATE queue_access_codes SET uses = uses + 1 WHERE code_hash = %s", (code_hash,))
        return CodeUse.ACCEPTED, max_uses
