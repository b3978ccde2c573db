"""The verified-fan draw over gRPC, against real Postgres and Redis: an
operator creates it for a presale lane (its commitment public from then
on), fans register until it closes, the drawer draws it once, the first
`winners` in the seeded order get single-use codes to the lane (and only
they), the proof verifies from public data alone (boxoffice verify-draw's
checks), and the order does not follow registration order."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import grpc
from google.protobuf import json_format

from boxoffice import draw
from boxoffice_cli import verify_draw
from gen.boxoffice.queue.v1 import queue_admin_service_pb2 as apb
from gen.boxoffice.queue.v1 import queue_service_pb2 as pb
from tests.queue.harness import new_event_id, queue_service, rpc_error
from tests.queue.test_admin import admin_client
from tests.queue.test_fairness import CHI2_BOUND_P_1E9_DF81, independence_chi2
from tests.support import ManualClock, Stores

HOUR_MS = 3_600_000


def _as(fan: str) -> tuple[tuple[str, str]]:
    return (("x-boxoffice-customer", fan),)


async def _room_with_draw(admin: Any, clock: ManualClock, *, winners: int) -> tuple[int, str]:
    event_id = new_event_id()
    now_ms = int(clock.now() * 1000)
    room = apb.WaitingRoom(event_id=event_id)
    room.opens_at.FromMilliseconds(now_ms + 24 * HOUR_MS)
    presale = room.lanes.add(name="presale", entry=apb.WAITING_ROOM_LANE_ENTRY_CODE, share_percent=30)
    presale.opens_at.FromMilliseconds(now_ms + HOUR_MS)  # when the draw closes
    room.lanes.add(name="members", entry=apb.WAITING_ROOM_LANE_ENTRY_OPEN, share_percent=10)
    await admin.CreateWaitingRoom(apb.CreateWaitingRoomRequest(config=room))
    request = apb.CreateFanDrawRequest(event_id=event_id, lane="presale", winners=winners)
    request.closes_at.FromMilliseconds(now_ms + HOUR_MS)
    created = await admin.CreateFanDraw(request)
    assert len(created.commitment) == 64
    return event_id, created.commitment


async def _proof(stub: Any, event_id: int) -> list[dict[str, Any]]:
    pages, token = [], ""
    while True:
        reply = await stub.GetFanDrawProof(pb.GetFanDrawProofRequest(event_id=event_id, page_size=40, page_token=token))
        pages.append(json_format.MessageToDict(reply))
        token = reply.next_page_token
        if not token:
            return pages


async def test_register_draw_win_and_verify(stores: Stores) -> None:
    clock = ManualClock()
    async with queue_service(stores, clock=clock) as q, admin_client(stores, q) as admin:
        event_id, commitment = await _room_with_draw(admin, clock, winners=10)
        fans = [f"fan-{i}" for i in range(60)]
        first = await asyncio.gather(
            *(q.stub.RegisterForFanDraw(pb.RegisterForFanDrawRequest(event_id=event_id), metadata=_as(f)) for f in fans)
        )
        assert all(r.newly_registered and len(r.pseudonym) == 32 for r in first)
        again = await q.stub.RegisterForFanDraw(pb.RegisterForFanDrawRequest(event_id=event_id), metadata=_as("fan-0"))
        assert not again.newly_registered and again.pseudonym == first[0].pseudonym
        waiting = await q.stub.GetFanDrawResult(pb.GetFanDrawResultRequest(event_id=event_id), metadata=_as("fan-0"))
        assert waiting.outcome == pb.FAN_DRAW_OUTCOME_REGISTERED and not waiting.access_code
        stranger = await q.stub.GetFanDrawResult(pb.GetFanDrawResultRequest(event_id=event_id), metadata=_as("nobody"))
        assert stranger.outcome == pb.FAN_DRAW_OUTCOME_NOT_REGISTERED

        # Before the close: the commitment, no seed, nobody listed.
        before = await _proof(q.stub, event_id)
        assert before[0]["commitment"] == commitment and "seed" not in before[0]
        assert "participants" not in before[0]

        clock.advance(3601)
        late = await rpc_error(
            q.stub.RegisterForFanDraw(pb.RegisterForFanDrawRequest(event_id=event_id), metadata=_as("late"))
        )
        assert (late.code, late.reason) == (grpc.StatusCode.FAILED_PRECONDITION, "FAN_DRAW_CLOSED")
        # (Other tests' draws in the same database may be due too.)
        assert event_id in await q.app.fan_draws.draw_due()
        assert event_id not in await q.app.fan_draws.draw_due()  # drawn once

        results = {
            fan: await q.stub.GetFanDrawResult(pb.GetFanDrawResultRequest(event_id=event_id), metadata=_as(fan))
            for fan in fans
        }
        won = {fan: r for fan, r in results.items() if r.outcome == pb.FAN_DRAW_OUTCOME_WON}
        assert len(won) == 10 and all(r.access_code and r.lane == "presale" for r in won.values())
        assert all(r.outcome == pb.FAN_DRAW_OUTCOME_NOT_DRAWN for f, r in results.items() if f not in won)
        # The same code on every ask.
        winner, result = next(iter(won.items()))
        asked = await q.stub.GetFanDrawResult(pb.GetFanDrawResultRequest(event_id=event_id), metadata=_as(winner))
        assert asked.access_code == result.access_code

        # The proof verifies, and its first ten are the winners.
        pages = await _proof(q.stub, event_id)
        proof = verify_draw.merge(pages)
        assert proof.algorithm == draw.FAN_DRAW_V1 and proof.winners == 10 and proof.lane == "presale"
        assert verify_draw.check(proof, commitment=commitment) == []
        assert len(proof.participants) == 60
        assert {str(p.pseudonym) for p in proof.participants[:10]} == {r.pseudonym for r in won.values()}
        tampered = json.loads(json.dumps(pages))
        tampered[0]["participants"][0], tampered[0]["participants"][1] = (
            tampered[0]["participants"][1],
            tampered[0]["participants"][0],
        )
        assert verify_draw.check(verify_draw.merge(tampered)) != []

        # A winner's code opens the presale lane once; a loser has none.
        joined = await q.stub.JoinQueue(
            pb.JoinQueueRequest(event_id=event_id, access_code=result.access_code), metadata=_as(winner)
        )
        assert joined.position.lane == "presale"
        reused = await rpc_error(
            q.stub.JoinQueue(pb.JoinQueueRequest(event_id=event_id, access_code=result.access_code), metadata=_as("x"))
        )
        assert reused.reason == "ACCESS_CODE_USED"


async def test_the_draws_order_does_not_follow_registration_order(stores: Stores) -> None:
    """1,000 registrations in order: the drawn order is independent of it
    (the chi-square test of the pre-queue's shuffle, 10 per cell)."""
    clock = ManualClock()
    async with queue_service(stores, clock=clock) as q, admin_client(stores, q) as admin:
        event_id, _ = await _room_with_draw(admin, clock, winners=100)
        pseudonyms: list[str] = []
        for start in range(0, 1000, 200):
            replies = await asyncio.gather(
                *(
                    q.stub.RegisterForFanDraw(pb.RegisterForFanDrawRequest(event_id=event_id), metadata=_as(f"r{i}"))
                    for i in range(start, start + 200)
                )
            )
            pseudonyms.extend(r.pseudonym for r in replies)
        clock.advance(3601)
        await q.app.fan_draws.draw_due()
        pages = []
        token = ""
        while True:
            reply = await q.stub.GetFanDrawProof(
                pb.GetFanDrawProofRequest(event_id=event_id, page_size=10_000, page_token=token)
            )
            pages.append(json_format.MessageToDict(reply))
            token = reply.next_page_token
            if not token:
                break
        index = {p: i for i, p in enumerate(pseudonyms)}
        order = [index[str(p.pseudonym)] for p in verify_draw.merge(pages).participants]
        assert sorted(order) == list(range(1000))
        assert independence_chi2(order) < CHI2_BOUND_P_1E9_DF81


async def test_bad_draws_are_refused_and_change_nothing(stores: Stores) -> None:
    clock = ManualClock()
    async with queue_service(stores, clock=clock) as q, admin_client(stores, q) as admin:
        event_id, _ = await _room_with_draw(admin, clock, winners=5)
        now_ms = int(clock.now() * 1000)

        def request(**fields: Any) -> apb.CreateFanDrawRequest:
            made = apb.CreateFanDrawRequest(**{"event_id": event_id, "lane": "presale", "winners": 5, **fields})
            if "closes_at" not in fields:
                made.closes_at.FromMilliseconds(now_ms + HOUR_MS)
            return made

        cases = {
            "again": (request(), grpc.StatusCode.ALREADY_EXISTS, "FAN_DRAW_EXISTS"),
            "open lane": (request(lane="members"), grpc.StatusCode.NOT_FOUND, "LANE_NOT_FOUND"),
            "no lane": (request(lane=""), grpc.StatusCode.INVALID_ARGUMENT, "INVALID_FIELD"),
            "no winners": (request(winners=0), grpc.StatusCode.INVALID_ARGUMENT, "INVALID_FIELD"),
        }
        past = request()
        past.closes_at.FromMilliseconds(now_ms - 1)
        cases["past"] = (past, grpc.StatusCode.INVALID_ARGUMENT, "INVALID_FIELD")
        for name, (made, code, reason) in cases.items():
            err = await rpc_error(admin.CreateFanDraw(made))
            assert (err.code, err.reason) == (code, reason), name
        other = new_event_id()
        none = await rpc_error(
            q.stub.RegisterForFanDraw(pb.RegisterForFanDrawRequest(event_id=other), metadata=_as("ann"))
        )
        assert (none.code, none.reason) == (grpc.StatusCode.NOT_FOUND, "FAN_DRAW_NOT_FOUND")
        # The one draw is untouched: still open, nobody registered.
        proof = await q.stub.GetFanDrawProof(pb.GetFanDrawProofRequest(event_id=event_id))
        assert not proof.revealed and proof.winners == 5
