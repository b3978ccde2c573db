"""The waiting room's arithmetic: estimated places, ETA, polling hints."""

from __future__ import annotations

from dataclasses import replace

from queue_svc.model import (
    PRE_QUEUE_BAND,
    AdmissionState,
    Progress,
    WatchBase,
    admission_state,
    estimate_ahead,
    eta_seconds,
    measured_rate,
    passed,
    poll_after_seconds,
)

PROGRESS = Progress(
    event_id=1,
    admitted_through_score=0,
    queue_length=10_000,
    active_shoppers=0,
    admitted_total=0,
    joined_total=10_000,
    pre_queue_joined=0,
    rate_at_last_tick=0.0,
    last_tick_ms=0,
    opens_at_ms=0,
    paused=False,
    observed_at_ms=1_000,
)


def test_admissions_since_the_reading_come_off_the_place() -> None:
    base = WatchBase(score=PRE_QUEUE_BAND + 5_000, ahead=4_999, admitted_total=100, pre_queue_joined=0)
    assert estimate_ahead(base, replace(PROGRESS, admitted_total=100)) == 4_999
    assert estimate_ahead(base, replace(PROGRESS, admitted_total=1_100)) == 3_999
    assert estimate_ahead(base, replace(PROGRESS, admitted_total=9_000)) == 0
    # Never more than the queue holds.
    assert estimate_ahead(base, replace(PROGRESS, queue_length=10)) == 9


def test_later_pre_queue_arrivals_land_ahead_in_proportion_to_the_score() -> None:
    quarter = WatchBase(score=PRE_QUEUE_BAND // 4, ahead=250, admitted_total=0, pre_queue_joined=1_000)
    grown = replace(PROGRESS, pre_queue_joined=5_000)
    assert estimate_ahead(quarter, grown) == 250 + 1_000  # a quarter of 4,000 newcomers
    after_opening = WatchBase(score=PRE_QUEUE_BAND + 1, ahead=250, admitted_total=0, pre_queue_joined=1_000)
    assert estimate_ahead(after_opening, grown) == 250  # nobody joins ahead of an arrival after opening


def test_passed_needs_an_admission() -> None:
    assert not passed(0, PROGRESS)
    assert passed(10, replace(PROGRESS, admitted_total=1, admitted_through_score=10))
    assert not passed(11, replace(PROGRESS, admitted_total=1, admitted_through_score=10))


def test_rate_decays_when_ticks_stop() -> None:
    assert measured_rate(50.0, 10_000, 11_000) == 50.0
    assert measured_rate(50.0, 10_000, 12_000) == 50.0
    assert 18 < measured_rate(50.0, 10_000, 22_000) < 19  # e^-1 after ten idle seconds past two
    assert measured_rate(0.0, 10_000, 11_000) == 0.0


def test_eta_and_poll_hints() -> None:
    assert eta_seconds(99, 0.0) is None
    assert eta_seconds(99, 50.0) == 2.0
    # The hint follows the ETA: a fan about to be admitted asks again soon.
    assert poll_after_seconds(0, 1.0) == 1.0
    assert poll_after_seconds(10, 8.0) == 2.0
    assert poll_after_seconds(0, None) == 5.0
    assert poll_after_seconds(100_000, 2_000.0) == 15.0
    assert poll_after_seconds(100_000, None) == 15.0
    assert poll_after_seconds(3_000, None) == 8.0
    assert 5.0 <= poll_after_seconds(4_000, 100.0) <= 15.0


def test_admission_state() -> None:
    assert admission_state(now_ms=5, opens_at_ms=10, paused=False) is AdmissionState.PRE_QUEUE
    assert admission_state(now_ms=10, opens_at_ms=10, paused=False) is AdmissionState.OPEN
    assert admission_state(now_ms=50, opens_at_ms=10, paused=True) is AdmissionState.PAUSED
    # Sold out is said before anything else: nobody will be admitted.
    assert admission_state(now_ms=50, opens_at_ms=10, paused=False, sold_out=True) is AdmissionState.SOLD_OUT
    assert admission_state(now_ms=50, opens_at_ms=10, paused=True, sold_out=True) is AdmissionState.SOLD_OUT
    assert admission_state(now_ms=5, opens_at_ms=10, paused=False, sold_out=True) is AdmissionState.SOLD_OUT
