"""A presale lane through the edge's HTTP API only, every role running: a
fan types a code, waits in the presale lane (the edge follows that lane's
own progress stream and document), is admitted and holds seats; another
account is refused the code; the general lane's fans are untouched."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta

import pytest

from boxoffice import access
from gen.boxoffice.queue.v1 import queue_admin_service_pb2 as apb
from gen.boxoffice.queue.v1 import queue_admin_service_pb2_grpc as apb_grpc
from tests.e2e.harness import eventually
from tests.edge.fans import ADMITTED, expect, hold, signed_in
from tests.edge.harness import EdgeStack, edge_stack
from tests.support import Stores


@pytest.fixture(scope="module")
async def stack(stores: Stores) -> AsyncIterator[EdgeStack]:
    async with edge_stack(stores, prefix="edge-lanes") as stack:
        yield stack


async def _presale(stack: EdgeStack, event_id: int, codes: int) -> list[str]:
    admin = stack.operators["queue"].stub(apb_grpc.QueueAdminServiceStub, role=access.OPERATOR)
    room = (await admin.GetWaitingRoom(apb.GetWaitingRoomRequest(event_id=event_id))).config
    room.lanes.add(name="presale", entry=apb.WAITING_ROOM_LANE_ENTRY_CODE, share_percent=40)
    await admin.UpdateWaitingRoom(apb.UpdateWaitingRoomRequest(config=room))
    request = apb.CreateAccessCodesRequest(event_id=event_id, lane="presale", count=codes, max_uses=1)
    request.valid_until.FromDatetime(datetime.now(UTC) + timedelta(hours=1))
    return list((await admin.CreateAccessCodes(request)).codes)


async def test_a_code_takes_a_fan_through_the_presale_lane_to_a_hold(stack: EdgeStack) -> None:
    event_id = await stack.event(seats=8, max_active=10)
    (code,) = await _presale(stack, event_id, 1)
    async with signed_in(stack) as ana, signed_in(stack) as bo:
        joined = await ana.post(f"/v1/events/{event_id}/queue:join", json={"accessCode": code.lower()})
        assert joined.status_code == 200, joined.text
        assert joined.json()["position"]["lane"] == "presale"
        refused = await bo.post(f"/v1/events/{event_id}/queue:join", json={"accessCode": code})
        expect(refused, 403, "PERMISSION_DENIED", "ACCESS_CODE_USED")
        bad = await bo.post(f"/v1/events/{event_id}/queue:join", json={"accessCode": "ZZZZ"})
        expect(bad, 403, "PERMISSION_DENIED", "ACCESS_CODE_INVALID")

        # The lane's own progress, public like the general one.
        lane_progress = await ana.get(f"/v1/events/{event_id}/queue/progress", params={"lane": "presale"})
        assert lane_progress.status_code == 200 and lane_progress.json()["progress"]["lane"] == "presale"
        unknown = await ana.get(f"/v1/events/{event_id}/queue/progress", params={"lane": "vip"})
        expect(unknown, 404, "NOT_FOUND", "LANE_NOT_FOUND")
        bad_lane = await ana.get(f"/v1/events/{event_id}/queue/progress", params={"lane": "V I P"})
        expect(bad_lane, 400, "INVALID_ARGUMENT", "INVALID_FIELD")

        # Admitted by the lane's own progress (the admitter picks the lane up
        # at its next refresh); the edge answers from that lane's stream.
        async def admitted() -> str | None:
            reply = await ana.get(f"/v1/events/{event_id}/queue/position")
            assert reply.status_code == 200, reply.text
            return reply.json()["position"]["state"] if reply.json()["position"]["state"] == ADMITTED else None

        assert await eventually(admitted, "the presale fan is admitted") == ADMITTED
        held = await hold(ana, event_id, 2)
        assert held["state"] == "HOLD_STATE_HELD", held
        # The general lane's fan is unaffected and joins the general lane.
        general = await bo.post(f"/v1/events/{event_id}/queue:join", json={})
        assert general.status_code == 200 and general.json()["position"].get("lane", "") == "", general.text
