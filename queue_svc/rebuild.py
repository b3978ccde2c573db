"""The waiting room rebuilds itself after Redis loses its data.

Redis is the room's hot path, and Redis can lose what it was told (a
failover without persistence, a flush). What a fan's place depends on is
durable all the same: every change of a fan's state is copied to Postgres
by the lifecycle recorder (``queue_svc.jobs.lifecycle``), and this module
makes that copy the source of a rebuild.

*The generation marker.* Each room has a generation in Postgres
(``queue_generations``; a room without a row is generation 1) and a marker
in Redis (``{ev:<id>}:gen``) written with the room's first configuration
and gone with its data. A room whose marker is missing, or older than
Postgres's generation, lost its data: its join and fan scripts answer "not
rebuilt yet" and change nothing (the handler asks again each moment within
the call's time: :func:`wait_a_moment`), and its admit script admits nobody,
so the cap holds across the loss: nobody is admitted before the admitted
and active sets are back.

*The rebuild.* The admitter, on an admit tick that found the room lost,
calls :meth:`Rebuilder.rebuild`: it advances the room's generation in
Postgres (one admitter wins), folds the room's lifecycle rows into the
state they describe (:func:`fold`): each lane's queue with the fans' own
scores (so their original order), the admissions not yet claimed whose
claim time is not over, the sessions not over, the flagged fans (the
operator's flags are in the lifecycle too), how each departed fan's visit
ended, the lanes' bindings, sequences (later joins go behind everyone
rebuilt) and progress counters; writes it while the marker is still
missing, with the pre-queue's log of placements (the draw's entries copied
to Postgres, a page at a time, then the pre-queue joins not copied to the
draw yet, so the draw recorder copies them: :meth:`Rebuilder._restore_pre_queue`)
and its seal; and writes the
new marker last, with the refusal counters' totals from Postgres added to
whatever was counted meanwhile (once: with the marker, in one script). Fans who joined in the
last moment before the loss (not copied yet) read "not in queue" and join
again; nobody else does.

Lifecycle entries are numbered within their generation
(``redis_queue_store.GENERATION_SPAN``), so entries of a rebuilt room never
collide with the ones stored before the loss. The generation travels in the
progress stream (``AdmissionProgress.generation``), so the edge drops places
it saved under an older generation and asks again.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from boxoffice import deadline, draw
from boxoffice.errors import DeadlineExceeded
from queue_svc.jobs.lifecycle import LifecycleRow
from queue_svc.metrics import RebuildMetrics
from queue_svc.model import PRE_QUEUE_BAND, WaitingRoomConfig
from queue_svc.ports import QueueStore

_log = logging.getLogger("queue_svc.rebuild")

# How often a call waiting for a rebuild asks again, and the time it keeps
# for its own answer.
_POLL_SECONDS = 0.05
_MARGIN_SECONDS = 0.1

# Lifecycle rows read per query of a rebuild.
HISTORY_PAGE = 10_000

# How a departed fan's visit ended, as the scripts record it (``out``).
_OUTCOMES = {"left": "L", "ended": "C", "dropped": "D", "no_show": "E", "expired": "E"}


async def wait_a_moment() -> bool:
    """Wait before asking a room being rebuilt again; False when the call
    has no time left for another try."""
    try:
        left = deadline.remaining()
    except DeadlineExceeded:
        return False
    if left <= _POLL_SECONDS + _MARGIN_SECONDS:
        return False
    await asyncio.sleep(_POLL_SECONDS)
    return True


@dataclass(frozen=True, slots=True)
class RoomGeneration:
    """A room's generation in Postgres, and whether Postgres holds a
    history of it (lifecycle rows) to rebuild from."""

    generation: int
    history: bool

    @property
    def stamp(self) -> int:
        """The marker a mirror writes when the room has none: the
        generation for a room with nothing to rebuild, else none (0)."""
        return 0 if self.history else self.generation


class RoomGenerations(Protocol):
    """The rooms' generations and histories (Postgres)."""

    async def stamp(self, event_id: int) -> int:
        """:attr:`RoomGeneration.stamp` of one room."""

    async def current(self, event_id: int) -> RoomGeneration:
        """One room's generation."""

    async def all(self) -> dict[int, RoomGeneration]:
        """Every room's generation."""

    async def advance(self, event_id: int, *, from_generation: int) -> int | None:
        """Move the room to the next generation if it is still at
        ``from_generation``; the new one, or None (another moved it)."""

    async def history(self, event_id: int, *, after: int, limit: int) -> list[LifecycleRow]:
        """A page of the room's lifecycle rows (every generation's) in index
        order: at most ``limit`` rows whose index is above ``after``."""

    async def refusals(self, event_id: int) -> dict[str, int]:
        """The room's refused joins per reason, as copied to Postgres."""

    async def pre_queue(self, event_id: int) -> PreQueueDraw | None:
        """The room's pre-queue draw in Postgres; None without one."""

    async def pre_queue_entries(
        self, event_id: int, *, after: tuple[int, str] | None, limit: int
    ) -> list[tuple[str, int]]:
        """A page of the draw's placements copied to Postgres, (pseudonym,
        score) in the draw's order: at most ``limit`` after ``after``
        ((score, pseudonym); None: from the first)."""


@dataclass(frozen=True, slots=True)
class PreQueueDraw:
    """What Postgres holds of a room's pre-queue draw besides its entries:
    how many log entries its copy covers, whether it is sealed, and the key
    of the fans' pseudonyms."""

    recorded: int
    sealed: bool
    pseudonym_key: bytes


@dataclass(frozen=True, slots=True)
class LaneImage:
    """One lane's part of a rebuilt room."""

    # (score, customer) of the fans waiting, and the lane's sequence (the
    # highest score after opening, less the pre-queue band).
    waiting: list[tuple[int, str]] = field(default_factory=list)
    sequence: int = 0
    # The lane's progress counters (the ``prog`` hash's fields).
    progress: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class RoomImage:
    """A room's Redis state, as its lifecycle describes it at one instant."""

    lanes: dict[str, LaneImage]
    # (claim deadline ms, customer) and (session end ms, customer).
    admitted: list[tuple[int, str]]
    active: list[tuple[int, str]]
    # Flagged fans whom admission reached: (score, customer).
    shadowed: list[tuple[int, str]]
    # How each departed fan's visit ended (E, L, C, D), and each lane fan's lane.
    outcomes: dict[str, str]
    bindings: dict[str, str]
    # The instant it describes (ms): the waiters are seen then.
    at_ms: int = 0
    # Fans flagged by an operator whom admission has not reached.
    flagged: list[str] = field(default_factory=list)
    # Whether the pre-queue is sealed (its log is written apart, in pages).
    pre_queue_sealed: bool = False

    @property
    def waiting(self) -> int:
        return sum(len(lane.waiting) for lane in self.lanes.values())


@dataclass(slots=True)
class _Fan:
    lane: str = ""
    score: int = 0
    state: str = ""
    since_ms: int = 0


class Folder:
    """Folds a room's lifecycle rows, page by page in index order, into the
    state they describe (:meth:`image`): what it keeps is one small record
    per fan, never the rows."""

    def __init__(self) -> None:
        self._fans: dict[str, _Fan] = {}
        self._counters: dict[str, dict[str, int]] = {}
        self._sequences: dict[str, int] = {}
        self._outcomes: dict[str, str] = {}
        self._flags: set[str] = set()
        # The pre-queue joins: customer -> score.
        self.pre_queue_joins: dict[str, int] = {}
        self.rows = 0
        self.last_index = -1

    def _count(self, lane: str, name: str, by: int = 1) -> None:
        lane_counters = self._counters.setdefault(lane, {})
        lane_counters[name] = lane_counters.get(name, 0) + by

    def add(self, rows: Sequence[LifecycleRow]) -> None:
        """Fold the next rows (in index order, after those added before)."""
        for row in rows:
            self.rows += 1
            self.last_index = row.index
            if row.kind == "joined" and row.pre_queue and row.score is not None:
                self.pre_queue_joins[row.customer_id] = row.score
            self._one(row)

    def _one(self, row: LifecycleRow) -> None:
        if row.kind == "flagged":
            self._flags.add(row.customer_id)
            return
        if row.kind in ("unflagged", "unshadowed"):
            self._flags.discard(row.customer_id)
        fan = self._fans.get(row.customer_id)
        if row.kind == "joined":
            lane = row.detail or ""
            fan = self._fans[row.customer_id] = _Fan(
                lane=lane, score=row.score or 0, state="waiting", since_ms=row.at_ms
            )
            self._outcomes.pop(row.customer_id, None)
            self._count(lane, "joined")
            if row.pre_queue:
                self._count(lane, "pre")
            elif row.score is not None:
                self._sequences[lane] = max(self._sequences.get(lane, 0), row.score - PRE_QUEUE_BAND)
            return
        if fan is None:
            return  # its join was removed by the retention: nothing to put back
        if row.kind == "admitted":
            fan.state, fan.since_ms = "admitted", row.at_ms
            self._count(fan.lane, "admitted")
            lane_counters = self._counters.setdefault(fan.lane, {})
            lane_counters["through"] = max(lane_counters.get("through", 0), fan.score)
        elif row.kind == "claimed":
            fan.state, fan.since_ms = "active", row.at_ms
            self._count(fan.lane, "claimed")
        elif row.kind == "shadowed":
            fan.state = "shadowed"
        elif row.kind == "unshadowed":
            fan.state = "waiting"
        elif row.kind in _OUTCOMES:
            if row.kind == "no_show":
                self._count(fan.lane, "noshow")
            fan.state = "gone"
            self._outcomes[row.customer_id] = _OUTCOMES[row.kind]

    def image(self, config: WaitingRoomConfig, *, now_ms: int) -> RoomImage:
        """The room's state after the rows added, at ``now_ms``."""
        outcomes = dict(self._outcomes)
        lanes: dict[str, LaneImage] = {}
        names = {view.name for view in config.lane_views()}
        for name in names | set(self._counters):
            lanes[name] = LaneImage(sequence=self._sequences.get(name, 0), progress=dict(self._counters.get(name, {})))
        admitted: list[tuple[int, str]] = []
        active: list[tuple[int, str]] = []
        shadowed: list[tuple[int, str]] = []
        bindings: dict[str, str] = {}
        for customer, fan in self._fans.items():
            if fan.lane:
                bindings[customer] = fan.lane
            if fan.state == "waiting":
                lanes.setdefault(fan.lane, LaneImage()).waiting.append((fan.score, customer))
            elif fan.state == "shadowed":
                shadowed.append((fan.score, customer))
            elif fan.state == "admitted":
                ends = fan.since_ms + config.claim_grace_ms
                if ends > now_ms:
                    admitted.append((ends, customer))
                else:
                    outcomes[customer] = "E"
            elif fan.state == "active":
                ends = fan.since_ms + config.session_length_ms
                if ends > now_ms:
                    active.append((ends, customer))
                else:
                    outcomes[customer] = "E"
        for part in lanes.values():
            part.waiting.sort()
        reached = {customer for _, customer in shadowed}
        flagged = sorted(self._flags - reached)
        return RoomImage(lanes, admitted, active, shadowed, outcomes, bindings, now_ms, flagged=flagged)


def fold(rows: Sequence[LifecycleRow], config: WaitingRoomConfig, *, now_ms: int) -> RoomImage:
    """The room's state after ``rows`` (in index order) at ``now_ms``."""
    folder = Folder()
    folder.add(rows)
    return folder.image(config, now_ms=now_ms)


class RoomImageStore(Protocol):
    """The Redis side of a rebuild (``adapters.redis_rebuild``)."""

    async def marker(self, event_id: int) -> tuple[int, bool]:
        """The room's marker (0: none) and whether it holds any state."""

    async def wipe(self, event_id: int, lanes: Sequence[str]) -> None:
        """Delete a stale room's state (a marker older than Postgres's)."""

    async def restore(self, event_id: int, image: RoomImage) -> bool:
        """Write the image while the marker is missing; False when a marker
        appeared meanwhile (another admitter finished first)."""

    async def append_pre_queue(self, event_id: int, entries: Sequence[str]) -> bool:
        """Append to the pre-queue's log while the marker is missing; False
        when a marker appeared meanwhile."""

    async def mark(self, event_id: int, generation: int, *, refusals: dict[str, int] | None = None) -> None:
        """Write the marker (never lowering one); when this call writes it,
        add ``refusals`` to the room's refusal counters in the same step."""


class Rebuilder:
    """Puts a lost room back from Postgres (see the module). The room's
    history is read ``page_size`` rows at a time (keyset pagination by
    index) and folded as it comes, so a room of any size costs the
    admitter one page of rows and one small record per fan."""

    def __init__(
        self,
        *,
        generations: RoomGenerations,
        images: RoomImageStore,
        store: QueueStore,
        page_size: int = HISTORY_PAGE,
        metrics: RebuildMetrics | None = None,
    ) -> None:
        self._generations = generations
        self._images = images
        self._store = store
        self._page_size = page_size
        self._metrics = metrics

    async def _restore_pre_queue(self, event_id: int, pre_queue: PreQueueDraw, joins: Mapping[str, int]) -> int:
        """The pre-queue's log of placements ("<pseudonym> <score>"), written
        a page at a time: the placements copied to Postgres, as many entries
        as the copy covers (an entry logged twice was stored once: the first
        is repeated in its place, since the recorder never reads below what
        it covered), then the pre-queue joins of the lifecycle (``joins``,
        customer: score) that the copy does not hold, which the draw
        recorder copies next. The entries written, or -1 once refused (the
        marker is back: another admitter finished first)."""
        key = pre_queue.pseudonym_key
        pending = {draw.pseudonym(key, event_id, customer): score for customer, score in joins.items()}
        written = 0
        first = ""
        after: tuple[int, str] | None = None
        while True:
            page = await self._generations.pre_queue_entries(event_id, after=after, limit=self._page_size)
            if not page:
                break
            for pseudonym, _ in page:
                pending.pop(pseudonym, None)
            entries = [f"{pseudonym} {score}" for pseudonym, score in page]
            first = first or entries[0]
            if not await self._images.append_pre_queue(event_id, entries):
                return -1
            written += len(entries)
            after = (page[-1][1], page[-1][0])
            if len(page) < self._page_size:
                break
        tail = [first] * (pre_queue.recorded - written) if first else []
        tail += [f"{pseudonym} {score}" for pseudonym, score in pending.items()]
        if tail and not await self._images.append_pre_queue(event_id, tail):
            return -1
        return written + len(tail)

    async def _fold_history(self, event_id: int) -> Folder:
        folder = Folder()
        while True:
            page = await self._generations.history(event_id, after=folder.last_index, limit=self._page_size)
            folder.add(page)
            if len(page) < self._page_size:
                return folder

    async def generations(self) -> dict[int, tuple[int, int]]:
        """Every room's generation, and the marker a mirror may write."""
        return {event_id: (room.generation, room.stamp) for event_id, room in (await self._generations.all()).items()}

    async def rebuild(self, config: WaitingRoomConfig, *, now_ms: int) -> int | None:
        """Bring the room's marker up to Postgres's generation, rebuilding
        its state first when it lost it; the room's generation after, or
        None when another admitter is at it."""
        event_id = config.event_id
        known = await self._generations.current(event_id)
        marker, has_state = await self._images.marker(event_id)
        if marker >= known.generation:
            return marker
        lanes = [view.name for view in config.lane_views()]
        if marker == 0 and (has_state or not known.history):
            # A room from before markers, or one with nothing to rebuild.
            await self._store.put_config(config, generation=0)
            await self._images.mark(event_id, known.generation)
            return known.generation
        if marker > 0:
            # A failover to a copy older than the room's last rebuild.
            await self._images.wipe(event_id, lanes)
        started = time.monotonic()
        folder = await self._fold_history(event_id)
        generation = await self._generations.advance(event_id, from_generation=known.generation)
        if generation is None:
            return None
        image = folder.image(config, now_ms=now_ms)
        pre_queue = await self._generations.pre_queue(event_id)
        if pre_queue is not None:
            image = dataclasses.replace(image, pre_queue_sealed=pre_queue.sealed)
        refusals = await self._generations.refusals(event_id)
        await self._store.put_config(config, generation=0)
        if not await self._images.restore(event_id, image):
            return None
        logged = 0
        if pre_queue is not None:
            logged = await self._restore_pre_queue(event_id, pre_queue, folder.pre_queue_joins)
            if logged < 0:
                return None
        await self._images.mark(event_id, generation, refusals=refusals)
        # Flagged fans still waiting are among the waiting.
        restored = image.waiting + len(image.admitted) + len(image.active) + len(image.shadowed)
        if self._metrics is not None:
            self._metrics.rebuilds.inc()
            self._metrics.seconds.observe(time.monotonic() - started)
            self._metrics.fans_restored.inc(restored)
        _log.warning(
            "waiting room rebuilt after Redis lost its data",
            extra={
                "event_id": event_id,
                "generation": generation,
                "waiting": image.waiting,
                "admitted": len(image.admitted),
                "active": len(image.active),
                "lifecycle_rows": folder.rows,
                "flagged": len(image.flagged),
                "pre_queue_log": logged,
            },
        )
        return generation
