"""The edge follows a saved place only within the room's generation: once
the waiting room is rebuilt after its store lost its data (the progress's
generation moved), a place saved before is not moved by the new progress
(the edge asks QueueService again), and the place cookie keeps the
generation it was saved under."""

from __future__ import annotations

from boxoffice import places
from boxoffice.secrets import SecretSource
from boxoffice.tokens import KeyRing
from edge_svc.sealed import Sealer
from edge_svc.waiting import Place, PlaceCookies, ProgressView, estimated, place_from
from gen.boxoffice.queue.v1 import queue_service_pb2 as queue_pb

KEYS = SecretSource.fixed("keys", KeyRing({"k1": b"0123456789abcdef0123"}, "k1"))
EVENT = 41


def _progress(generation: int) -> queue_pb.AdmissionProgress:
    progress = queue_pb.AdmissionProgress(
        event_id=EVENT,
        admitted_through_score=places.PRE_QUEUE_BAND + 10,
        queue_length=100,
        admitted_total=10,
        admission_rate_per_second=5.0,
        admission_state=queue_pb.ADMISSION_STATE_OPEN,
        generation=generation,
    )
    progress.observed_at.FromMilliseconds(10_000)
    return progress


def _waiting(score: int) -> queue_pb.QueuePosition:
    return queue_pb.QueuePosition(
        event_id=EVENT, customer_id="fan-7", state=queue_pb.QUEUE_STATE_WAITING, score=score, ahead=40
    )


def test_a_place_moves_only_with_progress_of_its_own_generation() -> None:
    place = place_from(_waiting(places.PRE_QUEUE_BAND + 50), _progress(1), now_ms=1_000)
    assert place.generation == 1
    found = estimated(place, ProgressView.of(_progress(1)))
    assert found is not None and found.ahead == 40
    # The room was rebuilt (2), or waits for its rebuild (0): ask again.
    assert estimated(place, ProgressView.of(_progress(2))) is None
    assert estimated(place, ProgressView.of(_progress(0))) is None
    again = place_from(_waiting(places.PRE_QUEUE_BAND + 50), _progress(2), now_ms=11_000)
    assert estimated(again, ProgressView.of(_progress(2))) is not None
    # A place saved before the edge saw any progress follows the first it sees.
    unseen = place_from(_waiting(places.PRE_QUEUE_BAND + 50), None, now_ms=1_000)
    assert unseen.generation == 0 and estimated(unseen, ProgressView.of(_progress(2))) is not None


def test_the_place_cookie_keeps_its_generation() -> None:
    cookies = PlaceCookies(KEYS)
    place = Place(EVENT, "fan-7", places.PlaceBase(places.PRE_QUEUE_BAND + 50, 40, 10, 0), 1_000, "", 3)
    assert cookies.decode(cookies.encode(place), event_id=EVENT, customer_id="fan-7") == place
    sealer = Sealer(KEYS, "p1")
    # A cookie saved before generations: generation 0.
    old = sealer.seal([EVENT, "fan-7", places.PRE_QUEUE_BAND + 50, 40, 10, 0, 1_000, ""])
    decoded = cookies.decode(old, event_id=EVENT, customer_id="fan-7")
    assert decoded is not None and decoded.generation == 0
    # A field too many, or a generation that is not a number: refused.
    longer = sealer.seal([EVENT, "fan-7", places.PRE_QUEUE_BAND + 50, 40, 10, 0, 1_000, "", 3, 9])
    assert cookies.decode(longer, event_id=EVENT, customer_id="fan-7") is None
    wrong = sealer.seal([EVENT, "fan-7", places.PRE_QUEUE_BAND + 50, 40, 10, 0, 1_000, "", "x"])
    assert cookies.decode(wrong, event_id=EVENT, customer_id="fan-7") is None
