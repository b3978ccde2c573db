"""Every error the queue raises, built here and nowhere else.

The stores report outcomes (a join script's status, a missing or duplicate
waiting room); this module decides what each means to a caller: the
``boxoffice.errors`` class (hence the gRPC code), the reason and the
metadata. Input validation errors come from ``boxoffice.validate``.

Reasons raised here: ``EVENT_NOT_FOUND``, ``EVENT_QUEUE_EXISTS``,
``QUEUE_NOT_OPEN``, ``RATE_LIMITED``, ``NOT_ADMITTED``, ``DRAINING``,
``LANE_NOT_FOUND``, ``ACCESS_CODE_REQUIRED``, ``ACCESS_CODE_INVALID``,
``ACCESS_CODE_USED``, ``STAFF_PASS_INVALID``, ``LANE_CHANGED``,
``FAN_DRAW_NOT_FOUND``, ``FAN_DRAW_EXISTS``, ``FAN_DRAW_CLOSED``, each a
value of the contract's ``boxoffice.queue.v1.ErrorReason``, which documents
its code and metadata.
"""

from __future__ import annotations

from datetime import UTC, datetime

from boxoffice.errors import (
    Aborted,
    AlreadyExists,
    BoxofficeError,
    FailedPrecondition,
    NotFound,
    PermissionDenied,
    ResourceExhausted,
    Unavailable,
)
from queue_svc.model import QueueState
from queue_svc.ports import JoinReply, JoinStatus


def _iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, tz=UTC).isoformat(timespec="seconds")


def unknown_event(event_id: int) -> NotFound:
    """The event has no waiting room (in Postgres, after a Redis miss)."""
    return NotFound(
        f"event {event_id} has no waiting room", reason="EVENT_NOT_FOUND", metadata={"event_id": str(event_id)}
    )


def waiting_room_exists(event_id: int) -> AlreadyExists:
    """A create for an event that has a waiting room already."""
    return AlreadyExists(
        f"event {event_id} already has a waiting room",
        reason="EVENT_QUEUE_EXISTS",
        metadata={"event_id": str(event_id)},
    )


class RoomRebuilding(Unavailable):
    """The room lost its data (Redis) and the admitter has not rebuilt it
    yet: a fan's place comes back with the rebuild, so the call waits for
    it; this is the answer when the call's time ran out first."""

    def __init__(self, event_id: int) -> None:
        super().__init__(
            f"the waiting room of event {event_id} is being rebuilt; ask again in a moment",
            reason="REDIS_UNAVAILABLE",
            metadata={"event_id": str(event_id)},
        )
        self.event_id = event_id


def join_refused(event_id: int, reply: JoinReply, *, window_seconds: float) -> BoxofficeError:
    """The error for a join the store refused (any status but WAITING and
    ADMITTED)."""
    status = reply.status
    if status is JoinStatus.UNKNOWN_EVENT:
        return unknown_event(event_id)
    if status is JoinStatus.REBUILDING:
        return RoomRebuilding(event_id)
    if status is JoinStatus.NOT_OPEN:
        return FailedPrecondition(
            f"the waiting room of event {event_id} is not open yet",
            reason="QUEUE_NOT_OPEN",
            metadata={"event_id": str(event_id), "opens_at": _iso(reply.opens_at_ms)},
        )
    if status in (JoinStatus.ACCOUNT_LIMITED, JoinStatus.CLIENT_LIMITED):
        limit = "account" if status is JoinStatus.ACCOUNT_LIMITED else "client"
        return ResourceExhausted(
            f"too many joins from this {limit}; retry later",
            reason="RATE_LIMITED",
            metadata={"limit": limit, "retry_after_seconds": f"{window_seconds:g}"},
        )
    raise ValueError(f"a join that ended {status.name} is not refused")


def not_admitted(event_id: int, state: QueueState) -> FailedPrecondition:
    """A session ended by a fan who is not admitted."""
    return FailedPrecondition(
        f"customer is not admitted to event {event_id}",
        reason="NOT_ADMITTED",
        metadata={"event_id": str(event_id), "state": state.name},
    )


def draining() -> Unavailable:
    """A stream ended (or refused) because the process is shutting down."""
    return Unavailable("the server is shutting down; watch again", reason="DRAINING")


def lane_not_found(event_id: int, lane: str) -> NotFound:
    """A lane the event's waiting room does not have (or not of the kind
    asked for)."""
    return NotFound(
        f"event {event_id}'s waiting room has no such lane",
        reason="LANE_NOT_FOUND",
        metadata={"event_id": str(event_id), "lane": lane[:64]},
    )


def access_code_required(event_id: int, lane: str) -> PermissionDenied:
    return PermissionDenied(
        "this lane is entered with an access code",
        reason="ACCESS_CODE_REQUIRED",
        metadata={"event_id": str(event_id), "lane": lane},
    )


def access_code_invalid(event_id: int, lane: str) -> PermissionDenied:
    return PermissionDenied(
        "this access code does not open this lane now",
        reason="ACCESS_CODE_INVALID",
        metadata={"event_id": str(event_id), "lane": lane},
    )


def access_code_used(event_id: int, lane: str, max_uses: int) -> PermissionDenied:
    return PermissionDenied(
        "this access code is already used by other accounts",
        reason="ACCESS_CODE_USED",
        metadata={"event_id": str(event_id), "lane": lane, "max_uses": str(max_uses)},
    )


def staff_pass_invalid(event_id: int, check: str) -> PermissionDenied:
    return PermissionDenied(
        "the staff pass does not verify",
        reason="STAFF_PASS_INVALID",
        metadata={"event_id": str(event_id), "check": check},
    )


def lane_changed(event_id: int) -> Aborted:
    """A fan's call that followed their lane too many times (joins into
    different lanes racing)."""
    return Aborted(
        "the customer's lane changed while the call followed it; call again",
        reason="LANE_CHANGED",
        metadata={"event_id": str(event_id)},
    )


def fan_draw_not_found(event_id: int) -> NotFound:
    return NotFound(
        f"event {event_id} has no verified-fan draw", reason="FAN_DRAW_NOT_FOUND", metadata={"event_id": str(event_id)}
    )


def fan_draw_exists(event_id: int) -> AlreadyExists:
    return AlreadyExists(
        f"event {event_id} already has a verified-fan draw",
        reason="FAN_DRAW_EXISTS",
        metadata={"event_id": str(event_id)},
    )


def fan_draw_closed(event_id: int, closed_at_ms: int) -> FailedPrecondition:
    return FailedPrecondition(
        f"the verified-fan draw of event {event_id} is closed",
        reason="FAN_DRAW_CLOSED",
        metadata={"event_id": str(event_id), "closed_at": _iso(closed_at_ms)},
    )
