"""A waiting fan's place, estimated from an event's admission progress.

QueueService's watch streams and the edge both answer "about 12,000 ahead"
without asking Redis per fan: they keep one exact reading of the fan's place
(:class:`PlaceBase`, from a join or a position read) and move it with the
event's progress, which they follow once per event. Everything here is
arithmetic on values of the contract (queue scores and the fields of
``AdmissionProgress``); no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass

# Queue scores: arrivals before opening get a uniformly random score in
# [0, PRE_QUEUE_BAND); arrivals after opening get PRE_QUEUE_BAND + n for the
# n-th arrival, so every post-opening score is above every pre-queue score.
# Scores stay below 2**53, where a Redis score (a double) is still exact.
PRE_QUEUE_BAND = 2**50

# Polling hints (seconds): close to the head ask often, far back rarely.
# The hint is a quarter of the ETA, so a fan about to be admitted asks again
# within a second or two (POLL_NEAR_SECONDS at the least); while the ETA is
# unknown (no measured rate yet), POLL_MIN_SECONDS and more further back.
POLL_NEAR_SECONDS = 1.0
POLL_MIN_SECONDS = 5.0
POLL_MAX_SECONDS = 15.0


@dataclass(frozen=True, slots=True)
class PlaceBase:
    """An exact reading of a waiting fan's place, from which later places
    are estimated without asking Redis again."""

    score: int
    ahead: int
    # The event's admitted_total and pre_queue_joined when it was read.
    admitted_total: int
    pre_queue_joined: int


def estimate_ahead(base: PlaceBase, *, admitted_total: int, pre_queue_joined: int, queue_length: int) -> int:
    """Fans ahead now, from an exact reading and the event's progress.

    Every fan admitted since the reading was ahead (admission pops in score
    order). Before opening, a later pre-queue arrival lands ahead with
    probability score / PRE_QUEUE_BAND (scores are uniform), so the expected
    number of them is added. Fans who left are not known and not subtracted:
    the estimate errs on the long side.
    """
    ahead = base.ahead - max(0, admitted_total - base.admitted_total)
    if base.score < PRE_QUEUE_BAND:
        newcomers = max(0, pre_queue_joined - base.pre_queue_joined)
        ahead += round(newcomers * (base.score / PRE_QUEUE_BAND))
    return max(0, min(ahead, queue_length - 1))


def passed(score: int, *, admitted_total: int, admitted_through_score: int) -> bool:
    """Whether admission has reached a fan with this score (admitted, or
    gone from the queue some other way)."""
    return admitted_total > 0 and admitted_through_score >= score


def eta_seconds(ahead: int, rate_per_second: float) -> float | None:
    """Seconds until admission at the measured rate; None while unknown."""
    if rate_per_second < 0.01:
        return None
    return (ahead + 1) / rate_per_second


def poll_after_seconds(ahead: int, eta: float | None) -> float:
    """A quarter of the ETA, 1 s to 15 s; without an ETA 5 s near the head,
    up to 15 s far back."""
    if eta is not None:
        return min(POLL_MAX_SECONDS, max(POLL_NEAR_SECONDS, eta / 4))
    return min(POLL_MAX_SECONDS, max(POLL_MIN_SECONDS, POLL_MIN_SECONDS + ahead / 1000))
