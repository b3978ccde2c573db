"""The fan in the waiting room, answered by the edge itself.

A fan's place is read once, when they join (or, on a replica that has not
seen them, by one GetQueuePosition), and kept: in a signed ``bo_place``
cookie for browsers and in a bounded in-memory table for everyone. From then
on the edge answers the fan's polls and SSE stream from the event's
admission progress (:mod:`edge_svc.progress`): fans admitted since were
ahead, so "about N ahead" and "admitted now" need no call. It calls
QueueService for the fan again only when the progress shows them admitted
(to fetch the access token, which claims the admission) and when they leave.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

from google.protobuf import duration_pb2, timestamp_pb2

from boxoffice import places
from boxoffice.secrets import SecretSource
from boxoffice.tokens import KeyRing
from edge_svc.sealed import Sealer, Unsealed
from gen.boxoffice.queue.v1 import queue_service_pb2 as queue_pb

# How far apart the waiting room's clock and the edge's may be.
_SNAPSHOT_SKEW_MS = 1000

WAITING = queue_pb.QUEUE_STATE_WAITING
ADMITTED = queue_pb.QUEUE_STATE_ADMITTED
FINAL_STATES = frozenset(
    {
        queue_pb.QUEUE_STATE_ADMITTED,
        queue_pb.QUEUE_STATE_EXPIRED,
        queue_pb.QUEUE_STATE_LEFT,
        queue_pb.QUEUE_STATE_COMPLETED,
        queue_pb.QUEUE_STATE_NOT_IN_QUEUE,
        queue_pb.QUEUE_STATE_DROPPED,
    }
)


@dataclass(frozen=True, slots=True)
class Place:
    """What the edge remembers of a waiting fan."""

    event_id: int
    customer_id: str
    base: places.PlaceBase
    # When the exact reading was made (the edge's clock, ms): a progress
    # snapshot from before about then may not count the fan yet.
    read_at_ms: int = 0


@dataclass(frozen=True, slots=True)
class Admission:
    """A fan's access token, fetched when the progress showed them admitted."""

    token: str
    expires_at: timestamp_pb2.Timestamp


class PlaceBook:
    """Fans' places by (event, customer), the most recent ``capacity``."""

    def __init__(self, capacity: int) -> None:
        self._capacity = capacity
        self._places: OrderedDict[tuple[int, str], Place] = OrderedDict()
        self._admissions: OrderedDict[tuple[int, str], Admission] = OrderedDict()

    def get(self, event_id: int, customer_id: str) -> Place | None:
        return self._places.get((event_id, customer_id))

    def put(self, place: Place) -> None:
        key = (place.event_id, place.customer_id)
        self._places[key] = place
        self._places.move_to_end(key)
        while len(self._places) > self._capacity:
            self._places.popitem(last=False)

    def forget(self, event_id: int, customer_id: str) -> None:
        self._places.pop((event_id, customer_id), None)
        self._admissions.pop((event_id, customer_id), None)

    def admission(self, event_id: int, customer_id: str, now: float) -> Admission | None:
        found = self._admissions.get((event_id, customer_id))
        if found is not None and found.expires_at.seconds <= now:
            del self._admissions[(event_id, customer_id)]
            return None
        return found

    def admitted(self, event_id: int, customer_id: str, admission: Admission) -> None:
        key = (event_id, customer_id)
        self._admissions[key] = admission
        self._admissions.move_to_end(key)
        while len(self._admissions) > self._capacity:
            self._admissions.popitem(last=False)


class PlaceCookies:
    """The ``bo_place`` cookie: a fan's place in one event, signed with the
    session keys, so that any replica answers the fan's polls without a call."""

    def __init__(self, keys: SecretSource[KeyRing]) -> None:
        self._sealer = Sealer(keys, "p1")

    def encode(self, place: Place) -> str:
        base = place.base
        return self._sealer.seal(
            [
                place.event_id,
                place.customer_id,
                base.score,
                base.ahead,
                base.admitted_total,
                base.pre_queue_joined,
                place.read_at_ms,
            ]
        )

    def decode(self, cookie: str, *, event_id: int, customer_id: str) -> Place | None:
        """The place, if the cookie is genuine and is this fan's in this event."""
        if len(cookie) > 1024:
            return None
        try:
            event, customer, score, ahead, admitted_total, pre_queue_joined, read_at_ms = self._sealer.open(cookie)
            base = places.PlaceBase(int(score), int(ahead), int(admitted_total), int(pre_queue_joined))
        except (Unsealed, ValueError, TypeError):
            return None
        if event != event_id or customer != customer_id:
            return None
        return Place(event_id, customer_id, base, int(read_at_ms))


def place_from(position: queue_pb.QueuePosition, progress: queue_pb.AdmissionProgress | None, *, now_ms: int) -> Place:
    """A waiting fan's place as a join or a position read answered it, with
    the event's progress as the edge saw it then."""
    return Place(
        position.event_id,
        position.customer_id,
        places.PlaceBase(
            score=position.score,
            ahead=position.ahead,
            admitted_total=0 if progress is None else progress.admitted_total,
            pre_queue_joined=0 if progress is None else progress.pre_queue_joined,
        ),
        now_ms,
    )


def _duration(seconds: float) -> duration_pb2.Duration:
    whole = int(seconds)
    return duration_pb2.Duration(seconds=whole, nanos=int((seconds - whole) * 1e9))


def estimate(place: Place, progress: queue_pb.AdmissionProgress) -> queue_pb.QueuePosition | None:
    """The fan's position now, or None when admission has reached their score
    (admitted, or gone some other way: ask QueueService)."""
    if places.passed(
        place.base.score,
        admitted_total=progress.admitted_total,
        admitted_through_score=progress.admitted_through_score,
    ):
        return None
    queue_length = progress.queue_length
    if progress.observed_at.ToMilliseconds() < place.read_at_ms + _SNAPSHOT_SKEW_MS:
        # A snapshot from before (or about when) the place was read may not
        # count the fan yet: it cannot bound the fans ahead.
        queue_length = max(queue_length, place.base.ahead + 1)
    ahead = places.estimate_ahead(
        place.base,
        admitted_total=progress.admitted_total,
        pre_queue_joined=progress.pre_queue_joined,
        queue_length=queue_length,
    )
    eta = places.eta_seconds(ahead, progress.admission_rate_per_second)
    position = queue_pb.QueuePosition(
        event_id=place.event_id,
        customer_id=place.customer_id,
        state=WAITING,
        ahead=ahead,
        poll_after=_duration(places.poll_after_seconds(ahead, eta)),
        score=place.base.score,
        admission_state=progress.admission_state,
    )
    if eta is not None:
        position.eta.CopyFrom(_duration(eta))
    return position
