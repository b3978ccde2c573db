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

import json
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from operator import itemgetter

from google.protobuf import duration_pb2, json_format, timestamp_pb2

from boxoffice import places
from boxoffice.secrets import SecretSource
from boxoffice.tokens import KeyRing
from edge_svc.identity import Session
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
    # The fan's lane ("" the general one): its progress is the lane's.
    lane: str = ""
    # The room's generation in the progress the place was saved with: a
    # progress of another generation (the room was rebuilt after its store
    # lost its data) does not move it; the edge asks QueueService again.
    generation: int = 0


@dataclass(frozen=True, slots=True)
class Admission:
    """A fan's access token, fetched when the progress showed them admitted."""

    token: str
    expires_at: timestamp_pb2.Timestamp
    lane: str = ""


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
                place.lane,
                place.generation,
            ]
        )

    def decode(self, cookie: str, *, event_id: int, customer_id: str) -> Place | None:
        """The place, if the cookie is genuine and is this fan's in this event."""
        if len(cookie) > 1024:
            return None
        try:
            fields = self._sealer.open(cookie)
            # A cookie set before lanes has no lane (the general one), one
            # set before generations none (0).
            event, customer, score, ahead, admitted_total, pre_queue_joined, read_at_ms, *rest = fields
            lane = str(rest[0]) if rest else ""
            generation = int(rest[1]) if len(rest) > 1 else 0
            base = places.PlaceBase(int(score), int(ahead), int(admitted_total), int(pre_queue_joined))
        except (Unsealed, ValueError, TypeError, OverflowError):
            return None
        if event != event_id or customer != customer_id or len(rest) > 2:
            return None
        return Place(event_id, customer_id, base, int(read_at_ms), lane, generation)


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
        position.lane,
        0 if progress is None else progress.generation,
    )


def _duration(seconds: float) -> duration_pb2.Duration:
    whole, nanos = _split(seconds)
    return duration_pb2.Duration(seconds=whole, nanos=nanos)


def _split(seconds: float) -> tuple[int, int]:
    whole = int(seconds)
    return whole, int((seconds - whole) * 1e9)


@dataclass(frozen=True, slots=True)
class ProgressView:
    """The numbers of one admission-progress snapshot that a fan's estimate
    reads, taken out of the message once per snapshot (not once per fan)."""

    admitted_total: int
    admitted_through_score: int
    queue_length: int
    pre_queue_joined: int
    rate_per_second: float
    admission_state: queue_pb.AdmissionState.ValueType
    observed_at_ms: int
    generation: int = 0

    @classmethod
    def of(cls, progress: queue_pb.AdmissionProgress) -> ProgressView:
        return cls(
            admitted_total=progress.admitted_total,
            admitted_through_score=progress.admitted_through_score,
            queue_length=progress.queue_length,
            pre_queue_joined=progress.pre_queue_joined,
            rate_per_second=progress.admission_rate_per_second,
            admission_state=progress.admission_state,
            observed_at_ms=progress.observed_at.ToMilliseconds(),
            generation=progress.generation,
        )


@dataclass(frozen=True, slots=True)
class Estimate:
    """A waiting fan's position now: fans ahead, the ETA (None while the
    rate is unknown) and when to ask again, in seconds."""

    ahead: int
    eta: float | None
    poll_after: float


def estimated(place: Place, view: ProgressView) -> Estimate | None:
    """The fan's position in ``view``'s snapshot, or None when admission has
    reached their score (admitted, or gone some other way: ask QueueService)
    or the place was saved under another generation of the room (rebuilt
    after its store lost its data: ask QueueService for the place again). A
    place saved before any progress was seen (generation 0) follows any."""
    if place.generation and view.generation != place.generation:
        return None
    base = place.base
    admitted_total = view.admitted_total
    if places.passed(base.score, admitted_total=admitted_total, admitted_through_score=view.admitted_through_score):
        return None
    queue_length = view.queue_length
    if view.observed_at_ms < place.read_at_ms + _SNAPSHOT_SKEW_MS:
        # A snapshot from before (or about when) the place was read may not
        # count the fan yet: it cannot bound the fans ahead.
        queue_length = max(queue_length, base.ahead + 1)
    ahead = places.estimate_ahead(
        base, admitted_total=admitted_total, pre_queue_joined=view.pre_queue_joined, queue_length=queue_length
    )
    eta = places.eta_seconds(ahead, view.rate_per_second)
    return Estimate(ahead, eta, places.poll_after_seconds(ahead, eta))


def estimate(place: Place, progress: queue_pb.AdmissionProgress) -> queue_pb.QueuePosition | None:
    """The fan's position now as a message, or None when admission has
    reached their score (see :func:`estimated`)."""
    view = ProgressView.of(progress)
    found = estimated(place, view)
    if found is None:
        return None
    return waiting_position(place, found, view.admission_state)


def waiting_position(
    place: Place, found: Estimate, admission_state: queue_pb.AdmissionState.ValueType
) -> queue_pb.QueuePosition:
    position = queue_pb.QueuePosition(
        event_id=place.event_id,
        customer_id=place.customer_id,
        state=WAITING,
        ahead=found.ahead,
        poll_after=_duration(found.poll_after),
        score=place.base.score,
        admission_state=admission_state,
    )
    if found.eta is not None:
        position.eta.CopyFrom(_duration(found.eta))
    return position


# Durations the proto3 JSON mapping accepts (about 10,000 years either way).
_MAX_DURATION_SECONDS = 315_576_000_000
# Stand-ins for a fan's fields in the messages templates are cut from.
_EVENT = 7_777_777_777_777_771
_CUSTOMER = "\u2603customer\u2603"
_SCORE = 6_666_666_666_666_661
_AHEAD = 8_675_309_867_530_986
_POLL = 314_159_265_358
_ETA = 271_828_182_845
# Slot numbers: 0 event id, 1 customer id (its whole JSON string), 2 score,
# 3 ahead, 4 poll after, 5 ETA; the text each stand-in is written as.
_SLOTS = (
    (0, f'"{_EVENT}"', True),
    (1, json.dumps(_CUSTOMER), False),
    (2, f'"{_SCORE}"', True),
    (3, f'"{_AHEAD}"', True),
    (4, f'"{_POLL}s"', True),
    (5, f'"{_ETA}s"', True),
)

# A template: a %-format of the message with a %s per slot, and what picks
# the values (event id, customer id, score, ahead, poll after, ETA) in the
# order of their slots.
_Template = tuple[str, Callable[[tuple[str, ...]], tuple[str, ...]]]
# The shape of a waiting fan's message: the room's admission state, and
# whether the customer id, the score, the fans ahead and the ETA are set
# (the mapping writes a field at its default in another place).
_Shape = tuple[int, bool, bool, bool, bool]


class PositionTemplates:
    """Templates of a waiting fan's ``GetQueuePositionResponse`` JSON, one
    per shape of the message, shared by every stream: ``json_format`` writes
    the message once with stand-in values, cut at them. Whatever fields the
    contract has, in whatever order the mapping writes them, the template
    has them too."""

    def __init__(self, capacity: int = 256) -> None:
        self._capacity = capacity
        self._templates: dict[_Shape, _Template] = {}

    def get(self, shape: _Shape) -> _Template:
        template = self._templates.get(shape)
        if template is None:
            if len(self._templates) >= self._capacity:
                self._templates.clear()
            template = self._templates[shape] = _template(shape)
        return template


class PositionJson:
    """A waiting fan's ``GetQueuePositionResponse`` as proto3 JSON, byte for
    byte what ``json_format`` writes for :func:`waiting_position`'s message,
    without running it per update: the fan's values are put in a shared
    template (:class:`PositionTemplates`)."""

    __slots__ = ("_customer", "_place", "_templates")

    def __init__(self, place: Place, templates: PositionTemplates) -> None:
        self._place = place
        self._templates = templates
        self._customer = json.dumps(place.customer_id)

    def render(self, found: Estimate, admission_state: queue_pb.AdmissionState.ValueType) -> str:
        eta = found.eta
        if (eta is not None and not 0 <= eta < _MAX_DURATION_SECONDS) or not 0 <= found.poll_after < 60:
            # Out of the template's range: the message's own mapping (which
            # refuses what the contract cannot carry) says it.
            return _to_json_text(waiting_position(self._place, found, admission_state))
        place = self._place
        shape = (
            int(admission_state),
            place.customer_id != "",
            place.base.score != 0,
            found.ahead != 0,
            eta is not None,
        )
        text, pick = self._templates.get(shape)
        values = (
            str(place.event_id),
            self._customer,
            str(place.base.score),
            str(found.ahead),
            _duration_json(found.poll_after),
            "" if eta is None else _duration_json(eta),
        )
        return text % pick(values)


def _template(shape: _Shape) -> _Template:
    """The message of ``shape`` written by ``json_format`` with stand-in
    values, cut at them."""
    admission_state, with_customer, with_score, with_ahead, with_eta = shape
    position = queue_pb.QueuePosition(
        event_id=_EVENT,
        customer_id=_CUSTOMER if with_customer else "",
        state=WAITING,
        ahead=_AHEAD if with_ahead else 0,
        score=_SCORE if with_score else 0,
        admission_state=admission_state,  # type: ignore[arg-type]
    )
    position.poll_after.seconds = _POLL
    if with_eta:
        position.eta.seconds = _ETA
    text = _to_json_text(position)
    present = (True, with_customer, with_score, with_ahead, True, with_eta)
    cuts: list[tuple[int, int, int]] = []
    for slot, token, quoted in _SLOTS:
        if not present[slot]:
            continue
        at = text.index(token)
        assert text.count(token) == 1, token
        # A number's slot is inside its quotes; the customer's is the whole string.
        cuts.append((at + 1, at + len(token) - 1, slot) if quoted else (at, at + len(token), slot))
    cuts.sort()
    pieces: list[str] = []
    last = 0
    for start, end, _ in cuts:
        pieces.append(text[last:start])
        last = end
    pieces.append(text[last:])
    # One %-format per template (its own % doubled), the values picked in
    # the order of their slots: one C call per update.
    return "%s".join(piece.replace("%", "%%") for piece in pieces), itemgetter(*(slot for _, _, slot in cuts))


def _duration_json(seconds: float) -> str:
    """A non-negative Duration of ``seconds`` (as :func:`_duration` makes
    it) in the proto3 JSON mapping: whole seconds, then 3, 6 or 9 digits
    of fraction as needed, then ``s``."""
    whole, nanos = _split(seconds)
    if nanos == 0:
        return f"{whole}s"
    if nanos % 1_000_000 == 0:
        return f"{whole}.{nanos // 1_000_000:03d}s"
    if nanos % 1000 == 0:
        return f"{whole}.{nanos // 1000:06d}s"
    return f"{whole}.{nanos:09d}s"


def _to_json_text(position: queue_pb.QueuePosition) -> str:
    message = queue_pb.GetQueuePositionResponse(position=position)
    document = json_format.MessageToDict(message, always_print_fields_with_no_presence=True)
    return json.dumps(document, separators=(",", ":"))


def shown_to(session: Session, position: queue_pb.QueuePosition) -> queue_pb.QueuePosition:
    """The position as the fan sees it: a browser (a cookie session) gets
    the access token only as an HttpOnly cookie, never in a body its scripts
    can read; an app gets it in the body."""
    if session.via != "cookie" or not position.access_token:
        return position
    shown = queue_pb.QueuePosition()
    shown.CopyFrom(position)
    shown.access_token = ""
    return shown
