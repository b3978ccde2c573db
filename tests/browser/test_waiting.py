"""The waiting room in a real browser: the place, ETA, progress and the
room's state, live over Server-Sent Events; a reload and a second tab keep
the one place; an edge restarted mid-wait and the page recovers by itself,
then lets the fan in when admission resumes; the last seat sold and the
page says sold out."""

from __future__ import annotations

import asyncio
from typing import Any

from playwright.async_api import Browser, Page, expect

from tests.browser.harness import Mesh, admitted_client, new_fan
from tests.browser.pages import check_axe, shoot, switch_language, view
from tests.e2e.harness import eventually
from tests.edge.fans import buy
from tests.edge.harness import sign_in


async def crowd(mesh: Mesh, event_id: int, count: int, prefix: str) -> None:
    """``count`` fans join through the API (and stay in the queue)."""
    assert mesh.api is not None

    async def one(i: int) -> None:
        async with mesh.api.client() as client:  # type: ignore[union-attr]
            await sign_in(client, f"{prefix}-{i}")
            reply = await client.post(f"/v1/events/{event_id}/queue:join", json={})
            assert reply.status_code == 200, reply.text

    await asyncio.gather(*(one(i) for i in range(count)))


async def position(page: Page, event_id: int) -> dict[str, Any]:
    reply = await page.evaluate(
        "id => fetch(`/v1/events/${id}/queue/position`, {credentials: 'same-origin'}).then(r => r.json())",
        str(event_id),
    )
    found: dict[str, Any] = reply["position"]
    return found


async def join_in_browser(page: Page, url: str, event_id: int, name: str) -> None:
    await page.goto(f"{url}/e/{event_id}")
    await view(page, "event")
    await page.fill("#sign-in-name", name)
    await page.click("#sign-in button[type=submit]")
    await page.click("#join")
    await view(page, "waiting")


async def test_a_reload_and_a_second_tab_keep_the_place(browser: Browser, mesh: Mesh) -> None:
    event_id = await mesh.event(seats=8, max_active=5, paused=True)
    await crowd(mesh, event_id, 37, "ahead")
    fan = await new_fan(browser, mesh.url)
    page = fan.page
    await join_in_browser(page, mesh.url, event_id, "cara")
    await expect(page.locator("#place")).to_have_text("About 35 people ahead of you")
    await expect(page.locator("#room-state")).to_contain_text("paused")
    await expect(page.locator("#live")).to_contain_text("Live")
    for lang in ("vi", "pt-BR", "en"):
        await switch_language(page, lang)
        await check_axe(page, f"waiting ({lang})")
        await shoot(page, f"2-waiting-{lang}")
    before = await position(page, event_id)
    assert before["state"] == "QUEUE_STATE_WAITING"

    await page.reload()
    await view(page, "waiting")
    await expect(page.locator("#place")).to_have_text("About 35 people ahead of you")
    after = await position(page, event_id)
    assert after["score"] == before["score"]

    second = await fan.context.new_page()
    await second.goto(f"{mesh.url}/e/{event_id}")
    await view(second, "waiting")
    await expect(second.locator("#place")).to_have_text("About 35 people ahead of you")
    assert (await position(second, event_id))["score"] == before["score"]
    assert fan.foreign() == []
    await fan.context.close()


async def test_the_page_recovers_from_an_edge_restarted_mid_wait(browser: Browser, mesh: Mesh) -> None:
    event_id = await mesh.event(seats=8, max_active=5, paused=True)
    fan = await new_fan(browser, mesh.url)
    page = fan.page
    await join_in_browser(page, mesh.url, event_id, "dan")
    await expect(page.locator("#live")).to_contain_text("Live")
    await expect(page.locator("#room-state")).to_contain_text("paused")

    await mesh.restart_edge()
    assert mesh.api is not None
    streams = mesh.api.edge.deps.metrics.sse_connections
    assert streams._value.get() == 0

    # The page noticed the stream end and is back on a stream of the new edge.
    async def reconnected() -> bool | None:
        return True if streams._value.get() == 1 else None

    await eventually(reconnected, "the page's stream on the new edge", seconds=30.0)
    await expect(page.locator("#live")).to_contain_text("Live")
    assert await page.evaluate("document.body.dataset.view") == "waiting"

    await mesh.resume(event_id)
    await view(page, "shop", timeout_ms=30_000)
    await expect(page.locator("#map")).to_be_visible()
    assert fan.foreign() == []
    await fan.context.close()


async def test_without_a_stream_the_page_polls_the_progress_and_gets_in(browser: Browser, mesh: Mesh) -> None:
    event_id = await mesh.event(seats=8, max_active=5, paused=True)
    await crowd(mesh, event_id, 3, "poll")
    fan = await new_fan(browser, mesh.url)
    page = fan.page
    # Server-Sent Events never get through (a proxy that buffers them, say).
    await page.route("**/queue/position:watch", lambda route: route.abort())
    await join_in_browser(page, mesh.url, event_id, "flo")
    await expect(page.locator("#live")).to_contain_text("Reconnecting")
    await expect(page.locator("#place")).to_have_text("3 people ahead of you")
    await expect(page.locator("#room-state")).to_contain_text("paused")

    async def polled() -> bool | None:
        return True if any(url.endswith(f"/v1/events/{event_id}/queue/progress") for url in fan.requests) else None

    await eventually(polled, "a poll of the progress document", seconds=20.0)
    await mesh.resume(event_id)
    await view(page, "shop", timeout_ms=40_000)
    assert fan.foreign() == []
    await fan.context.close()


async def test_the_page_says_sold_out_when_the_last_seat_sells(browser: Browser, mesh: Mesh) -> None:
    event_id = await mesh.event(seats=2, max_active=1)
    buyer = await admitted_client(mesh, "last-buyer", event_id)
    fan = await new_fan(browser, mesh.url)
    page = fan.page
    try:
        # The one slot is the buyer's: the fan waits, the stream live.
        await join_in_browser(page, mesh.url, event_id, "dana")
        await expect(page.locator("#live")).to_contain_text("Live")
        await expect(page.locator("#sold-out")).to_be_hidden()
        await buy(buyer, event_id, 2)
        await expect(page.locator("#sold-out")).to_be_visible(timeout=30_000)
        await expect(page.locator("#room-state")).to_have_text("Sold out")
        for lang, says in (("vi", "Đã bán hết"), ("pt-BR", "Esgotado"), ("en", "Sold out")):
            await switch_language(page, lang)
            await expect(page.locator("#room-state")).to_have_text(says)
            await check_axe(page, f"waiting, sold out ({lang})")
        # The fan keeps their place; the stream ended with the news.
        assert (await position(page, event_id))["admissionState"] == "ADMISSION_STATE_SOLD_OUT"
        assert await page.evaluate("document.body.dataset.view") == "waiting"
        assert fan.foreign() == []
    finally:
        await buyer.aclose()
        await fan.context.close()
