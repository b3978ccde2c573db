"""Waiting-room configurations, durable in Postgres
(``ports.WaitingRoomRepository``, table ``queue_events``)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
from psycopg.types.json import Jsonb

from boxoffice import db
from boxoffice.runtime import Pool
from queue_svc import errors
from queue_svc.model import Lane, LaneEntry, WaitingRoomConfig

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MS = timedelta(milliseconds=1)

_COLUMNS = (
    "event_id, opens_at, pre_queue_window_ms, admission_rate_per_second, max_active_shoppers,"
    " session_length_ms, token_ttl_ms, claim_grace_ms, paused, version,"
    " presence_grace_ms, safety_net, admission_rate_min_per_second, admission_rate_max_per_second, lanes"
)


def _ms_to_datetime(ms: int) -> datetime:
    return _EPOCH + timedelta(milliseconds=ms)


def _datetime_to_ms(value: datetime) -> int:
    return (value - _EPOCH) // _MS


def _row(row: tuple[Any, ...]) -> WaitingRoomConfig:
    (
        event_id,
        opens_at,
        window,
        rate,
        max_active,
        session,
        ttl,
        grace,
        paused,
        version,
        presence,
        safety,
        low,
        high,
        lanes,
    ) = row
    return WaitingRoomConfig(
        event_id=int(event_id),
        opens_at_ms=_datetime_to_ms(opens_at),
        pre_queue_window_ms=int(window),
        admission_rate_per_second=int(rate),
        max_active_shoppers=int(max_active),
        session_length_ms=int(session),
        token_ttl_ms=int(ttl),
        claim_grace_ms=int(grace),
        paused=bool(paused),
        version=int(version),
        presence_grace_ms=int(presence),
        safety_net=bool(safety),
        admission_rate_min_per_second=int(low),
        admission_rate_max_per_second=int(high),
        lanes=_lanes(lanes),
    )


def _lanes(stored: Any) -> tuple[Lane, ...]:
    """The lanes column (a JSON array; psycopg decodes it, or a string)."""
    items = json.loads(stored) if isinstance(stored, str) else stored
    return tuple(
        Lane(
            name=str(item["name"]),
            entry=LaneEntry(int(item["entry"])),
            share_percent=int(item["share_percent"]),
            opens_at_ms=int(item.get("opens_at_ms", 0)),
            pre_queue_window_ms=int(item.get("pre_queue_window_ms", 0)),
        )
        for item in items or ()
    )


def _lanes_json(config: WaitingRoomConfig) -> Jsonb:
    return Jsonb(
        [
            {
                "name": lane.name,
                "entry": int(lane.entry),
                "share_percent": lane.share_percent,
                "opens_at_ms": lane.opens_at_ms,
                "pre_queue_window_ms": lane.pre_queue_window_ms,
            }
            for lane in config.lanes
        ]
    )


def _params(config: WaitingRoomConfig) -> dict[str, Any]:
    """A configuration's columns, by name, as the statements take them."""
    return {
        "event_id": config.event_id,
        "opens_at": _ms_to_datetime(config.opens_at_ms),
        "pre_queue_window_ms": config.pre_queue_window_ms,
        "admission_rate_per_second": config.admission_rate_per_second,
        "max_active_shoppers": config.max_active_shoppers,
        "session_length_ms": config.session_length_ms,
        "token_ttl_ms": config.token_ttl_ms,
        "claim_grace_ms": config.claim_grace_ms,
        "paused": config.paused,
        "presence_grace_ms": config.presence_grace_ms,
        "safety_net": config.safety_net,
        "admission_rate_min_per_second": config.admission_rate_min_per_second,
        "admission_rate_max_per_second": config.admission_rate_max_per_second,
        "lanes": _lanes_json(config),
    }


class PgWaitingRoomRepository:
    """Waiting-room configurations in the ``queue_events`` table."""

    def __init__(self, pool: Pool) -> None:
        self._pool = pool

    async def create(self, config: WaitingRoomConfig) -> WaitingRoomConfig:
        try:
            async with db.transaction(self._pool) as conn:
                cur = await conn.execute(
                    f"""
                    INSERT INTO queue_events ({_COLUMNS})
                    VALUES (%(event_id)s, %(opens_at)s, %(pre_queue_window_ms)s, %(admission_rate_per_second)s,
                            %(max_active_shoppers)s, %(session_length_ms)s, %(token_ttl_ms)s,
                            %(claim_grace_ms)s, %(paused)s, 1, %(presence_grace_ms)s, %(safety_net)s,
                            %(admission_rate_min_per_second)s, %(admission_rate_max_per_second)s, %(lanes)s)
                    RETURNING {_COLUMNS}
                    """,
                    _params(config),
                )
                row = await cur.fetchone()
        except psycopg.errors.UniqueViolation:
            raise errors.waiting_room_exists(config.event_id) from None
        assert row is not None
        return _row(row)

    async def update(self, config: WaitingRoomConfig) -> WaitingRoomConfig:
        async with db.transaction(self._pool) as conn:
            cur = await conn.execute(
                f"""
                UPDATE queue_events
                   SET opens_at = %(opens_at)s, pre_queue_window_ms = %(pre_queue_window_ms)s,
                       admission_rate_per_second = %(admission_rate_per_second)s,
                       max_active_shoppers = %(max_active_shoppers)s, session_length_ms = %(session_length_ms)s,
                       token_ttl_ms = %(token_ttl_ms)s, claim_grace_ms = %(claim_grace_ms)s, paused = %(paused)s,
                       presence_grace_ms = %(presence_grace_ms)s, safety_net = %(safety_net)s,
                       admission_rate_min_per_second = %(admission_rate_min_per_second)s,
                       admission_rate_max_per_second = %(admission_rate_max_per_second)s,
                       lanes = %(lanes)s,
                       version = version + 1, updated_at = now()
                 WHERE event_id = %(event_id)s
                RETURNING {_COLUMNS}
                """,
                _params(config),
            )
            row = await cur.fetchone()
        if row is None:
            raise errors.unknown_event(config.event_id)
        return _row(row)

    async def set_paused(self, event_id: int, paused: bool) -> WaitingRoomConfig:
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
            raise errors.unknown_event(event_id)
        return _row(row)

    async def get(self, event_id: int) -> WaitingRoomConfig | None:
        async with db.transaction(self._pool) as conn:
            cur = await conn.execute(f"SELECT {_COLUMNS} FROM queue_events WHERE event_id = %s", (event_id,))
            row = await cur.fetchone()
        return None if row is None else _row(row)

    async def list_all(self) -> list[WaitingRoomConfig]:
        async with db.transaction(self._pool) as conn:
            cur = await conn.execute(f"SELECT {_COLUMNS} FROM queue_events ORDER BY event_id")
            rows = await cur.fetchall()
        return [_row(row) for row in rows]
