"""The challenge at the door: a proof-of-work that verifies only for its
event and fan, before it expires, at its difficulty, once; and an external
challenge service asked over real HTTP."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import threading
import urllib.parse
from collections.abc import AsyncIterator, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
import redis.asyncio as aioredis

from boxoffice.errors import PermissionDenied
from boxoffice.redis import event_key
from boxoffice.secrets import SecretSource
from boxoffice.tokens import KeyRing
from edge_svc.challenge import Attempt, ExternalCheck, ProofOfWork, RedisProofUsed, leading_zero_bits, solve
from tests.support import ManualClock, Stores

KEYS = SecretSource.fixed("keys", KeyRing({"k1": b"0123456789abcdef0123"}, "k1"))
BITS = 10


@pytest.fixture
async def pow_check(stores: Stores, clock: ManualClock) -> AsyncIterator[ProofOfWork]:
    client = aioredis.Redis.from_url(stores.redis_url)
    try:
        yield ProofOfWork(KEYS, RedisProofUsed(client, clock), clock, difficulty_bits=BITS, by_event={7: 12})
    finally:
        await client.aclose()


def _reason(err: pytest.ExceptionInfo[PermissionDenied]) -> tuple[str, str | None]:
    return err.value.reason, err.value.metadata.get("check")


def test_leading_zero_bits() -> None:
    assert leading_zero_bits(b"\x00\x00\xff") == 16
    assert leading_zero_bits(b"\x00\x1f") == 11
    assert leading_zero_bits(b"\x80") == 0


async def test_a_solved_challenge_is_accepted_once(pow_check: ProofOfWork) -> None:
    issued = pow_check.issue(5, "fan-a")
    assert issued.difficulty_bits == BITS
    proof = solve(issued.challenge, issued.difficulty_bits)
    assert leading_zero_bits(hashlib.sha256(proof.encode()).digest()) >= BITS
    await pow_check.verify(Attempt(5, "fan-a", "10.0.0.1", proof))
    with pytest.raises(PermissionDenied) as reused:
        await pow_check.verify(Attempt(5, "fan-a", "10.0.0.1", proof))
    assert reused.value.reason == "PROOF_REUSED"


async def test_a_proof_for_another_event_or_fan_is_refused(pow_check: ProofOfWork) -> None:
    proof = solve(pow_check.issue(5, "fan-a").challenge, BITS)
    for attempt in (Attempt(6, "fan-a", "", proof), Attempt(5, "fan-b", "", proof)):
        with pytest.raises(PermissionDenied) as refused:
            await pow_check.verify(attempt)
        assert _reason(refused) == ("PROOF_INVALID", "subject")
    # Refusals spent nothing: the rightful fan still gets in.
    await pow_check.verify(Attempt(5, "fan-a", "", proof))


async def test_forged_expired_too_easy_and_unworked_proofs_are_refused(
    pow_check: ProofOfWork, clock: ManualClock
) -> None:
    issued = pow_check.issue(5, "fan-a")
    proof = solve(issued.challenge, BITS)
    challenge, _, nonce = proof.rpartition(":")
    head, kid, payload, mac = challenge.split(".")
    cases = {
        "signature": f"{head}.{kid}.{payload}.{mac[:-2]}AA:{nonce}",
        "format": "not-a-proof",
    }
    for check, forged in cases.items():
        with pytest.raises(PermissionDenied) as refused:
            await pow_check.verify(Attempt(5, "fan-a", "", forged))
        assert _reason(refused) == ("PROOF_INVALID", check)
    # A nonce that does not meet the difficulty.
    unworked = next(
        f"{challenge}:{n}"
        for n in range(10_000)
        if leading_zero_bits(hashlib.sha256(f"{challenge}:{n}".encode()).digest()) < BITS
    )
    with pytest.raises(PermissionDenied) as refused:
        await pow_check.verify(Attempt(5, "fan-a", "", unworked))
    assert _reason(refused) == ("PROOF_INVALID", "work")
    # Difficulty per event: event 7 asks 12 bits.
    harder = pow_check.issue(7, "fan-a")
    assert harder.difficulty_bits == 12
    await pow_check.verify(Attempt(7, "fan-a", "", solve(harder.challenge, 12)))
    # A challenge issued before the difficulty was raised no longer passes.
    raised = ProofOfWork(KEYS, _NeverUsed(), clock, difficulty_bits=BITS + 4)
    with pytest.raises(PermissionDenied) as refused:
        await raised.verify(Attempt(5, "fan-a", "", proof))
    assert _reason(refused) == ("PROOF_INVALID", "difficulty")
    # Past its expiry.
    clock.advance(301)
    with pytest.raises(PermissionDenied) as refused:
        await pow_check.verify(Attempt(5, "fan-a", "", proof))
    assert _reason(refused) == ("PROOF_INVALID", "expiry")


class _NeverUsed:
    async def spend(self, proof_id: str, *, until_epoch_seconds: int) -> bool:
        return True


class _SiteVerify(BaseHTTPRequestHandler):
    """A challenge service: the token "human" passes for secret "s3cret"."""

    seen: list[dict[str, str]] = []

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length", "0"))
        form = dict(urllib.parse.parse_qsl(self.rfile.read(length).decode()))
        self.seen.append(form)
        ok = form.get("secret") == "s3cret" and form.get("response") == "human"
        body = json.dumps({"success": ok}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        return None


@contextlib.contextmanager
def _site_verify() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _SiteVerify)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/siteverify"
    finally:
        server.shutdown()
        thread.join()


async def test_an_external_challenge_service_decides() -> None:
    with _site_verify() as url:
        check = ExternalCheck(url, SecretSource.fixed("secret", "s3cret"))
        await check.verify(Attempt(5, "fan-a", "203.0.113.9", "human"))
        assert _SiteVerify.seen[-1] == {"secret": "s3cret", "response": "human", "remoteip": "203.0.113.9"}
        with pytest.raises(PermissionDenied) as refused:
            await check.verify(Attempt(5, "fan-a", "203.0.113.9", "bot"))
        assert _reason(refused) == ("PROOF_INVALID", "external")
    unreachable = ExternalCheck("http://127.0.0.1:1/siteverify", SecretSource.fixed("secret", "s3cret"))
    with pytest.raises(PermissionDenied) as refused:
        await asyncio.wait_for(unreachable.verify(Attempt(5, "fan-a", "", "human")), 10)
    assert _reason(refused) == ("PROOF_INVALID", "service")


async def test_a_join_through_the_edge_answers_its_proof_of_work(stores: Stores) -> None:
    from edge_svc.config import ChallengeConfig
    from tests.edge.harness import edge_stack, error_of, sign_in

    settings = {"challenge": ChallengeConfig("proof-of-work", pow_bits=8)}
    async with edge_stack(stores, prefix="edge-pow", settings=settings) as stack:
        event_id = await stack.event()
        async with stack.client() as fan, stack.client() as bot:
            await sign_in(fan, "pow-fan")
            await sign_in(bot, "pow-bot")
            join = f"/v1/events/{event_id}/queue:join"
            refused = await bot.post(join, json={})
            assert error_of(refused) == (403, "PERMISSION_DENIED", "PROOF_REQUIRED")
            issued = (await fan.get(f"/v1/events/{event_id}/queue/challenge")).json()
            assert issued["kind"] == "proof-of-work" and issued["difficultyBits"] == 8
            proof = solve(issued["challenge"], issued["difficultyBits"])
            # Another fan cannot use it, and its refusal spends nothing.
            stolen = await bot.post(join, json={}, headers={"Boxoffice-Proof": proof})
            assert error_of(stolen) == (403, "PERMISSION_DENIED", "PROOF_INVALID")
            joined = await fan.post(join, json={}, headers={"Boxoffice-Proof": proof})
            assert joined.status_code == 200, joined.text
            # Joining again while queued needs no new proof (it is idempotent).
            again = await fan.post(join, json={})
            assert again.status_code == 200 and again.json()["position"]["score"] == joined.json()["position"]["score"]
            # The bot, queued nowhere, never got a place.
            position = await bot.get(f"/v1/events/{event_id}/queue/position")
            assert position.json()["position"]["state"] == "QUEUE_STATE_NOT_IN_QUEUE"
            # A spent proof is refused for a fresh session of the same fan too.
            async with stack.client() as again_client:
                await sign_in(again_client, "pow-fan")
                replay = await again_client.post(
                    f"/v1/events/{event_id}/queue:leave", json={}
                )  # leave, so that the next join is a new one
                assert replay.status_code == 200
                reused = await again_client.post(join, json={}, headers={"Boxoffice-Proof": proof})
                assert error_of(reused) == (403, "PERMISSION_DENIED", "PROOF_REUSED")
        # Each refusal at the door is counted for the event's on-sale report.
        client = aioredis.Redis.from_url(stores.redis_url)
        try:
            counted = await client.hgetall(event_key(event_id, "refused"))
        finally:
            await client.aclose()
        assert counted == {b"proof_required": b"1", b"proof_invalid": b"1", b"proof_reused": b"1"}
