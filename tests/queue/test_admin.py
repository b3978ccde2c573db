"""QueueAdminService over gRPC on loopback, with Postgres and Redis: the
waiting rooms' administration, a customer revoked, and the audit row of
every change (the deprecated QueueService admin RPCs included)."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

import grpc
import pytest

from boxoffice import access, audit
from gen.boxoffice.queue.v1 import queue_admin_service_pb2 as apb
from gen.boxoffice.queue.v1 import queue_admin_service_pb2_grpc as apb_grpc
from gen.boxoffice.queue.v1 import queue_service_pb2 as pb
from tests.queue.harness import QueueUnderTest, new_event_id, queue_service, rpc_error
from tests.support import NAMESPACE, TRUST_DOMAIN, ManualClock, Stores, mesh_client

ADMIN = "boxoffice.queue.v1.QueueAdminService"


def _ms(clock: ManualClock) -> int:
    return int(clock.now() * 1000)


@contextlib.asynccontextmanager
async def admin_client(stores: Stores, q: QueueUnderTest) -> AsyncIterator[Any]:
    """QueueAdminService of the server under test, called as an operator."""
    async with mesh_client(stores, q.address) as client:
        yield client.stub(apb_grpc.QueueAdminServiceStub, role=access.OPERATOR)


def _room(event_id: int, opens_at_ms: int, **fields: Any) -> apb.WaitingRoom:
    room = apb.WaitingRoom(event_id=event_id, **fields)
    room.opens_at.FromMilliseconds(opens_at_ms)
    return room


async def _audit_of(q: QueueUnderTest, event_id: int) -> list[audit.AuditEntry]:
    """The event's audit rows, oldest first."""
    rows = await audit.entries(q.rt.pool(), limit=1000)
    return [r for r in reversed(rows) if r.request.get("event_id") == str(event_id) or _config_event(r) == event_id]


def _config_event(entry: audit.AuditEntry) -> int | None:
    config = entry.request.get("config")
    return int(config["event_id"]) if isinstance(config, dict) and "event_id" in config else None


async def test_an_operator_creates_changes_pauses_resumes_and_opens_a_waiting_room_each_change_audited(
    stores: Stores,
) -> None:
    clock = ManualClock()
    event_id = new_event_id()
    later = _ms(clock) + 3_600_000
    async with queue_service(stores, clock=clock) as q, admin_client(stores, q) as admin:
        created = await admin.CreateWaitingRoom(
            apb.CreateWaitingRoomRequest(config=_room(event_id, later, admission_rate_per_second=5))
        )
        assert created.config.admission_rate_per_second == 5 and created.config.max_active_shoppers == 1000
        got = await admin.GetWaitingRoom(apb.GetWaitingRoomRequest(event_id=event_id))
        assert got.config == created.config

        changed = _room(event_id, later, admission_rate_per_second=7, max_active_shoppers=50)
        updated = await admin.UpdateWaitingRoom(apb.UpdateWaitingRoomRequest(config=changed))
        assert updated.config.admission_rate_per_second == 7 and updated.config.max_active_shoppers == 50
        paused = await admin.PauseWaitingRoom(apb.PauseWaitingRoomRequest(event_id=event_id))
        assert paused.config.paused
        resumed = await admin.ResumeWaitingRoom(apb.ResumeWaitingRoomRequest(event_id=event_id))
        assert not resumed.config.paused
        await admin.PauseWaitingRoom(apb.PauseWaitingRoomRequest(event_id=event_id))
        opened = await admin.OpenWaitingRoom(apb.OpenWaitingRoomRequest(event_id=event_id))
        assert not opened.config.paused and opened.config.opens_at.ToMilliseconds() == _ms(clock)
        again = await admin.OpenWaitingRoom(apb.OpenWaitingRoomRequest(event_id=event_id))
        assert again.config == opened.config

        # Fans may join now, and the operator's figures say so.
        await q.stub.JoinQueue(pb.JoinQueueRequest(event_id=event_id, customer_id="fan-1"))
        stats = await admin.GetWaitingRoomStats(apb.GetWaitingRoomStatsRequest(event_id=event_id))
        assert stats.stats.queue_length == 1 and stats.stats.joined_total == 1
        assert stats.stats.admission == apb.WAITING_ROOM_ADMISSION_OPEN
        assert stats.config == opened.config

        rows = await _audit_of(q, event_id)
        assert [r.method for r in rows] == [
            "CreateWaitingRoom",
            "UpdateWaitingRoom",
            "PauseWaitingRoom",
            "ResumeWaitingRoom",
            "PauseWaitingRoom",
            "OpenWaitingRoom",
            "OpenWaitingRoom",
        ]
        assert {r.service for r in rows} == {ADMIN}
        assert all(r.outcome == audit.OK and r.reason is None for r in rows)
        create, update, pause = rows[0], rows[1], rows[2]
        assert create.before is None and create.after is not None
        assert create.after["admission_rate_per_second"] == 5
        assert create.request["config"]["admission_rate_per_second"] == 5
        assert update.before == create.after
        assert update.after is not None and update.after["max_active_shoppers"] == 50
        assert pause.before == update.after
        assert pause.after is not None and pause.after["paused"] is True
        assert rows[5].after is not None and "paused" not in rows[5].after  # false is the default, left out
        # Who: the operator's certificate.
        assert {(r.caller_identity, r.caller_role) for r in rows} == {
            (access.spiffe_id(TRUST_DOMAIN, NAMESPACE, access.OPERATOR), access.OPERATOR)
        }


async def test_a_refused_change_is_audited_with_its_code_and_changes_nothing(stores: Stores) -> None:
    clock = ManualClock()
    event_id = new_event_id()
    async with queue_service(stores, clock=clock) as q, admin_client(stores, q) as admin:
        first = await admin.CreateWaitingRoom(
            apb.CreateWaitingRoomRequest(config=_room(event_id, _ms(clock), admission_rate_per_second=3))
        )
        dup = await rpc_error(
            admin.CreateWaitingRoom(
                apb.CreateWaitingRoomRequest(config=_room(event_id, _ms(clock), admission_rate_per_second=99))
            )
        )
        assert (dup.code, dup.reason) == (grpc.StatusCode.ALREADY_EXISTS, "EVENT_QUEUE_EXISTS")
        unchanged = await admin.GetWaitingRoom(apb.GetWaitingRoomRequest(event_id=event_id))
        assert unchanged.config == first.config

        missing = new_event_id()
        gone = await rpc_error(admin.PauseWaitingRoom(apb.PauseWaitingRoomRequest(event_id=missing)))
        assert gone.code == grpc.StatusCode.NOT_FOUND

        rows = await _audit_of(q, event_id)
        assert [(r.method, r.outcome, r.reason) for r in rows] == [
            ("CreateWaitingRoom", "OK", None),
            ("CreateWaitingRoom", "ALREADY_EXISTS", "EVENT_QUEUE_EXISTS"),
        ]
        assert rows[1].before == rows[1].after == rows[0].after
        assert rows[1].message and str(event_id) in rows[1].message
        pause = await _audit_of(q, missing)
        assert [(r.method, r.outcome, r.reason, r.before, r.after) for r in pause] == [
            ("PauseWaitingRoom", "NOT_FOUND", "EVENT_NOT_FOUND", None, None)
        ]


@pytest.mark.parametrize(
    ("call", "request_", "field"),
    [
        ("CreateWaitingRoom", apb.CreateWaitingRoomRequest(), "config"),
        ("UpdateWaitingRoom", apb.UpdateWaitingRoomRequest(config=apb.WaitingRoom(event_id=5)), "config.opens_at"),
        ("PauseWaitingRoom", apb.PauseWaitingRoomRequest(event_id=0), "event_id"),
        ("OpenWaitingRoom", apb.OpenWaitingRoomRequest(event_id=-3), "event_id"),
        ("GetWaitingRoomStats", apb.GetWaitingRoomStatsRequest(), "event_id"),
        ("RevokeCustomer", apb.RevokeCustomerRequest(event_id=5, customer_id=""), "customer_id"),
        ("RevokeCustomer", apb.RevokeCustomerRequest(event_id=5, customer_id="x" * 129), "customer_id"),
    ],
)
async def test_bad_input_is_invalid_argument_naming_the_field_and_records_nothing(
    stores: Stores, call: str, request_: Any, field: str
) -> None:
    async with queue_service(stores) as q, admin_client(stores, q) as admin:
        before = await audit.entries(q.rt.pool(), limit=1)
        err = await rpc_error(getattr(admin, call)(request_))
        assert err.code == grpc.StatusCode.INVALID_ARGUMENT
        assert err.metadata.get("field", "").startswith(field), err
        assert await audit.entries(q.rt.pool(), limit=1) == before


async def test_revoking_a_waiting_fan_and_an_admitted_fan_makes_them_join_again_at_the_back(stores: Stores) -> None:
    clock = ManualClock()
    event_id = new_event_id()
    async with queue_service(stores, clock=clock) as q, admin_client(stores, q) as admin:
        await admin.CreateWaitingRoom(
            apb.CreateWaitingRoomRequest(config=_room(event_id, _ms(clock) - 1000, admission_rate_per_second=1))
        )
        for fan in ("fan-a", "fan-b", "fan-c"):
            await q.stub.JoinQueue(pb.JoinQueueRequest(event_id=event_id, customer_id=fan))
        await q.app.admitter.tick_event(event_id, 1)
        clock.advance(1.0)
        await q.app.admitter.tick_event(event_id, 1)  # fan-a admitted (one a second)
        claimed = await q.stub.GetQueuePosition(pb.GetQueuePositionRequest(event_id=event_id, customer_id="fan-a"))
        assert claimed.position.state == pb.QUEUE_STATE_ADMITTED

        admitted = await admin.RevokeCustomer(apb.RevokeCustomerRequest(event_id=event_id, customer_id="fan-a"))
        assert (admitted.previous_state, admitted.state, admitted.revoked) == (
            apb.CUSTOMER_STATE_ADMITTED,
            apb.CUSTOMER_STATE_COMPLETED,
            True,
        )
        waiting = await admin.RevokeCustomer(apb.RevokeCustomerRequest(event_id=event_id, customer_id="fan-b"))
        assert (waiting.previous_state, waiting.state, waiting.revoked) == (
            apb.CUSTOMER_STATE_WAITING,
            apb.CUSTOMER_STATE_LEFT,
            True,
        )
        stranger = await admin.RevokeCustomer(apb.RevokeCustomerRequest(event_id=event_id, customer_id="nobody"))
        assert stranger.state == apb.CUSTOMER_STATE_NOT_IN_QUEUE and not stranger.revoked

        # The admitted fan's slot is free; both must join again, behind fan-c.
        stats = await admin.GetWaitingRoomStats(apb.GetWaitingRoomStatsRequest(event_id=event_id))
        assert stats.stats.active_shoppers == 0 and stats.stats.queue_length == 1
        rejoined = await q.stub.JoinQueue(pb.JoinQueueRequest(event_id=event_id, customer_id="fan-b"))
        assert rejoined.newly_joined and rejoined.position.ahead == 1

        rows = [r for r in await _audit_of(q, event_id) if r.method == "RevokeCustomer"]
        assert [(r.request["customer_id"], r.before, r.after) for r in rows] == [
            (
                "fan-a",
                {"event_id": str(event_id), "customer_id": "fan-a", "state": "ADMITTED"},
                {"event_id": str(event_id), "customer_id": "fan-a", "state": "COMPLETED"},
            ),
            (
                "fan-b",
                {"event_id": str(event_id), "customer_id": "fan-b", "state": "WAITING"},
                {"event_id": str(event_id), "customer_id": "fan-b", "state": "LEFT"},
            ),
            (
                "nobody",
                {"event_id": str(event_id), "customer_id": "nobody", "state": "NOT_IN_QUEUE"},
                {"event_id": str(event_id), "customer_id": "nobody", "state": "NOT_IN_QUEUE"},
            ),
        ]


async def test_revoking_in_an_event_without_a_waiting_room_is_not_found(stores: Stores) -> None:
    async with queue_service(stores) as q, admin_client(stores, q) as admin:
        err = await rpc_error(
            admin.RevokeCustomer(apb.RevokeCustomerRequest(event_id=new_event_id(), customer_id="fan"))
        )
        assert (err.code, err.reason) == (grpc.StatusCode.NOT_FOUND, "EVENT_NOT_FOUND")


async def test_the_deprecated_admin_rpcs_still_work_and_are_audited_as_queue_service(stores: Stores) -> None:
    clock = ManualClock()
    event_id = new_event_id()
    async with queue_service(stores, clock=clock) as q:
        await q.create_event(event_id, opens_at_ms=_ms(clock), admission_rate_per_second=4)
        paused = await q.stub.PauseAdmission(pb.PauseAdmissionRequest(event_id=event_id))
        assert paused.config.paused
        resumed = await q.stub.ResumeAdmission(pb.ResumeAdmissionRequest(event_id=event_id))
        assert not resumed.config.paused
        config = pb.EventQueueConfig(event_id=event_id, admission_rate_per_second=9)
        config.opens_at.FromMilliseconds(_ms(clock))
        updated = await q.stub.UpdateEventQueue(pb.UpdateEventQueueRequest(config=config))
        assert updated.config.admission_rate_per_second == 9
        rows = await _audit_of(q, event_id)
        assert [(r.service, r.method, r.outcome) for r in rows] == [
            ("boxoffice.queue.v1.QueueService", "CreateEventQueue", "OK"),
            ("boxoffice.queue.v1.QueueService", "PauseAdmission", "OK"),
            ("boxoffice.queue.v1.QueueService", "ResumeAdmission", "OK"),
            ("boxoffice.queue.v1.QueueService", "UpdateEventQueue", "OK"),
        ]
        assert rows[3].before is not None and rows[3].before["admission_rate_per_second"] == 4


def test_the_admin_waiting_room_mirrors_event_queue_config_field_for_field() -> None:
    """Fields 1 to 9 are shared; WaitingRoom's own settings come after."""
    ours = apb.WaitingRoom.DESCRIPTOR.fields_by_number
    theirs = pb.EventQueueConfig.DESCRIPTOR.fields_by_number
    shared = {n: (f.name, f.type) for n, f in ours.items() if n in theirs}
    assert shared == {n: (f.name, f.type) for n, f in theirs.items()}
    assert min(set(ours) - set(theirs)) > max(theirs)
    assert {
        v.number: v.name.removeprefix("WAITING_ROOM_RATE_REASON_") for v in apb.WaitingRoomRateReason.DESCRIPTOR.values
    } == {v.number: v.name.removeprefix("ADMISSION_RATE_REASON_") for v in pb.AdmissionRateReason.DESCRIPTOR.values}
    assert {v.number: v.name.removeprefix("CUSTOMER_STATE_") for v in apb.CustomerState.DESCRIPTOR.values} == {
        v.number: v.name.removeprefix("QUEUE_STATE_") for v in pb.QueueState.DESCRIPTOR.values
    }
