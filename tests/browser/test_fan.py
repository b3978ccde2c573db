"""A fan in a real browser, from the event page to tickets: sign in, join,
admitted, the seat map by keyboard, hold, pay with the sandbox's card, and
tickets whose QR codes a real decoder reads. Every page passes axe-core in
every language, and is photographed in each; nothing is requested from any
origin but the edge's."""

from __future__ import annotations

import time

import zxingcpp
from playwright.async_api import Browser, Page, expect

from boxoffice import ticketcodes
from gen.boxoffice.booking.v1 import booking_service_pb2 as bpb
from gen.boxoffice.booking.v1 import booking_service_pb2_grpc as bpb_grpc
from tests.browser.harness import Mesh, admitted_client, new_fan
from tests.browser.pages import canvas_gray, check_axe, shoot, switch_language, view

LANGS = ("vi", "pt-BR", "en")


async def every_language(page: object, name: str) -> None:
    """axe-core and a screenshot of the page as it is, in each language
    (switched with the page's own control), ending in English."""
    for lang in LANGS:
        await switch_language(page, lang)  # type: ignore[arg-type]
        await check_axe(page, f"{name} ({lang})")  # type: ignore[arg-type]
        await shoot(page, f"{name}-{lang}")  # type: ignore[arg-type]


async def test_a_fan_from_the_event_page_to_tickets(browser: Browser, mesh: Mesh) -> None:
    event_id = await mesh.event(seats=30, standing=40, max_active=5)
    booking = mesh.operators["booking"].stub(bpb_grpc.BookingServiceStub)
    await booking.LoadInventory(
        bpb.LoadInventoryRequest(
            event_id=event_id,
            rows=[
                bpb.SeatRowSpec(section_id="A", row_label=row, first_seat_number=1, seat_count=30) for row in "LMNOPQR"
            ],
        )
    )
    # Other fans hold some seats already: the map shows them taken.
    early = await admitted_client(mesh, "early-bird", event_id)
    taken = await early.post(f"/v1/events/{event_id}/holds", json={"bestAvailable": {"sectionId": "A", "quantity": 3}})
    assert taken.status_code == 200, taken.text
    rows = {
        row["rowLabel"]: int(row["firstSeatId"])
        for row in (await early.get(f"/v1/events/{event_id}/seatmap")).json()["sections"][0]["rows"]
    }
    await early.aclose()
    for name, row, first in (("fan-m", "M", 11), ("fan-o", "O", 4), ("fan-q", "Q", 20)):
        other = await admitted_client(mesh, name, event_id)
        seats = [str(rows[row] + first - 1 + i) for i in range(4)]
        held = await other.post(f"/v1/events/{event_id}/holds", json={"seats": {"seatIds": seats}})
        assert held.status_code == 200, held.text
        await other.post(f"/v1/events/{event_id}/queue:leave", json={})
        await other.aclose()

    fan = await new_fan(browser, mesh.url)
    page = fan.page
    await page.goto(f"{mesh.url}/e/{event_id}")
    await view(page, "event")
    await expect(page.locator("#event-title")).to_have_text("Edge test")
    await every_language(page, "1-event")

    await page.fill("#sign-in-name", "ana")
    await page.press("#sign-in-name", "Enter")
    await expect(page.locator("#join")).to_be_visible()
    await expect(page.locator("#who")).to_contain_text("ana")
    await page.click("#join")
    await view(page, "shop")
    await expect(page.locator("#map")).to_be_visible()

    # The whole choice by keyboard: focus the map, move, select two seats.
    await page.focus("#map")
    await page.keyboard.press("Home")
    await expect(page.locator("#map-focus")).to_contain_text("Row K, seat 1: taken")
    for _ in range(5):
        await page.keyboard.press("ArrowRight")
    await expect(page.locator("#map-focus")).to_contain_text("seat 6: available")
    await page.keyboard.press("Space")
    await page.keyboard.press("ArrowRight")
    await page.keyboard.press("Enter")
    await expect(page.locator("#picked")).to_contain_text("K6, K7")
    await every_language(page, "3-seatmap")

    await page.click("#hold-picked")
    await view(page, "hold")
    await expect(page.locator("#hold-seats")).to_contain_text("row K, seat 6")
    await expect(page.locator("#countdown")).to_contain_text(":")
    await every_language(page, "4-hold")

    await page.check("input[value=pm_card_ok]")
    await page.click("#pay")
    await view(page, "tickets", timeout_ms=60_000)
    tickets = page.locator(".ticket")
    await expect(tickets).to_have_count(2)
    await every_language(page, "5-tickets")

    # Each QR code, as drawn on the page, reads back as its ticket's code
    # rotating now: the signed code, this 30-second step (or the next, if
    # it turned meanwhile) and a mac under the ticket's secret.
    for i in range(2):
        code = await tickets.nth(i).locator("code").inner_text()
        assert ticketcodes.looks_signed(code)
        step = ticketcodes.rotation_step(time.time())
        width, height, pixels = await canvas_gray(page, f".ticket:nth-child({i + 1}) canvas")
        found = zxingcpp.read_barcodes(memoryview(pixels).cast("B", (height, width)))
        assert len(found) == 1, found
        rotating = ticketcodes.split_rotating(found[0].text)
        assert rotating is not None and rotating.code == code, found[0].text
        assert rotating.step in (step, step + 1), (rotating.step, step)

    # The fan's session ended with the purchase: their place went to the next fan.
    position = await page.evaluate("id => fetch(`/v1/events/${id}/queue/position`).then(r => r.json())", str(event_id))
    assert position["position"]["state"] != "QUEUE_STATE_ADMITTED"
    assert fan.foreign() == []
    await fan.context.close()


async def test_a_seat_taken_between_render_and_click_shows_as_taken(browser: Browser, mesh: Mesh) -> None:
    event_id = await mesh.event(seats=10, max_active=5)
    fan = await new_fan(browser, mesh.url)
    page = fan.page
    await page.goto(f"{mesh.url}/e/{event_id}")
    await view(page, "event")
    await page.fill("#sign-in-name", "bia")
    await page.click("#sign-in button[type=submit]")
    await page.click("#join")
    await view(page, "shop")
    await expect(page.locator("#map")).to_be_visible()
    await page.focus("#map")
    await page.keyboard.press("Home")
    await page.keyboard.press("ArrowRight")
    await page.keyboard.press("ArrowRight")
    await expect(page.locator("#map-focus")).to_contain_text("Row K, seat 3: available")

    # Meanwhile another fan takes K3 through the API.
    rival = await admitted_client(mesh, "rival", event_id)
    seatmap = (await rival.get(f"/v1/events/{event_id}/seatmap")).json()
    row = seatmap["sections"][0]["rows"][0]
    k3 = int(row["firstSeatId"]) + 2
    held = await rival.post(f"/v1/events/{event_id}/holds", json={"seats": {"seatIds": [str(k3)]}})
    assert held.status_code == 200, held.text
    await rival.aclose()

    # The page still shows it free; the fan picks it and asks to hold it.
    await page.keyboard.press("Space")
    await page.keyboard.press("ArrowRight")
    await page.keyboard.press("Space")
    await expect(page.locator("#picked")).to_contain_text("K3, K4")
    await page.click("#hold-picked")
    message = page.locator("#shop-message")
    await expect(message).to_be_visible()
    await expect(message).to_contain_text("Someone else just took K3")
    # K3 is now drawn taken, and the fan's choice keeps only K4.
    await expect(page.locator("#picked")).to_contain_text("K4")
    await expect(page.locator("#picked")).not_to_contain_text("K3")
    await page.focus("#map")
    await page.keyboard.press("Home")
    await page.keyboard.press("ArrowRight")
    await page.keyboard.press("ArrowRight")
    await expect(page.locator("#map-focus")).to_contain_text("Row K, seat 3: taken")
    await check_axe(page, "seat taken")
    await shoot(page, "seat-taken-en")
    assert fan.foreign() == []
    await fan.context.close()


async def tab_to(page: Page, selector: str) -> None:
    """Presses Tab until ``selector`` has the focus (as a keyboard user would)."""
    for _ in range(40):
        if await page.evaluate("s => document.activeElement && document.activeElement.matches(s)", selector):
            return
        await page.keyboard.press("Tab")
    raise AssertionError(f"{selector} cannot be reached with Tab")


async def test_the_whole_flow_by_keyboard(browser: Browser, mesh: Mesh) -> None:
    event_id = await mesh.event(seats=10, max_active=5)
    fan = await new_fan(browser, mesh.url)
    page = fan.page
    await page.goto(f"{mesh.url}/e/{event_id}")
    await view(page, "event")
    await tab_to(page, "#sign-in-name")
    await page.keyboard.type("kim")
    await page.keyboard.press("Enter")
    await expect(page.locator("#join")).to_be_visible()
    await tab_to(page, "#join")
    await page.keyboard.press("Enter")
    await view(page, "shop")
    await expect(page.locator("#map")).to_be_visible()
    await tab_to(page, "#map")
    await page.keyboard.press("ArrowRight")
    await page.keyboard.press("Space")
    await tab_to(page, "#hold-picked")
    await page.keyboard.press("Enter")
    await view(page, "hold")
    await expect(page.locator("#hold-seats")).to_contain_text("row K, seat 2")
    await tab_to(page, "#pay")
    await page.keyboard.press("Enter")
    await view(page, "tickets", timeout_ms=60_000)
    await expect(page.locator(".ticket")).to_have_count(1)
    assert fan.foreign() == []
    await fan.context.close()
