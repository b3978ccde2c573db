"""The waiting list on the fan's page, in a real browser: a sold-out event's
page offers the list (a section or any, and a number of seats), the fan
joins it (taking a place in the queue first), sees their place, and once a
buyer cancels, the offer appears (its seat, price and countdown); "Buy"
goes through the page's own payment to the ticket. Axe-clean in every
language at each step, with no console error but the contract's answers
of a fan who is not on the list yet (404) and an event with no fan draw.
A fan waiting in the room when the last seat sells is offered the list
there, joins it for any section and leaves it."""

from __future__ import annotations

import uuid
from typing import Any

from playwright.async_api import Browser, expect

from tests.browser.harness import Mesh, admitted_client, new_fan
from tests.browser.pages import view
from tests.browser.test_fan import every_language
from tests.e2e.harness import eventually
from tests.edge.fans import buy
from tests.edge.harness import sign_in


async def _sold_out(mesh: Mesh) -> tuple[int, Any, str]:
    """A one-seat event (refunds in full) whose seat a buyer bought through
    the API: the event, the buyer's client and the booking's id."""
    event_id = await mesh.event(seats=1, refund_percent=100)
    buyer = await admitted_client(mesh, f"buyer-{uuid.uuid4().hex[:6]}", event_id)
    held = await buyer.post(f"/v1/events/{event_id}/holds", json={"bestAvailable": {"sectionId": "A", "quantity": 1}})
    assert held.status_code == 200, held.text
    booking_id = held.json()["hold"]["holdId"]
    started = await buyer.post(f"/v1/holds/{booking_id}/payment", json={"paymentMethod": "pm_card_ok"})
    payment_id = started.json()["payment"]["paymentId"]
    paid = await buyer.post(f"/v1/payments/{payment_id}:confirm", headers={"Idempotency-Key": f"pay-{payment_id}"})
    assert paid.json()["payment"]["state"] == "PAYMENT_STATE_SUCCEEDED", paid.text
    await buyer.post(f"/v1/events/{event_id}/queue:leave", json={})
    return event_id, buyer, booking_id


async def test_a_fan_joins_the_waiting_list_of_a_sold_out_event_and_buys_the_offer(
    browser: Browser, mesh: Mesh
) -> None:
    event_id, buyer, booking_id = await _sold_out(mesh)
    assert mesh.api is not None
    name = f"fan-wl-{uuid.uuid4().hex[:6]}"
    async with mesh.api.client() as signing:
        await sign_in(signing, name)
        cookie = signing.cookies["bo_session"]
    fan = await new_fan(browser, mesh.url)
    page = fan.page
    await fan.context.add_cookies([{"name": "bo_session", "value": cookie, "url": mesh.url}])
    await page.goto(f"{mesh.url}/e/{event_id}")
    await view(page, "event")
    # Sold out: no queue to join, the waiting list instead.
    await expect(page.locator("#join")).to_be_disabled()
    await expect(page.locator("#waitlist-form")).to_be_visible()
    await expect(page.locator("#waitlist-status")).to_contain_text("Join the waiting list")
    await expect(page.locator("#waitlist-section option")).to_have_text(["Any section", "Stalls · €45.00"])
    await every_language(page, "waitlist-1-join")
    # Read once: the page's own updates (three languages) do not read it again.
    entry_path = f"/v1/events/{event_id}/waitlist"
    assert [url for url in fan.requests if url.endswith(entry_path)] == [f"{mesh.url}{entry_path}"]

    await page.select_option("#waitlist-section", "A")
    await page.select_option("#waitlist-quantity", "1")
    await page.click("#waitlist-join")
    await expect(page.locator("#waitlist-status")).to_have_text(
        "You are next on the waiting list. You asked for 1 seat in Stalls."
    )
    await expect(page.locator("#waitlist-form")).to_be_hidden()
    await expect(page.locator("#waitlist-leave")).to_be_visible()
    await every_language(page, "waitlist-2-waiting")
    # The fan took a place in the queue on the way.
    async with mesh.api.client(cookies={"bo_session": cookie}) as client:
        position = (await client.get(f"/v1/events/{event_id}/queue/position")).json()["position"]
        assert position["state"] != "QUEUE_STATE_NOT_IN_QUEUE", position

        # The buyer cancels: the seat is offered to the fan, on the page.
        quote = (await buyer.get(f"/v1/bookings/{booking_id}/cancellation")).json()
        cancelled = await buyer.post(
            f"/v1/bookings/{booking_id}:cancel",
            json={"quotedRefund": quote["refund"]},
            headers={"Idempotency-Key": f"cancel-{booking_id}"},
        )
        assert cancelled.status_code == 200, cancelled.text
        await expect(page.locator("#waitlist-offer")).to_be_visible(timeout=30_000)
        await expect(page.locator("#waitlist-seats li")).to_have_text(["Stalls, row K, seat 1"])
        await expect(page.locator("#waitlist-amount")).to_have_text("Total: €45.00")
        await expect(page.locator("#waitlist-countdown")).to_contain_text("The offer ends in 1")
        await every_language(page, "waitlist-3-offer")

        # Buy: the page's own hold and payment view, for the offer's hold.
        await page.click("#waitlist-buy")
        await view(page, "hold")
        await expect(page.locator("#hold-seats li")).to_have_text(["Stalls, row K, seat 1"])
        await page.check("input[value=pm_card_ok]")
        await page.click("#pay")
        await view(page, "tickets", timeout_ms=60_000)
        await expect(page.locator(".ticket")).to_have_count(1)

        async def taken() -> bool | None:
            entry = (await client.get(f"/v1/events/{event_id}/waitlist")).json()["entry"]
            return True if entry["state"] == "WAITLIST_STATE_TAKEN" else None

        await eventually(taken, "the offer is taken")
    # The page asked for the fan's entry before they joined (404: not on the
    # list) and for the event's fan draw (404: it has none); nothing else failed.
    expected = (f"404 GET /v1/events/{event_id}/waitlist", f"404 GET /v1/events/{event_id}/fan-draw")
    assert fan.troubles(*expected) == [] and fan.foreign() == []
    await fan.context.close()
    await buyer.aclose()


async def test_a_waiting_fan_told_sold_out_joins_the_list_and_leaves_it(browser: Browser, mesh: Mesh) -> None:
    event_id = await mesh.event(seats=2, max_active=1)
    buyer = await admitted_client(mesh, f"last-buyer-{uuid.uuid4().hex[:6]}", event_id)
    fan = await new_fan(browser, mesh.url)
    page = fan.page
    try:
        # The one slot is the buyer's: the fan waits; the list is not offered yet.
        await page.goto(f"{mesh.url}/e/{event_id}")
        await view(page, "event")
        await expect(page.locator("#waitlist")).to_be_hidden()
        await page.fill("#sign-in-name", f"fan-wl-{uuid.uuid4().hex[:6]}")
        await page.click("#sign-in button[type=submit]")
        await page.click("#join")
        await view(page, "waiting")
        await expect(page.locator("#live")).to_contain_text("Live")
        await expect(page.locator("#waitlist")).to_be_hidden()
        await buy(buyer, event_id, 2)
        # Sold out: the waiting room says so and offers the list.
        await expect(page.locator("#sold-out")).to_be_visible(timeout=30_000)
        await expect(page.locator("#waitlist-form")).to_be_visible()
        await page.select_option("#waitlist-quantity", "2")
        await page.click("#waitlist-join")
        await expect(page.locator("#waitlist-status")).to_have_text(
            "You are next on the waiting list. You asked for 2 seats in any section."
        )
        await every_language(page, "waitlist-4-waiting-room")
        # Leaving the list: it says so, and the fan may join again.
        await page.click("#waitlist-leave")
        await expect(page.locator("#waitlist-status")).to_have_text(
            "You left the waiting list. You can join it again, at the back."
        )
        await expect(page.locator("#waitlist-form")).to_be_visible()
        await expect(page.locator("#waitlist-leave")).to_be_hidden()
        await expect(page.locator("#waitlist-title")).to_be_focused()
        await every_language(page, "waitlist-5-left")
        assert await page.evaluate("document.body.dataset.view") == "waiting"
        # The page asked for the fan's entry before they joined (404: not on the list).
        assert fan.troubles(f"404 GET /v1/events/{event_id}/waitlist", f"404 GET /v1/events/{event_id}/fan-draw") == []
        assert fan.foreign() == []
    finally:
        await buyer.aclose()
        await fan.context.close()
