"""Wire <-> model for QueueService: request fields validated and parsed into
the model's values, and the model's values built into response messages.
Bad input raises ``boxoffice.validate``'s INVALID_ARGUMENT errors."""

from __future__ import annotations

import base64
import binascii
import dataclasses
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from google.protobuf import duration_pb2, timestamp_pb2

from boxoffice import draw, validate
from gen.boxoffice.queue.v1 import queue_admin_service_pb2 as apb
from gen.boxoffice.queue.v1 import queue_service_pb2 as pb
from queue_svc import model, passes
from queue_svc.model import (
    LANE_NAME_MAX,
    Lane,
    LaneEntry,
    Position,
    PreQueueProof,
    Progress,
    ProofCursor,
    WaitingRoomConfig,
    lane_problems,
)

MAX_RATE_PER_SECOND = 100_000

MAX_CUSTOMER_ID_LENGTH = 128
MAX_CLIENT_ID_LENGTH = 128

_SECOND_MS = 1000
_MINUTE_MS = 60 * _SECOND_MS
_HOUR_MS = 60 * _MINUTE_MS
_DAY_MS = 24 * _HOUR_MS
# 0001-01-01 .. 9999-12-31, the range of google.protobuf.Timestamp.
_TIMESTAMP_MIN_SECONDS = -62135596800
_TIMESTAMP_MAX_SECONDS = 253402300799

_END_REASONS = {
    pb.SESSION_END_REASON_COMPLETED: "completed",
    pb.SESSION_END_REASON_ABANDONED: "abandoned",
}


def parse_event_id(value: int, field: str = "event_id") -> int:
    return validate.positive_id(field, value)


def parse_customer_id(value: str) -> str:
    return validate.text("customer_id", value, max_length=MAX_CUSTOMER_ID_LENGTH)


def parse_client_id(value: str) -> str:
    """The client id a join is limited by ('' when the caller gives none)."""
    return validate.text("client_id", value, max_length=MAX_CLIENT_ID_LENGTH, min_length=0)


MAX_PRESENCE_IDS = 1000


def parse_presence_ids(values: Sequence[str]) -> list[str]:
    """The customer ids of a RecordPresence call: at most 1,000, each like
    a customer id."""
    if len(values) > MAX_PRESENCE_IDS:
        raise validate.invalid("customer_ids", f"must name at most {MAX_PRESENCE_IDS} customers")
    return [validate.text("customer_ids", value, max_length=MAX_CUSTOMER_ID_LENGTH) for value in values]


def parse_end_reason(value: pb.SessionEndReason.ValueType) -> str:
    """Why a fan ends their session, as the metric label."""
    if value == pb.SESSION_END_REASON_UNSPECIFIED:
        raise validate.required("reason")
    reason = _END_REASONS.get(value)
    if reason is None:
        raise validate.invalid("reason", f"unknown reason {value}")
    return reason


def position_pb(position: Position) -> pb.QueuePosition:
    message = pb.QueuePosition(
        event_id=position.event_id,
        customer_id=position.customer_id,
        state=pb.QueueState.ValueType(position.state.value),
        ahead=position.ahead,
        score=position.score,
        admission_state=pb.AdmissionState.ValueType(position.admission_state.value),
        lane=position.lane,
    )
    if position.eta_seconds is not None:
        message.eta.seconds = round(position.eta_seconds)
    if position.poll_after_seconds is not None:
        message.poll_after.seconds = round(position.poll_after_seconds)
    if position.access_token:
        message.access_token = position.access_token
        message.access_token_expires_at.seconds = position.access_token_expires_at
    return message


def progress_pb(progress: Progress) -> pb.AdmissionProgress:
    observed = timestamp_pb2.Timestamp()
    observed.FromMilliseconds(progress.observed_at_ms)
    return pb.AdmissionProgress(
        event_id=progress.event_id,
        admitted_through_score=progress.admitted_through_score,
        queue_length=progress.queue_length,
        active_shoppers=progress.active_shoppers,
        admitted_total=progress.admitted_total,
        admission_rate_per_second=round(progress.rate_per_second, 3),
        admission_state=pb.AdmissionState.ValueType(progress.admission_state.value),
        observed_at=observed,
        pre_queue_joined=progress.pre_queue_joined,
        target_admission_rate_per_second=round(progress.target_rate_per_second, 3),
        admission_rate_reason=pb.AdmissionRateReason.ValueType(progress.rate_reason.value),
        lane=progress.lane,
        generation=progress.generation,
    )


def _ms_duration(ms: int) -> duration_pb2.Duration:
    return duration_pb2.Duration(seconds=ms // 1000, nanos=(ms % 1000) * 1_000_000)


def config_pb(config: WaitingRoomConfig) -> pb.EventQueueConfig:
    opens_at = timestamp_pb2.Timestamp()
    opens_at.FromMilliseconds(config.opens_at_ms)
    return pb.EventQueueConfig(
        event_id=config.event_id,
        opens_at=opens_at,
        pre_queue_window=_ms_duration(config.pre_queue_window_ms),
        admission_rate_per_second=config.admission_rate_per_second,
        max_active_shoppers=config.max_active_shoppers,
        session_length=_ms_duration(config.session_length_ms),
        token_ttl=_ms_duration(config.token_ttl_ms),
        claim_grace=_ms_duration(config.claim_grace_ms),
        paused=config.paused,
    )


# Each duration of a configuration: (default when unset, least, most), in ms.
_DURATIONS_MS = {
    "pre_queue_window": (model.DEFAULT_PRE_QUEUE_WINDOW_MS, 0, 7 * _DAY_MS),
    "session_length": (model.DEFAULT_SESSION_LENGTH_MS, 10 * _SECOND_MS, _DAY_MS),
    "token_ttl": (model.DEFAULT_TOKEN_TTL_MS, 10 * _SECOND_MS, _DAY_MS),
    "claim_grace": (model.DEFAULT_CLAIM_GRACE_MS, 5 * _SECOND_MS, _HOUR_MS),
    "presence_grace": (model.DEFAULT_PRESENCE_GRACE_MS, _MINUTE_MS, _DAY_MS),
}


class _HasDurations(Protocol):
    def HasField(self, field_name: Any) -> bool: ...


def _duration_ms(message: _HasDurations, name: str) -> int:
    default_ms, minimum_ms, maximum_ms = _DURATIONS_MS[name]
    path = f"config.{name}"
    if not message.HasField(name):
        return default_ms
    value: duration_pb2.Duration = getattr(message, name)
    if not -999_999_999 <= value.nanos <= 999_999_999 or (value.seconds * value.nanos < 0):
        raise validate.invalid(path, "is not a valid duration")
    if value.nanos % 1_000_000:
        raise validate.invalid(path, "must be a whole number of milliseconds")
    ms = value.seconds * 1000 + value.nanos // 1_000_000
    if ms < minimum_ms or ms > maximum_ms:
        raise validate.invalid(path, f"must be between {minimum_ms / 1000:g} s and {maximum_ms / 1000:g} s")
    return ms


def _count(field: str, value: int, *, default: int, maximum: int) -> int:
    if value == 0:
        return default
    return validate.int_range(f"config.{field}", value, minimum=1, maximum=maximum)


def parse_config(message: pb.EventQueueConfig, *, present: bool) -> WaitingRoomConfig:
    """A validated configuration; unset fields take their defaults."""
    if not present:
        raise validate.required("config")
    event_id = parse_event_id(message.event_id, "config.event_id")
    if not message.HasField("opens_at"):
        raise validate.required("config.opens_at")
    opens = message.opens_at
    if not (_TIMESTAMP_MIN_SECONDS <= opens.seconds <= _TIMESTAMP_MAX_SECONDS) or not 0 <= opens.nanos < 10**9:
        raise validate.invalid("config.opens_at", "is not a valid timestamp")
    if opens.seconds < 0:
        raise validate.invalid("config.opens_at", "must be after 1970-01-01")
    return WaitingRoomConfig(
        event_id=event_id,
        opens_at_ms=opens.seconds * 1000 + opens.nanos // 1_000_000,
        pre_queue_window_ms=_duration_ms(message, "pre_queue_window"),
        admission_rate_per_second=_count(
            "admission_rate_per_second",
            message.admission_rate_per_second,
            default=model.DEFAULT_ADMISSION_RATE_PER_SECOND,
            maximum=MAX_RATE_PER_SECOND,
        ),
        max_active_shoppers=_count(
            "max_active_shoppers",
            message.max_active_shoppers,
            default=model.DEFAULT_MAX_ACTIVE_SHOPPERS,
            maximum=10_000_000,
        ),
        session_length_ms=_duration_ms(message, "session_length"),
        token_ttl_ms=_duration_ms(message, "token_ttl"),
        claim_grace_ms=_duration_ms(message, "claim_grace"),
        paused=message.paused,
    )


@dataclass(frozen=True, slots=True)
class RoomSettings:
    """The settings only the admin contract's WaitingRoom carries (fields
    10 on), parsed."""

    presence_grace_ms: int
    safety_net: bool
    admission_rate_min_per_second: int
    admission_rate_max_per_second: int
    lanes: tuple[Lane, ...] = ()

    @classmethod
    def of(cls, config: WaitingRoomConfig) -> RoomSettings:
        return cls(
            presence_grace_ms=config.presence_grace_ms,
            safety_net=config.safety_net,
            admission_rate_min_per_second=config.admission_rate_min_per_second,
            admission_rate_max_per_second=config.admission_rate_max_per_second,
            lanes=config.lanes,
        )

    def applied(self, config: WaitingRoomConfig) -> WaitingRoomConfig:
        """``config`` with these settings; the bounds must hold the base rate."""
        base = config.admission_rate_per_second
        if self.admission_rate_min_per_second > base:
            raise validate.invalid(
                "config.admission_rate_min_per_second", "must not be above admission_rate_per_second"
            )
        if self.admission_rate_max_per_second and self.admission_rate_max_per_second < base:
            raise validate.invalid(
                "config.admission_rate_max_per_second", "must not be below admission_rate_per_second"
            )
        applied = dataclasses.replace(
            config,
            presence_grace_ms=self.presence_grace_ms,
            safety_net=self.safety_net,
            admission_rate_min_per_second=self.admission_rate_min_per_second,
            admission_rate_max_per_second=self.admission_rate_max_per_second,
            lanes=self.lanes,
        )
        problems = lane_problems(applied)
        if problems:
            raise validate.invalid("config.lanes", "; ".join(problems))
        return applied


def parse_room_settings(message: apb.WaitingRoom) -> RoomSettings:
    """The admin-only settings of a WaitingRoom; unset ones take their defaults."""
    low = message.admission_rate_min_per_second
    high = message.admission_rate_max_per_second
    if low:
        validate.int_range("config.admission_rate_min_per_second", low, minimum=1, maximum=MAX_RATE_PER_SECOND)
    if high:
        validate.int_range("config.admission_rate_max_per_second", high, minimum=1, maximum=MAX_RATE_PER_SECOND)
    return RoomSettings(
        presence_grace_ms=_duration_ms(message, "presence_grace"),
        safety_net=message.safety_net,
        admission_rate_min_per_second=low,
        admission_rate_max_per_second=high,
        lanes=tuple(_parse_lane(i, lane) for i, lane in enumerate(message.lanes)),
    )


_LANE_ENTRIES = {
    apb.WAITING_ROOM_LANE_ENTRY_OPEN: LaneEntry.OPEN,
    apb.WAITING_ROOM_LANE_ENTRY_CODE: LaneEntry.CODE,
    apb.WAITING_ROOM_LANE_ENTRY_STAFF: LaneEntry.STAFF,
}


def _parse_lane(index: int, message: apb.WaitingRoomLane) -> Lane:
    field = f"config.lanes[{index}]"
    entry = _LANE_ENTRIES.get(message.entry)
    if entry is None:
        raise validate.invalid(f"{field}.entry", "must be OPEN, CODE or STAFF")
    window = 0
    if message.HasField("pre_queue_window"):
        window = message.pre_queue_window.ToMilliseconds()
        if not 0 < window <= 7 * 24 * 3600 * 1000:
            raise validate.invalid(f"{field}.pre_queue_window", "must be more than 0 and at most 7 days")
    opens = message.opens_at.ToMilliseconds() if message.HasField("opens_at") else 0
    if message.HasField("opens_at") and opens <= 0:
        raise validate.invalid(f"{field}.opens_at", "must be after 1970")
    return Lane(
        name=message.name,
        entry=entry,
        share_percent=message.share_percent,
        opens_at_ms=opens,
        pre_queue_window_ms=window,
    )


def lane_pb(lane: Lane) -> apb.WaitingRoomLane:
    entry = {v: k for k, v in _LANE_ENTRIES.items()}[lane.entry]
    message = apb.WaitingRoomLane(name=lane.name, entry=entry, share_percent=lane.share_percent)
    if lane.opens_at_ms:
        message.opens_at.FromMilliseconds(lane.opens_at_ms)
    if lane.pre_queue_window_ms:
        message.pre_queue_window.FromMilliseconds(lane.pre_queue_window_ms)
    return message


def parse_lane_name(value: str, field: str = "lane") -> str:
    """A lane named in a request: "" (or "general") for the general lane."""
    if value in ("", "general"):
        return ""
    if len(value) > LANE_NAME_MAX or not value.isascii():
        raise validate.invalid(field, f"must be a lane name of at most {LANE_NAME_MAX} characters")
    return value


# GetPreQueueProof's pages: participants per page by default and at most.
PROOF_PAGE_SIZE = 1000
MAX_PROOF_PAGE_SIZE = 10_000
_MAX_PAGE_TOKEN_LENGTH = 512


def parse_proof_page_size(value: int) -> int:
    if value == 0:
        return PROOF_PAGE_SIZE
    return validate.int_range("page_size", value, minimum=1, maximum=MAX_PROOF_PAGE_SIZE)


def proof_page_token(event_id: int, cursor: ProofCursor) -> str:
    """An opaque token for the page after ``cursor`` of the event's proof."""
    body = {"e": event_id, "r": cursor.rank, "s": cursor.score, "p": cursor.pseudonym}
    return base64.urlsafe_b64encode(json.dumps(body, separators=(",", ":")).encode()).decode().rstrip("=")


def parse_proof_page_token(event_id: int, token: str) -> ProofCursor | None:
    """The cursor of a token from :func:`proof_page_token` for this event
    (None for the first page); INVALID_FIELD for anything else."""
    if not token:
        return None
    bad = validate.invalid("page_token", "is not a token from this event's listing")
    if len(token) > _MAX_PAGE_TOKEN_LENGTH:
        raise bad
    try:
        body = json.loads(base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)))
        cursor = ProofCursor(rank=body["r"], score=body["s"], pseudonym=body["p"])
        same = body["e"] == event_id
    except (ValueError, KeyError, TypeError, binascii.Error):
        raise bad from None
    well_formed = (
        type(cursor.rank) is int
        and type(cursor.score) is int
        and isinstance(cursor.pseudonym, str)
        and 1 <= cursor.rank < 2**62
        and 0 <= cursor.score < draw.SCORE_LIMIT
        and draw.is_pseudonym(cursor.pseudonym)
    )
    if not same or not well_formed:
        raise bad
    return cursor


def proof_pb(proof: PreQueueProof) -> pb.GetPreQueueProofResponse:
    message = pb.GetPreQueueProofResponse(
        event_id=proof.event_id,
        algorithm=proof.algorithm,
        commitment=proof.commitment,
        revealed=proof.seed is not None,
    )
    message.committed_at.FromMilliseconds(proof.committed_at_ms)
    message.opens_at.FromMilliseconds(proof.opens_at_ms)
    if proof.seed is not None:
        message.seed = proof.seed.hex()
        message.revealed_at.FromMilliseconds(proof.revealed_at_ms)
        message.participant_count = proof.participant_count
        message.participants.extend(
            pb.PreQueueParticipant(rank=p.rank, pseudonym=p.pseudonym, score=p.score) for p in proof.participants
        )
        if proof.next_page is not None:
            message.next_page_token = proof_page_token(proof.event_id, proof.next_page)
    return message


# A staff pass is a signed value of a few hundred characters.
MAX_STAFF_PASS_LENGTH = 1024


def parse_access_code(value: str) -> str:
    if len(value) > passes.CODE_MAX_TYPED:
        raise validate.invalid("access_code", f"must be at most {passes.CODE_MAX_TYPED} characters")
    return value


def parse_staff_pass(value: str) -> str:
    if len(value) > MAX_STAFF_PASS_LENGTH:
        raise validate.invalid("staff_pass", f"must be at most {MAX_STAFF_PASS_LENGTH} characters")
    return value
