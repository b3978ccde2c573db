"""The admitter's adaptive admission rate: what it targets for an event,
and why, from the room's bounds, the no-show ratio of its recent
admissions and booking's health. Arithmetic only, no I/O; the admit script
still applies the cap on active shoppers whatever the rate.

- Booking failing (its error ratio over the policy's): the base rate
  scaled down by threshold / ratio.
- Booking slow (its hold p99 over the policy's): scaled down by
  threshold / p99.
- Else admitted fans not showing (unclaimed until the claim deadline): the
  base rate raised by 1 / (1 - no-show ratio), so that about the base rate
  of fans actually arrive at booking.
- Else the base rate.

The result is held within the room's bounds; when a bound binds the reason
is BOUNDED.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from queue_svc.model import RateReason, WaitingRoomConfig


@dataclass(frozen=True, slots=True)
class BookingHealth:
    """Booking's hold calls over its recent publishing windows, summed over
    its replicas (see ``adapters.booking_health``)."""

    holds: int
    # Holds that failed on booking's side (not a refusal such as seats taken).
    errors: int
    p50_ms: float
    p99_ms: float

    @property
    def error_ratio(self) -> float:
        return self.errors / self.holds if self.holds else 0.0


@dataclass(frozen=True, slots=True)
class RatePolicy:
    """When booking counts as slow or failing, and how much evidence each
    judgement needs."""

    slow_p99_ms: float
    error_ratio: float
    # Booking's errors are judged over at least this many holds.
    min_holds: int = 20
    # No-shows are judged over at least this many resolved admissions
    # (claimed or not by their deadline); below 5 % they are noise.
    min_resolved: int = 20
    no_show_floor: float = 0.05
    # The compensation stops growing here (1 / (1 - 0.8) = 5 x the base).
    no_show_ceiling: float = 0.8


def target_rate(
    config: WaitingRoomConfig, *, no_show_ratio: float | None, health: BookingHealth | None, policy: RatePolicy
) -> tuple[float, RateReason]:
    """Admissions per second the admitter targets for this room, and why."""
    base = float(config.admission_rate_per_second)
    wanted: float
    if health is not None and health.holds >= policy.min_holds and health.error_ratio > policy.error_ratio:
        wanted, reason = base * policy.error_ratio / health.error_ratio, RateReason.BOOKING_ERRORS
    elif health is not None and health.holds > 0 and health.p99_ms > policy.slow_p99_ms:
        wanted, reason = base * policy.slow_p99_ms / health.p99_ms, RateReason.BOOKING_SLOW
    elif no_show_ratio is not None and no_show_ratio > policy.no_show_floor:
        wanted = base / (1.0 - min(no_show_ratio, policy.no_show_ceiling))
        reason = RateReason.NO_SHOW_COMPENSATION
    else:
        return base, RateReason.BASE
    low, high = config.rate_bounds
    bounded = min(float(high), max(float(low), wanted))
    if bounded != wanted:
        return bounded, RateReason.BOUNDED
    return wanted, reason


class NoShowWindow:
    """The no-show ratio of one event's admissions resolved within the
    last ``window_ms``, from the cumulative counters each tick reports
    (kept in Redis, so a new leader's window starts from the same ones)."""

    def __init__(self, window_ms: int, min_resolved: int) -> None:
        self._window_ms = window_ms
        self._min_resolved = min_resolved
        # (time, no-shows total, claimed total), one a second at most.
        self._samples: deque[tuple[int, int, int]] = deque()

    def observe(self, now_ms: int, no_shows_total: int, claimed_total: int) -> float | None:
        """Record a tick's counters; the ratio over the window, or None
        while too few admissions were resolved in it."""
        samples = self._samples
        if samples and (no_shows_total < samples[-1][1] or claimed_total < samples[-1][2]):
            samples.clear()  # the counters went back (Redis flushed): start over
        if not samples or now_ms - samples[-1][0] >= 1000:
            samples.append((now_ms, no_shows_total, claimed_total))
        # Keep one sample at or before the window's start as the reference.
        while len(samples) > 1 and samples[1][0] <= now_ms - self._window_ms:
            samples.popleft()
        _, no_shows_then, claimed_then = samples[0]
        no_shows = no_shows_total - no_shows_then
        resolved = no_shows + claimed_total - claimed_then
        if resolved < self._min_resolved:
            return None
        return no_shows / resolved
