"""The pre-queue's verifiable shuffle over gRPC, against real Postgres and
Redis: the commitment is public from the room's creation and the seed is
not; joins before opening are placed at the draw's score of the fan's
pseudonym and logged; the draw recorder copies the log to Postgres in
batches and seals the pre-queue at opening; then GetPreQueueProof answers
the seed and every participant in the draw's order, in pages."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
from typing import Any

from google.protobuf import json_format
from prometheus_client import CollectorRegistry

from boxoffice import draw
from boxoffice.errors import InvalidArgument, NotFound
from gen.boxoffice.queue.v1 import queue_service_pb2 as pb
from queue_svc.jobs import DrawRecorder
from queue_svc.metrics import DrawMetrics
from queue_svc.model import PRE_QUEUE_BAND, DrawRecord
from tests.queue.harness import (
    MINUTE_MS,
    QueueUnderTest,
    build_app,
    new_event_id,
    queue_service,
    room_config,
    rpc_error,
)
from tests.support import ManualClock, Stores


def _token(body: dict[str, Any]) -> str:
    """A page token of the service's form with the given content."""
    return base64.urlsafe_b64encode(json.dumps(body).encode()).decode().rstrip("=")


def _ms(clock: ManualClock) -> int:
    return int(clock.now() * 1000)


async def _join(q: QueueUnderTest, event_id: int, customer: str) -> pb.JoinQueueResponse:
    reply = await q.stub.JoinQueue(pb.JoinQueueRequest(event_id=event_id, customer_id=customer))
    assert isinstance(reply, pb.JoinQueueResponse)
    return reply


async def _proof(q: QueueUnderTest, event_id: int, **fields: Any) -> pb.GetPreQueueProofResponse:
    reply = await q.stub.GetPreQueueProof(pb.GetPreQueueProofRequest(event_id=event_id, **fields))
    assert isinstance(reply, pb.GetPreQueueProofResponse)
    return reply


async def _all_pages(q: QueueUnderTest, event_id: int, page_size: int) -> list[pb.GetPreQueueProofResponse]:
    pages = [await _proof(q, event_id, page_size=page_size)]
    while pages[-1].next_page_token:
        pages.append(await _proof(q, event_id, page_size=page_size, page_token=pages[-1].next_page_token))
    return pages


async def test_the_seed_is_committed_at_creation_and_revealed_with_every_participant_at_opening(
    stores: Stores,
) -> None:
    clock = ManualClock()
    event_id = new_event_id()
    async with queue_service(stores, clock=clock) as q:
        opens_at = _ms(clock) + 10 * MINUTE_MS
        await q.create_event(event_id, opens_at_ms=opens_at)
        stored = await q.app.draws.get_or_create(event_id)
        assert stored is not None
        seed = stored.secrets.seed

        before = await _proof(q, event_id)
        assert before.algorithm == draw.PRE_QUEUE_V1 and before.event_id == event_id
        assert before.commitment == hashlib.sha256(seed).hexdigest()
        assert not before.revealed and not before.seed and not before.participants
        assert not before.HasField("revealed_at") and before.participant_count == 0
        assert before.opens_at.ToMilliseconds() == opens_at
        assert before.committed_at.ToMilliseconds() > 0

        fans = [f"fan-{i}" for i in range(7)]
        joined = {fan: await _join(q, event_id, fan) for fan in fans}
        for fan, reply in joined.items():
            assert draw.is_pseudonym(reply.pseudonym)
            assert reply.pseudonym == draw.pseudonym(stored.secrets.pseudonym_key, event_id, fan)
            assert reply.position.score == draw.score(seed, event_id, reply.pseudonym)
        # Joining again, and leaving then joining again, lands on the same place.
        again = await _join(q, event_id, "fan-3")
        assert not again.newly_joined and again.pseudonym == joined["fan-3"].pseudonym
        await q.stub.LeaveQueue(pb.LeaveQueueRequest(event_id=event_id, customer_id="fan-5"))
        back = await _join(q, event_id, "fan-5")
        assert back.newly_joined and back.position.score == joined["fan-5"].position.score

        # Before opening the recorder copies the log, and reveals nothing.
        recorder = q.app.draw_recorder
        assert event_id not in await recorder.pass_once()
        still = await _proof(q, event_id)
        assert not still.revealed and not still.seed and not still.participants
        # The seed appears in no answer before the opening, in any form.
        for message in (before, still, *joined.values()):
            wire = message.SerializeToString()
            assert seed not in wire and seed.hex().encode() not in wire
            assert seed.hex() not in json_format.MessageToJson(message)

        # After the opening time, a join goes to the back, outside the draw.
        clock.advance(10 * 60 + 1)
        late = await _join(q, event_id, "late")
        assert late.position.score >= PRE_QUEUE_BAND
        assert event_id in await recorder.pass_once()
        registry = q.rt.registry
        assert (registry.get_sample_value("boxoffice_queue_draws_sealed_total") or 0) >= 1
        assert (registry.get_sample_value("boxoffice_queue_draw_placements_recorded_total") or 0) >= 8

        pages = await _all_pages(q, event_id, page_size=3)
        assert [len(page.participants) for page in pages] == [3, 3, 1]
        first = pages[0]
        assert first.revealed and first.seed == seed.hex()
        assert first.commitment == before.commitment == hashlib.sha256(bytes.fromhex(first.seed)).hexdigest()
        assert first.participant_count == 7 and first.revealed_at.ToMilliseconds() > 0
        assert all((p.seed, p.commitment) == (first.seed, first.commitment) for p in pages)
        listed = [participant for page in pages for participant in page.participants]
        assert [p.rank for p in listed] == list(range(1, 8))
        expected = draw.draw(seed, event_id, [reply.pseudonym for reply in joined.values()])
        assert [(p.pseudonym, p.score) for p in listed] == [(e.pseudonym, e.score) for e in expected]
        # The queue admits in that order: the Redis scores are the listed ones.
        assert {p.pseudonym: p.score for p in listed} == {r.pseudonym: r.position.score for r in joined.values()}

        # Sealed for good: an opening moved later does not reopen the pre-queue.
        moved = pb.EventQueueConfig(event_id=event_id)
        moved.opens_at.FromMilliseconds(_ms(clock) + 5 * MINUTE_MS)
        await q.stub.UpdateEventQueue(pb.UpdateEventQueueRequest(config=moved))
        after_move = await _join(q, event_id, "after-move")
        assert after_move.position.score >= PRE_QUEUE_BAND
        assert event_id not in await recorder.pass_once()
        assert [p.pseudonym for p in (await _proof(q, event_id, page_size=100)).participants] == [
            p.pseudonym for p in listed
        ]


async def test_page_sizes_and_tokens_are_checked_and_unknown_events_are_not_found(stores: Stores) -> None:
    clock = ManualClock()
    event_id, other = new_event_id(), new_event_id()
    async with queue_service(stores, clock=clock) as q:
        for each in (event_id, other):
            await q.create_event(each, opens_at_ms=_ms(clock) + MINUTE_MS)
        for fan in ("ann", "bob", "cid"):
            await _join(q, event_id, fan)
            await _join(q, other, fan)
        clock.advance(61)
        assert {event_id, other} <= set(await q.app.draw_recorder.pass_once())
        token = (await _proof(q, event_id, page_size=1)).next_page_token
        assert token
        second = await _proof(q, event_id, page_size=1, page_token=token)
        assert [p.rank for p in second.participants] == [2]

        for fields, field in (
            ({"page_size": -1}, "page_size"),
            ({"page_size": 10_001}, "page_size"),
            ({"page_token": "not-a-token"}, "page_token"),
            ({"page_token": token[:-2]}, "page_token"),
            ({"page_token": _token({"e": event_id, "r": 2**63, "s": 1, "p": "0" * 32})}, "page_token"),
            ({"page_token": _token({"e": event_id, "r": 1, "s": 2**50, "p": "0" * 32})}, "page_token"),
            ({"page_token": _token({"e": event_id, "r": 1, "s": 1, "p": "A" * 32})}, "page_token"),
        ):
            err = await rpc_error(q.stub.GetPreQueueProof(pb.GetPreQueueProofRequest(event_id=event_id, **fields)))
            assert isinstance(err, InvalidArgument) and err.reason == "INVALID_FIELD", fields
            assert err.metadata["field"] == field
        # A token of another event's listing is refused.
        err = await rpc_error(q.stub.GetPreQueueProof(pb.GetPreQueueProofRequest(event_id=other, page_token=token)))
        assert isinstance(err, InvalidArgument) and err.metadata["field"] == "page_token"

        missing = await rpc_error(q.stub.GetPreQueueProof(pb.GetPreQueueProofRequest(event_id=new_event_id())))
        assert isinstance(missing, NotFound) and missing.reason == "EVENT_NOT_FOUND"


async def test_recorders_copy_the_log_in_batches_at_once_and_each_placement_once(stores: Stores) -> None:
    """Two recorders with batches of 4 run together while fans join (some
    leave and join again, appending to the log twice): every placement is
    stored once, and the draw seals only with the whole log."""
    clock = ManualClock()
    event_id = new_event_id()
    async with queue_service(stores, clock=clock) as q:
        await q.create_event(event_id, opens_at_ms=_ms(clock) + MINUTE_MS)
        recorders = [
            DrawRecorder(
                store=q.app.store,
                draws=q.app.draws,
                clock=clock,
                interval_seconds=0.05,
                metrics=DrawMetrics.create(CollectorRegistry()),
                batch=4,
            )
            for _ in range(2)
        ]
        pseudonyms: set[str] = set()

        async def record_once(recorder: DrawRecorder) -> bool:
            """The recorder's pass over this event's draw alone."""
            pending = [d for d in await q.app.draws.unsealed() if d.event_id == event_id]
            return bool(pending) and await recorder.record(pending[0])

        async def fans(start: int) -> None:
            for i in range(start, start + 15):
                reply = await _join(q, event_id, f"fan-{i}")
                pseudonyms.add(reply.pseudonym)
                if i % 5 == 0:
                    await q.stub.LeaveQueue(pb.LeaveQueueRequest(event_id=event_id, customer_id=f"fan-{i}"))
                    await _join(q, event_id, f"fan-{i}")
                await asyncio.gather(*(record_once(r) for r in recorders))

        await asyncio.gather(fans(0), fans(100))
        log_length = await q.redis.llen(q.app.store.keys(event_id).pre_queue_log)
        assert log_length == 30 + 6  # each fan once, and the six who left and joined again once more
        clock.advance(61)
        assert any(await asyncio.gather(*(record_once(r) for r in recorders)))
        record = await q.app.draws.get_or_create(event_id)
        assert record is not None and record.sealed and record.recorded == log_length
        proof = await _proof(q, event_id, page_size=1000)
        assert proof.participant_count == 30
        assert sorted(p.pseudonym for p in proof.participants) == sorted(pseudonyms)


async def test_a_room_made_without_a_draw_gets_one_when_first_needed(stores: Stores) -> None:
    """A waiting room stored before draws existed (its configuration only):
    the first join before opening makes its draw."""
    clock = ManualClock()
    event_id = new_event_id()
    async with queue_service(stores, clock=clock) as q:
        config = await q.app.rooms.create(room_config(event_id, opens_at_ms=_ms(clock) + MINUTE_MS))
        await q.app.store.put_config(config)
        reply = await _join(q, event_id, "ann")
        record = await q.app.draws.get_or_create(event_id)
        assert record is not None
        assert reply.position.score == record.secrets.score(reply.pseudonym) < PRE_QUEUE_BAND
        assert (await _proof(q, event_id)).commitment == record.secrets.commitment


async def test_a_crowd_of_first_joins_reads_the_draw_once(stores: Stores) -> None:
    """Fifty fans join a room at once on a process that never read its
    draw: Postgres is asked once, and every fan gets their draw's place."""
    clock = ManualClock()
    event_id = new_event_id()
    async with queue_service(stores, clock=clock) as q:
        config = await q.app.rooms.create(room_config(event_id, opens_at_ms=_ms(clock) + MINUTE_MS))
        await q.app.store.put_config(config)
        draws = q.app.draws
        reads = 0
        get_or_create = draws.get_or_create

        async def counting(event_id: int) -> DrawRecord | None:
            nonlocal reads
            reads += 1
            return await get_or_create(event_id)

        draws.get_or_create = counting  # type: ignore[method-assign]
        replies = await asyncio.gather(*(_join(q, event_id, f"fan-{i}") for i in range(50)))
        assert reads == 1
        record = await get_or_create(event_id)
        assert record is not None
        assert all(r.position.score == record.secrets.score(r.pseudonym) for r in replies)


async def test_the_admitter_role_runs_the_draw_recorder(stores: Stores) -> None:
    """Every admitter process (leader or standby) records and seals the
    draws; the server role does not. (On the running loop: building the
    server role makes a grpc.aio server, which takes the current loop, and
    a test run in another's thread state has none.)"""
    queue = build_app(stores)
    assert "draw-recorder" in [c.name for c in queue.components("admitter")]
    assert "draw-recorder" not in [c.name for c in queue.components("server")]
