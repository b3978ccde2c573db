"""The waiting room's domain values: a waiting room's configuration, a
fan's place, an event's admission progress, and the arithmetic on them.
No I/O here."""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass, field

from boxoffice import draw, lanes, places

# Scores, the pre-queue band and the polling hints are shared with the edge,
# which estimates places the same way (boxoffice.places).
PRE_QUEUE_BAND = places.PRE_QUEUE_BAND
POLL_MIN_SECONDS = places.POLL_MIN_SECONDS
POLL_MAX_SECONDS = places.POLL_MAX_SECONDS
eta_seconds = places.eta_seconds
poll_after_seconds = places.poll_after_seconds
WatchBase = places.PlaceBase


class QueueState(enum.IntEnum):
    """Where a fan stands; the numbers are those of the proto enum."""

    WAITING = 1
    ADMITTED = 2
    EXPIRED = 3
    LEFT = 4
    COMPLETED = 5
    NOT_IN_QUEUE = 6
    # Not seen for the waiting room's presence grace: out of the queue.
    DROPPED = 7

    @property
    def terminal(self) -> bool:
        return self not in (QueueState.WAITING, QueueState.ADMITTED)


class AdmissionState(enum.IntEnum):
    """Whether an event's admitter lets fans in; proto enum numbers."""

    PRE_QUEUE = 1
    OPEN = 2
    PAUSED = 3
    # Every section is sold out: nobody is admitted until seats come back.
    SOLD_OUT = 4


class RateReason(enum.IntEnum):
    """Why the admitter admits at its current target rate; the numbers
    are those of the proto enum AdmissionRateReason."""

    BASE = 1
    NO_SHOW_COMPENSATION = 2
    BOOKING_SLOW = 3
    BOOKING_ERRORS = 4
    BOUNDED = 5


class LaneEntry(enum.IntEnum):
    """Who may join a lane; the numbers are those of the proto enum
    WaitingRoomLaneEntry."""

    # Any signed-in fan (the general lane is always open).
    OPEN = 1
    # A fan with one of the lane's access codes (bound to the first
    # accounts that use it).
    CODE = 2
    # Staff with a signed staff pass for the event.
    STAFF = 3


# A lane's name: lowercase letters, digits and dashes, 1 to 32 characters;
# "" is the general lane.
LANE_NAME_MAX = lanes.NAME_MAX
GENERAL_LANE = lanes.GENERAL


@dataclass(frozen=True, slots=True)
class Lane:
    """One lane of a waiting room besides the general one: its own queue,
    opening and pre-queue, and a weight in the admission rate and the free
    slots (``share_percent``), under the room's one cap on active shoppers."""

    name: str
    entry: LaneEntry
    share_percent: int
    # 0: the room's opening / pre-queue window.
    opens_at_ms: int = 0
    pre_queue_window_ms: int = 0


@dataclass(frozen=True, slots=True)
class LaneView:
    """A lane as the store and the admitter use it (the general lane too):
    its effective opening, pre-queue opening and weight."""

    name: str
    entry: LaneEntry
    weight: int
    opens_at_ms: int
    pre_queue_opens_at_ms: int


@dataclass(frozen=True, slots=True)
class WaitingRoomConfig:
    """The configuration of one event's waiting room (times in ms)."""

    event_id: int
    opens_at_ms: int
    pre_queue_window_ms: int
    admission_rate_per_second: int
    max_active_shoppers: int
    session_length_ms: int
    token_ttl_ms: int
    claim_grace_ms: int
    paused: bool
    # Incremented by every stored change; the Redis mirror keeps the newest.
    version: int = 0
    # A waiting fan not seen for this long drops out of the queue.
    presence_grace_ms: int = 5 * 60 * 1000
    # Whether a join into an open room where nobody waits and a slot is
    # free is admitted at once (within the rate).
    safety_net: bool = False
    # The bounds the admitter adapts the rate within; 0: the base rate
    # (admission_rate_per_second), i.e. never lower / never higher.
    admission_rate_min_per_second: int = 0
    admission_rate_max_per_second: int = 0
    # The lanes besides the general one (presale, members, staff, ...).
    lanes: tuple[Lane, ...] = ()

    @property
    def pre_queue_opens_at_ms(self) -> int:
        return self.opens_at_ms - self.pre_queue_window_ms

    @property
    def general_share_percent(self) -> int:
        """The general lane's weight: what the other lanes leave."""
        return 100 - sum(lane.share_percent for lane in self.lanes)

    def lane_views(self) -> tuple[LaneView, ...]:
        """Every lane, the general one first."""
        general = LaneView(
            GENERAL_LANE, LaneEntry.OPEN, self.general_share_percent, self.opens_at_ms, self.pre_queue_opens_at_ms
        )
        views = [general]
        for lane in self.lanes:
            opens = lane.opens_at_ms or self.opens_at_ms
            window = lane.pre_queue_window_ms or self.pre_queue_window_ms
            views.append(LaneView(lane.name, lane.entry, lane.share_percent, opens, opens - window))
        return tuple(views)

    def lane(self, name: str) -> LaneView | None:
        for view in self.lane_views():
            if view.name == name:
                return view
        return None

    @property
    def rate_bounds(self) -> tuple[int, int]:
        """The least and the most admissions per second the admitter may
        target."""
        base = self.admission_rate_per_second
        return (self.admission_rate_min_per_second or base, self.admission_rate_max_per_second or base)


# Defaults applied to fields a create or update leaves unset (zero).
DEFAULT_PRE_QUEUE_WINDOW_MS = 30 * 60 * 1000
DEFAULT_ADMISSION_RATE_PER_SECOND = 50
DEFAULT_MAX_ACTIVE_SHOPPERS = 1000
DEFAULT_SESSION_LENGTH_MS = 15 * 60 * 1000
DEFAULT_TOKEN_TTL_MS = 10 * 60 * 1000
DEFAULT_CLAIM_GRACE_MS = 2 * 60 * 1000
DEFAULT_PRESENCE_GRACE_MS = 5 * 60 * 1000


def lane_problems(config: WaitingRoomConfig) -> list[str]:
    """What is wrong with a room's lanes ([] when nothing): names, weights
    and openings (a lane opens at or before the room: the pre-queue's draw
    is sealed, and its seed revealed, at the room's opening)."""
    problems: list[str] = []
    seen: set[str] = set()
    staff = 0
    for lane in config.lanes:
        name = lane.name
        if not lanes.is_name(name) and name != "general":
            problems.append(
                f"lane name {name!r} must be 1 to {LANE_NAME_MAX} of a-z, 0-9 and '-', not starting with '-'"
            )
        elif name in seen or name == "general":
            problems.append(f"lane name {name!r} is used twice (or is the general lane's)")
        seen.add(name)
        if not 1 <= lane.share_percent <= 99:
            problems.append(f"lane {name!r}: share_percent must be 1 to 99")
        if lane.opens_at_ms and lane.opens_at_ms > config.opens_at_ms:
            problems.append(f"lane {name!r} opens after the waiting room (lanes open at or before it)")
        if lane.pre_queue_window_ms < 0:
            problems.append(f"lane {name!r}: pre_queue_window must not be negative")
        staff += lane.entry is LaneEntry.STAFF
    if len(config.lanes) > MAX_LANES:
        problems.append(f"at most {MAX_LANES} lanes besides the general one")
    if config.lanes and config.general_share_percent < 1:
        problems.append("the lanes' shares must leave the general lane at least 1 percent")
    if staff > 1:
        problems.append("at most one staff lane")
    return problems


MAX_LANES = 7


def lane_weights(views: tuple[LaneView, ...], *, now_ms: int, waiting: dict[str, int]) -> dict[str, float]:
    """Each lane's part (0 to 1) of the admission rate and of the free
    slots at one tick: the lanes that are open and have fans waiting share
    in proportion to their weights; the others keep their nominal part (so
    that an arrival there is not stranded) but take nothing from the
    busy ones. With no busy lane, every lane its nominal part."""
    busy = [v for v in views if now_ms >= v.opens_at_ms and waiting.get(v.name, 0) > 0]
    total = sum(v.weight for v in views) or 1
    if not busy:
        return {v.name: v.weight / total for v in views}
    busy_total = sum(v.weight for v in busy) or 1
    parts = {v.name: v.weight / total for v in views}
    for v in busy:
        parts[v.name] = v.weight / busy_total
    return parts


def admission_state(*, now_ms: int, opens_at_ms: int, paused: bool, sold_out: bool = False) -> AdmissionState:
    """The admitter admits only when the event is open, not paused and not
    sold out. Sold out is said first: it is what a fan needs to know (a
    paused or not yet open room that is sold out will not admit either)."""
    if sold_out:
        return AdmissionState.SOLD_OUT
    if paused:
        return AdmissionState.PAUSED
    if now_ms < opens_at_ms:
        return AdmissionState.PRE_QUEUE
    return AdmissionState.OPEN


@dataclass(frozen=True, slots=True)
class Progress:
    """One snapshot of an event's admission, read in one Redis call."""

    event_id: int
    admitted_through_score: int
    queue_length: int
    active_shoppers: int
    admitted_total: int
    joined_total: int
    # Fans who joined with a pre-queue (random) score.
    pre_queue_joined: int
    # Admissions per second, averaged over the recent window at last_tick_ms.
    rate_at_last_tick: float
    last_tick_ms: int
    opens_at_ms: int
    paused: bool
    observed_at_ms: int
    # The admitter's target rate at its last tick, and why.
    target_rate_per_second: float = 0.0
    rate_reason: RateReason = RateReason.BASE
    # The lane ("" the general one); every figure but active_shoppers is its.
    lane: str = ""
    # The room's generation (queue_svc.rebuild): it grows each time the room
    # is rebuilt after Redis lost its data; 0 while it waits for that.
    generation: int = 0
    # The admitter found every section of the event sold out (the room's
    # sold-out flag, see the admit script).
    sold_out: bool = False
    # Derived once here, read by every watcher of the event.
    admission_state: AdmissionState = field(init=False)
    rate_per_second: float = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(
            self,
            "admission_state",
            admission_state(
                now_ms=self.observed_at_ms, opens_at_ms=self.opens_at_ms, paused=self.paused, sold_out=self.sold_out
            ),
        )
        object.__setattr__(
            self, "rate_per_second", measured_rate(self.rate_at_last_tick, self.last_tick_ms, self.observed_at_ms)
        )


# The admit script averages admissions per second over this window.
RATE_WINDOW_MS = 10_000


def measured_rate(rate_at_last_tick: float, last_tick_ms: int, now_ms: int) -> float:
    """The averaged admission rate, decayed for the time since the last
    tick: a stopped or paused admitter's rate falls towards zero."""
    if rate_at_last_tick <= 0 or last_tick_ms <= 0:
        return 0.0
    idle_ms = max(0, now_ms - last_tick_ms)
    if idle_ms <= 2_000:  # ticks are frequent; do not decay between two of them
        return rate_at_last_tick
    return rate_at_last_tick * math.exp(-(idle_ms - 2_000) / RATE_WINDOW_MS)


def estimate_ahead(base: WatchBase, progress: Progress) -> int:
    """Fans ahead now (see :func:`boxoffice.places.estimate_ahead`)."""
    return places.estimate_ahead(
        base,
        admitted_total=progress.admitted_total,
        pre_queue_joined=progress.pre_queue_joined,
        queue_length=progress.queue_length,
    )


def passed(base_score: int, progress: Progress) -> bool:
    """Whether admission has reached a fan with this score (admitted, or
    gone from the queue some other way)."""
    return places.passed(
        base_score, admitted_total=progress.admitted_total, admitted_through_score=progress.admitted_through_score
    )


@dataclass(frozen=True, slots=True)
class Place:
    """A fan's place as the store reads it, before tokens and estimates."""

    state: QueueState
    score: int
    ahead: int
    # ADMITTED: when the unclaimed admission or the claimed session ends (ms).
    expires_at_ms: int
    # Whether this read claimed the admission (first read after admission).
    claimed_now: bool
    # Whether the operation made its change (claimed, left, ended).
    changed: bool
    opens_at_ms: int
    paused: bool
    token_ttl_ms: int
    rate_at_last_tick: float
    last_tick_ms: int
    admitted_total: int
    pre_queue_joined: int
    # The lane the fan is in ("" the general one).
    lane: str = ""
    # The event is sold out (the room's flag).
    sold_out: bool = False


@dataclass(frozen=True, slots=True)
class Position:
    """What the API answers about a fan: a Place with ETA, polling hint and
    (when admitted) the access token."""

    event_id: int
    customer_id: str
    state: QueueState
    ahead: int
    score: int
    eta_seconds: float | None
    poll_after_seconds: float | None
    admission_state: AdmissionState
    access_token: str = ""
    access_token_expires_at: int = 0
    # The lane the fan is in ("" the general one).
    lane: str = ""

    @classmethod
    def waiting(
        cls,
        event_id: int,
        customer_id: str,
        *,
        score: int,
        ahead: int,
        rate_per_second: float,
        admission: AdmissionState,
    ) -> Position:
        """A waiting fan's position, with the ETA at the measured rate and
        the polling hint that follows from it."""
        eta = eta_seconds(ahead, rate_per_second)
        return cls(
            event_id=event_id,
            customer_id=customer_id,
            state=QueueState.WAITING,
            ahead=ahead,
            score=score,
            eta_seconds=eta,
            poll_after_seconds=poll_after_seconds(ahead, eta),
            admission_state=admission,
        )

    @classmethod
    def past_the_queue(
        cls,
        event_id: int,
        customer_id: str,
        state: QueueState,
        admission: AdmissionState,
        *,
        access_token: str = "",
        access_token_expires_at: int = 0,
    ) -> Position:
        """The position of a fan who is not waiting (admitted, or in a
        final state): no place, no ETA."""
        return cls(
            event_id=event_id,
            customer_id=customer_id,
            state=state,
            ahead=0,
            score=0,
            eta_seconds=None,
            poll_after_seconds=None,
            admission_state=admission,
            access_token=access_token,
            access_token_expires_at=access_token_expires_at,
        )


@dataclass(frozen=True, slots=True)
class TickResult:
    """What one admit tick did for one event."""

    event_id: int
    stale_epoch: bool
    admitted: int
    expired: int
    active_shoppers: int
    queue_length: int
    admitted_through_score: int
    admitted_total: int
    highest_epoch: int
    # Waiters dropped for not being seen within the presence grace.
    dropped: int = 0
    # Since the event began: admissions never claimed before their claim
    # deadline (no-shows), and admissions claimed.
    no_shows_total: int = 0
    claimed_total: int = 0
    # The room lost its data (its generation marker is gone or older than
    # Postgres's): nothing was done; the room waits for its rebuild.
    room_lost: bool = False
    # The room's sold-out flag after the tick (no admission while it is set).
    sold_out: bool = False


# The pre-queue's draw: scores of the pre-queue band are the draw's scores.
assert draw.SCORE_LIMIT == PRE_QUEUE_BAND


@dataclass(frozen=True, slots=True)
class DrawSecrets:
    """The secrets of one event's pre-queue draw (see :mod:`boxoffice.draw`):
    the seed, revealed once the pre-queue is sealed, and the pseudonym key,
    never revealed."""

    event_id: int
    algorithm: str
    seed: bytes
    pseudonym_key: bytes

    @property
    def commitment(self) -> str:
        return draw.commitment(self.seed)

    def pseudonym(self, customer_id: str) -> str:
        """The customer's public pseudonym in this draw."""
        return draw.pseudonym(self.pseudonym_key, self.event_id, customer_id)

    def score(self, pseudonym: str) -> int:
        """The pre-queue score of the fan with this pseudonym."""
        return draw.score(self.seed, self.event_id, pseudonym, algorithm=self.algorithm)

    def __repr__(self) -> str:  # never the secrets, in a log or a traceback
        return f"DrawSecrets(event_id={self.event_id}, algorithm={self.algorithm!r})"


@dataclass(frozen=True, slots=True)
class DrawRecord:
    """One event's pre-queue draw as stored: its secrets, when it was
    committed, how many placements are copied from Redis, and when it was
    sealed (None: still open to placements, the seed still secret)."""

    secrets: DrawSecrets
    committed_at_ms: int
    recorded: int
    sealed_at_ms: int | None
    participant_count: int

    @property
    def sealed(self) -> bool:
        return self.sealed_at_ms is not None


@dataclass(frozen=True, slots=True)
class UnsealedDraw:
    """A draw the recorder still copies into Postgres, with its room's
    opening (when it is sealed)."""

    event_id: int
    opens_at_ms: int
    recorded: int


@dataclass(frozen=True, slots=True)
class RankedEntry:
    """One line of a published draw: rank (from 1), pseudonym, score."""

    rank: int
    pseudonym: str
    score: int


@dataclass(frozen=True, slots=True)
class ProofCursor:
    """Where a page of a published draw ends: its last line."""

    rank: int
    score: int
    pseudonym: str


@dataclass(frozen=True, slots=True)
class PreQueueProof:
    """What GetPreQueueProof answers: the commitment always; the seed and
    one page of participants once the draw is sealed."""

    event_id: int
    algorithm: str
    commitment: str
    committed_at_ms: int
    opens_at_ms: int
    # Set once revealed (sealed), with the participants.
    seed: bytes | None = None
    revealed_at_ms: int = 0
    participant_count: int = 0
    participants: tuple[RankedEntry, ...] = ()
    next_page: ProofCursor | None = None


@dataclass(frozen=True, slots=True)
class FanDraw:
    """An event's verified-fan draw: for which lane by code, when it
    closes, how many win, how long the winners' codes work, and when it
    was drawn (None: not yet)."""

    event_id: int
    lane: str
    closes_at_ms: int
    winners: int
    code_validity_ms: int
    drawn_at_ms: int | None = None


class FanDrawOutcome(enum.IntEnum):
    """A fan's part in a draw; the numbers are those of the proto enum."""

    NOT_REGISTERED = 1
    REGISTERED = 2
    WON = 3
    NOT_DRAWN = 4


@dataclass(frozen=True, slots=True)
class FanDrawResult:
    outcome: FanDrawOutcome
    lane: str
    closes_at_ms: int
    pseudonym: str = ""
    access_code: str = ""
