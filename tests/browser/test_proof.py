"""The home page, and the page's proof-of-work worker (for the edge's bot defence) runs under
the pages' CSP and finds a proof the edge's own check accepts as work."""

from __future__ import annotations

import base64
import hashlib
import json
import time

from playwright.async_api import Browser

from edge_svc.challenge import leading_zero_bits
from edge_svc.config import ChallengeConfig
from edge_svc.pages import Pages
from tests.browser.harness import Mesh, new_fan
from tests.browser.pages import check_axe, shoot, switch_language, view

BITS = 12
# The edge's default difficulty.
POW_BITS = 18


def challenge_of(bits: int) -> str:
    payload = json.dumps({"e": 1, "c": "fan", "d": bits, "i": "00ff", "x": 2_000_000_000}, separators=(",", ":"))
    encoded = base64.urlsafe_b64encode(payload.encode()).rstrip(b"=").decode()
    return f"v1.dev.{encoded}.not-checked-here"


async def test_the_worker_finds_a_proof_of_work(browser: Browser, mesh: Mesh) -> None:
    worker = Pages(dev_sign_in=True).site.names["pow.js"]
    fan = await new_fan(browser, mesh.url)
    page = fan.page
    await page.goto(f"{mesh.url}/")
    await view(page, "home")
    # Challenges of several lengths: the nonce's last block is sometimes one,
    # sometimes two blocks of SHA-256.
    for pad in range(0, 64, 9):
        challenge = challenge_of(BITS) + "x" * pad
        found = await page.evaluate(
            """([url, challenge]) => new Promise((resolve, reject) => {
                const worker = new Worker(url);
                worker.onmessage = e => resolve(e.data);
                worker.onerror = e => reject(new Error(e.message));
                worker.postMessage({challenge});
            })""",
            [f"/assets/{worker}", challenge],
        )
        proof = found["proof"]
        assert proof.startswith(challenge + ":")
        assert leading_zero_bits(hashlib.sha256(proof.encode()).digest()) >= BITS
        # Found by the worker's own SHA-256 (the slow fallback was not needed).
        assert found["engine"] == "own", found
    # The home page itself, in every language.
    for lang in ("vi", "pt-BR", "en"):
        await switch_language(page, lang)
        await check_axe(page, f"home ({lang})")
        await shoot(page, f"0-home-{lang}")
    assert fan.foreign() == []
    await fan.context.close()


async def test_a_join_the_edge_asks_a_proof_of_work_for_gets_in(browser: Browser, mesh: Mesh) -> None:
    event_id = await mesh.event(seats=8, max_active=5)
    await mesh.restart_edge({"challenge": ChallengeConfig("proof-of-work", pow_bits=POW_BITS)})
    try:
        fan = await new_fan(browser, mesh.url)
        page = fan.page
        await page.goto(f"{mesh.url}/e/{event_id}")
        await view(page, "event")
        await page.fill("#sign-in-name", "hana")
        await page.click("#sign-in button[type=submit]")
        started = time.monotonic()
        await page.click("#join")
        await view(page, "shop", timeout_ms=60_000)
        print(f"a proof of {POW_BITS} bits took {time.monotonic() - started:.1f} s from the click to the seat map")
        assert any(url.endswith(f"/v1/events/{event_id}/queue/challenge") for url in fan.requests)
        assert fan.foreign() == []
        await fan.context.close()
    finally:
        await mesh.restart_edge()
