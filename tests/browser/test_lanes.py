"""Lanes in a real browser: a fan types a presale code on the event page
and waits in the presale lane until admitted; a wrong code is explained in
plain words; a staff link's pass leaves the address bar as soon as the
page reads it and takes the fan to the staff lane. axe-core passes on the
event page with its code field."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import psycopg
from google.protobuf import duration_pb2
from playwright.async_api import Browser, expect

from boxoffice import access
from gen.boxoffice.queue.v1 import queue_admin_service_pb2 as apb
from gen.boxoffice.queue.v1 import queue_admin_service_pb2_grpc as apb_grpc
from tests.browser.harness import Mesh, new_fan
from tests.browser.pages import check_axe, view
from tests.support import Stores


async def _lanes(mesh: Mesh, event_id: int) -> tuple[list[str], str]:
    """A presale lane by code and a staff lane; two codes and a staff pass."""
    admin = mesh.operators["queue"].stub(apb_grpc.QueueAdminServiceStub, role=access.OPERATOR)
    room = (await admin.GetWaitingRoom(apb.GetWaitingRoomRequest(event_id=event_id))).config
    room.lanes.add(name="presale", entry=apb.WAITING_ROOM_LANE_ENTRY_CODE, share_percent=40)
    room.lanes.add(name="staff", entry=apb.WAITING_ROOM_LANE_ENTRY_STAFF, share_percent=5)
    await admin.UpdateWaitingRoom(apb.UpdateWaitingRoomRequest(config=room))
    request = apb.CreateAccessCodesRequest(event_id=event_id, lane="presale", count=2, max_uses=1)
    request.valid_until.FromDatetime(datetime.now(UTC) + timedelta(hours=1))
    codes = list((await admin.CreateAccessCodes(request)).codes)
    issued = await admin.IssueStaffPass(
        apb.IssueStaffPassRequest(event_id=event_id, staff_name="door", ttl=duration_pb2.Duration(seconds=3600))
    )
    return codes, issued.staff_pass


async def _position(page: object, event_id: int) -> dict[str, str]:
    found: dict[str, str] = await page.evaluate(  # type: ignore[attr-defined]
        "id => fetch(`/v1/events/${id}/queue/position`).then(r => r.json()).then(j => j.position)", str(event_id)
    )
    return found


async def test_a_presale_code_and_a_staff_link_on_the_page(browser: Browser, mesh: Mesh) -> None:
    event_id = await mesh.event(seats=12, max_active=5)
    codes, staff_pass = await _lanes(mesh, event_id)

    fan = await new_fan(browser, mesh.url)
    page = fan.page
    await page.goto(f"{mesh.url}/e/{event_id}")
    await view(page, "event")
    await page.fill("#sign-in-name", "presale-ana")
    await page.press("#sign-in-name", "Enter")
    await expect(page.locator("#access-code")).to_be_visible()
    await check_axe(page, "event page with a code field")
    # A wrong code first: said in plain words, nothing joined.
    await page.fill("#access-code", "ABCD-EFGH-JKMN-PQRT")
    await page.click("#join")
    await expect(page.locator("#view-event .message")).to_contain_text("does not work for this event")
    assert (await _position(page, event_id))["state"] == "QUEUE_STATE_NOT_IN_QUEUE"
    await page.fill("#access-code", codes[0])
    await page.click("#join")
    await view(page, "shop", timeout_ms=30_000)
    position = await _position(page, event_id)
    assert position["state"] == "QUEUE_STATE_ADMITTED" and position.get("lane") == "presale", position
    assert fan.foreign() == []
    await fan.context.close()

    crew = await new_fan(browser, mesh.url)
    page = crew.page
    await page.goto(f"{mesh.url}/e/{event_id}?staff={staff_pass}")
    await view(page, "event")
    assert "staff=" not in page.url  # the pass is out of the address bar (and of the history)
    await page.fill("#sign-in-name", "crew-bo")
    await page.press("#sign-in-name", "Enter")
    await expect(page.locator("#staff-note")).to_be_visible()
    await expect(page.locator("#access-code")).to_be_hidden()
    await page.click("#join")
    await view(page, "shop", timeout_ms=30_000)
    assert (await _position(page, event_id)).get("lane") == "staff"
    await crew.context.close()


async def _close_registration(stores: Stores, event_id: int) -> None:
    """The draw's registration closes now: its close moves to the present
    (the test's stand-in for waiting until it), after the fan registered."""
    async with await psycopg.AsyncConnection.connect(stores.database_url, autocommit=True) as conn:
        await conn.execute(
            "UPDATE queue_fan_draws SET closes_at = now() WHERE event_id = %s AND drawn_at IS NULL", (event_id,)
        )


async def test_the_verified_fan_draw_on_the_event_page(browser: Browser, mesh: Mesh, stores: Stores) -> None:
    """A fan registers on the event page; once drawn, the page shows the
    win and puts the code in the field, and the join lands in the lane.
    Registration stays open an hour, whatever the machine's pace, and the
    test closes it once the fan is registered."""
    event_id = await mesh.event(seats=12, max_active=5)
    await _lanes(mesh, event_id)
    admin = mesh.operators["queue"].stub(apb_grpc.QueueAdminServiceStub, role=access.OPERATOR)
    draw = apb.CreateFanDrawRequest(event_id=event_id, lane="presale", winners=1)
    draw.closes_at.FromDatetime(datetime.now(UTC) + timedelta(hours=1))
    await admin.CreateFanDraw(draw)

    fan = await new_fan(browser, mesh.url)
    page = fan.page
    await page.goto(f"{mesh.url}/e/{event_id}")
    await view(page, "event")
    await page.fill("#sign-in-name", "drawn-cy")
    await page.press("#sign-in-name", "Enter")
    await expect(page.locator("#fan-draw-register")).to_be_visible()
    await check_axe(page, "event page with the draw")
    await page.click("#fan-draw-register")
    await expect(page.locator("#fan-draw-text")).to_contain_text("You are registered")
    await _close_registration(stores, event_id)
    # The admitter role's drawer draws it once it closes: the page tells on its next load.
    for _ in range(60):
        await page.reload()
        await view(page, "event")
        await expect(page.locator("#fan-draw-text")).not_to_be_empty()
        if "You were drawn" in await page.locator("#fan-draw-text").inner_text():
            break
    await expect(page.locator("#fan-draw-text")).to_contain_text("You were drawn")
    code = await page.input_value("#access-code")
    assert code and code in await page.locator("#fan-draw-text").inner_text()
    await page.click("#join")
    await view(page, "shop", timeout_ms=30_000)
    assert (await _position(page, event_id)).get("lane") == "presale"
    await fan.context.close()
