"""The queue's boundaries, as Protocols the use cases and jobs depend on:
the queue store (Redis), the waiting-room configuration repository
(Postgres) and the leadership the admitter campaigns with, plus the values
that cross the store's boundary. Implementations live in ``adapters/``
(and ``boxoffice.leader``); ``app`` wires each to its port."""

from __future__ import annotations

import enum
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from boxoffice.draw import Entry
from queue_svc.model import (
    DrawRecord,
    FanDraw,
    Place,
    Progress,
    RateReason,
    TickResult,
    UnsealedDraw,
    WaitingRoomConfig,
)
from queue_svc.rate import BookingHealth


class JoinStatus(enum.Enum):
    """How a join ended in the store; anything but WAITING and ADMITTED is
    a refusal that ``errors.join_refused`` turns into a domain error."""

    WAITING = "waiting"
    ADMITTED = "admitted"
    UNKNOWN_EVENT = "unknown_event"
    NOT_OPEN = "not_open"
    ACCOUNT_LIMITED = "account_limited"
    CLIENT_LIMITED = "client_limited"
    # The fan would be placed in the pre-queue, and the join came without
    # the draw's score (nothing changed but the limits' count): join again
    # with it.
    NEEDS_DRAW = "needs_draw"
    # The room lost its data and is not rebuilt yet (nothing changed): join
    # again once it is (queue_svc.rebuild).
    REBUILDING = "rebuilding"


@dataclass(frozen=True, slots=True)
class JoinReply:
    """A join's outcome and the event's state the fan's position needs."""

    status: JoinStatus
    score: int = 0
    ahead: int = 0
    newly_joined: bool = False
    opens_at_ms: int = 0
    paused: bool = False
    admitted_total: int = 0
    rate_at_last_tick: float = 0.0
    last_tick_ms: int = 0
    # The lane the fan's place is in ("" the general one).
    lane: str = ""
    # The event is sold out (the room's flag).
    sold_out: bool = False


@dataclass(frozen=True, slots=True)
class PreQueueLog:
    """A slice of an event's log of pre-queue placements (Redis), and the
    log's state: its length and whether the pre-queue is sealed (no
    placement can be added any more)."""

    length: int
    sealed: bool
    entries: list[Entry]


@dataclass(frozen=True, slots=True)
class LifecycleLog:
    """The head of an event's lifecycle log (Redis): the absolute index of
    its first entry (``start``, the entries trimmed so far), the entries as
    the scripts wrote them (``queue_svc.jobs.lifecycle``), and the event's
    joins refused so far per reason."""

    start: int
    entries: list[str]
    refusals: dict[str, int]


@dataclass(frozen=True, slots=True)
class JoinLimits:
    """Joins allowed per account / per client in each window (0: none)."""

    per_account: int
    per_client: int
    window_ms: int


class FanOp(enum.Enum):
    """What a call does to one fan's place besides reading it."""

    LOOK = "look"
    CLAIM = "claim"
    LEAVE = "leave"
    END = "end"


class QueueStore(Protocol):
    """The waiting room's live state: queue, admitted and active fans,
    progress, and the mirror of each event's configuration."""

    async def join(
        self,
        event_id: int,
        customer_id: str,
        client_id: str,
        *,
        now_ms: int,
        random_score: int,
        limits: JoinLimits,
        pseudonym: str = "",
        lane: str = "",
    ) -> JoinReply:
        """Queue a fan in ``lane`` ("" the general one), or return their
        place, in one round trip (more when the room has lanes and the fan
        is bound to another: a fan waiting or admitted in one lane gets that
        place, see ``JoinReply.lane``). A fan
        placed in the pre-queue gets ``random_score`` (the draw's score of
        their ``pseudonym``); a pseudonym given is appended to the event's
        log of pre-queue placements with it. A negative ``random_score``
        says the caller has no score: a fan who would be placed in the
        pre-queue is not, and the answer is NEEDS_DRAW."""

    async def pre_queue_log(self, event_id: int, *, start: int, count: int, seal: bool) -> PreQueueLog | None:
        """Up to ``count`` placements of the event's pre-queue log from
        ``start`` (0 first); ``seal`` first closes the pre-queue for good
        (later joins go to the back). None for an unknown event."""

    async def fan(
        self, event_id: int, customer_id: str, *, now_ms: int, op: FanOp, reason: str = "", lane: str = ""
    ) -> Place | None:
        """Read or change one fan's place (``reason``: why a session ends,
        for the lifecycle log) in the lane they are bound to (``lane`` a
        guess); None for an unknown event."""

    async def admit(
        self,
        event_id: int,
        *,
        now_ms: int,
        epoch: int,
        target_rate: float = 0.0,
        reason: RateReason = RateReason.BASE,
        lane: str = "",
        slot_share: float = 1.0,
        generation: int = 0,
        sold_out: bool | None = None,
        outside: int = 0,
    ) -> TickResult | None:
        """One admit tick of the event's ``lane`` at the target rate (0: the
        configured one), filling at most ``slot_share`` of the free slots;
        None for an unknown event (or lane not mirrored). A room whose
        generation marker is missing or below ``generation`` (Postgres's)
        lost its data: nothing is done and the result says ``room_lost``.
        ``sold_out`` (None: not known now) sets the room's sold-out flag
        first; while the flag is set nobody is admitted. ``outside`` counts
        shoppers the room did not admit (fans holding waiting-list offers)
        against its cap."""

    async def record_presence(self, event_id: int, customer_ids: Sequence[str], *, now_ms: int) -> int | None:
        """The waiting fans among ``customer_ids`` are seen now; how many
        of them wait, or None for an unknown event."""

    async def flag(self, event_id: int, customer_id: str, *, flagged: bool, now_ms: int) -> bool | None:
        """Put a fan in the shadow lane (never admitted) or take them out;
        whether that changed anything, or None for an unknown event."""

    async def progress(self, event_id: int, *, now_ms: int, lane: str = "") -> Progress | None:
        """The admission progress of the event's lane; None for an unknown
        event (or lane not mirrored)."""

    async def put_config(self, config: WaitingRoomConfig, *, generation: int = 1) -> bool:
        """Mirror a stored configuration (ignored when not newer). A room
        without a generation marker gets ``generation`` as its marker
        (0: left without one, for a room that lost its data and has a
        history to rebuild from, see queue_svc.rebuild)."""


class WaitingRoomRepository(Protocol):
    """Where waiting-room configurations live durably."""

    async def create(self, config: WaitingRoomConfig) -> WaitingRoomConfig:
        """Store a new configuration (version 1); ALREADY_EXISTS if there is one."""

    async def update(self, config: WaitingRoomConfig) -> WaitingRoomConfig:
        """Replace a configuration (next version); NOT_FOUND if there is none."""

    async def set_paused(self, event_id: int, paused: bool) -> WaitingRoomConfig:
        """Pause or resume (next version); NOT_FOUND if there is none."""

    async def get(self, event_id: int) -> WaitingRoomConfig | None:
        """One configuration, or None."""

    async def list_all(self) -> list[WaitingRoomConfig]:
        """Every configuration."""


class DrawRepository(Protocol):
    """Where the events' pre-queue draws live durably: their secrets, the
    placements copied from Redis, and whether they are sealed."""

    async def get_or_create(self, event_id: int) -> DrawRecord | None:
        """The event's draw, made now (a new secret seed) if it has none;
        None when the event has no waiting room."""

    async def record(self, event_id: int, start: int, entries: Sequence[Entry]) -> None:
        """Store the log's placements ``start`` .. ``start + len(entries)``
        (each pseudonym once) and count them as copied."""

    async def seal(self, event_id: int, length: int) -> bool:
        """Seal the draw, provided the first ``length`` placements of the
        log are copied; whether it is sealed now."""

    async def unsealed(self) -> list[UnsealedDraw]:
        """The draws not sealed yet."""

    async def entries(self, event_id: int, *, after: tuple[int, str] | None, limit: int) -> list[Entry]:
        """Up to ``limit`` placements in the draw's order, after the one
        with (score, pseudonym) ``after``."""


class Leadership(Protocol):
    """The election the admitter runs under (``boxoffice.leader`` in a
    process, a double in tests)."""

    async def run(self, lead: Callable[[int], Awaitable[None]]) -> None:
        """Campaign until cancelled; while this process leads, run
        lead(epoch) and cancel it when leadership is lost. The epoch grows
        with every change of leader."""


class BookingHealthSource(Protocol):
    """Booking's hold latency and error ratio as booking publishes them
    (``adapters.booking_health``)."""

    async def read(self, *, now_ms: int) -> BookingHealth | None:
        """The recent health, or None when nothing fresh was published."""


@dataclass(frozen=True, slots=True)
class StockVerdict:
    """What booking published of an event lately (``adapters.booking_stock``)."""

    sold_out: bool
    # Fans holding an open waiting-list offer: shoppers the room did not
    # admit, whom its cap on shoppers counts.
    offers: int = 0


class BookingStockSource(Protocol):
    """Whether events are sold out, as booking publishes it
    (``adapters.booking_stock``)."""

    async def want(self, event_ids: Sequence[int]) -> None:
        """Ask booking to publish these events' seats."""

    async def read(self, event_ids: Sequence[int], *, now_ms: int) -> dict[int, StockVerdict]:
        """The recent verdict of each event that has one (sold out or not,
        and the fans holding waiting-list offers); events without one are
        left out."""


class CodeUse(enum.Enum):
    """How an access code's use at a join ended."""

    # Bound to the account now, or already bound to it (no new use).
    ACCEPTED = "accepted"
    # Not one of the lane's codes, or outside its validity window.
    INVALID = "invalid"
    # Bound to as many other accounts as it allows.
    USED_UP = "used_up"


@dataclass(frozen=True, slots=True)
class CodeBatch:
    """A batch of access codes as an operator asks for it."""

    event_id: int
    lane: str
    max_uses: int
    valid_from_ms: int
    valid_until_ms: int
    label: str


class StaffPassBindings(Protocol):
    """Which account each staff pass belongs to (the first that used it)."""

    async def bind_staff_pass(self, event_id: int, pass_id: str, customer_id: str, *, keep_ms: int) -> bool:
        """Binds the pass to the account unless it is another's; whether it
        is (now) this account's. Kept for ``keep_ms`` (the pass's life left)."""


class AccessCodeRepository(Protocol):
    """Where the lanes' access codes live durably (only their hashes) and
    the accounts each is bound to."""

    async def create(self, batch: CodeBatch, code_hashes: Sequence[bytes]) -> int:
        """Store a batch and its codes' hashes; the batch's id."""

    async def lane_of(self, event_id: int, code_hash: bytes) -> str | None:
        """The lane of the event that the code is for, or None."""

    async def use(
        self, event_id: int, lane: str, code_hash: bytes, customer_id: str, *, now_ms: int
    ) -> tuple[CodeUse, int]:
        """Bind the code to the account (once; a repeat is no new use) if it
        is the lane's, valid now and not used up; the outcome and the code's
        max uses (0 when it is not found)."""


class FanDrawRepository(Protocol):
    """Where the events' verified-fan draws live durably (``secrets``:
    the draws' seeds and registrations, of their own purpose)."""

    @property
    def secrets(self) -> DrawRepository:
        """The draw repository of the verified-fan draws' purpose."""

    async def create(self, fan_draw: FanDraw) -> DrawRecord:
        """Store a new draw with a new secret seed; FAN_DRAW_EXISTS if the
        event has one."""

    async def get(self, event_id: int) -> FanDraw | None:
        """The event's draw, or None."""

    async def register(self, event_id: int, entry: Entry) -> bool:
        """Register a pseudonym with its score; whether it is new."""

    async def rank(self, event_id: int, pseudonym: str) -> int | None:
        """The pseudonym's rank in the draw's order, from 1; None if not
        registered."""

    async def due(self, now_ms: int) -> list[FanDraw]:
        """The draws not drawn whose registration has closed."""

    async def run(self, event_id: int, *, now_ms: int, code_of: Callable[[str], bytes]) -> bool:
        """Draw once: the winners' code hashes stored, the draw revealed;
        whether this call drew it."""


class RefusalCounter(Protocol):
    """Where joins refused before the join script are counted per reason
    (the event's refusal counters, copied to Postgres with the lifecycle)."""

    async def count_refusal(self, event_id: int, reason: str) -> None:
        """Count one refusal of the event's joins for ``reason``."""
