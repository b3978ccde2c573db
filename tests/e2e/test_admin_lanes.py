"""``boxoffice admin`` for lanes, in its own process against QueueService
and BookingService over mTLS: an event file with lanes, a batch of access
codes, a staff pass and its link, and the fans who use them; bad input
exits 2 before anything is sent."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from urllib.parse import parse_qs, urlsplit

import grpc
import pytest

from boxoffice.errors import from_rpc_error
from gen.boxoffice.queue.v1 import queue_admin_service_pb2 as apb
from gen.boxoffice.queue.v1 import queue_service_pb2 as qpb
from queue_svc import passes
from tests.e2e.admin_mesh import Mesh, edge_queue, event_yaml, iso, mesh, new_event_id, stored_room

__all__ = ["mesh"]

_LANES = """
          lanes:
            - {name: presale, entry: code, share_percent: 30}
            - {name: staff, entry: staff, share_percent: 5}"""


async def _join(mesh: Mesh, event_id: int, fan: str, **fields: str) -> qpb.JoinQueueResponse | grpc.aio.AioRpcError:
    async with edge_queue(mesh) as queue:
        try:
            reply: qpb.JoinQueueResponse = await queue.JoinQueue(
                qpb.JoinQueueRequest(event_id=event_id, **fields), metadata=(("x-boxoffice-customer", fan),)
            )
        except grpc.aio.AioRpcError as err:
            return err
        return reply


async def test_codes_and_a_staff_pass_from_the_command_open_their_lanes(mesh: Mesh) -> None:
    event_id = new_event_id()
    created = await mesh.admin(
        "event",
        "create",
        mesh.file("event.yaml", event_yaml(event_id, opens_in=timedelta(minutes=10), room_extra=_LANES)),
    )
    assert created.code == 0, created.err
    room = await stored_room(mesh, event_id)
    assert [(lane.name, lane.entry, lane.share_percent) for lane in room.lanes] == [
        ("presale", apb.WAITING_ROOM_LANE_ENTRY_CODE, 30),
        ("staff", apb.WAITING_ROOM_LANE_ENTRY_STAFF, 5),
    ]

    until = iso(datetime.now(UTC) + timedelta(days=1))
    made = await mesh.admin("codes", "create", str(event_id), "presale", "--count", "3", "--until", until)
    assert made.code == 0, made.err
    codes = made.out.split()
    assert len(codes) == 3 and all(passes.plausible(code) for code in codes)
    # The fan types a code; the join lands in its lane. A second account is refused.
    joined = await _join(mesh, event_id, "ann", access_code=codes[0])
    assert isinstance(joined, qpb.JoinQueueResponse) and joined.position.lane == "presale"
    refused = await _join(mesh, event_id, "bob", access_code=codes[0])
    assert isinstance(refused, grpc.aio.AioRpcError) and from_rpc_error(refused).reason == "ACCESS_CODE_USED"

    issued = await mesh.admin("staff-pass", str(event_id), "stage door", "--ttl", "2h", "--edge", "https://x.test/")
    assert issued.code == 0, issued.err
    link = issued.out.split()[-1]
    assert link.startswith(f"https://x.test/e/{event_id}?staff=")
    staff_pass = parse_qs(urlsplit(link).query)["staff"][0]
    crew = await _join(mesh, event_id, "crew", staff_pass=staff_pass)
    assert isinstance(crew, qpb.JoinQueueResponse) and crew.position.lane == "staff"

    closes = iso(datetime.now(UTC) + timedelta(hours=2))
    drawn = await mesh.admin("draw", "create", str(event_id), "presale", "--closes", closes, "--winners", "100")
    assert drawn.code == 0 and "commitment" in drawn.out, drawn.err
    commitment = drawn.out.split()[-1]
    async with edge_queue(mesh) as queue:
        proof = await queue.GetFanDrawProof(qpb.GetFanDrawProofRequest(event_id=event_id))
    assert proof.commitment == commitment and proof.winners == 100 and not proof.revealed
    twice = await mesh.admin("draw", "create", str(event_id), "presale", "--closes", closes, "--winners", "1")
    assert twice.code == 1 and "FAN_DRAW_EXISTS" in twice.err

    # An open-entry lane has no codes to make: the service says so, exit 1.
    wrong = await mesh.admin("codes", "create", str(event_id), "staff", "--count", "1", "--until", until)
    assert wrong.code == 1 and "LANE_NOT_FOUND" in wrong.err


@pytest.mark.parametrize(
    "args, problem",
    [
        (["codes", "create", "7", "presale", "--count", "0", "--until", "2030-01-01T00:00:00Z"], "--count"),
        (["codes", "create", "7", "presale", "--count", "100001", "--until", "2030-01-01T00:00:00Z"], "--count"),
        (["codes", "create", "7", "presale", "--count", "1", "--until", "2030-01-01T00:00:00"], "zone"),
        (
            [
                "codes",
                "create",
                "7",
                "presale",
                "--count",
                "1",
                "--from",
                "2030-01-02T00:00:00Z",
                "--until",
                "2030-01-01T00:00:00Z",
            ],
            "--until must be after --from",
        ),
        (["draw", "create", "7", "presale", "--closes", "tomorrow", "--winners", "5"], "ISO 8601"),
        (["draw", "create", "7", "presale", "--closes", "2030-01-01T00:00:00Z", "--winners", "0"], "--winners"),
        (["staff-pass", "7", "crew", "--ttl", "10s"], "1 minute to 7 days"),
        (["staff-pass", "7", "crew", "--ttl", "soon"], "duration"),
    ],
)
async def test_bad_lane_commands_exit_2_before_anything_is_sent(mesh: Mesh, args: list[str], problem: str) -> None:
    result = await mesh.admin(*args)
    assert result.code == 2 and problem in result.err, result.err


async def test_a_bad_lane_in_the_event_file_names_its_line_and_creates_nothing(mesh: Mesh) -> None:
    event_id = new_event_id()
    bad = """
          lanes:
            - {name: Pre Sale, entry: code, share_percent: 30}
            - {name: vip, entry: backstage, share_percent: 120}"""
    result = await mesh.admin("event", "create", mesh.file("event.yaml", event_yaml(event_id, room_extra=bad)))
    assert result.code == 2
    assert "lanes[0].name 'Pre Sale'" in result.err and "lanes[1].entry" in result.err
    assert "lanes[1].share_percent" in result.err and "nothing was sent" in result.err
    # The shares together are the service's to check: it refuses, and says which field.
    too_much = """
          lanes:
            - {name: a, entry: open, share_percent: 60}
            - {name: b, entry: open, share_percent: 40}"""
    other = new_event_id()
    result = await mesh.admin("event", "create", mesh.file("event2.yaml", event_yaml(other, room_extra=too_much)))
    assert result.code == 1 and "config.lanes" in result.err
