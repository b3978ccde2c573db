"""The discrete-event model of an on-sale (``boxoffice simulate --model``):
the scenario's fans (``simulate_scenario.plan``, the very fans the crowd
plays) through the waiting room's admit ticks and the shop, each call
costing the latency of the process that serves it at the load the scenario
puts on it. It predicts the sell-out time and the wait distribution, and
suggests the admission rate, the active cap and the pod counts.

The per-process capacities are the benchmarks' (README "Benchmarks",
measured on the 2-core development machine, one process each):

- edge: ``bench.edge_join``, joins through the edge to a real QueueService,
  896 /s; ``bench.edge_progress``, polls of the progress document, 6,691 /s;
- queue: ``bench.queue_join``, JoinQueue, 2,724 /s;
- booking: ``bench.booking_bench``, HoldSeats 1,357 /s (p50 46.5 ms at 64
  callers), ConfirmHold 755 /s;
- payment: ``bench.payment_bench``, StartPayment 216 /s, ConfirmPayment
  (first confirm) 364 /s.

How the waiting room is modelled (``queue_svc/lua/admit.lua``): a tick every
half second admits from the head as many as the free slots and the rate's
allowance (at most one second's worth banked) allow; the pre-queue is
shuffled at the opening, later arrivals queue in arrival order; an
admission unclaimed within the claim grace lapses (a no-show holds its slot
until then); a fan not seen for the presence grace is dropped when reached.
A fan who polls claims at their next poll: the crowd polls at once after
joining, then after the edge's ``pollAfter`` (``boxoffice.places``: a
quarter of the ETA, 5 to 15 s; the first wait spread over half to one and a
half of it), the ETA being the fans ahead over the admission rate; the
model replays each admitted fan's polls against the admissions it ticked.
A call through the edge costs the latencies below: the services' own (the
benchmarks') plus the HTTP hop and the crowd's share of the two cores,
as the lifecycle of a 1,000-fan run on the development machine showed them
(claim to hold 0.25 s over the think time, claim to paid 0.95 s over both).
When every seat is sold the room is paused (no admission after it).
"""

from __future__ import annotations

import bisect
import heapq
import math
import random
from collections import deque
from dataclasses import dataclass, replace

from boxoffice import places
from boxoffice_cli.report import distribution
from boxoffice_cli.simulate_scenario import POLL_SECONDS, FanPlan, Scenario, plan

TICK_SECONDS = 0.5
PRESENCE_GRACE_SECONDS = 300.0
# The utilisation a suggested pod count aims at (headroom for bursts).
TARGET_UTILISATION = 0.6


@dataclass(frozen=True, slots=True)
class Capacities:
    """Calls per second one process serves, and each call's latency unloaded (s)."""

    edge_joins: float = 896.0
    edge_polls: float = 6691.0
    queue_joins: float = 2724.0
    booking_holds: float = 1357.0
    booking_confirms: float = 755.0
    payment_starts: float = 216.0
    payment_confirms: float = 364.0
    hold_latency: float = 0.25
    start_latency: float = 0.3
    confirm_latency: float = 0.4
    pods: int = 1

    def scaled(self, pods: int) -> Capacities:
        return replace(self, pods=pods)


@dataclass(frozen=True, slots=True)
class Prediction:
    sold_out_after_seconds: float | None
    median_wait_seconds: float | None
    waits: dict[str, object]
    admitted: int
    orders: int
    tickets: int
    no_shows: int
    dropped: int
    admission_rate: int
    active_cap: int
    suggested_rate: int
    suggested_active_cap: int
    slot_seconds: float
    pods_given: int
    pods: dict[str, int]
    utilisation: dict[str, float]
    peak_active: int


def _loaded(latency: float, load: float, capacity: float) -> float:
    """A call's latency at ``load`` calls/s on ``capacity`` (M/M/1's 1/(1-rho), capped)."""
    rho = min(load / capacity, 0.95) if capacity > 0 else 0.95
    return latency / (1.0 - rho)


def _pods(scenario: Scenario, rate: float, caps: Capacities) -> tuple[dict[str, int], dict[str, float]]:
    after = scenario.fans * (1.0 - scenario.pre_queue_share)
    joins = after / scenario.surge_seconds + scenario.fans * scenario.bot_share * scenario.bot_joins / 10.0
    polls = scenario.fans * (1 - scenario.bot_share) * scenario.show_rate / 10.0
    shoppers = rate * scenario.show_rate
    # Process-seconds per second each tier needs.
    need = {
        "edge": joins / caps.edge_joins + polls / caps.edge_polls,
        "queue": joins / caps.queue_joins + polls / (caps.queue_joins * 2),
        "booking": shoppers * 1.2 / caps.booking_holds + shoppers / caps.booking_confirms,
        "payment": shoppers / caps.payment_starts + shoppers / caps.payment_confirms,
    }
    pods = {tier: max(1, math.ceil(n / TARGET_UTILISATION)) for tier, n in need.items()}
    utilisation = {tier: n / caps.pods for tier, n in need.items()}
    return pods, utilisation


def _next_poll(
    fan: FanPlan, now: float, rank: int, rate: float, opens: float, times: list[float], totals: list[int]
) -> float:
    """When the fan admitted at ``now`` (the ``rank``-th) next polls: their
    polls replayed from the join, each wait the edge's pollAfter for the
    fans ahead of them then."""
    at = fan.arrives_at
    first = True
    while at < now:
        done = totals[bisect.bisect_right(times, at) - 1] if times and at >= times[0] else 0
        ahead = max(0, rank - 1 - done)
        eta = ahead / rate if at >= opens else None
        wait = places.poll_after_seconds(ahead, eta)
        if first:
            wait *= 0.5 + fan.poll_phase
            first = False
        at += wait
    return at


def predict(scenario: Scenario, caps: Capacities, fans: list[FanPlan] | None = None) -> Prediction:
    """Run the model of the scenario once."""
    fans = fans if fans is not None else plan(scenario)
    rng = random.Random(scenario.seed + 1)
    opens = scenario.opens_in_seconds
    rate = float(scenario.admission_rate)
    cap = scenario.max_active
    _, utilisation = _pods(scenario, rate, caps)
    booking_rho_load = rate * scenario.show_rate * 2.2 / max(caps.pods, 1)
    payment_rho_load = rate * scenario.show_rate * 2 / max(caps.pods, 1)
    hold_latency = _loaded(caps.hold_latency, booking_rho_load, caps.booking_holds)
    pay_latency = _loaded(caps.start_latency, payment_rho_load, caps.payment_starts) + _loaded(
        caps.confirm_latency, payment_rho_load, caps.payment_confirms
    )

    pre = [f for f in fans if f.arrives_at < opens]
    rng.shuffle(pre)
    later = iter([f for f in fans if f.arrives_at >= opens])
    queue: deque[FanPlan] = deque(pre)
    upcoming = next(later, None)

    events: list[tuple[float, int, str, int]] = []
    seq = 0
    free = scenario.seats
    sold = 0
    active = 0
    peak_active = 0
    carry = 0.0
    last_sale: float | None = None
    waits: list[float] = []
    admitted = orders = no_shows = dropped = 0
    holding: dict[int, int] = {}
    plans: dict[int, FanPlan] = {}
    t = opens
    horizon = opens + 48 * 3600.0
    # Admitted so far after each tick (the polls' ``ahead``).
    tick_times: list[float] = []
    tick_totals: list[int] = []
    lags: list[float] = []

    def push(at: float, kind: str, fan: FanPlan) -> None:
        nonlocal seq
        seq += 1
        plans[fan.index] = fan
        heapq.heappush(events, (at, seq, kind, fan.index))

    while t < horizon and sold < scenario.seats:
        # Fans arriving before this tick join the back.
        while upcoming is not None and upcoming.arrives_at <= t:
            queue.append(upcoming)
            upcoming = next(later, None)
        # Everything the shoppers do before this tick.
        while events and events[0][0] <= t and sold < scenario.seats:
            at, _, kind, index = heapq.heappop(events)
            fan = plans.pop(index)
            if kind == "lapse":
                active -= 1
                no_shows += 1
            elif kind == "hold":
                wanted = fan.tickets if free >= fan.tickets else (1 if free >= 1 else 0)
                if wanted == 0:
                    active -= 1
                    continue
                free -= wanted
                holding[index] = wanted
                push(at + hold_latency + fan.pay, "pay", fan)
            elif kind == "pay":
                seats = holding.pop(index)
                active -= 1
                if fan.declined:
                    free += seats
                else:
                    sold += seats
                    orders += 1
                    last_sale = at + pay_latency
        if sold >= scenario.seats:
            break
        # The admit tick.
        allowance = min(rate, carry + rate * TICK_SECONDS)
        n = min(cap - active, math.floor(allowance))
        taken = 0
        while taken < n and queue:
            fan = queue.popleft()
            joined = max(fan.arrives_at, opens)
            if not fan.shows and t - fan.arrives_at > PRESENCE_GRACE_SECONDS:
                dropped += 1
                continue
            taken += 1
            admitted += 1
            waits.append(t - joined)
            if fan.shows:
                claim = _next_poll(fan, t, admitted, rate, opens, tick_times, tick_totals)
                lags.append(claim - t)
                push(claim + fan.think, "hold", fan)
            else:
                push(t + scenario.claim_grace_seconds, "lapse", fan)
        active += taken
        tick_times.append(t)
        tick_totals.append(admitted)
        peak_active = max(peak_active, active)
        carry = allowance - taken
        if not queue and upcoming is None and not events:
            break
        t += TICK_SECONDS

    # The slot an admission holds: a shopper's from admission to the end of
    # their payment (their claim as the model found it), a no-show's the claim grace.
    lag = sum(lags) / len(lags) if lags else POLL_SECONDS / 2
    shopping = lag + sum(scenario.think_seconds) / 2 + sum(scenario.pay_seconds) / 2 + hold_latency + pay_latency
    showing = (1 - scenario.bot_share) * scenario.show_rate
    slot_seconds = showing * shopping + (1 - showing) * scenario.claim_grace_seconds
    # What the shop's pods (--pods) sustain at the target utilisation.
    backend = (
        min(
            caps.booking_holds * caps.pods / 1.2,
            caps.payment_starts * caps.pods,
            caps.payment_confirms * caps.pods,
        )
        * TARGET_UTILISATION
        / max(scenario.show_rate, 0.01)
    )
    suggested_rate = max(1, math.floor(backend))
    waits_json = distribution(waits)
    return Prediction(
        sold_out_after_seconds=None if last_sale is None or sold < scenario.seats else last_sale - opens,
        median_wait_seconds=waits_json["p50"],
        waits=waits_json,
        admitted=admitted,
        orders=orders,
        tickets=sold,
        no_shows=no_shows,
        dropped=dropped,
        admission_rate=scenario.admission_rate,
        active_cap=cap,
        suggested_rate=suggested_rate,
        suggested_active_cap=max(1, math.ceil(rate * slot_seconds * 1.2)),
        slot_seconds=slot_seconds,
        pods_given=caps.pods,
        pods=_pods(scenario, rate, caps)[0],
        utilisation=utilisation,
        peak_active=peak_active,
    )


def describe(scenario: Scenario, prediction: Prediction) -> list[str]:
    p = prediction
    waits = p.waits

    def s(value: object) -> str:
        return "-" if value is None else f"{float(str(value)):,.1f} s"

    lines = [
        f"model: {scenario.fans:,} fans, {scenario.seats:,} seats, {scenario.admission_rate:,} admissions/s, "
        f"{scenario.max_active:,} shoppers at most",
        f"  sold out after      {s(p.sold_out_after_seconds)}"
        + ("" if p.sold_out_after_seconds is not None else " (not sold out)"),
        f"  wait (admitted)     p50 {s(waits['p50'])}, p90 {s(waits['p90'])}, p99 {s(waits['p99'])}, "
        f"{p.admitted:,} admitted",
        f"  orders / tickets    {p.orders:,} / {p.tickets:,}; no-shows {p.no_shows:,}, dropped {p.dropped:,}; "
        f"peak shoppers {p.peak_active:,}",
        "  wait distribution   "
        + ", ".join(
            f"{b['from']:g}-{'' if b['to'] is None else format(b['to'], 'g')} s: {b['count']:,}"
            for b in waits["histogram"]  # type: ignore[attr-defined]
            if b["count"]
        ),
        f"  suggested           active cap {p.suggested_active_cap:,} for {scenario.admission_rate:,} admissions/s"
        f" (an admission holds a slot {p.slot_seconds:.1f} s on average; the cap should not bind)",
        "  pods at that rate   "
        + ", ".join(f"{tier} {n:,}" for tier, n in p.pods.items())
        + f" (each {TARGET_UTILISATION:.0%} busy; bots' join bursts included)",
        f"  admission rate      {p.suggested_rate:,}/s is what {p.pods_given} booking and payment pod(s) sustain"
        f" {TARGET_UTILISATION:.0%} busy (--pods N)",
    ]
    return lines
