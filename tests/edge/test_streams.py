"""Waiting costs the origin nothing per fan: one admission-progress stream
per event whatever the number of SSE fans, SSE that survives real networks
(resume by Last-Event-ID, heartbeats, a reconnect hint on drain), and the
public, cacheable progress document."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import AsyncIterator

import httpx
import pytest

from edge_svc.endpoints.common import SESSION_COOKIE
from gen.boxoffice.queue.v1 import queue_service_pb2 as qpb
from gen.boxoffice.queue.v1 import queue_service_pb2_grpc as qpb_grpc
from tests.e2e.harness import eventually
from tests.edge.asserting import edge_mesh_client
from tests.edge.harness import EdgeStack, edge_stack, sign_in
from tests.support import Stores

FANS = 10_000


def metric(text: str, name: str) -> float:
    for line in text.splitlines():
        if line.startswith(name + " ") or line.startswith(name + "{"):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"no metric {name}")


async def _join(stack: EdgeStack, stores: Stores, event_id: int, fans: list[str]) -> None:
    """Queue the fans through QueueService itself (as the edge would)."""
    async with edge_mesh_client(stores, stack.addresses["queue"]) as client:
        queue = client.stub(qpb_grpc.QueueServiceStub)
        for start in range(0, len(fans), 500):
            await asyncio.gather(
                *(
                    queue.JoinQueue(qpb.JoinQueueRequest(event_id=event_id, customer_id=fan))
                    for fan in fans[start : start + 500]
                )
            )


@pytest.mark.slow
async def test_ten_thousand_sse_fans_hold_one_progress_stream_per_event(stores: Stores) -> None:
    async with edge_stack(stores, prefix="edge-fanout", settings={"sse_heartbeat_seconds": 30.0}) as stack:
        event_id = await stack.event(max_active=1, paused=True)
        other_event = await stack.event(max_active=1, paused=True)
        fans = [f"sse-fan-{n}" for n in range(FANS)]
        await _join(stack, stores, event_id, fans)
        await _join(stack, stores, other_event, fans[:10])
        cookies = stores.tmp / "sse-cookies.txt"
        sessions = stack.edge.deps.sessions
        cookies.write_text("".join(f"{SESSION_COOKIE}={sessions.issue(fan)[0]}\n" for fan in fans))
        other_cookies = stores.tmp / "sse-cookies-other.txt"
        other_cookies.write_text("".join(f"{SESSION_COOKIE}={sessions.issue(fan)[0]}\n" for fan in fans[:10]))
        port = str(stack.edge.server.port)
        clients = []
        try:
            for path, file in (
                (f"/v1/events/{event_id}/queue/position:watch", cookies),
                (f"/v1/events/{other_event}/queue/position:watch", other_cookies),
            ):
                process = await asyncio.create_subprocess_exec(
                    sys.executable,
                    "-m",
                    "tests.edge.sse_clients",
                    "127.0.0.1",
                    port,
                    path,
                    str(file),
                    stdin=asyncio.subprocess.PIPE,
                    stdout=asyncio.subprocess.PIPE,
                )
                clients.append(process)
                assert process.stdout is not None
                line = (await process.stdout.readline()).decode().split()
                assert line[:2] == ["ready", str(len(file.read_text().splitlines()))] and line[3] == "0", line
            async with stack.client() as ops:
                text = (await ops.get("/metrics")).text
            assert metric(text, "boxoffice_edge_sse_connections") == FANS + 10
            # One upstream stream per watched event, whatever the number of fans.
            assert metric(text, "boxoffice_edge_progress_streams") == 2
            assert stack.edge.hub.streams_open == 2
        finally:
            for process in clients:
                assert process.stdin is not None
                process.stdin.close()
                await process.wait()


@pytest.fixture
async def stack(stores: Stores) -> AsyncIterator[EdgeStack]:
    async with edge_stack(
        stores, prefix="edge-sse", settings={"sse_heartbeat_seconds": 0.2, "drain_seconds": 0.5}
    ) as stack:
        yield stack


async def _lines(lines_of: AsyncIterator[str], until: str) -> list[str]:
    lines: list[str] = []
    async for line in lines_of:
        lines.append(line)
        if line.startswith(until):
            return lines
    return lines


async def test_last_event_id_resumes_without_a_repeat_and_heartbeats_flow(stack: EdgeStack) -> None:
    event_id = await stack.event(max_active=1, paused=True)
    async with stack.client() as fan:
        await sign_in(fan, "resumer")
        await fan.post(f"/v1/events/{event_id}/queue:join", json={})
        path = f"/v1/events/{event_id}/queue/position:watch"
        async with fan.stream("GET", path) as reply:
            lines = await _lines(reply.aiter_lines(), "data: ")
        assert lines[0].startswith("retry: ")
        event_id_line = next(line for line in lines if line.startswith("id: "))
        assert "event: position" in lines
        last = event_id_line[4:]
        async with fan.stream("GET", path, headers={"Last-Event-ID": last}) as reply:
            resumed = await _lines(reply.aiter_lines(), ": keep-alive")
        # Nothing new happened: no repeat of the position, only the heartbeat.
        assert not any(line.startswith("data: ") for line in resumed), resumed
        assert resumed[-1] == ": keep-alive"


async def test_drain_fails_readiness_first_then_ends_streams_with_a_reconnect_hint(stack: EdgeStack) -> None:
    event_id = await stack.event(max_active=1, paused=True)
    async with stack.client() as fan, stack.client() as probe:
        await sign_in(fan, "drained")
        await fan.post(f"/v1/events/{event_id}/queue:join", json={})
        assert (await probe.get("/readyz")).status_code == 200
        async with fan.stream("GET", f"/v1/events/{event_id}/queue/position:watch") as reply:
            lines_of = reply.aiter_lines()
            await _lines(lines_of, "data: ")
            stopping = asyncio.create_task(stack.edge.server.stop(5.0))
            # Readiness fails at once, while requests are still answered.
            await eventually(lambda: _status(probe, "/readyz", 503), "readiness failing", seconds=5.0)
            assert (await probe.get(f"/v1/events/{event_id}/queue/progress")).status_code == 200
            # Then the stream ends with a reconnect hint.
            rest = await _lines(lines_of, "event: reconnect")
            assert rest[-1] == "event: reconnect"
            assert any(line.startswith("retry: ") for line in rest)
        await stopping
        with pytest.raises(httpx.ConnectError):
            await probe.get("/healthz")


async def _status(client: httpx.AsyncClient, path: str, status: int) -> bool | None:
    return True if (await client.get(path)).status_code == status else None


async def test_progress_document_is_public_cacheable_with_an_etag(stack: EdgeStack) -> None:
    event_id = await stack.event()
    async with stack.client() as anyone:
        reply = await anyone.get(f"/v1/events/{event_id}/queue/progress")
        assert reply.status_code == 200, reply.text
        cache = reply.headers["cache-control"]
        assert cache.startswith("public, max-age=") and "stale-while-revalidate=" in cache
        progress = reply.json()["progress"]
        assert progress["eventId"] == str(event_id)
        assert progress["admissionState"] == "ADMISSION_STATE_OPEN"
        again = await anyone.get(
            f"/v1/events/{event_id}/queue/progress", headers={"If-None-Match": reply.headers["etag"]}
        )
        assert again.status_code in (200, 304)
        if again.status_code == 304:
            assert again.content == b""
        unknown = await anyone.get("/v1/events/999999999999/queue/progress")
        assert unknown.status_code == 404 and unknown.json()["error"]["details"][0]["reason"] == "EVENT_NOT_FOUND"


async def test_answers_are_not_held_back_by_delayed_acks(stack: EdgeStack) -> None:
    """Accepted connections have TCP_NODELAY (asyncio sets it only for a
    listening socket made with IPPROTO_TCP); read back from the edge's own
    transport."""
    server = stack.edge.server
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
    try:
        writer.write(b"GET /healthz HTTP/1.1\r\nHost: t\r\n\r\n")
        await writer.drain()
        assert (await reader.readline()).startswith(b"HTTP/1.1 200")
        flags = server.accepted_nodelay()
        assert flags and all(flags), flags
    finally:
        writer.close()
