"""The queue's one mapping from a refused join to a domain error: the code
(by class), the reason and the metadata each refusal carries on the wire."""

from __future__ import annotations

import grpc
import pytest

from queue_svc import errors
from queue_svc.model import QueueState
from queue_svc.ports import JoinReply, JoinStatus

OPENS_AT_MS = 1_900_000_000_000  # 2030-03-17T17:46:40Z


@pytest.mark.parametrize(
    ("status", "code", "reason", "metadata"),
    [
        (JoinStatus.UNKNOWN_EVENT, grpc.StatusCode.NOT_FOUND, "EVENT_NOT_FOUND", {"event_id": "7"}),
        (
            JoinStatus.NOT_OPEN,
            grpc.StatusCode.FAILED_PRECONDITION,
            "QUEUE_NOT_OPEN",
            {"event_id": "7", "opens_at": "2030-03-17T17:46:40+00:00"},
        ),
        (
            JoinStatus.ACCOUNT_LIMITED,
            grpc.StatusCode.RESOURCE_EXHAUSTED,
            "RATE_LIMITED",
            {"limit": "account", "retry_after_seconds": "10"},
        ),
        (
            JoinStatus.CLIENT_LIMITED,
            grpc.StatusCode.RESOURCE_EXHAUSTED,
            "RATE_LIMITED",
            {"limit": "client", "retry_after_seconds": "10"},
        ),
    ],
)
def test_each_refused_join_is_one_domain_error(
    status: JoinStatus, code: grpc.StatusCode, reason: str, metadata: dict[str, str]
) -> None:
    err = errors.join_refused(7, JoinReply(status, opens_at_ms=OPENS_AT_MS), window_seconds=10.0)
    assert (err.code, err.reason, err.metadata) == (code, reason, metadata)


@pytest.mark.parametrize("status", [JoinStatus.WAITING, JoinStatus.ADMITTED])
def test_a_join_that_queued_the_fan_is_no_error(status: JoinStatus) -> None:
    with pytest.raises(ValueError, match=status.name):
        errors.join_refused(7, JoinReply(status), window_seconds=10.0)


def test_the_other_errors_carry_their_reason_and_what_they_are_about() -> None:
    exists = errors.waiting_room_exists(7)
    assert (exists.code, exists.reason, exists.metadata) == (
        grpc.StatusCode.ALREADY_EXISTS,
        "EVENT_QUEUE_EXISTS",
        {"event_id": "7"},
    )
    not_admitted = errors.not_admitted(7, QueueState.WAITING)
    assert (not_admitted.code, not_admitted.reason, not_admitted.metadata) == (
        grpc.StatusCode.FAILED_PRECONDITION,
        "NOT_ADMITTED",
        {"event_id": "7", "state": "WAITING"},
    )
    draining = errors.draining()
    assert (draining.code, draining.reason) == (grpc.StatusCode.UNAVAILABLE, "DRAINING")
