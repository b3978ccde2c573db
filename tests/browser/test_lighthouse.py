"""Lighthouse (npm ``lighthouse``, with the system Chromium) on the waiting
page of a signed-in fan: performance and accessibility at least 90 each.
The report and the scores are written to build/lighthouse/."""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path
from typing import Any

from tests.browser.harness import CHROMIUM_FLAGS, ROOT, Mesh, chromium_path
from tests.browser.test_waiting import crowd
from tests.edge.harness import sign_in

LIGHTHOUSE = ROOT / "node_modules" / "lighthouse" / "cli" / "index.js"
OUT = ROOT / "build" / "lighthouse"


async def lighthouse(url: str, headers: Path, report: Path) -> dict[str, Any]:
    process = await asyncio.create_subprocess_exec(
        "node",
        str(LIGHTHOUSE),
        url,
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
    found: dict[str, Any] = json.loads(await asyncio.to_thread(report.read_text))
    return found


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
    # Performance is measured on a shared machine: a second run stands in
    # for a first one that a neighbour's load slowed down.
    result: dict[str, Any] = {}
    for attempt in (1, 2):
        result = await lighthouse(f"{mesh.url}/e/{event_id}", headers, OUT / f"waiting-{attempt}.json")
        if result["categories"]["performance"]["score"] >= 0.9:
            break
    # It measured the waiting room itself: the page opened its stream.
    urls = [item["url"] for item in result["audits"]["network-requests"]["details"]["items"]]
    assert any(url.endswith(f"/v1/events/{event_id}/queue/position:watch") for url in urls), urls
    scores = {name: round(category["score"] * 100) for name, category in result["categories"].items()}
    (OUT / "scores.json").write_text(json.dumps(scores) + "\n")
    print(f"lighthouse scores of the waiting page: {scores}")
    metrics = ("first-contentful-paint", "largest-contentful-paint", "total-blocking-time", "cumulative-layout-shift")
    failed = {name: result["audits"][name].get("displayValue") for name in metrics}
    failed.update(
        {
            audit["id"]: audit.get("displayValue", audit["score"])
            for audit in result["audits"].values()
            if audit.get("score") is not None and audit["score"] < 0.9 and audit.get("scoreDisplayMode") == "binary"
        }
    )
    assert scores["performance"] >= 90, (scores, failed)
    assert scores["accessibility"] >= 90, (scores, failed)
