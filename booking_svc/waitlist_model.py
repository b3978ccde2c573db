"""The waiting list's values, and its order and fitting rule.

The rule (:func:`fitting_offers`), as the contract states it: entries are
served in the order they joined. For each waiting entry, in that order, the
sections it wants (its own, or every section when it wants any) that no
earlier entry still waits for are tried in section order; the first whose
free seats fit its quantity gets the offer. An entry that no section fits
leaves those sections waiting for it: no entry behind it is offered their
seats (a fan wanting 2 seats is not skipped for one wanting 1 when a single
seat comes back, and does not skip ahead either). An entry that may not buy
more (the event's ticket or hold limit) is passed over without holding the
sections up.
"""

from __future__ import annotations

import enum
import uuid
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime

from booking_svc.model import Hold

# Outcomes of an offer's hold that pass the fan over (the fan's own limits)
# rather than leave the section waiting for them.
PASSED_OVER = frozenset({"TICKET_LIMIT_REACHED", "CUSTOMER_HOLD_LIMIT"})


class WaitlistState(enum.Enum):
    WAITING = 1
    OFFERED = 2
    TAKEN = 3
    LEFT = 4
    LAPSED = 5


@dataclass(frozen=True, slots=True)
class WaitlistEntry:
    """A fan's place on an event's waiting list."""

    event_id: int
    customer_id: str
    section_id: str | None
    quantity: int
    state: WaitlistState
    joined_at: datetime
    offer_hold_id: uuid.UUID | None = None
    ahead: int = 0
    offer: Hold | None = None

    def with_offer(self, hold: Hold) -> WaitlistEntry:
        return replace(self, offer=hold)


@dataclass(frozen=True, slots=True)
class Offer:
    """Seats held for a fan on the list."""

    event_id: int
    customer_id: str
    section_id: str
    quantity: int
    hold_id: uuid.UUID


@dataclass(frozen=True, slots=True)
class OfferPass:
    """What one pass over an event's list did."""

    event_id: int
    offers: tuple[Offer, ...] = ()
    passed_over: tuple[str, ...] = ()
    taken: int = 0
    lapsed: int = 0
    skipped: bool = False


@dataclass(frozen=True, slots=True)
class WaitlistStats:
    """An event's list by state."""

    waiting: int = 0
    offered: int = 0
    taken: int = 0
    lapsed: int = 0


@dataclass(frozen=True, slots=True)
class WaitlistReservations:
    """Per (event, section): whether fans wait for it, and the seats open
    offers hold in it (and how many fans hold them)."""

    waited: frozenset[tuple[int, str]] = frozenset()
    offered: Mapping[tuple[int, str], int] = field(default_factory=dict)
    # Per event: the fans holding an open offer (shoppers the room did not
    # admit, whom its cap on shoppers counts).
    offers: Mapping[int, int] = field(default_factory=dict)

    @classmethod
    def of(cls, rows: Iterable[tuple[int, str, bool, int, int]]) -> WaitlistReservations:
        waited: set[tuple[int, str]] = set()
        offered: dict[tuple[int, str], int] = {}
        offers: dict[int, int] = {}
        for event_id, section_id, waits, seats, fans in rows:
            if waits:
                waited.add((event_id, section_id))
            if seats:
                offered[(event_id, section_id)] = seats
            if fans:
                offers[event_id] = offers.get(event_id, 0) + fans
        return cls(frozenset(waited), offered, offers)


# Try to offer an entry seats of a section: None when the offer was made,
# else the hold's outcome (SOLD_OUT, NOT_ENOUGH_SEATS, TICKET_LIMIT_REACHED...).
TryOffer = Callable[[WaitlistEntry, str], Awaitable[str | None]]


async def fitting_offers(
    waiting: Iterable[WaitlistEntry], free: dict[str, int], try_offer: TryOffer, passed: list[str]
) -> int:
    """Walk the waiting entries in order under the rule above, calling
    ``try_offer`` for each fit; ``free`` (seats free per section, in section
    order) is kept up to date. Fans passed over go to ``passed``. Answers
    the offers made."""
    blocked: set[str] = set()
    made = 0
    for entry in waiting:
        if len(blocked) == len(free):
            break
        wanted = [entry.section_id] if entry.section_id is not None else list(free)
        open_sections = [s for s in wanted if s in free and s not in blocked]
        if not open_sections:
            continue
        outcome: str | None = "NOT_ENOUGH_SEATS"
        for section in open_sections:
            if free[section] < entry.quantity:
                continue
            outcome = await try_offer(entry, section)
            if outcome is None:
                free[section] -= entry.quantity
                made += 1
                break
            if outcome in PASSED_OVER:
                break
            # Fewer seats than counted (a seat taken meanwhile): none is
            # counted free any more until the next pass reads again.
            free[section] = 0
        if outcome is None:
            continue
        if outcome in PASSED_OVER:
            passed.append(entry.customer_id)
            continue
        blocked.update(open_sections)
    return made
