"""Lighthouse (npm ``lighthouse``, with the system Chromium) on the waiting
page of a signed-in fan: performance and accessibility at least 90 each.
The report and the scores are written to build/lighthouse/."""

from __future__ import annotations

import asyncio
import json
import os

from tests.browser.harness import CHROMIUM_FLAGS, ROOT, Mesh, chromium_path
from tests.browser.test_waiting import crowd
from tests.edge.harness import sign_in

LIGHTHOUSE = ROOT / "node_modules" / "lighthouse" / "cli" / "index.js"
OUT = ROOT / "build" / "lighthouse"


async def test_lighthouse_scores_the_waiting_page(mesh: Mesh) -> None:
    event_id = await mesh.event(seats=8, max_active=5, paused=True)
    await crowd(mesh, event_id, 120, "lh")
    assert mesh.api is not None
    async with mesh.api.client() as client:
        await sign_in(client, "lighthouse")
        joined = await client.post(f"/v1/events/{event_id}/queue:join", json={})
        assert joined.status_code == 200, joined.text
        cookie = "; ".join(f"{name}={value}" for name, value in client.cookies.items())

    OUT.mkdir(parents=True, exist_ok=True)
    headers = OUT / "headers.json"
    # The fan's cookies (HttpOnly in a browser) reach the page's requests.
    headers.write_text(json.dumps({"Cookie": cookie}))
    report = OUT / "waiting.json"
    process = await asyncio.create_subprocess_exec(
        "node",
        str(LIGHTHOUSE),
        f"{mesh.url}/e/{event_id}",
        "--only-categories=performance,accessibility",
        "--output=json",
        f"--output-path={report}",
        f"--extra-headers={headers}",
        f"--chrome-flags={' '.join(CHROMIUM_FLAGS)}",
        "--max-wait-for-load=20000",
        "--quiet",
        env={**os.environ, "CHROME_PATH": chromium_path()},
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    output, _ = await asyncio.wait_for(process.communicate(), timeout=180)
    assert process.returncode == 0, output.decode()[-3000:]
    result = json.loads(report.read_text())
    # It measured the waiting room itself: the page opened its stream.
    urls = [item["url"] for item in result["audits"]["network-requests"]["details"]["items"]]
    assert any(url.endswith(f"/v1/events/{event_id}/queue/position:watch") for url in urls), urls
    scores = {name: round(category["score"] * 100) for name, category in result["categories"].items()}
    (OUT / "scores.json").write_text(json.dumps(scores) + "\n")
    print(f"lighthouse scores of the waiting page: {scores}")
    failed = {
        audit["id"]: audit.get("displayValue", audit["score"])
        for audit in result["audits"].values()
        if audit.get("score") is not None and audit["score"] < 0.9 and audit.get("scoreDisplayMode") == "binary"
    }
    assert scores["performance"] >= 90, (scores, failed)
    assert scores["accessibility"] >= 90, (scores, failed)
