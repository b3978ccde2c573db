"""The waiting room's own settings (presence grace, safety net, the
adaptive rate's bounds) through QueueAdminService: defaults, validation,
stored in Postgres, mirrored to Redis, audited, and kept by the deprecated
UpdateEventQueue whose message lacks them."""

from __future__ import annotations

import grpc
from google.protobuf import duration_pb2

from gen.boxoffice.queue.v1 import queue_admin_service_pb2 as apb
from gen.boxoffice.queue.v1 import queue_service_pb2 as pb
from tests.queue.harness import keys_of, new_event_id, queue_service, rpc_error
from tests.queue.test_admin import _audit_of, _ms, _room, admin_client
from tests.support import ManualClock, Stores


async def test_defaults_changes_validation_mirror_and_the_deprecated_update(stores: Stores) -> None:
    clock = ManualClock()
    event_id = new_event_id()
    later = _ms(clock) + 3_600_000
    async with queue_service(stores, clock=clock) as q, admin_client(stores, q) as admin:
        created = await admin.CreateWaitingRoom(
            apb.CreateWaitingRoomRequest(config=_room(event_id, later, admission_rate_per_second=50))
        )
        room = created.config
        assert room.presence_grace.ToSeconds() == 300 and not room.safety_net
        assert (room.admission_rate_min_per_second, room.admission_rate_max_per_second) == (0, 0)

        changed = _room(
            event_id,
            later,
            admission_rate_per_second=50,
            presence_grace=duration_pb2.Duration(seconds=90),
            safety_net=True,
            admission_rate_min_per_second=10,
            admission_rate_max_per_second=120,
        )
        updated = (await admin.UpdateWaitingRoom(apb.UpdateWaitingRoomRequest(config=changed))).config
        assert updated.presence_grace.ToSeconds() == 90 and updated.safety_net
        assert (updated.admission_rate_min_per_second, updated.admission_rate_max_per_second) == (10, 120)
        assert (await admin.GetWaitingRoom(apb.GetWaitingRoomRequest(event_id=event_id))).config == updated
        mirror = await q.redis.hmget(keys_of(event_id).config, "grace", "safety")
        assert mirror == [b"90000", b"1"]
        rows = await _audit_of(q, event_id)
        assert rows[-1].after is not None and rows[-1].after["safety_net"] is True

        for field, bad in (
            ("config.admission_rate_min_per_second", {"admission_rate_min_per_second": 51}),
            ("config.admission_rate_max_per_second", {"admission_rate_max_per_second": 49}),
            ("config.presence_grace", {"presence_grace": duration_pb2.Duration(seconds=30)}),
        ):
            wrong = _room(event_id, later, admission_rate_per_second=50, **bad)
            err = await rpc_error(admin.UpdateWaitingRoom(apb.UpdateWaitingRoomRequest(config=wrong)))
            assert err.code is grpc.StatusCode.INVALID_ARGUMENT and err.metadata["field"] == field

        # The deprecated API changes what it knows of and keeps the rest.
        config = pb.EventQueueConfig(event_id=event_id, admission_rate_per_second=60)
        config.opens_at.FromMilliseconds(later)
        await q.stub.UpdateEventQueue(pb.UpdateEventQueueRequest(config=config))
        kept = (await admin.GetWaitingRoom(apb.GetWaitingRoomRequest(event_id=event_id))).config
        assert kept.admission_rate_per_second == 60 and kept.safety_net and kept.presence_grace.ToSeconds() == 90
        assert (kept.admission_rate_min_per_second, kept.admission_rate_max_per_second) == (10, 120)

        stats = await admin.GetWaitingRoomStats(apb.GetWaitingRoomStatsRequest(event_id=event_id))
        assert stats.stats.rate_reason == apb.WAITING_ROOM_RATE_REASON_BASE
