"""What the browser tests do with a page: wait for a view, run axe-core in
it, take its screenshots, read a canvas."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from playwright.async_api import Page

from tests.browser.harness import ROOT, SHOTS

AXE = ROOT / "node_modules" / "axe-core" / "axe.min.js"
# WCAG 2.0, 2.1 and 2.2, levels A and AA.
AXE_TAGS = ["wcag2a", "wcag2aa", "wcag21a", "wcag21aa", "wcag22aa"]


async def view(page: Page, name: str, timeout_ms: float = 30_000) -> None:
    """Waits until the page shows view ``name`` (``event``, ``waiting``, ...)."""
    await page.wait_for_function("name => document.body.dataset.view === name", arg=name, timeout=timeout_ms)


async def axe(page: Page) -> list[dict[str, Any]]:
    """The serious and critical violations axe-core finds in the page as it is."""
    if not await page.evaluate("typeof window.axe !== 'undefined'"):
        # Evaluated over the DevTools protocol: the page's CSP (no inline
        # script) does not apply to it, and the page itself is not changed.
        await page.evaluate(AXE.read_text() + "\n;true")
    result = await page.evaluate(
        "tags => axe.run(document, {runOnly: {type: 'tag', values: tags}, resultTypes: ['violations']})"
        ".then(r => r.violations.map(v => ({id: v.id, impact: v.impact, help: v.help,"
        " nodes: v.nodes.map(n => n.target.join(' ')).slice(0, 5)})))",
        AXE_TAGS,
    )
    return [v for v in result if v["impact"] in ("serious", "critical")]


async def check_axe(page: Page, where: str) -> None:
    violations = await axe(page)
    assert violations == [], f"{where}: " + json.dumps(violations, indent=1)


async def shoot(page: Page, name: str) -> Path:
    SHOTS.mkdir(parents=True, exist_ok=True)
    path = SHOTS / f"{name}.png"
    await page.screenshot(path=str(path), full_page=True)
    return path


async def switch_language(page: Page, lang: str) -> None:
    await page.select_option("#lang", lang)
    await page.wait_for_function("lang => document.documentElement.lang === lang", arg=lang)


async def canvas_gray(page: Page, selector: str) -> tuple[int, int, bytes]:
    """A canvas's pixels as grayscale bytes: (width, height, pixels)."""
    width, height, pixels = await page.eval_on_selector(
        selector,
        """c => {
            const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
            const g = [];
            for (let i = 0; i < d.length; i += 4) g.push(Math.round((d[i] + d[i + 1] + d[i + 2]) / 3));
            return [c.width, c.height, g];
        }""",
    )
    return int(width), int(height), bytes(pixels)
