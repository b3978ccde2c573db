"""The events' pre-queue draws, durable in Postgres (``ports.DrawRepository``,
tables ``queue_draws`` and ``queue_draw_entries``).

A draw's seed and pseudonym key are drawn here, from the OS's CSPRNG, the
first time the event's draw is asked for (by the waiting room's creation,
in its transaction, or by the first join or proof of a room made before
draws existed). Two processes asking at once store one: the first insert
wins and both read it back.

Copying the Redis log is safe on any number of processes at once: an
entry is stored once per pseudonym (a second copy is ignored), and the
count of entries copied only grows (``GREATEST``), in the transaction that
stored them; so ``recorded = n`` always means that the log's first n
entries are stored, and a draw is sealed only when that covers the whole
final log.
"""

from __future__ import annotations

import secrets
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from boxoffice import db, draw
from boxoffice.draw import Entry
from boxoffice.runtime import Pool
from queue_svc.model import DrawRecord, DrawSecrets, UnsealedDraw

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MS = timedelta(milliseconds=1)

# The purpose of the pre-queue's draw (a verified-fan draw will be another).
PRE_QUEUE = "pre_queue"

_COLUMNS = "event_id, algorithm, seed, pseudonym_key, committed_at, recorded, sealed_at, participant_count"


def _ms(value: datetime) -> int:
    return (value - _EPOCH) // _MS


def _record(row: tuple[Any, ...]) -> DrawRecord:
    event_id, algorithm, seed, key, committed_at, recorded, sealed_at, count = row
    return DrawRecord(
        secrets=DrawSecrets(
            event_id=int(event_id), algorithm=str(algorithm), seed=bytes(seed), pseudonym_key=bytes(key)
        ),
        committed_at_ms=_ms(committed_at),
        recorded=int(recorded),
        sealed_at_ms=None if sealed_at is None else _ms(sealed_at),
        participant_count=int(count or 0),
    )


class PgDrawRepository:
    """Draws of one purpose (the pre-queue's) and one algorithm."""

    def __init__(self, pool: Pool, *, purpose: str = PRE_QUEUE, algorithm: str = draw.PRE_QUEUE_V1) -> None:
        self._pool = pool
        self._purpose = purpose
        self._algorithm = algorithm

    async def get_or_create(self, event_id: int) -> DrawRecord | None:
        select = f"SELECT {_COLUMNS} FROM queue_draws WHERE event_id = %s AND purpose = %s"
        async with db.transaction(self._pool) as conn:
            cur = await conn.execute(select, (event_id, self._purpose))
            row = await cur.fetchone()
        if row is not None:
            return _record(row)
        seed = secrets.token_bytes(draw.SEED_BYTES)
        key = secrets.token_bytes(draw.PSEUDONYM_KEY_BYTES)
        async with db.transaction(self._pool) as conn:
            # Inserted only for an event with a waiting room and no draw yet.
            await conn.execute(
                """
                INSERT INTO queue_draws (event_id, purpose, algorithm, seed, commitment, pseudonym_key)
                SELECT event_id, %s, %s, %s, %s, %s FROM queue_events WHERE event_id = %s
                ON CONFLICT (event_id, purpose) DO NOTHING
                """,
                (self._purpose, self._algorithm, seed, bytes.fromhex(draw.commitment(seed)), key, event_id),
            )
            cur = await conn.execute(select, (event_id, self._purpose))
            row = await cur.fetchone()
        return None if row is None else _record(row)

    async def record(self, event_id: int, start: int, entries: Sequence[Entry]) -> None:
        if not entries:
            return
        async with db.transaction(self._pool) as conn:
            await conn.execute(
                """
                INSERT INTO queue_draw_entries (event_id, purpose, pseudonym, score)
                SELECT %s, %s, pseudonym, score FROM unnest(%s::text[], %s::bigint[]) AS e (pseudonym, score)
                ON CONFLICT (event_id, purpose, pseudonym) DO NOTHING
                """,
                (event_id, self._purpose, [e.pseudonym for e in entries], [e.score for e in entries]),
            )
            await conn.execute(
                """
                UPDATE queue_draws SET recorded = GREATEST(recorded, %s)
                 WHERE event_id = %s AND purpose = %s
                """,
                (start + len(entries), event_id, self._purpose),
            )

    async def seal(self, event_id: int, length: int) -> bool:
        async with db.transaction(self._pool) as conn:
            cur = await conn.execute(
                """
                UPDATE queue_draws d
                   SET sealed_at = COALESCE(sealed_at, now()),
                       participant_count = COALESCE(
                           participant_count,
                           (SELECT count(*) FROM queue_draw_entries e
                             WHERE e.event_id = d.event_id AND e.purpose = d.purpose))
                 WHERE event_id = %s AND purpose = %s AND (sealed_at IS NOT NULL OR recorded >= %s)
                RETURNING 1
                """,
                (event_id, self._purpose, length),
            )
            row = await cur.fetchone()
        return row is not None

    async def unsealed(self) -> list[UnsealedDraw]:
        async with db.transaction(self._pool) as conn:
            cur = await conn.execute(
                """
                SELECT d.event_id, q.opens_at, d.recorded
                  FROM queue_draws d JOIN queue_events q USING (event_id)
                 WHERE d.purpose = %s AND d.sealed_at IS NULL
                 ORDER BY d.event_id
                """,
                (self._purpose,),
            )
            rows = await cur.fetchall()
        return [UnsealedDraw(int(event_id), _ms(opens_at), int(recorded)) for event_id, opens_at, recorded in rows]

    async def entries(self, event_id: int, *, after: tuple[int, str] | None, limit: int) -> list[Entry]:
        score, pseudonym = after if after is not None else (-1, "")
        async with db.transaction(self._pool) as conn:
            cur = await conn.execute(
                """
                SELECT pseudonym, score FROM queue_draw_entries
                 WHERE event_id = %s AND purpose = %s AND (score, pseudonym) > (%s, %s)
                 ORDER BY score, pseudonym
                 LIMIT %s
                """,
                (event_id, self._purpose, score, pseudonym, limit),
            )
            rows = await cur.fetchall()
        return [Entry(str(p), int(s)) for p, s in rows]
