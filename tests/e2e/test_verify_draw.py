"""`boxoffice verify-draw` end to end: fans join a waiting room's pre-queue
on a real QueueService (Postgres, Redis, gRPC over mTLS); the commitment is
saved before the opening; after it, the public proof document is saved
(a file) or served over HTTP on loopback (pages fetched by the command).
The command runs as its own process on that public data alone and
reproduces the order exactly; a changed seed, a changed score, a swapped
order and a commitment that does not match are each reported, with the
line, and exit 1."""

from __future__ import annotations

import asyncio
import contextlib
import copy
import json
import os
import secrets
import sys
import urllib.parse
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from google.protobuf import json_format

from boxoffice import draw
from gen.boxoffice.queue.v1 import queue_service_pb2 as pb
from tests.queue.harness import MINUTE_MS, QueueUnderTest, new_event_id, queue_service
from tests.support import ManualClock, Stores

ROOT = Path(__file__).resolve().parents[2]
FANS = 40
PAGE_SIZE = 15
Json = dict[str, Any]


@dataclass
class Result:
    code: int
    out: str


async def verify_draw(*args: str) -> Result:
    """``boxoffice verify-draw ARGS`` in its own process."""
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "boxoffice_cli.verify_draw",
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    out, _ = await asyncio.wait_for(process.communicate(), timeout=60)
    assert process.returncode is not None
    return Result(process.returncode, out.decode())


async def _page(q: QueueUnderTest, event_id: int, token: str = "", page_size: int = PAGE_SIZE) -> Json:
    reply = await q.stub.GetPreQueueProof(
        pb.GetPreQueueProofRequest(event_id=event_id, page_size=page_size, page_token=token)
    )
    return json_format.MessageToDict(reply)


@contextlib.asynccontextmanager
async def proof_http_server(q: QueueUnderTest) -> AsyncIterator[str]:
    """GET /v1/events/{id}/queue/proof[?pageToken=...] on loopback, answered
    by GetPreQueueProof in the proto3 JSON mapping (as the edge will)."""

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            request_line = (await reader.readline()).decode()
            while (await reader.readline()) not in (b"\r\n", b"\n", b""):
                pass
            target = urllib.parse.urlsplit(request_line.split(" ")[1])
            event_id = int(target.path.split("/")[3])
            token = urllib.parse.parse_qs(target.query).get("pageToken", [""])[0]
            body = json.dumps(await _page(q, event_id, token)).encode()
            head = f"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n"
            writer.write(head.encode() + b"Connection: close\r\n\r\n" + body)
            await writer.drain()
        finally:
            writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.close()
        await server.wait_closed()


@dataclass
class Published:
    event_id: int
    commitment: str  # saved before the opening
    pseudonyms: list[str]  # each fan's, from their join
    pages: list[Json]


@contextlib.asynccontextmanager
async def published_draw(stores: Stores) -> AsyncIterator[tuple[QueueUnderTest, Published]]:
    """A room whose pre-queue FANS fans joined, opened and sealed."""
    clock = ManualClock()
    event_id = new_event_id()
    async with queue_service(stores, clock=clock) as q:
        await q.create_event(event_id, opens_at_ms=int(clock.now() * 1000) + MINUTE_MS)
        saved = (await _page(q, event_id))["commitment"]
        joined = await asyncio.gather(
            *(q.stub.JoinQueue(pb.JoinQueueRequest(event_id=event_id, customer_id=f"fan-{i}")) for i in range(FANS))
        )
        clock.advance(61)
        assert event_id in await q.app.draw_recorder.pass_once()
        pages = [await _page(q, event_id)]
        while pages[-1].get("nextPageToken"):
            pages.append(await _page(q, event_id, pages[-1]["nextPageToken"]))
        yield q, Published(event_id, saved, [reply.pseudonym for reply in joined], pages)


def _merged(pages: list[Json]) -> Json:
    document = {k: v for k, v in pages[0].items() if k not in ("participants", "nextPageToken")}
    document["participants"] = [p for page in pages for p in page["participants"]]
    return document


def _write(path: Path, document: Any) -> str:
    path.write_text(json.dumps(document, indent=2))
    return str(path)


async def test_verify_draw_reproduces_the_order_and_names_each_tampering(stores: Stores, tmp_path: Path) -> None:
    async with published_draw(stores) as (_q, published):
        pages = published.pages
        assert len(pages) == 3
        document = _merged(pages)
        # The published order is exactly the draw recomputed from the seed.
        seed = bytes.fromhex(document["seed"])
        expected = draw.draw(seed, published.event_id, published.pseudonyms)
        assert [(p["pseudonym"], int(p["score"])) for p in document["participants"]] == [
            (e.pseudonym, e.score) for e in expected
        ]

        # The pages as saved, and the merged document: both verify.
        ok = await verify_draw(_write(tmp_path / "pages.json", pages), "--commitment", published.commitment)
        assert ok.code == 0 and ok.out.startswith("OK"), ok.out
        assert f"{FANS} participants" in ok.out and published.commitment in ok.out
        whole = await verify_draw(_write(tmp_path / "proof.json", document))
        assert whole.code == 0, whole.out

        def tampered(change: Any) -> Json:
            forged = copy.deepcopy(document)
            change(forged)
            return forged

        # A changed seed.
        other_seed = tampered(lambda d: d.update(seed=secrets.token_hex(32)))
        result = await verify_draw(_write(tmp_path / "seed.json", other_seed))
        assert result.code == 1 and "seed does not match the commitment" in result.out, result.out

        # A changed score, on line 7.
        def bump(d: Json) -> None:
            d["participants"][6]["score"] = str(int(d["participants"][6]["score"]) + 1)

        line7 = document["participants"][6]["pseudonym"]
        result = await verify_draw(_write(tmp_path / "score.json", tampered(bump)))
        assert result.code == 1, result.out
        assert f"participant #7 (pseudonym {line7}): score" in result.out and "is wrong" in result.out

        # Two participants swapped (their ranks left in sequence), lines 12 and 13.
        def swap(d: Json) -> None:
            lines = d["participants"]
            lines[11], lines[12] = lines[12], lines[11]
            lines[11]["rank"], lines[12]["rank"] = "12", "13"

        result = await verify_draw(_write(tmp_path / "swap.json", tampered(swap)))
        assert result.code == 1 and "participant #13" in result.out and "out of order" in result.out, result.out

        # A whole forged draw, consistent with itself (a new seed, its
        # commitment, its scores and order) fails against the commitment
        # saved before the opening.
        forged_seed = secrets.token_bytes(32)

        def forge(d: Json) -> None:
            entries = draw.draw(forged_seed, published.event_id, published.pseudonyms)
            d.update(seed=forged_seed.hex(), commitment=draw.commitment(forged_seed))
            d["participants"] = [
                {"rank": str(i), "pseudonym": e.pseudonym, "score": str(e.score)} for i, e in enumerate(entries, 1)
            ]

        forged = _write(tmp_path / "forged.json", tampered(forge))
        assert (await verify_draw(forged)).code == 0  # consistent with itself...
        result = await verify_draw(forged, "--commitment", published.commitment)
        assert result.code == 1 and "is not the commitment you saved" in result.out, result.out

        # A page left out: the count says more.
        result = await verify_draw(_write(tmp_path / "short.json", pages[:2]))
        assert result.code == 1 and "incomplete" in result.out, result.out


async def test_verify_draw_fetches_every_page_from_the_url_and_saves_the_document(
    stores: Stores, tmp_path: Path
) -> None:
    async with published_draw(stores) as (q, published), proof_http_server(q) as base:
        url = f"{base}/v1/events/{published.event_id}/queue/proof"
        saved = tmp_path / "saved.json"
        result = await verify_draw(url, "--commitment", published.commitment, "--save", str(saved))
        assert result.code == 0 and f"{FANS} participants" in result.out, result.out
        assert json.loads(saved.read_text()) == _merged(published.pages)
        again = await verify_draw(str(saved), "--commitment", published.commitment)
        assert again.code == 0, again.out


async def test_verify_draw_before_the_opening_has_nothing_to_verify(stores: Stores, tmp_path: Path) -> None:
    clock = ManualClock()
    event_id = new_event_id()
    async with queue_service(stores, clock=clock) as q:
        await q.create_event(event_id, opens_at_ms=int(clock.now() * 1000) + MINUTE_MS)
        await q.stub.JoinQueue(pb.JoinQueueRequest(event_id=event_id, customer_id="ann"))
        page = await _page(q, event_id)
    assert "seed" not in page and "participants" not in page
    result = await verify_draw(_write(tmp_path / "early.json", page))
    assert result.code == 1 and "not revealed" in result.out, result.out


async def test_verify_draw_needs_no_service_code() -> None:
    """The verifier imports neither a service nor the generated contracts:
    the standard library and boxoffice.draw are all it runs on."""
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        "import sys, boxoffice_cli.verify_draw; "
        "print(sorted({m.split('.')[0] for m in sys.modules} & "
        "{'queue_svc', 'booking_svc', 'payment_svc', 'edge_svc', 'gen', 'grpc', 'google', 'psycopg', 'redis'}))",
        stdout=asyncio.subprocess.PIPE,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    out, _ = await process.communicate()
    assert process.returncode == 0 and out.decode().strip() == "[]"
