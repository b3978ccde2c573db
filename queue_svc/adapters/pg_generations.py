"""The waiting rooms' generations and lifecycle histories in Postgres
(``rebuild.RoomGenerations``, tables ``queue_generations`` and
``queue_lifecycle``)."""

from __future__ import annotations

from boxoffice import db
from boxoffice.runtime import Pool
from queue_svc.adapters.pg_draws import PRE_QUEUE
from queue_svc.jobs.lifecycle import LifecycleRow
from queue_svc.rebuild import PreQueueDraw, RoomGeneration

# A page of a room's history, or of its draw, may take longer than a call's
# default.
_PAGE_SECONDS = 60.0


class PgRoomGenerations:
    """Generations and histories, read and advanced in Postgres."""

    def __init__(self, pool: Pool) -> None:
        self._pool = pool

    async def stamp(self, event_id: int) -> int:
        return (await self.current(event_id)).stamp

    async def current(self, event_id: int) -> RoomGeneration:
        async with db.transaction(self._pool) as conn:
            cur = await conn.execute(
                """
                SELECT COALESCE((SELECT generation FROM queue_generations WHERE event_id = %(e)s), 1),
                       EXISTS (SELECT 1 FROM queue_lifecycle WHERE event_id = %(e)s)
                """,
                {"e": event_id},
            )
            row = await cur.fetchone()
        assert row is not None
        return RoomGeneration(int(row[0]), bool(row[1]))

    async def all(self) -> dict[int, RoomGeneration]:
        async with db.transaction(self._pool) as conn:
            cur = await conn.execute(
                """
                SELECT e.event_id, COALESCE(g.generation, 1),
                       EXISTS (SELECT 1 FROM queue_lifecycle l WHERE l.event_id = e.event_id)
                  FROM queue_events e LEFT JOIN queue_generations g USING (event_id)
                """
            )
            rows = await cur.fetchall()
        return {int(event_id): RoomGeneration(int(gen), bool(history)) for event_id, gen, history in rows}

    async def advance(self, event_id: int, *, from_generation: int) -> int | None:
        async with db.transaction(self._pool) as conn:
            cur = await conn.execute(
                """
                INSERT INTO queue_generations (event_id, generation) VALUES (%(e)s, %(from)s + 1)
                ON CONFLICT (event_id) DO UPDATE SET generation = EXCLUDED.generation, rebuilt_at = now()
                 WHERE queue_generations.generation = %(from)s
                RETURNING generation
                """,
                {"e": event_id, "from": from_generation},
            )
            row = await cur.fetchone()
        return None if row is None else int(row[0])

    async def history(self, event_id: int, *, after: int, limit: int) -> list[LifecycleRow]:
        async with db.transaction(self._pool, default_seconds=_PAGE_SECONDS) as conn:
            cur = await conn.execute(
                """
                SELECT idx, kind, (extract(epoch FROM at) * 1000)::bigint, customer_id, score, pre_queue, detail
                  FROM queue_lifecycle WHERE event_id = %s AND idx > %s ORDER BY idx LIMIT %s
                """,
                (event_id, after, limit),
            )
            rows = await cur.fetchall()
        return [
            LifecycleRow(int(idx), str(kind), int(at_ms), str(customer), score, pre_queue, detail)
            for idx, kind, at_ms, customer, score, pre_queue, detail in rows
        ]

    async def refusals(self, event_id: int) -> dict[str, int]:
        async with db.transaction(self._pool) as conn:
            cur = await conn.execute("SELECT reason, refused FROM queue_refusals WHERE event_id = %s", (event_id,))
            rows = await cur.fetchall()
        return {str(reason): int(refused) for reason, refused in rows}

    async def pre_queue(self, event_id: int) -> PreQueueDraw | None:
        async with db.transaction(self._pool) as conn:
            cur = await conn.execute(
                "SELECT recorded, sealed_at IS NOT NULL, pseudonym_key FROM queue_draws"
                " WHERE event_id = %s AND purpose = %s",
                (event_id, PRE_QUEUE),
            )
            row = await cur.fetchone()
        return None if row is None else PreQueueDraw(int(row[0]), bool(row[1]), bytes(row[2]))

    async def pre_queue_entries(
        self, event_id: int, *, after: tuple[int, str] | None, limit: int
    ) -> list[tuple[str, int]]:
        async with db.transaction(self._pool, default_seconds=_PAGE_SECONDS) as conn:
            cur = await conn.execute(
                """
                SELECT pseudonym, score FROM queue_draw_entries
                 WHERE event_id = %s AND purpose = %s AND (%s::bigint IS NULL OR (score, pseudonym) > (%s, %s))
                 ORDER BY score, pseudonym LIMIT %s
                """,
                (event_id, PRE_QUEUE, None if after is None else after[0], *(after or (None, None)), limit),
            )
            return [(str(pseudonym), int(score)) for pseudonym, score in await cur.fetchall()]
