"""The events' door settings (``checkin.static_codes``, ``checkin.reentry``),
read from booking's events in the same Postgres and kept for a few seconds.

A setting is read only for a scan whose code verified, and once per event
per few seconds however many gates scan: a change reaches the door within
:data:`SETTINGS_TTL_SECONDS`. An event the door does not know (no row) takes
the defaults: rotating codes only, no re-entry.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

from boxoffice import db
from boxoffice.clock import Clock
from boxoffice.runtime import Pool
from checkin_svc.ports import ReEntry, StaticCodes

SETTINGS_TTL_SECONDS = 5.0
# Events whose settings are kept at once (a process serves a few doors).
_KEPT = 1024


@dataclass(frozen=True, slots=True)
class DoorSettings:
    """An event's door settings, defaults applied."""

    static_codes: bool
    reentry: bool


DEFAULTS = DoorSettings(static_codes=False, reentry=False)


def settings_of(kind: str, static_codes: bool | None, reentry: bool) -> DoorSettings:
    """The settings of an event of ``kind``: static codes as set, else
    allowed for flights only (boarding passes are printed)."""
    return DoorSettings(kind == "FLIGHT" if static_codes is None else static_codes, reentry)


class PgEventSettings:
    """Each event's door settings from the events table, cached."""

    def __init__(self, pool: Pool, clock: Clock, *, ttl_seconds: float = SETTINGS_TTL_SECONDS) -> None:
        self._pool = pool
        self._ttl = ttl_seconds
        self._clock = clock
        self._kept: OrderedDict[int, tuple[float, DoorSettings]] = OrderedDict()

    async def of(self, event_id: int) -> DoorSettings:
        kept = self._kept.get(event_id)
        now = self._clock.now()
        if kept is not None and 0 <= now - kept[0] < self._ttl:
            return kept[1]
        async with db.transaction(self._pool) as conn:
            cur = await conn.execute(
                "SELECT kind, checkin_static_codes, checkin_reentry FROM events WHERE event_id = %s", (event_id,)
            )
            row = await cur.fetchone()
        settings = DEFAULTS if row is None else settings_of(str(row[0]), row[1], bool(row[2]))
        self._kept[event_id] = (now, settings)
        self._kept.move_to_end(event_id)
        while len(self._kept) > _KEPT:
            self._kept.popitem(last=False)
        return settings


class StaticCodesOf:
    """The :class:`~checkin_svc.ports.StaticCodes` of the events' settings."""

    def __init__(self, settings: PgEventSettings) -> None:
        self._settings = settings

    async def allowed(self, event_id: int) -> bool:
        return (await self._settings.of(event_id)).static_codes


class ReEntryOf:
    """The :class:`~checkin_svc.ports.ReEntry` of the events' settings."""

    def __init__(self, settings: PgEventSettings) -> None:
        self._settings = settings

    async def allowed(self, event_id: int) -> bool:
        return (await self._settings.of(event_id)).reentry


def _compliance(settings: PgEventSettings) -> tuple[StaticCodes, ReEntry]:
    return StaticCodesOf(settings), ReEntryOf(settings)
