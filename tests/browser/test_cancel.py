"""A fan cancels a booking on the tickets page, in a real browser: the quote
comes first (what is refunded, of what, until when), then the cancel, after
which the booking's tickets leave the page and the money goes back (read
through the API). A booking whose event refunds nothing says so and offers
no cancel. Axe-clean in every language at each step, with no console error."""

from __future__ import annotations

import uuid
from typing import Any

from playwright.async_api import Browser, expect

from tests.browser.harness import Mesh, admitted_client, new_fan
from tests.browser.pages import switch_language, view
from tests.browser.test_fan import every_language
from tests.e2e.harness import eventually


async def _bought(mesh: Mesh, name: str, event_id: int, quantity: int) -> tuple[Any, str, str]:
    """A fan who bought ``quantity`` seats through the API and left the
    queue: (their client, the booking's id, the payment's id), once the
    tickets are issued."""
    client = await admitted_client(mesh, name, event_id)
    held = await client.post(
        f"/v1/events/{event_id}/holds", json={"bestAvailable": {"sectionId": "A", "quantity": quantity}}
    )
    assert held.status_code == 200, held.text
    booking_id = held.json()["hold"]["holdId"]
    started = await client.post(f"/v1/holds/{booking_id}/payment", json={"paymentMethod": "pm_card_ok"})
    payment_id = started.json()["payment"]["paymentId"]
    paid = await client.post(f"/v1/payments/{payment_id}:confirm", headers={"Idempotency-Key": f"pay-{payment_id}"})
    assert paid.json()["payment"]["state"] == "PAYMENT_STATE_SUCCEEDED", paid.text

    async def issued() -> bool | None:
        reply = await client.get(f"/v1/events/{event_id}/tickets", params={"holdId": booking_id})
        return True if len(reply.json()["tickets"]) == quantity else None

    await eventually(issued, "tickets issued")
    await client.post(f"/v1/events/{event_id}/queue:leave", json={})
    return client, booking_id, payment_id


async def test_a_fan_cancels_a_booking_from_the_tickets_page_after_reading_the_quote(
    browser: Browser, mesh: Mesh
) -> None:
    event_id = await mesh.event(seats=6, refund_percent=80)
    name = f"fan-cancel-{uuid.uuid4().hex[:6]}"
    client, booking_id, payment_id = await _bought(mesh, name, event_id, 2)
    fan = await new_fan(browser, mesh.url)
    page = fan.page
    await fan.context.add_cookies([{"name": "bo_session", "value": client.cookies["bo_session"], "url": mesh.url}])
    await page.goto(f"{mesh.url}/e/{event_id}")
    await view(page, "event")
    await page.click("#show-tickets")
    await view(page, "tickets")
    await expect(page.locator(".ticket")).to_have_count(2)
    cancel = page.locator("button.cancel-booking")
    await expect(cancel).to_have_count(1)
    await expect(cancel).to_have_accessible_name("Cancel the booking: 2 tickets · Stalls")
    await every_language(page, "cancel-1-tickets")

    # The quote first: nothing is cancelled until the fan confirms it.
    await cancel.click()
    await expect(page.locator("#cancel-quote")).to_contain_text("€72.00 of the €90.00 you paid")
    await expect(page.locator("#cancel-quote")).to_contain_text("80%")
    await expect(page.locator("#cancel-confirm")).to_have_text("Cancel and refund €72.00")
    await expect(page.locator("#cancel-title")).to_be_focused()
    await every_language(page, "cancel-2-quote")
    # Keeping the tickets closes the quote and changes nothing.
    await page.click("#cancel-keep")
    await expect(page.locator("#cancel-panel")).to_be_hidden()
    await expect(cancel).to_be_focused()
    payment = (await client.get(f"/v1/payments/{payment_id}")).json()["payment"]
    assert payment["state"] == "PAYMENT_STATE_SUCCEEDED"

    await cancel.click()
    await expect(page.locator("#cancel-confirm")).to_be_visible()
    await page.click("#cancel-confirm")
    await expect(page.locator("#cancel-title")).to_have_text("Booking cancelled")
    await expect(page.locator("#cancel-quote")).to_contain_text("€72.00 is being refunded to your card")
    await expect(page.locator(".ticket")).to_have_count(0)
    await expect(page.locator("button.cancel-booking")).to_have_count(0)
    await every_language(page, "cancel-3-done")
    # What the page says of the cancellation follows the language chosen after it.
    await switch_language(page, "vi")
    await expect(page.locator("#cancel-title")).to_have_text("Đã hủy đơn đặt vé")
    await expect(page.locator("#cancel-quote")).to_contain_text("đang được hoàn về thẻ của bạn")
    await switch_language(page, "en")
    payment = (await client.get(f"/v1/payments/{payment_id}")).json()["payment"]
    assert payment["state"] == "PAYMENT_STATE_PARTIALLY_REFUNDED" and payment["refunded"]["amountMinor"] == "7200"

    # Reloaded once the tickets are voided, the page shows none.
    async def voided() -> bool | None:
        reply = await client.get(f"/v1/events/{event_id}/tickets", params={"holdId": booking_id})
        return True if all(t["state"] == "TICKET_STATE_VOID" for t in reply.json()["tickets"]) else None

    await eventually(voided, "tickets voided")
    await page.reload()
    await view(page, "event")
    await expect(page.locator("#show-tickets")).to_be_hidden()
    # The event has no fan draw: the page's look-up of one is a 404.
    assert fan.troubles(f"404 GET /v1/events/{event_id}/fan-draw") == [] and fan.foreign() == []
    await fan.context.close()
    await client.aclose()


async def test_a_booking_whose_event_refunds_nothing_says_so_and_offers_no_cancel(browser: Browser, mesh: Mesh) -> None:
    event_id = await mesh.event(seats=4)
    client, _, payment_id = await _bought(mesh, f"fan-keeps-{uuid.uuid4().hex[:6]}", event_id, 1)
    fan = await new_fan(browser, mesh.url)
    page = fan.page
    await fan.context.add_cookies([{"name": "bo_session", "value": client.cookies["bo_session"], "url": mesh.url}])
    await page.goto(f"{mesh.url}/e/{event_id}")
    await view(page, "event")
    await page.click("#show-tickets")
    await view(page, "tickets")
    await page.click("button.cancel-booking")
    await expect(page.locator("#cancel-quote")).to_have_text(
        "This event's policy gives no refunds, so this booking cannot be cancelled here."
    )
    await expect(page.locator("#cancel-confirm")).to_be_hidden()
    await expect(page.locator("#cancel-keep")).to_have_text("Close")
    await every_language(page, "cancel-4-no-refunds")
    assert (await client.get(f"/v1/payments/{payment_id}")).json()["payment"]["state"] == "PAYMENT_STATE_SUCCEEDED"
    # The event has no fan draw: the page's look-up of one is a 404.
    assert fan.troubles(f"404 GET /v1/events/{event_id}/fan-draw") == [] and fan.foreign() == []
    await fan.context.close()
    await client.aclose()
