"""Verified-fan draws, durable in Postgres (``ports.FanDrawRepository``,
table ``queue_fan_draws``; the draw's seed, commitment and registrations
are a draw of purpose ``fan_draw`` in ``queue_draws`` and
``queue_draw_entries``, shared with the pre-queue's draws).

Registrations are stored by pseudonym and score only: no account id is
kept with them, and a fan's result is their rank, counted from the order.
Drawing is one transaction: the draw's row locked, the winners' codes made
(their hashes, in one batch of single-use codes of the lane), the draw and
its seed marked revealed; a second drawer finds it drawn and does nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg

from boxoffice import db, draw
from boxoffice.draw import Entry
from boxoffice.runtime import Pool
from queue_svc import errors
from queue_svc.adapters.pg_draws import PgDrawRepository
from queue_svc.model import DrawRecord, FanDraw

FAN_DRAW = "fan_draw"

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MS = timedelta(milliseconds=1)
_COLUMNS = "event_id, lane, closes_at, winners, code_validity_ms, drawn_at"


def _at(ms: int) -> datetime:
    return _EPOCH + timedelta(milliseconds=ms)


def _ms(value: datetime) -> int:
    return (value - _EPOCH) // _MS


def _draw(row: tuple[Any, ...]) -> FanDraw:
    event_id, lane, closes_at, winners, validity, drawn_at = row
    return FanDraw(
        event_id=int(event_id),
        lane=str(lane),
        closes_at_ms=_ms(closes_at),
        winners=int(winners),
        code_validity_ms=int(validity),
        drawn_at_ms=None if drawn_at is None else _ms(drawn_at),
    )


class PgFanDrawRepository:
    def __init__(self, pool: Pool) -> None:
        self._pool = pool
        self._secrets = PgDrawRepository(pool, purpose=FAN_DRAW, algorithm=draw.FAN_DRAW_V1)

    @property
    def secrets(self) -> PgDrawRepository:
        return self._secrets

    async def create(self, fan_draw: FanDraw) -> DrawRecord:
        """The draw and its secret seed, in one transaction; FAN_DRAW_EXISTS
        if the event has one."""
        try:
            async with db.transaction(self._pool) as conn:
                with db.joining(self._pool, conn):
                    await self._insert(conn, fan_draw)
                    record = await self.secrets.get_or_create(fan_draw.event_id)
        except psycopg.errors.UniqueViolation:
            raise errors.fan_draw_exists(fan_draw.event_id) from None
        except psycopg.errors.ForeignKeyViolation:
            raise errors.unknown_event(fan_draw.event_id) from None
        assert record is not None
        return record

    @staticmethod
    async def _insert(conn: Any, fan_draw: FanDraw) -> None:
        await conn.execute(
            f"""
            INSERT INTO queue_fan_draws ({_COLUMNS})
            VALUES (%s, %s, %s, %s, %s, NULL)
            """,
            (
                fan_draw.event_id,
                fan_draw.lane,
                _at(fan_draw.closes_at_ms),
                fan_draw.winners,
                fan_draw.code_validity_ms,
            ),
        )

    async def get(self, event_id: int) -> FanDraw | None:
        async with db.transaction(self._pool) as conn:
            cur = await conn.execute(f"SELECT {_COLUMNS} FROM queue_fan_draws WHERE event_id = %s", (event_id,))
            row = await cur.fetchone()
        return None if row is None else _draw(row)

    async def register(self, event_id: int, entry: Entry) -> bool:
        """Whether this call registered the pseudonym (a repeat is ignored)."""
        async with db.transaction(self._pool) as conn:
            cur = await conn.execute(
                """
                INSERT INTO queue_draw_entries (event_id, purpose, pseudonym, score)
                VALUES (%s, %s, %s, %s)
                ON CONFLICT (event_id, purpose, pseudonym) DO NOTHING
                RETURNING 1
                """,
                (event_id, FAN_DRAW, entry.pseudonym, entry.score),
            )
            row = await cur.fetchone()
        return row is not None

    async def rank(self, event_id: int, pseudonym: str) -> int | None:
        """The registered pseudonym's rank in the draw's order (from 1), or
        None when it is not registered."""
        async with db.transaction(self._pool) as conn:
            cur = await conn.execute(
                """
                SELECT (SELECT count(*) FROM queue_draw_entries o
                         WHERE o.event_id = e.event_id AND o.purpose = e.purpose
                           AND (o.score, o.pseudonym) < (e.score, e.pseudonym)) + 1
                  FROM queue_draw_entries e
                 WHERE e.event_id = %s AND e.purpose = %s AND e.pseudonym = %s
                """,
                (event_id, FAN_DRAW, pseudonym),
            )
            row = await cur.fetchone()
        return None if row is None else int(row[0])

    async def due(self, now_ms: int) -> list[FanDraw]:
        async with db.transaction(self._pool) as conn:
            cur = await conn.execute(
                f"SELECT {_COLUMNS} FROM queue_fan_draws WHERE drawn_at IS NULL AND closes_at <= %s ORDER BY event_id",
                (_at(now_ms),),
            )
            rows = await cur.fetchall()
        return [_draw(row) for row in rows]

    async def run(self, event_id: int, *, now_ms: int, code_of: Callable[[str], bytes]) -> bool:
        """Draws a closed draw once: the first `winners` registrations in
        the draw's order get a single-use code of the lane (``code_of``: a
        winner's pseudonym -> the hash of their code), and the draw is
        revealed. Whether this call drew it."""
        async with db.transaction(self._pool) as conn:
            cur = await conn.execute(
                f"SELECT {_COLUMNS} FROM queue_fan_draws WHERE event_id = %s AND drawn_at IS NULL FOR UPDATE",
                (event_id,),
            )
            row = await cur.fetchone()
            if row is None:
                return False
            found = _draw(row)
            if found.closes_at_ms > now_ms:
                return False
            cur = await conn.execute(
                """
                SELECT pseudonym FROM queue_draw_entries
                 WHERE event_id = %s AND purpose = %s ORDER BY score, pseudonym LIMIT %s
                """,
                (event_id, FAN_DRAW, found.winners),
            )
            winners: Sequence[str] = [str(r[0]) for r in await cur.fetchall()]
            cur = await conn.execute(
                """
                INSERT INTO queue_access_code_batches (event_id, lane, max_uses, valid_from, valid_until, label)
                VALUES (%s, %s, 1, %s, %s, 'verified-fan draw')
                RETURNING batch_id
                """,
                (event_id, found.lane, _at(now_ms), _at(now_ms + found.code_validity_ms)),
            )
            batch = await cur.fetchone()
            assert batch is not None
            await conn.execute(
                "INSERT INTO queue_access_codes (code_hash, batch_id) SELECT unnest(%s::bytea[]), %s",
                ([code_of(p) for p in winners], batch[0]),
            )
            await conn.execute(
                "UPDATE queue_fan_draws SET drawn_at = %s, batch_id = %s WHERE event_id = %s",
                (_at(now_ms), batch[0], event_id),
            )
            await conn.execute(
                """
                UPDATE queue_draws d
                   SET sealed_at = %s,
                       participant_count = (SELECT count(*) FROM queue_draw_entries e
                                             WHERE e.event_id = d.event_id AND e.purpose = d.purpose)
                 WHERE event_id = %s AND purpose = %s
                """,
                (_at(now_ms), event_id, FAN_DRAW),
            )
        return True
