"""The home page is the catalogue: a fan searches for a flight from it by
keyboard (from, to, date), finds it in the list with its local time, route,
from-price and availability, follows its link to the event page and reaches
its seat map; the page passes axe-core in every language; a word search
ignores accents."""

from __future__ import annotations

import secrets
import string
from datetime import UTC, datetime, timedelta

from google.protobuf import timestamp_pb2
from playwright.async_api import Browser, Page, expect

from gen.boxoffice.booking.v1 import booking_service_pb2 as bpb
from gen.boxoffice.booking.v1 import booking_service_pb2_grpc as bpb_grpc
from gen.boxoffice.queue.v1 import queue_service_pb2 as qpb
from gen.boxoffice.queue.v1 import queue_service_pb2_grpc as qpb_grpc
from tests.browser.harness import Mesh, new_fan
from tests.browser.pages import check_axe, shoot, switch_language, view

HCM = "Asia/Ho_Chi_Minh"


def _ts(value: datetime) -> timestamp_pb2.Timestamp:
    out = timestamp_pb2.Timestamp()
    out.FromDatetime(value)
    return out


def airport() -> str:
    """A made-up airport code, so that only this test's flight flies it."""
    return "Q" + "".join(secrets.choice(string.ascii_uppercase) for _ in range(2))


async def flight(mesh: Mesh, origin: str, destination: str, departs: datetime, name: str) -> int:
    """A flight with 12 seats in fare class Y and its open waiting room."""
    event_id = int(secrets.randbits(40)) + 10**6
    booking = mesh.operators["booking"].stub(bpb_grpc.BookingServiceStub)
    await booking.CreateEvent(
        bpb.CreateEventRequest(
            event_id=event_id,
            display_name=name,
            kind=bpb.EVENT_KIND_FLIGHT,
            starts_at=_ts(departs),
            time_zone=HCM,
            flight=bpb.Flight(
                flight_code="VN213",
                origin=origin,
                destination=destination,
                departs_at=_ts(departs),
                arrives_at=_ts(departs + timedelta(hours=2, minutes=10)),
            ),
            sections=[
                bpb.SectionSpec(
                    section_id="Y",
                    display_name="Economy",
                    kind=bpb.SECTION_KIND_SEATED,
                    price=bpb.Money(currency_code="VND", amount_minor=1500000),
                )
            ],
        )
    )
    await booking.LoadInventory(
        bpb.LoadInventoryRequest(
            event_id=event_id,
            rows=[bpb.SeatRowSpec(section_id="Y", row_label=str(r), first_seat_number=1, seat_count=6) for r in (1, 2)],
        )
    )
    queue = mesh.operators["queue"].stub(qpb_grpc.QueueServiceStub)
    await queue.CreateEventQueue(
        qpb.CreateEventQueueRequest(
            config=qpb.EventQueueConfig(
                event_id=event_id,
                opens_at=_ts(datetime.now(UTC) - timedelta(seconds=1)),
                admission_rate_per_second=100,
                max_active_shoppers=5,
            )
        )
    )
    return event_id


async def tab_to(page: Page, selector: str, limit: int = 60) -> None:
    """Presses Tab until ``selector`` has the focus."""
    for _ in range(limit):
        if await page.evaluate("s => document.activeElement === document.querySelector(s)", selector):
            return
        await page.keyboard.press("Tab")
    raise AssertionError(f"Tab never reached {selector}")


async def test_a_fan_searches_a_flight_from_the_home_page_and_reaches_its_seat_map(
    browser: Browser, mesh: Mesh
) -> None:
    origin, destination = airport(), airport()
    # 00:30 in Ho Chi Minh City: on the 20th there, on the 19th in UTC.
    day = (datetime.now(UTC) + timedelta(days=40)).date()
    departs = datetime(day.year, day.month, day.day, tzinfo=UTC) - timedelta(hours=7) + timedelta(minutes=30)
    tag = secrets.token_hex(3)
    event_id = await flight(mesh, origin, destination, departs, f"Chuyến bay đêm {tag}")
    fan = await new_fan(browser, mesh.url)
    page = fan.page
    await page.goto(f"{mesh.url}/")
    await view(page, "home")
    await expect(page.locator("#event-number, #home-event")).to_have_count(0)
    # By keyboard: from, to and date, then Enter.
    await tab_to(page, "#flight-from")
    await page.keyboard.type(origin.lower())
    await page.keyboard.press("Tab")
    await page.keyboard.type(destination)
    await page.keyboard.press("Tab")
    await page.fill("#flight-date", day.isoformat())
    await page.keyboard.press("Enter")
    results = page.locator("#results .listing")
    await expect(results).to_have_count(1)
    item = results.first
    await expect(item).to_contain_text(f"Chuyến bay đêm {tag}")
    await expect(item).to_contain_text(f"Flight VN213: {origin} → {destination}")
    await expect(item).to_contain_text("12:30 AM")  # the local time, not UTC's 5:30 PM
    await expect(item).to_contain_text("On sale")
    await expect(item).to_contain_text("₫1,500,000")
    assert f"origin={origin}" in page.url and f"date={day.isoformat()}" in page.url
    for lang in ("vi", "pt-BR", "en"):
        await switch_language(page, lang)
        await check_axe(page, f"catalogue ({lang})")
        await shoot(page, f"0-catalogue-{lang}")
    await expect(item).to_contain_text("On sale")
    # A word search without the accents finds it too.
    await page.fill("#search-q", f"chuyen bay dem {tag}")
    # Its answer awaited: the flight search's list shows the same one listing.
    async with page.expect_response(lambda reply: "/v1/events?q=" in reply.url) as searched:
        await page.keyboard.press("Enter")
    assert (await searched.value).ok
    await expect(page.locator("#results .listing")).to_have_count(1)
    await expect(page.locator("#results .listing a")).to_have_attribute("href", f"/e/{event_id}")
    # Its link, by keyboard, to the event page; then in to the seat map.
    await tab_to(page, "#results .listing a")
    await page.keyboard.press("Enter")
    await view(page, "event")
    assert page.url == f"{mesh.url}/e/{event_id}"
    await expect(page.locator("#event-when")).to_contain_text("12:30 AM")
    await page.fill("#sign-in-name", f"flyer-{tag}")
    await page.click("#sign-in button[type=submit]")
    await page.click("#join")
    await view(page, "shop")
    await expect(page.locator("#map")).to_be_visible()
    await expect(page.locator("#section-choice")).to_contain_text("Economy")
    assert fan.foreign() == []
    # The event page asks for a verified-fan draw this event does not have.
    assert fan.troubles(f"404 GET /v1/events/{event_id}/fan-draw") == []
    await fan.context.close()


async def test_nothing_found_is_said_and_pages_move_by_keyboard(browser: Browser, mesh: Mesh) -> None:
    origin, destination = airport(), airport()
    start = datetime.now(UTC) + timedelta(days=50)
    made = [await flight(mesh, origin, destination, start + timedelta(hours=i), f"Page {i}") for i in range(23)]
    fan = await new_fan(browser, mesh.url, lang="vi")
    page = fan.page
    await page.goto(f"{mesh.url}/?kind=flight&origin={origin}&destination={destination}")
    await view(page, "home")
    await expect(page.locator("#results .listing")).to_have_count(20)
    await expect(page.locator("#page-prev")).to_be_hidden()
    await tab_to(page, "#page-next")
    await page.keyboard.press("Enter")
    await expect(page.locator("#results .listing")).to_have_count(3)
    links = await page.locator("#results .listing a").evaluate_all("as => as.map(a => a.getAttribute('href'))")
    assert links == [f"/e/{e}" for e in made[20:]]
    await expect(page.locator("#page-next")).to_be_hidden()
    await tab_to(page, "#page-prev")
    await page.keyboard.press("Enter")
    await expect(page.locator("#results .listing")).to_have_count(20)
    await page.fill("#flight-from", airport())
    await page.click("#flight-form button[type=submit]")
    await expect(page.locator("#results-status")).to_contain_text("Không tìm thấy")
    await check_axe(page, "catalogue, nothing found (vi)")
    assert fan.troubles() == []
    await fan.context.close()
