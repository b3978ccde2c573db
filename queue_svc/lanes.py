"""The door of each lane besides the general one: who may join it. An open
lane takes any signed-in fan; a lane by code takes a fan with one of its
access codes (bound to the account at its first use, up to its uses); the
staff lane takes whoever holds a valid staff pass for the event. The
general lane has no door (a general join reads nothing here)."""

from __future__ import annotations

import asyncio
import contextlib
import time

from boxoffice.clock import Clock
from boxoffice.errors import BoxofficeError
from queue_svc import errors, passes
from queue_svc.model import LaneEntry, LaneView, WaitingRoomConfig
from queue_svc.passes import StaffPasses, StaffPassInvalid
from queue_svc.ports import (
    AccessCodeRepository,
    CodeUse,
    RefusalCounter,
    StaffPassBindings,
    WaitingRoomRepository,
)

# The refusals of a lane's door that the on-sale report counts.
_COUNTED = frozenset({"ACCESS_CODE_REQUIRED", "ACCESS_CODE_INVALID", "ACCESS_CODE_USED", "STAFF_PASS_INVALID"})

# How long a room's configuration read for a lane join is reused.
_ROOM_SECONDS = 2.0
_ROOMS_KEPT = 10_000


class LaneDoor:
    def __init__(
        self,
        *,
        rooms: WaitingRoomRepository,
        codes: AccessCodeRepository,
        staff: StaffPasses,
        clock: Clock,
        refusals: RefusalCounter | None = None,
        staff_bindings: StaffPassBindings | None = None,
    ) -> None:
        self._refusals = refusals
        self._staff_bindings = staff_bindings
        self._rooms = rooms
        self._codes = codes
        self._staff = staff
        self._clock = clock
        self._cached: dict[int, tuple[float, WaitingRoomConfig | None]] = {}
        self._reading: dict[int, asyncio.Task[WaitingRoomConfig | None]] = {}

    async def room(self, event_id: int) -> WaitingRoomConfig:
        """The room's configuration, read at most every few seconds per
        event; NOT_FOUND without a waiting room. The joins that find it
        stale together share one read: a crowd joining a lane at once makes
        one query, not one each queued for the pool's connections."""
        now = time.monotonic()
        cached = self._cached.get(event_id)
        if cached is None or cached[0] <= now:
            config = await self._read(event_id)
            if len(self._cached) >= _ROOMS_KEPT:
                self._cached.clear()
            cached = self._cached[event_id] = (now + _ROOM_SECONDS, config)
        if cached[1] is None:
            raise errors.unknown_event(event_id)
        return cached[1]

    async def _read(self, event_id: int) -> WaitingRoomConfig | None:
        """The read in flight for the event, or a new one (under the first
        caller's deadline); a caller that gives up leaves it to the others."""
        read = self._reading.get(event_id)
        if read is None:
            read = asyncio.ensure_future(self._rooms.get(event_id))
            self._reading[event_id] = read
            read.add_done_callback(lambda done: self._read_done(event_id, done))
        return await asyncio.shield(read)

    def _read_done(self, event_id: int, done: asyncio.Task[WaitingRoomConfig | None]) -> None:
        if self._reading.get(event_id) is done:
            del self._reading[event_id]
        if not done.cancelled():
            done.exception()  # retrieved: each waiter has its own copy raised

    async def lane(self, event_id: int, lane: str) -> LaneView:
        """The event's lane by name; LANE_NOT_FOUND if it has none."""
        view = (await self.room(event_id)).lane(lane)
        if view is None:
            raise errors.lane_not_found(event_id, lane)
        return view

    async def lane_for(self, event_id: int, *, lane: str, access_code: str, staff_pass: str) -> str:
        """The lane a join goes to: the one named; with none named, the
        lane of the access code given (a fan types a code, not a lane), or
        the staff lane for a staff pass; else the general one. An unknown
        code names no lane: ACCESS_CODE_INVALID."""
        if lane:
            return lane
        if access_code:
            found = None
            if passes.plausible(access_code):
                found = await self._codes.lane_of(event_id, passes.code_hash(access_code))
            if found is None:
                raise errors.access_code_invalid(event_id, "")
            return found
        if staff_pass:
            room = await self.room(event_id)
            for each in room.lanes:
                if each.entry is LaneEntry.STAFF:
                    return each.name
            raise errors.lane_not_found(event_id, "staff")
        return ""

    async def enter(self, event_id: int, customer_id: str, lane: str, *, access_code: str, staff_pass: str) -> None:
        """Lets the fan through the lane's door, or raises why not
        (LANE_NOT_FOUND, ACCESS_CODE_*, STAFF_PASS_INVALID). A code is used
        (bound to the account) here, before the join itself. A refusal is
        counted per reason for the on-sale report."""
        try:
            await self._enter(event_id, customer_id, lane, access_code=access_code, staff_pass=staff_pass)
        except BoxofficeError as err:
            if self._refusals is not None and err.reason in _COUNTED:
                with contextlib.suppress(BoxofficeError):  # the refusal stands without its count
                    await self._refusals.count_refusal(event_id, err.reason.lower())
            raise

    async def _enter(self, event_id: int, customer_id: str, lane: str, *, access_code: str, staff_pass: str) -> None:
        view = await self.lane(event_id, lane)
        if view.entry is LaneEntry.OPEN:
            return
        if view.entry is LaneEntry.STAFF:
            try:
                found = self._staff.verify(staff_pass, event_id=event_id)
            except StaffPassInvalid as err:
                raise errors.staff_pass_invalid(event_id, err.check) from None
            # A pass is one person's: bound to the first account that uses it.
            bindings = self._staff_bindings
            if bindings is not None:
                if not found.pass_id:
                    raise errors.staff_pass_invalid(event_id, "form")
                keep_ms = found.expires_at_ms - int(self._clock.now() * 1000)
                if not await bindings.bind_staff_pass(event_id, found.pass_id, customer_id, keep_ms=keep_ms):
                    raise errors.staff_pass_invalid(event_id, "bound")
            return
        if not access_code:
            raise errors.access_code_required(event_id, lane)
        if not passes.plausible(access_code):
            raise errors.access_code_invalid(event_id, lane)
        now_ms = int(self._clock.now() * 1000)
        outcome, max_uses = await self._codes.use(
            event_id, lane, passes.code_hash(access_code), customer_id, now_ms=now_ms
        )
        if outcome is CodeUse.INVALID:
            raise errors.access_code_invalid(event_id, lane)
        if outcome is CodeUse.USED_UP:
            raise errors.access_code_used(event_id, lane, max_uses)
