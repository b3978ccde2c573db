"""Ticket transfers in a real browser: the sender's tickets page offers a
ticket to a friend's address (and shows it pending, with its cancel), the
friend opens the claim link, signs in and claims it, and then lists the
ticket (its new code) on the event's page while the sender no longer does.
Each page passes axe-core in every language, and nothing logs an error."""

from __future__ import annotations

import psycopg
from playwright.async_api import Browser, expect

from tests.browser.harness import Mesh, admitted_client, new_fan
from tests.browser.pages import check_axe, shoot, switch_language, view
from tests.e2e.harness import eventually
from tests.support import Stores

LANGS = ("vi", "pt-BR", "en")


async def every_language(page: object, name: str) -> None:
    for lang in LANGS:
        await switch_language(page, lang)  # type: ignore[arg-type]
        await check_axe(page, f"{name} ({lang})")  # type: ignore[arg-type]
        await shoot(page, f"{name}-{lang}")  # type: ignore[arg-type]


async def _buy(mesh: Mesh, name: str, event_id: int, quantity: int) -> list[dict[str, object]]:
    """A fan who bought ``quantity`` tickets through the API; the tickets."""
    client = await admitted_client(mesh, name, event_id)
    held = await client.post(
        f"/v1/events/{event_id}/holds", json={"bestAvailable": {"sectionId": "A", "quantity": quantity}}
    )
    assert held.status_code == 200, held.text
    started = await client.post(
        f"/v1/holds/{held.json()['hold']['holdId']}/payment", json={"paymentMethod": "pm_card_ok"}
    )
    payment_id = started.json()["payment"]["paymentId"]
    confirmed = await client.post(f"/v1/payments/{payment_id}:confirm", headers={"Idempotency-Key": payment_id})
    assert confirmed.json()["payment"]["state"] == "PAYMENT_STATE_SUCCEEDED", confirmed.text
    await client.post(f"/v1/events/{event_id}/queue:leave", json={})

    async def issued() -> list[dict[str, object]] | None:
        found: list[dict[str, object]] = (await client.get(f"/v1/events/{event_id}/tickets")).json().get("tickets", [])
        return found if len(found) == quantity else None

    tickets = await eventually(issued, "tickets issued")
    await client.aclose()
    return tickets


async def test_a_fan_transfers_a_ticket_and_a_friend_claims_it(browser: Browser, mesh: Mesh, stores: Stores) -> None:
    event_id = await mesh.event(seats=10, max_active=5)
    bought = await _buy(mesh, "tao", event_id, 2)

    sender = await new_fan(browser, mesh.url)
    page = sender.page
    await page.goto(f"{mesh.url}/e/{event_id}")
    await view(page, "event")
    await page.fill("#sign-in-name", "tao")
    await page.press("#sign-in-name", "Enter")
    await expect(page.locator("#show-tickets")).to_be_visible()
    await page.click("#show-tickets")
    await view(page, "tickets")
    tickets = page.locator(".ticket")
    await expect(tickets).to_have_count(2)
    first = tickets.nth(0)
    given = await first.locator("code").inner_text()
    await every_language(page, "transfer-1-tickets")
    # (A change of language draws the list again, closing the form.)
    await first.locator("summary").click()
    await first.locator("input[type=email]").fill("friend@example.org")
    await check_axe(page, "transfer form (en)")
    await first.locator("button[type=submit]").click()
    await expect(first).to_contain_text("Being transferred to friend@example.org")
    await every_language(page, "transfer-2-pending")
    # The other ticket is offered and withdrawn again.
    second = tickets.nth(1)
    await second.locator("summary").click()
    await second.locator("input[type=email]").fill("someone@example.org")
    await second.locator("button[type=submit]").click()
    await expect(second).to_contain_text("Being transferred to someone@example.org")
    await second.get_by_role("button", name="Cancel the transfer").click()
    await expect(second.locator("summary")).to_have_text("Transfer to a friend")

    given_id = next(str(t["ticketId"]) for t in bought if t["code"] == given)
    async with await psycopg.AsyncConnection.connect(stores.database_url) as conn:
        cur = await conn.execute(
            "SELECT transfer_id::text, claim_secret FROM ticket_transfers WHERE ticket_id = %s AND state = 'PENDING'",
            (given_id,),
        )
        row = await cur.fetchone()
    assert row is not None
    link = f"{mesh.url}/claim#{row[0]}.{row[1]}"

    friend = await new_fan(browser, mesh.url, lang="vi")
    claim = friend.page
    await claim.goto(link)
    await view(claim, "claim")
    await expect(claim.locator("#claim-sign-in")).to_be_visible()
    await every_language(claim, "transfer-3-claim")
    await claim.fill("#claim-name", "lan")
    await claim.press("#claim-name", "Enter")
    await expect(claim.locator("#claim")).to_be_visible()
    await claim.click("#claim")
    await expect(claim.locator("#claim-status")).to_have_text(
        "The ticket is yours. Your friend's old code no longer admits anyone."
    )
    # The secret left the address bar once it had done its work.
    assert claim.url == f"{mesh.url}/claim"
    await every_language(claim, "transfer-4-claimed")
    await expect(claim.locator("#claim-status")).to_have_text(
        "The ticket is yours. Your friend's old code no longer admits anyone."
    )
    await claim.click("#claim-open")
    await view(claim, "event")
    await claim.click("#show-tickets")
    await view(claim, "tickets")
    await expect(claim.locator(".ticket")).to_have_count(1)
    new_code = await claim.locator(".ticket code").inner_text()
    assert new_code != given

    # The sender's list, read again, has the other ticket only.
    await page.goto(f"{mesh.url}/e/{event_id}")
    await view(page, "event")
    await page.click("#show-tickets")
    await view(page, "tickets")
    await expect(page.locator(".ticket")).to_have_count(1)
    assert await page.locator(".ticket code").inner_text() != given
    # (The event has no fan draw: its page's probe of one is a 404.)
    no_draw = f"404 GET /v1/events/{event_id}/fan-draw"
    assert sender.troubles(no_draw) == [] and friend.troubles(no_draw) == []
    assert sender.foreign() == [] and friend.foreign() == []
    await sender.context.close()
    await friend.context.close()


async def test_a_claim_page_without_its_link_says_so(browser: Browser, mesh: Mesh) -> None:
    fan = await new_fan(browser, mesh.url, lang="pt-BR")
    page = fan.page
    await page.goto(f"{mesh.url}/claim#not-a-transfer")
    await view(page, "claim")
    await expect(page.locator("#claim-status")).to_have_text(
        "Este link não está completo. Abra de novo o link do e-mail."
    )
    await expect(page.locator("#claim")).to_be_hidden()
    await expect(page.locator("#claim-sign-in")).to_be_hidden()
    await every_language(page, "transfer-5-bad-link")
    assert fan.troubles() == [] and fan.foreign() == []
    await fan.context.close()
