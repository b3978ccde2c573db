"""Every page in every language loads and works without a console error or
a failed request: a fan opened in English, Vietnamese and Brazilian
Portuguese goes from the home page and the event page through the waiting
room, the seat map and the hold to tickets, and the browser reports no
error, no failed request and no answer of 400 or more (but the "who is
signed in" probe's 401 before sign-in, and the 404 of an event's
verified-fan draw when it has none). The gate page, provisioned by a
gate link, judges the fan's code with no error either. A page that
preloads an asset it never built, as ``{{i18n.js}}`` once was, fails here."""

from __future__ import annotations

import re

from playwright.async_api import Browser, expect

from boxoffice import access
from gen.boxoffice.checkin.v1 import checkin_service_pb2 as cpb
from gen.boxoffice.checkin.v1 import checkin_service_pb2_grpc as cpb_grpc
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
            code = await page.locator(".ticket code").first.inner_text()
        finally:
            await fan.context.close()
        admin = mesh.operators["checkin"].stub(cpb_grpc.CheckInAdminServiceStub, role=access.OPERATOR)
        key = (await admin.CreateGateDevice(cpb.CreateGateDeviceRequest(event_id=event_id, name="Clean gate"))).key
        staff = await new_fan(browser, mesh.url, lang=lang)
        try:
            await staff.page.goto(f"{mesh.url}/gate#event={event_id}&key={key}&gate=clean-1")
            await view(staff.page, "gate")
            await staff.page.wait_for_function("() => document.body.dataset.ready === 'true'")
            await staff.page.fill("#typed", code)
            await staff.page.click("#typed-form button[type=submit]")
            await expect(staff.page.locator("#verdict")).to_have_attribute("data-result", re.compile(r"^[A-Z_]+$"))
            assert staff.troubles() == [], f"{lang} gate: {staff.troubles()}"
            assert staff.foreign() == []
        finally:
            await staff.context.close()
