"""Every page in every language loads and works without a console error or
a failed request: a fan opened in English, Vietnamese and Brazilian
Portuguese goes from the home page and the event page through the waiting
room, the seat map and the hold to tickets, and the browser reports no
error, no failed request and no answer of 400 or more (but the "who is
signed in" probe's 401 before sign-in, and the 404 of an event's
verified-fan draw when it has none). A page that preloads an asset it
never built, as ``{{i18n.js}}`` once was, fails here."""

from __future__ import annotations

from playwright.async_api import Browser, expect

from tests.browser.harness import Mesh, new_fan
from tests.browser.pages import view


async def test_no_page_logs_an_error_or_fails_a_request_in_any_language(browser: Browser, mesh: Mesh) -> None:
    for lang in ("en", "vi", "pt-BR"):
        event_id = await mesh.event(seats=8, max_active=5, paused=True)
        fan = await new_fan(browser, mesh.url, lang=lang)
        page = fan.page
        try:
            await page.goto(f"{mesh.url}/")
            await view(page, "home")
            # Its reads done (the list of events), so that leaving aborts none of them.
            await page.wait_for_load_state("networkidle")
            await page.goto(f"{mesh.url}/e/{event_id}")
            await view(page, "event")
            await page.wait_for_function("lang => document.documentElement.lang === lang", arg=lang)
            await page.fill("#sign-in-name", f"clean-{lang}")
            await page.click("#sign-in button[type=submit]")
            await page.click("#join")
            await view(page, "waiting")
            await mesh.resume(event_id)
            await view(page, "shop", timeout_ms=60_000)
            await page.select_option("#best-qty", "2")
            await page.click("#hold-best")
            await view(page, "hold")
            await page.check("input[value=pm_card_ok]")
            await page.click("#pay")
            await view(page, "tickets", timeout_ms=60_000)
            await expect(page.locator(".ticket")).to_have_count(2)
            # An event without a verified-fan draw answers its draw NOT_FOUND
            # (the contract's FAN_DRAW_NOT_FOUND), which the event page asks once signed in.
            no_draw = f"404 GET /v1/events/{event_id}/fan-draw"
            assert fan.troubles(no_draw) == [], f"{lang}: {fan.troubles(no_draw)}"
            assert fan.foreign() == []
        finally:
            await fan.context.close()
