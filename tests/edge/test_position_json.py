"""A waiting fan's SSE updates are written from a template
(edge_svc.waiting.PositionJson): byte for byte what json_format writes for
the same position, for many places and snapshots, edge values included."""

from __future__ import annotations

import json
import random
from typing import Any

import pytest
from google.protobuf import json_format

from boxoffice import places
from edge_svc.endpoints.common import to_json
from edge_svc.waiting import (
    Place,
    PositionJson,
    PositionTemplates,
    ProgressView,
    estimate,
    estimated,
    waiting_position,
)
from gen.boxoffice.queue.v1 import queue_service_pb2 as queue_pb

CUSTOMERS = [
    "fan-1",
    "",
    'quote"and\\backslash',
    "tab\tnewline\ncr\r",
    "\x00\x1f\x7f",
    "é ñ ü",
    "\u2028\u2029",
    "emoji 🎟️",
    "</script>",
    "100% a fan %s %%",
    "x" * 64,
]
SCORES = [0, 1, places.PRE_QUEUE_BAND - 1, places.PRE_QUEUE_BAND, places.PRE_QUEUE_BAND + 12_345, 2**53 - 1]
RATES = [0.0, 0.0099, 0.01, 0.3, 1.0, 3.0, 7.0, 10.0, 123.456, 1e6, 1e9, float("inf")]
# One set of templates for the whole module, as one edge shares it.
TEMPLATES = PositionTemplates()
STATES = [
    queue_pb.ADMISSION_STATE_UNSPECIFIED,
    queue_pb.ADMISSION_STATE_OPEN,
    queue_pb.ADMISSION_STATE_PAUSED,
    queue_pb.ADMISSION_STATE_PRE_QUEUE,
    99,  # a state this build does not know: written as its number
]


def _progress(rng: random.Random, event_id: int) -> queue_pb.AdmissionProgress:
    progress = queue_pb.AdmissionProgress(
        event_id=event_id,
        admitted_through_score=rng.choice([0, 1, places.PRE_QUEUE_BAND, 2**53 - 2]),
        queue_length=rng.choice([0, 1, 2, 10, 999, 1000, 1001, 20_000, 10**9]),
        admitted_total=rng.choice([0, 0, 1, 5, 10_000, 10**9]),
        admission_rate_per_second=rng.choice(RATES) * rng.choice([1.0, 1.0, 1 / 3, 0.999_999_999]),
        admission_state=rng.choice(STATES),  # type: ignore[arg-type]
        pre_queue_joined=rng.choice([0, 1, 77, 10**6]),
    )
    progress.observed_at.FromMilliseconds(rng.choice([0, 1_700_000_000_000, 1_700_000_000_999]))
    return progress


def _place(rng: random.Random, event_id: int) -> Place:
    base = places.PlaceBase(
        score=rng.choice(SCORES),
        ahead=rng.choice([0, 1, 2, 9, 1000, 19_999, 10**9]),
        admitted_total=rng.choice([0, 1, 5, 10_000]),
        pre_queue_joined=rng.choice([0, 1, 50]),
    )
    return Place(event_id, rng.choice(CUSTOMERS), base, rng.choice([0, 1_700_000_000_000, 1_700_000_000_500]))


def test_the_template_writes_what_json_format_writes_for_many_positions() -> None:
    rng = random.Random(20_000)
    compared = 0
    digits: set[int] = set()
    while compared < 5000:
        event_id = rng.choice([1, 123_456_789, 2**63 - 1])
        place, progress = _place(rng, event_id), _progress(rng, event_id)
        position = estimate(place, progress)
        found = estimated(place, ProgressView.of(progress))
        if position is None:
            assert found is None
            continue
        assert found is not None
        expected = to_json(queue_pb.GetQueuePositionResponse(position=position)).decode()
        written = PositionJson(place, TEMPLATES).render(found, progress.admission_state)
        assert written == expected, (place, progress)
        assert json.loads(written)["position"]["customerId"] == place.customer_id
        for duration in (position.eta, position.poll_after):
            text = json_format.MessageToJson(duration).strip('"s')
            digits.add(len(text.partition(".")[2]))
        compared += 1
    # The durations written had whole seconds and 3, 6 and 9 digits of fraction.
    assert digits == {0, 3, 6, 9}


@pytest.mark.parametrize(
    ("eta", "poll"),
    [
        (None, 5.0),
        (None, 15.0),
        (0.0, 5.0),
        (1.5, 5.0),
        (0.001, 5.25),
        (0.000_001, 14.999_999),
        (0.000_000_001, 5.000_000_001),
        (1 / 3, 7.123_456_789),
        (123_456_789.987_654_321, 15.0),
        (315_575_999_999.0, 15.0),
    ],
)
def test_durations_are_written_as_json_format_writes_them(eta: float | None, poll: float) -> None:
    place = Place(7, "fan-d", places.PlaceBase(score=42, ahead=3, admitted_total=0, pre_queue_joined=0))
    progress = queue_pb.AdmissionProgress(event_id=7, admission_state=queue_pb.ADMISSION_STATE_OPEN)
    view = ProgressView.of(progress)
    found = estimated(place, view)
    assert found is not None
    found = type(found)(ahead=found.ahead, eta=eta, poll_after=poll)
    written = PositionJson(place, TEMPLATES).render(found, view.admission_state)
    expected = to_json(queue_pb.GetQueuePositionResponse(position=waiting_position(place, found, view.admission_state)))
    assert written == expected.decode()


def test_a_duration_the_contract_cannot_carry_is_refused_as_before() -> None:
    place = Place(7, "fan-e", places.PlaceBase(score=42, ahead=3, admitted_total=0, pre_queue_joined=0))
    view = ProgressView.of(queue_pb.AdmissionProgress(event_id=7))
    found = estimated(place, view)
    assert found is not None
    too_long = type(found)(ahead=found.ahead, eta=1e12, poll_after=found.poll_after)
    with pytest.raises(json_format.SerializeToJsonError):
        PositionJson(place, TEMPLATES).render(too_long, view.admission_state)


def test_updates_do_not_run_json_format_per_update(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = 0
    original = json_format.MessageToDict

    def counted(*args: Any, **kwargs: Any) -> Any:
        nonlocal calls
        calls += 1
        return original(*args, **kwargs)

    place = Place(
        9, "fan-f", places.PlaceBase(score=places.PRE_QUEUE_BAND + 5, ahead=900, admitted_total=0, pre_queue_joined=0)
    )
    shared = PositionTemplates()
    template = PositionJson(place, shared)
    written = []
    monkeypatch.setattr(json_format, "MessageToDict", counted)
    for admitted in range(0, 1000, 10):
        progress = queue_pb.AdmissionProgress(
            event_id=9,
            admitted_total=admitted,
            queue_length=1000,
            admission_rate_per_second=(admitted % 30) / 10,
            admission_state=queue_pb.ADMISSION_STATE_OPEN,
        )
        found = estimated(place, ProgressView.of(progress))
        assert found is not None
        written.append((template.render(found, progress.admission_state), progress))
    # One template per shape of the message (ETA known or not, anyone ahead
    # or not), shared by every fan.
    assert calls <= 4
    other = Place(
        9, "fan-g", places.PlaceBase(score=places.PRE_QUEUE_BAND + 6, ahead=1, admitted_total=0, pre_queue_joined=0)
    )
    found = estimated(other, ProgressView.of(progress))
    assert found is not None
    before = calls
    PositionJson(other, shared).render(found, progress.admission_state)
    assert calls == before
    monkeypatch.undo()
    for text, progress in written:
        position = estimate(place, progress)
        assert position is not None
        assert text == to_json(queue_pb.GetQueuePositionResponse(position=position)).decode()


def test_a_fan_whose_own_fields_spell_a_stand_in_is_written_right() -> None:
    for customer in ("8675309867530986", "314159265358s", "271828182845s", "\u2603customer\u2603", "7777777777777771"):
        place = Place(
            3, customer, places.PlaceBase(score=8_675_309_867_530_986, ahead=5, admitted_total=0, pre_queue_joined=0)
        )
        progress = queue_pb.AdmissionProgress(event_id=3, queue_length=100, admission_rate_per_second=2.0)
        found = estimated(place, ProgressView.of(progress))
        position = estimate(place, progress)
        assert found is not None and position is not None
        expected = to_json(queue_pb.GetQueuePositionResponse(position=position)).decode()
        assert PositionJson(place, TEMPLATES).render(found, progress.admission_state) == expected
