"""The scenario, the discrete-event model and the simulate command's input
checks (the crowd itself drives the real mesh in test_report)."""

from __future__ import annotations

import dataclasses
import io
import math

import pytest

from boxoffice_cli import simulate
from boxoffice_cli.simulate_model import TICK_SECONDS, Capacities, predict
from boxoffice_cli.simulate_scenario import BadScenario, Scenario, plan

SMALL = Scenario(fans=600, seats=150, admission_rate=5, max_active=30, seed=3)


def test_the_plan_is_seeded_and_in_arrival_order() -> None:
    fans = plan(SMALL)
    assert fans == plan(SMALL) and fans != plan(dataclasses.replace(SMALL, seed=4))
    assert [f.arrives_at for f in fans] == sorted(f.arrives_at for f in fans)
    assert sorted(f.index for f in fans) == list(range(SMALL.fans))
    assert all(not (f.bot and f.shows) for f in fans)
    assert {f.tickets for f in fans} <= {n for n, _ in SMALL.tickets_per_order}
    pre = [f for f in fans if f.arrives_at < SMALL.opens_in_seconds]
    assert 0 < len(pre) < len(fans)


def test_the_model_sells_out_within_the_rooms_limits() -> None:
    fans = plan(SMALL)
    p = predict(SMALL, Capacities(), fans)
    assert p.tickets == SMALL.seats and p.sold_out_after_seconds is not None
    # Never more admitted than the rate allows (one second's worth banked at most), never above the cap.
    assert p.admitted <= SMALL.admission_rate * (p.sold_out_after_seconds + TICK_SECONDS + 1)
    assert p.peak_active <= SMALL.max_active
    assert p.waits["count"] == p.admitted and p.median_wait_seconds is not None and p.median_wait_seconds >= 0
    biggest = max(n for n, _ in SMALL.tickets_per_order)
    assert math.ceil(SMALL.seats / biggest) <= p.orders <= p.admitted
    # Nobody shows: nothing sells.
    nobody = dataclasses.replace(SMALL, show_rate=0.0)
    assert predict(nobody, Capacities()).tickets == 0


def test_the_model_suggests_more_pods_for_a_bigger_crowd() -> None:
    small = predict(SMALL, Capacities())
    big_scenario = SMALL.scaled(60_000, 1_500)
    big = predict(big_scenario, Capacities())
    assert big.tickets == 1_500
    assert all(big.pods[tier] >= small.pods[tier] for tier in small.pods) and big.pods["edge"] > small.pods["edge"]
    # More pods of the shop's services sustain a higher admission rate.
    assert predict(big_scenario, Capacities().scaled(4)).suggested_rate > big.suggested_rate


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--model", "--fans", "0"], "fans and seats must be at least 1"),
        (["--model", "--show-rate", "2"], "show rate must be between 0 and 1"),
        (["--model", "--rate", "0"], "admission rate"),
        (["--model", "--pods", "0"], "--pods must be at least 1"),
        (["--model", "--compare"], "not allowed with argument"),
        ([], "DATABASE_URL"),
    ],
)
def test_bad_input_is_refused_with_a_clear_message(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    out = io.StringIO()
    assert simulate.main(argv, {}, out) == 2
    assert out.getvalue() == "" and message in capsys.readouterr().err


def test_the_model_command_prints_its_prediction() -> None:
    out = io.StringIO()
    assert simulate.main(["--model", "--fans", "3000", "--seats", "500"], {}, out) == 0
    text = out.getvalue()
    for part in ("sold out after", "p50", "suggested", "admission rate", "active cap", "pods at that rate"):
        assert part in text


def test_scenario_checks() -> None:
    with pytest.raises(BadScenario):
        dataclasses.replace(SMALL, tickets_per_order=((0, 1.0),)).check()
    with pytest.raises(BadScenario):
        dataclasses.replace(SMALL, claim_grace_seconds=2).check()
    SMALL.check()
