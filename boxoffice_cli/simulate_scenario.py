"""An on-sale scenario, shared by the synthetic crowd that drives the real
mesh (``boxoffice_cli.simulate``) and the discrete-event model that predicts
it (``boxoffice_cli.simulate_model``): who arrives when, and what each fan
does once there. Both draw every fan from the same seeded plan, so that a
fan of the model is the same fan as in the real run."""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field

# A fan near the head of the queue is told to poll again after this long
# (boxoffice.places.POLL_MIN_SECONDS): an admission is claimed on average
# half of it later.
POLL_SECONDS = 5.0


class BadScenario(ValueError):
    """A scenario whose numbers do not fit together."""


@dataclass(frozen=True, slots=True)
class Scenario:
    """The crowd, the room and the fans' behaviour."""

    fans: int = 5000
    seats: int = 1000
    # Seats per row of the one seated section.
    row_seats: int = 50
    # The room: admissions per second and shoppers at once.
    admission_rate: int = 20
    max_active: int = 200
    # Seconds from the start of the run to the opening; a share of the fans
    # arrives before it (the pre-queue), spread over that time.
    opens_in_seconds: float = 10.0
    pre_queue_share: float = 0.3
    # After the opening: arrivals fall off exponentially with this mean (the
    # surge at opening).
    surge_seconds: float = 20.0
    # Of the fans who are not bots, the share who come back when admitted.
    show_rate: float = 0.85
    # Tickets per order and the weight of each.
    tickets_per_order: tuple[tuple[int, float], ...] = ((1, 0.25), (2, 0.45), (3, 0.15), (4, 0.15))
    # The share of payments made with a card the sandbox declines.
    declined_share: float = 0.08
    # The share of bots: each joins this many times at once (the join
    # limits refuse the surplus) and never comes back.
    bot_share: float = 0.05
    bot_joins: int = 30
    # A shopper's think time before holding and before paying (seconds, uniform).
    think_seconds: tuple[float, float] = (1.0, 3.0)
    pay_seconds: tuple[float, float] = (1.0, 2.0)
    # Unclaimed admissions lapse after this (seconds); a session lasts this.
    claim_grace_seconds: int = 30
    session_seconds: int = 600
    seed: int = 13
    price_minor: int = 4500
    currency: str = field(default="EUR")

    def check(self) -> None:
        problems = []
        if self.fans < 1 or self.seats < 1:
            problems.append("fans and seats must be at least 1")
        if not 1 <= self.row_seats <= 1000:
            problems.append("row seats must be 1 to 1,000")
        if self.admission_rate < 1 or self.max_active < 1:
            problems.append("the admission rate and the active cap must be at least 1")
        for name in ("pre_queue_share", "show_rate", "declined_share", "bot_share"):
            value = getattr(self, name)
            if not 0.0 <= value <= 1.0:
                problems.append(f"{name.replace('_', ' ')} must be between 0 and 1")
        if self.opens_in_seconds < 1 or self.surge_seconds <= 0:
            problems.append("the opening must be at least 1 s away and the surge longer than 0 s")
        if not self.tickets_per_order or any(n < 1 or w < 0 for n, w in self.tickets_per_order):
            problems.append("tickets per order must be positive counts with weights >= 0")
        if self.claim_grace_seconds < 5 or self.session_seconds < 60:
            problems.append("the claim grace must be >= 5 s and the session >= 60 s")
        if problems:
            raise BadScenario("; ".join(problems))

    def scaled(self, fans: int, seats: int) -> Scenario:
        """The same crowd at another size, the room scaled with the seats."""
        factor = seats / self.seats
        from dataclasses import replace

        return replace(
            self,
            fans=fans,
            seats=seats,
            admission_rate=max(1, round(self.admission_rate * factor)),
            max_active=max(1, round(self.max_active * factor)),
        )


@dataclass(frozen=True, slots=True)
class FanPlan:
    """One fan: when they arrive (seconds from the start of the run) and
    what they will do."""

    index: int
    arrives_at: float
    bot: bool
    shows: bool
    tickets: int
    declined: bool
    think: float
    pay: float
    # The share of the poll interval after which the fan next polls, once admitted.
    poll_phase: float


def plan(scenario: Scenario) -> list[FanPlan]:
    """Every fan of the scenario, in arrival order (seeded)."""
    rng = random.Random(scenario.seed)
    counts = [n for n, _ in scenario.tickets_per_order]
    weights = [w for _, w in scenario.tickets_per_order]
    fans = []
    for i in range(scenario.fans):
        if rng.random() < scenario.pre_queue_share:
            arrives = rng.uniform(0.0, scenario.opens_in_seconds * 0.9)
        else:
            arrives = scenario.opens_in_seconds - scenario.surge_seconds * math.log(1.0 - rng.random())
        bot = rng.random() < scenario.bot_share
        fans.append(
            FanPlan(
                index=i,
                arrives_at=arrives,
                bot=bot,
                shows=(not bot) and rng.random() < scenario.show_rate,
                tickets=rng.choices(counts, weights)[0],
                declined=rng.random() < scenario.declined_share,
                think=rng.uniform(*scenario.think_seconds),
                pay=rng.uniform(*scenario.pay_seconds),
                poll_phase=rng.random(),
            )
        )
    fans.sort(key=lambda f: f.arrives_at)
    return fans
