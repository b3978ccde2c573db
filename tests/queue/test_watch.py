"""WatchQueuePosition and WatchAdmissionProgress on a real server: a stream
sees its place fall and ends admitted with a token; progress is read from
Redis once per event per interval whatever the number of watchers; streams
end on drain."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import grpc

from boxoffice.errors import Unavailable, from_rpc_error
from gen.boxoffice.queue.v1 import queue_service_pb2 as pb
from queue_svc.jobs import Admitter
from tests.queue.harness import QueueUnderTest, new_event_id, queue_app, queue_service
from tests.support import ManualClock, Stores

FAST = {"BOXOFFICE_QUEUE_WATCH_INTERVAL_SECONDS": "0.02"}


@contextlib.asynccontextmanager
async def _ticking(
    q: QueueUnderTest, clock: ManualClock, event_id: int, *, step_seconds: float = 1.0
) -> AsyncIterator[Admitter]:
    """An admitter ticking every 20 ms of real time, each tick one
    ``step_seconds`` of the test's clock later."""
    admitter = q.app.admitter

    async def tick_forever() -> None:
        while True:
            clock.advance(step_seconds)
            await admitter.tick_event(event_id, 1)
            await asyncio.sleep(0.02)

    task = asyncio.create_task(tick_forever())
    try:
        yield admitter
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def _read_to_end(stream: Any) -> list[Any]:
    """The rest of a stream that was read with ``read()`` before."""
    messages = []
    while (message := await stream.read()) is not grpc.aio.EOF:
        messages.append(message)
    return messages


async def _join(q: QueueUnderTest, event_id: int, count: int, prefix: str = "fan") -> None:
    for i in range(count):
        await q.stub.JoinQueue(pb.JoinQueueRequest(event_id=event_id, customer_id=f"{prefix}-{i}"))


async def test_a_stream_sees_its_place_fall_and_ends_admitted_with_a_token(stores: Stores) -> None:
    clock = ManualClock()
    event_id = new_event_id()
    async with queue_service(stores, clock=clock, environ=FAST) as q:
        await q.create_event(event_id, opens_at_ms=int(clock.now() * 1000), admission_rate_per_second=2)
        await _join(q, event_id, 12)
        stream = q.stub.WatchQueuePosition(pb.WatchQueuePositionRequest(event_id=event_id, customer_id="fan-11"))
        first = await stream.read()
        assert first.position.state == pb.QUEUE_STATE_WAITING and first.position.ahead == 11
        seen: list[Any] = [first.position]
        async with _ticking(q, clock, event_id):
            seen += [message.position for message in await _read_to_end(stream)]
        assert await stream.code() == grpc.StatusCode.OK
        aheads = [p.ahead for p in seen[:-1]]
        assert all(p.state == pb.QUEUE_STATE_WAITING for p in seen[:-1])
        assert aheads == sorted(aheads, reverse=True) and len(set(aheads)) == len(aheads) >= 3
        last = seen[-1]
        assert last.state == pb.QUEUE_STATE_ADMITTED and last.access_token
        claims = q.rt.token_signer.verify(last.access_token, event_id=event_id)
        assert claims.customer_id == "fan-11"


async def test_a_stream_of_a_fan_not_in_the_queue_ends_at_once(stores: Stores) -> None:
    clock = ManualClock()
    event_id = new_event_id()
    async with queue_service(stores, clock=clock, environ=FAST) as q:
        await q.create_event(event_id, opens_at_ms=int(clock.now() * 1000))
        messages = [
            m async for m in q.stub.WatchQueuePosition(pb.WatchQueuePositionRequest(event_id=event_id, customer_id="x"))
        ]
        assert [m.position.state for m in messages] == [pb.QUEUE_STATE_NOT_IN_QUEUE]


async def test_watchers_cost_no_redis_work_per_tick(stores: Stores) -> None:
    """Redis calls while 100 streams watch one event equal the progress
    reads (one per event per interval): the watchers add none."""
    clock = ManualClock()
    event_id = new_event_id()
    async with queue_service(stores, clock=clock, environ=FAST) as q:
        await q.create_event(event_id, opens_at_ms=int(clock.now() * 1000), admission_rate_per_second=1)
        await _join(q, event_id, 101)
        streams = [
            q.stub.WatchQueuePosition(pb.WatchQueuePositionRequest(event_id=event_id, customer_id=f"fan-{i}"))
            for i in range(1, 101)
        ]
        for stream in streams:
            assert (await stream.read()).position.state == pb.QUEUE_STATE_WAITING
        metrics = q.rt.registry
        batcher = q.app.batcher  # every Redis call of the server
        calls_before = batcher.calls_sent
        reads_before = metrics.get_sample_value("boxoffice_queue_progress_reads_total") or 0
        reports_before = metrics.get_sample_value("boxoffice_queue_presence_reports_total") or 0
        assert metrics.get_sample_value("boxoffice_queue_watchers_open", {"stream": "position"}) == 100
        # One tick admits fan-0 (nobody watches fan-0): every stream gets one update.
        # The admitter is another process: its calls are not the server's.
        async with queue_app(stores, clock=clock) as admitting:
            await admitting.admitter.tick_event(event_id, 1)
            clock.advance(1.0)
            result = await admitting.admitter.tick_event(event_id, 1)
        assert result is not None and result.admitted == 1
        for stream in streams:
            update = await stream.read()
            assert update.position.state == pb.QUEUE_STATE_WAITING
        reads = (metrics.get_sample_value("boxoffice_queue_progress_reads_total") or 0) - reads_before
        calls = batcher.calls_sent - calls_before
        # The watchers' presence, one call for all of them every interval
        # (of real time: a slow run may meet one).
        reports = (metrics.get_sample_value("boxoffice_queue_presence_reports_total") or 0) - reports_before
        assert reads >= 1
        # No Redis call on behalf of any one watcher (reads that meet in one
        # pipeline share a call). A read or report is counted when made, just
        # before it is sent: the one feed may have had one of each counted
        # before the window opened and sent inside it, never more (its loop
        # makes one call at a time).
        in_flight_at_start = 2 * q.app.hub.feeds
        assert calls <= reads + reports + in_flight_at_start, (calls, reads, reports)
        for stream in streams:
            stream.cancel()
        for _ in range(100):
            if metrics.get_sample_value("boxoffice_queue_watchers_open", {"stream": "position"}) == 0:
                break
            await asyncio.sleep(0.02)
        assert metrics.get_sample_value("boxoffice_queue_watchers_open", {"stream": "position"}) == 0
        assert q.app.hub.feeds == 0


async def test_admission_progress_stream(stores: Stores) -> None:
    clock = ManualClock()
    event_id = new_event_id()
    async with queue_service(stores, clock=clock, environ=FAST) as q:
        await q.create_event(event_id, opens_at_ms=int(clock.now() * 1000), admission_rate_per_second=3)
        await _join(q, event_id, 9)
        stream = q.stub.WatchAdmissionProgress(pb.WatchAdmissionProgressRequest(event_id=event_id))
        first = (await stream.read()).progress
        assert first.queue_length == 9 and first.admitted_total == 0
        assert first.admission_state == pb.ADMISSION_STATE_OPEN
        totals = [first.admitted_total]
        async with _ticking(q, clock, event_id):
            while totals[-1] < 9:
                progress = (await stream.read()).progress
                assert progress.admitted_total >= totals[-1]
                assert progress.queue_length == 9 - progress.admitted_total
                totals.append(progress.admitted_total)
        assert progress.admitted_through_score > first.admitted_through_score
        assert progress.admission_rate_per_second > 0
        stream.cancel()


async def test_streams_end_with_unavailable_draining_on_shutdown(stores: Stores) -> None:
    clock = ManualClock()
    event_id = new_event_id()
    async with queue_service(stores, clock=clock, environ=FAST) as q:
        await q.create_event(event_id, opens_at_ms=int(clock.now() * 1000), paused=True)
        await _join(q, event_id, 3)
        position = q.stub.WatchQueuePosition(pb.WatchQueuePositionRequest(event_id=event_id, customer_id="fan-2"))
        progress = q.stub.WatchAdmissionProgress(pb.WatchAdmissionProgressRequest(event_id=event_id))
        assert (await position.read()).position.ahead == 2
        assert (await progress.read()).progress.admission_state == pb.ADMISSION_STATE_PAUSED
        q.rt.drain.start()
        for stream in (position, progress):
            try:
                await _read_to_end(stream)
            except grpc.aio.AioRpcError as err:
                error = from_rpc_error(err)
                assert isinstance(error, Unavailable) and error.reason == "DRAINING"
            else:
                raise AssertionError("the stream ended without UNAVAILABLE")
        # New streams are refused while draining.
        late = q.stub.WatchAdmissionProgress(pb.WatchAdmissionProgressRequest(event_id=event_id))
        try:
            async for _ in late:
                pass
        except grpc.aio.AioRpcError as err:
            assert from_rpc_error(err).reason == "DRAINING"
