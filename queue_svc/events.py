"""Event waiting-room configuration, durable in Postgres."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any, Protocol

import psycopg

from boxoffice import db
from boxoffice.errors import AlreadyExists, NotFound
from boxoffice.runtime import Pool
from queue_svc.model import EventQueueConfig

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MS = timedelta(milliseconds=1)

_COLUMNS = (
    "event_id, opens_at, pre_queue_window_ms, admission_rate_per_second, max_active_shoppers,"
    " session_length_ms, token_ttl_ms, claim_grace_ms, paused, version"
)


def ms_to_datetime(ms: int) -> datetime:
    return _EPOCH + timedelta(milliseconds=ms)


def datetime_to_ms(value: datetime) -> int:
    return (value - _EPOCH) // _MS


def _not_found(event_id: int) -> NotFound:
    return NotFound(
        f"event {event_id} has no waiting room", reason="EVENT_NOT_FOUND", metadata={"event_id": str(event_id)}
    )


class EventQueueRepository(Protocol):
    """Where event configurations live."""

    async def create(self, config: EventQueueConfig) -> EventQueueConfig:
        """Store a new configuration (version 1); ALREADY_EXISTS if there is one."""

    async def update(self, config: EventQueueConfig) -> EventQueueConfig:
        """Replace a configuration (next version); NOT_FOUND if there is none."""

    async def set_paused(self, event_id: int, paused: bool) -> EventQueueConfig:
        """Pause or resume (next version); NOT_FOUND if there is none."""

    async def get(self, event_id: int) -> EventQueueConfig | None:
        """One configuration, or None."""

    async def list_all(self) -> list[EventQueueConfig]:
        """Every configuration."""


def _row(row: tuple[Any, ...]) -> EventQueueConfig:
    (event_id, opens_at, window, rate, max_active, session, ttl, grace, paused, version) = row
    return EventQueueConfig(
        event_id=int(event_id),
        opens_at_ms=datetime_to_ms(opens_at),
        pre_queue_window_ms=int(window),
        admission_rate_per_second=int(rate),
        max_active_shoppers=int(max_active),
        session_length_ms=int(session),
        token_ttl_ms=int(ttl),
        claim_grace_ms=int(grace),
        paused=bool(paused),
        version=int(version),
    )


class PgEventQueueRepository:
    def __init__(self, pool: Pool) -> None:
        self._pool = pool

    async def create(self, config: EventQueueConfig) -> EventQueueConfig:
        try:
            async with db.transaction(self._pool) as conn:
                cur = await conn.execute(
                    f"""
                    INSERT INTO queue_events ({_COLUMNS})
                    VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, 1)
                    RETURNING {_COLUMNS}
                    """,
                    (
                        config.event_id,
                        ms_to_datetime(config.opens_at_ms),
                        config.pre_queue_window_ms,
                        config.admission_rate_per_second,
                        config.max_active_shoppers,
                        config.session_length_ms,
                        config.token_ttl_ms,
                        config.claim_grace_ms,
                        config.paused,
                    ),
                )
                row = await cur.fetchone()
        except psycopg.errors.UniqueViolation:
            raise AlreadyExists(
                f"event {config.event_id} already has a waiting room",
                reason="EVENT_QUEUE_EXISTS",
                metadata={"event_id": str(config.event_id)},
            ) from None
        assert row is not None
        return _row(row)

    async def update(self, config: EventQueueConfig) -> EventQueueConfig:
        async with db.transaction(self._pool) as conn:
            cur = await conn.execute(
                f"""
                UPDATE queue_events
                   SET opens_at = %s, pre_queue_window_ms = %s, admission_rate_per_second = %s,
                       max_active_shoppers = %s, session_length_ms = %s, token_ttl_ms = %s,
                       claim_grace_ms = %s, paused = %s, version = version + 1, updated_at = now()
                 WHERE event_id = %s
                RETURNING {_COLUMNS}
                """,
                (
                    ms_to_datetime(config.opens_at_ms),
                    config.pre_queue_window_ms,
                    config.admission_rate_per_second,
                    config.max_active_shoppers,
                    config.session_length_ms,
                    config.token_ttl_ms,
                    config.claim_grace_ms,
                    config.paused,
                    config.event_id,
                ),
            )
            row = await cur.fetchone()
        if row is None:
            raise _not_found(config.event_id)
        return _row(row)

    async def set_paused(self, event_id: int, paused: bool) -> EventQueueConfig:
        async with db.transaction(self._pool) as conn:
            cur = await conn.execute(
                f"""
                UPDATE queue_events SET paused = %s, version = version + 1, updated_at = now()
                 WHERE event_id = %s
                RETURNING {_COLUMNS}
                """,
                (paused, event_id),
            )
            row = await cur.fetchone()
        if row is None:
            raise _not_found(event_id)
        return _row(row)

    async def get(self, event_id: int) -> EventQueueConfig | None:
        async with db.transaction(self._pool) as conn:
            cur = await conn.execute(f"SELECT {_COLUMNS} FROM queue_events WHERE event_id = %s", (event_id,))
            row = await cur.fetchone()
        return None if row is None else _row(row)

    async def list_all(self) -> list[EventQueueConfig]:
        async with db.transaction(self._pool) as conn:
            cur = await conn.execute(f"SELECT {_COLUMNS} FROM queue_events ORDER BY event_id")
            rows = await cur.fetchall()
        return [_row(row) for row in rows]


def _compliance(pool: Pool) -> EventQueueRepository:
    return PgEventQueueRepository(pool)


__all__ = ["EventQueueRepository", "PgEventQueueRepository", "datetime_to_ms", "ms_to_datetime"]
