"""The home page, and the page's proof-of-work worker (for the edge's bot defence) runs under
the pages' CSP and finds a proof the edge's own check accepts as work."""

from __future__ import annotations

import base64
import hashlib
import json

from playwright.async_api import Browser

from edge_svc.challenge import leading_zero_bits
from edge_svc.pages import Pages
from tests.browser.harness import Mesh, new_fan
from tests.browser.pages import check_axe, shoot, switch_language, view

BITS = 14


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
    challenge = challenge_of(BITS)
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
    assert found["tries"] >= 1
    # The home page itself, in every language.
    for lang in ("vi", "pt-BR", "en"):
        await switch_language(page, lang)
        await check_axe(page, f"home ({lang})")
        await shoot(page, f"0-home-{lang}")
    assert fan.foreign() == []
    await fan.context.close()
