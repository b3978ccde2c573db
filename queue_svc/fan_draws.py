"""The verified-fan draw's use cases: an operator creates the draw for a
lane by code (its seed committed from then on), fans register until it
closes, the drawer draws it at the close (the first `winners` in the
seeded order get a single-use code of the lane), fans read their result
(a winner's code is derived again from the draw's secret pseudonym key
whenever they ask), and anyone reads the proof (``boxoffice verify-draw``
checks it as it checks the pre-queue's).

A registration keeps no account id: the fan's pseudonym and score only,
as the pre-queue's placements."""

from __future__ import annotations

import dataclasses
import logging

from boxoffice import deadline
from boxoffice.clock import Clock
from boxoffice.draw import Entry
from boxoffice.errors import BoxofficeError
from boxoffice.lifecycle import every
from queue_svc import errors, passes, proofs
from queue_svc.lanes import LaneDoor
from queue_svc.model import (
    DrawRecord,
    FanDraw,
    FanDrawOutcome,
    FanDrawResult,
    LaneEntry,
    PreQueueProof,
    ProofCursor,
)
from queue_svc.ports import FanDrawRepository

_log = logging.getLogger("queue_svc.fan_draws")


@dataclasses.dataclass(frozen=True, slots=True)
class Registration:
    newly_registered: bool
    pseudonym: str
    closes_at_ms: int


class FanDraws:
    def __init__(self, *, repo: FanDrawRepository, door: LaneDoor, clock: Clock) -> None:
        self._repo = repo
        self._door = door
        self._clock = clock

    def _now_ms(self) -> int:
        return int(self._clock.now() * 1000)

    async def _draw(self, event_id: int) -> tuple[FanDraw, DrawRecord]:
        found = await self._repo.get(event_id)
        record = None if found is None else await self._repo.secrets.get_or_create(event_id)
        if found is None or record is None:
            raise errors.fan_draw_not_found(event_id)
        return found, record

    async def create(self, fan_draw: FanDraw) -> str:
        """The draw of an event's lane by code; its commitment."""
        view = await self._door.lane(fan_draw.event_id, fan_draw.lane)
        if view.entry is not LaneEntry.CODE or not fan_draw.lane:
            raise errors.lane_not_found(fan_draw.event_id, fan_draw.lane)
        record = await self._repo.create(fan_draw)
        return record.secrets.commitment

    async def register(self, event_id: int, customer_id: str) -> Registration:
        found, record = await self._draw(event_id)
        secrets = record.secrets
        if self._now_ms() >= found.closes_at_ms:
            raise errors.fan_draw_closed(event_id, found.closes_at_ms)
        pseudonym = secrets.pseudonym(customer_id)
        newly = await self._repo.register(event_id, Entry(pseudonym, secrets.score(pseudonym)))
        return Registration(newly, pseudonym, found.closes_at_ms)

    async def result(self, event_id: int, customer_id: str) -> FanDrawResult:
        found, record = await self._draw(event_id)
        secrets = record.secrets
        pseudonym = secrets.pseudonym(customer_id)
        rank = await self._repo.rank(event_id, pseudonym)
        base = FanDrawResult(FanDrawOutcome.NOT_REGISTERED, found.lane, found.closes_at_ms)
        if rank is None:
            return base
        if found.drawn_at_ms is None:
            return dataclasses.replace(base, outcome=FanDrawOutcome.REGISTERED, pseudonym=pseudonym)
        if rank > found.winners:
            return dataclasses.replace(base, outcome=FanDrawOutcome.NOT_DRAWN, pseudonym=pseudonym)
        code = passes.winner_code(secrets.pseudonym_key, event_id, pseudonym)
        return dataclasses.replace(base, outcome=FanDrawOutcome.WON, pseudonym=pseudonym, access_code=code)

    async def proof(self, event_id: int, *, page_size: int, after: ProofCursor | None) -> tuple[PreQueueProof, FanDraw]:
        """The public proof: the commitment always; once drawn the seed and
        one page of the registrations in the draw's order."""
        found, record = await self._draw(event_id)
        proof = await proofs.published(
            self._repo.secrets,
            record,
            opens_at_ms=found.closes_at_ms,
            page_size=page_size,
            after=after,
            revealed=found.drawn_at_ms is not None,
        )
        return proof, found

    async def draw_due(self) -> list[int]:
        """Draws every draw whose registration has closed; the events drawn."""
        drawn: list[int] = []
        now_ms = self._now_ms()
        for found in await self._repo.due(now_ms):
            record = await self._repo.secrets.get_or_create(found.event_id)
            if record is None:
                continue
            key, event_id = record.secrets.pseudonym_key, found.event_id

            def code_of(pseudonym: str, key: bytes = key, event_id: int = event_id) -> bytes:
                return passes.code_hash(passes.winner_code(key, event_id, pseudonym))

            if await self._repo.run(event_id, now_ms=now_ms, code_of=code_of):
                drawn.append(event_id)
        return drawn


class FanDrawer:
    """The admitter role's loop that draws each draw at its close (any
    number may run: a draw is drawn once, under its row lock)."""

    def __init__(self, draws: FanDraws, *, interval_seconds: float) -> None:
        self._draws = draws
        self._interval = interval_seconds
        # Whether the last pass failed: a failure is logged once per outage.
        self._failing = False

    async def run(self) -> None:
        await every(self._interval, self.draw_once, failed=self._failed)

    async def draw_once(self) -> None:
        with deadline.scope(max(self._interval, 1.0) * 30):
            for event_id in await self._draws.draw_due():
                _log.info("verified-fan draw drawn", extra={"event_id": event_id})
        self._failing = False

    def _failed(self, err: BoxofficeError) -> None:
        if not self._failing:
            _log.warning("cannot draw the verified-fan draws", extra={"reason": err.reason})
        self._failing = True
