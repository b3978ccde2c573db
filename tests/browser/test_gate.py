"""The gate page and the browser's side of ticket codes.

- The page's code module (``codes.js``, WebCrypto only) agrees with the
  door (:mod:`boxoffice.ticketcodes`): it verifies a code the door signs
  with the JWKS the door publishes, refuses one with a byte changed, one
  signed with another key and one with its header's algorithm changed, and
  makes the same rotating code the door checks.
- A gate link provisions the phone: the key leaves the address bar at once
  and stays in the phone's storage; without one the page says how to set it
  up. Both views are axe-clean in every language, with no console error.
- Offline, the page applies the event's rule on static codes that the
  check-in list brings: a static (printed, screenshot) code at an event of
  rotating codes only is ``EXPIRED_CODE``, as the door answers online, and
  queues nothing; where the event accepts them it admits.
"""

from __future__ import annotations

import base64
import json
import time
import uuid
from pathlib import Path

from playwright.async_api import Browser, Page, expect

from boxoffice import access, ticketcodes
from boxoffice.clock import SystemClock
from boxoffice.ticketcodes import TicketClaims, TicketCodeSigner
from edge_svc.pages import build, web_root
from gen.boxoffice.checkin.v1 import checkin_service_pb2 as cpb
from gen.boxoffice.checkin.v1 import checkin_service_pb2_grpc as cpb_grpc
from tests.browser.harness import Fan, Mesh, new_fan
from tests.browser.pages import check_axe, shoot, switch_language, view

KEYS = ticketcodes.parse_keys("gate1:" + "9a" * 32 + ",gate0:" + "5c" * 32)
OTHER = ticketcodes.parse_keys("gate1:" + "3b" * 32)


def _asset(name: str) -> str:
    return "/assets/" + build(web_root(), dev_sign_in=True).names[name]


async def _codes(page: Page, script: str, arg: object) -> object:
    """Runs ``script`` (a function of the module and ``arg``) in the page."""
    return await page.evaluate(
        f"async ([url, arg]) => {{ const m = await import(url); return await ({script})(m, arg); }}",
        [_asset("codes.js"), arg],
    )


async def test_the_pages_codes_agree_with_the_door(browser: Browser, mesh: Mesh) -> None:
    fan = await new_fan(browser, mesh.url)
    try:
        await fan.page.goto(f"{mesh.url}/gate")
        await view(fan.page, "setup")
        signer = TicketCodeSigner(lambda: KEYS, SystemClock())
        ticket_id = str(uuid.uuid4())
        code = signer.sign(TicketClaims(ticket_id, 4242, "A", "row K, seat 6", int(time.time())))
        jwks = ticketcodes.jwks(KEYS.public())
        verify = "(m, a) => new m.CodeVerifier(a.jwks).verify(a.code)"
        claims = await _codes(fan.page, verify, {"jwks": jwks, "code": code})
        assert claims == {"ticketId": ticket_id, "eventId": 4242, "sectionId": "A", "seatLabel": "row K, seat 6"}
        # One byte of the signature changed, of the payload, another key's
        # signature, the header's algorithm: none verifies.
        head, body, signature = code.split(".")
        flipped = signature[:10] + ("A" if signature[10] != "A" else "B") + signature[11:]
        payload = json.loads(base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)))
        forged_body = base64.urlsafe_b64encode(json.dumps({**payload, "ev": 4243}).encode()).rstrip(b"=").decode()
        other = TicketCodeSigner(lambda: OTHER, SystemClock()).sign(
            TicketClaims(ticket_id, 4242, "A", "", int(time.time()))
        )
        none_head = base64.urlsafe_b64encode(b'{"alg":"none","kid":"gate1","typ":"ticket"}').rstrip(b"=").decode()
        for bad in (f"{head}.{body}.{flipped}", f"{head}.{forged_body}.{signature}", other, f"{none_head}.{body}."):
            assert await _codes(fan.page, verify, {"jwks": jwks, "code": bad}) is None, bad
        # The rotating code the fan's page shows is the one the door checks.
        secret = bytes(range(32))
        step = ticketcodes.rotation_step(time.time())
        shown = await _codes(
            fan.page,
            "(m, a) => m.rotatingCode(a.code, m.fromBase64(a.secret), a.ticket, a.step)",
            {"code": code, "secret": base64.b64encode(secret).decode(), "ticket": ticket_id, "step": step},
        )
        assert shown == ticketcodes.rotating_code(code, secret, ticket_id, step)
        parts = await _codes(fan.page, "(m, a) => m.splitRotating(a)", shown)
        assert parts == {"code": code, "step": step, "mac": ticketcodes.rotation_mac(secret, ticket_id, step)}
        assert fan.troubles() == []
    finally:
        await fan.context.close()


async def test_a_gate_link_provisions_the_phone_and_leaves_the_address_bar(browser: Browser, mesh: Mesh) -> None:
    for lang in ("en", "vi", "pt-BR"):
        fan = await new_fan(browser, mesh.url, lang=lang)
        page = fan.page
        try:
            await page.goto(f"{mesh.url}/gate")
            await view(page, "setup")
            await check_axe(page, f"gate setup ({lang})")
            key = "bxd_" + "k" * 43
            # An event with no check-in service behind it in this mesh: the
            # page stays usable from what it holds (nothing yet).
            await page.goto(f"{mesh.url}/gate#event=77&key={key}&gate=north-1")
            await view(page, "gate")
            assert "#" not in page.url and key not in page.url
            stored = await page.evaluate("JSON.parse(localStorage.getItem('bo.gate.device'))")
            assert stored == {"key": key, "eventId": "77", "gateId": "north-1"}
            assert await page.input_value("#gate-id") == "north-1"
            await switch_language(page, lang)
            await check_axe(page, f"gate ({lang})")
        finally:
            await fan.context.close()


async def _gate_device(mesh: Mesh, event_id: int) -> str:
    admin = mesh.operators["checkin"].stub(cpb_grpc.CheckInAdminServiceStub, role=access.OPERATOR)
    reply = await admin.CreateGateDevice(cpb.CreateGateDeviceRequest(event_id=event_id, name="North gate"))
    return str(reply.key)


async def _fan_with_tickets(browser: Browser, mesh: Mesh, event_id: int, quantity: int) -> Fan:
    """A fan who bought ``quantity`` seats on the page, on their tickets."""
    fan = await new_fan(browser, mesh.url)
    page = fan.page
    await page.goto(f"{mesh.url}/e/{event_id}")
    await view(page, "event")
    await page.fill("#sign-in-name", f"gate-fan-{uuid.uuid4().hex[:6]}")
    await page.click("#sign-in button[type=submit]")
    await page.click("#join")
    await view(page, "shop", timeout_ms=60_000)
    await page.select_option("#best-qty", str(quantity))
    await page.click("#hold-best")
    await view(page, "hold")
    await page.check("input[value=pm_card_ok]")
    await page.click("#pay")
    await view(page, "tickets", timeout_ms=60_000)
    # Each ticket shows its rotating code (the page fetched its secret).
    await expect(page.locator("#tickets canvas[data-ticket]")).to_have_count(quantity)
    return fan


async def _qr_picture(fan: Fan, index: int, folder: Path) -> tuple[Path, str]:
    """The fan's QR code ``index`` as the page draws it now, as a PNG file
    (what a camera would see), and the text it holds."""
    canvas = fan.page.locator("#tickets canvas[data-ticket]").nth(index)
    text = await canvas.get_attribute("data-code")
    assert text is not None and ticketcodes.split_rotating(text) is not None, text
    data_url = await canvas.evaluate("c => c.toDataURL('image/png')")
    path = folder / f"qr-{index}-{uuid.uuid4().hex[:6]}.png"
    path.write_bytes(base64.b64decode(data_url.split(",", 1)[1]))
    return path, text


async def _verdict(gate: Page, result: str) -> None:
    await expect(gate.locator("#verdict")).to_have_attribute("data-result", result)


async def _type(gate: Page, code: str) -> None:
    """A code typed at the gate (as a hand scanner types it)."""
    await gate.fill("#typed", code)
    await gate.press("#typed", "Enter")


async def test_the_gate_scans_the_fans_rotating_code_online_and_with_the_network_cut(
    browser: Browser, mesh: Mesh, tmp_path: Path
) -> None:
    event_id = await mesh.event(seats=8, max_active=5)
    fan = await _fan_with_tickets(browser, mesh, event_id, 2)
    key = await _gate_device(mesh, event_id)
    staff = await new_fan(browser, mesh.url)
    gate = staff.page
    # A staff phone.
    await gate.set_viewport_size({"width": 412, "height": 860})
    try:
        # The list is downloaded after the fan's page fetched its secrets:
        # the phone can check their rotating codes offline.
        await gate.goto(f"{mesh.url}/gate#event={event_id}&key={key}&gate=north-1")
        await view(gate, "gate")
        await gate.wait_for_function("() => document.body.dataset.ready === 'true'")
        await expect(gate.locator("#list-state")).to_contain_text("2")

        # Online: the door decides.
        picture, _ = await _qr_picture(fan, 0, tmp_path)
        await gate.set_input_files("#picture", str(picture))
        await _verdict(gate, "ADMITTED")
        await expect(gate.locator("#verdict")).to_have_class("verdict go")
        seats = [await fan.page.locator(".ticket h2").nth(i).inner_text() for i in range(2)]
        seat_shown = await gate.locator("#verdict-seat").inner_text()
        assert seat_shown.split(", ")[-1] in seats[0], (seat_shown, seats)
        await check_axe(gate, "gate verdict")
        await shoot(gate, "6-gate-en")
        await gate.set_input_files("#picture", str(picture))
        await _verdict(gate, "ALREADY_CHECKED_IN")
        await expect(gate.locator("#verdict")).to_have_class("verdict stop")
        await expect(gate.locator("#verdict-detail")).to_contain_text("north-1")

        # A static code (the signed code alone: a print or a screenshot of
        # it) at this concert, which takes rotating codes only: the door's
        # answer online, and the list brought the rule to the phone.
        _, rotating = await _qr_picture(fan, 1, tmp_path)
        static = ticketcodes.split_rotating(rotating)
        assert static is not None
        await _type(gate, static.code)
        await _verdict(gate, "EXPIRED_CODE")
        rules = await gate.evaluate(f"JSON.parse(localStorage.getItem('bo.gate.{event_id}.list')).rules")
        assert rules == {"staticCodes": False, "reentry": False}

        # The network cut: the phone decides from its list and queues the scan.
        await staff.context.set_offline(True)
        await expect(gate.locator("#net")).to_have_attribute("data-online", "false")
        # Offline, the same static code is refused as the door refuses it,
        # and nothing is queued.
        await _type(gate, static.code)
        await _verdict(gate, "EXPIRED_CODE")
        await expect(gate.locator("#verdict-detail")).not_to_be_empty()
        assert await gate.evaluate(f"localStorage.getItem('bo.gate.{event_id}.queue')") in (None, "[]")
        picture, second = await _qr_picture(fan, 1, tmp_path)
        await gate.set_input_files("#picture", str(picture))
        await _verdict(gate, "ADMITTED")
        await expect(gate.locator("#verdict-detail")).not_to_be_empty()
        await expect(gate.locator("#queue-state")).to_contain_text("1")
        # Offline, the first ticket is still known as checked in.
        first, _ = await _qr_picture(fan, 0, tmp_path)
        await gate.set_input_files("#picture", str(first))
        await _verdict(gate, "ALREADY_CHECKED_IN")
        queued = await gate.evaluate(f"JSON.parse(localStorage.getItem('bo.gate.{event_id}.queue'))")
        assert [scan["code"] for scan in queued] == [second]

        # Back online: the queued admission is uploaded, and the door has it.
        await staff.context.set_offline(False)
        await expect(gate.locator("#net")).to_have_attribute("data-online", "true")
        await expect(gate.locator("#queue-state")).to_contain_text("Uploaded 1")
        assert await gate.evaluate(f"JSON.parse(localStorage.getItem('bo.gate.{event_id}.queue'))") == []
        parts = ticketcodes.split_rotating(second)
        assert parts is not None
        ticket_id = json.loads(base64.urlsafe_b64decode(parts.code.split(".")[1] + "=="))["sub"]
        assert mesh.api is not None
        async with mesh.api.client(headers={"Authorization": f"Device {key}"}) as door:
            listed = await door.get(f"/v1/events/{event_id}/checkin-list")
        entries = [e for line in listed.text.splitlines() for e in json.loads(line).get("entries", [])]
        (entry,) = [e for e in entries if e["ticket"]["ticketId"] == ticket_id]
        assert entry["firstCheckin"]["gateId"] == "north-1", entry
        # The event has no verified-fan draw (its 404 is the contract's):
        # nothing else went wrong on either page, the network cut included.
        no_draw = f"404 GET /v1/events/{event_id}/fan-draw"
        assert fan.troubles(no_draw) == [], fan.troubles(no_draw)
        assert staff.troubles() == [], staff.troubles()
        assert fan.foreign() == [] and staff.foreign() == []
    finally:
        await staff.context.close()
        await fan.context.close()


async def test_offline_a_static_code_admits_only_where_the_events_rules_accept_it(browser: Browser, mesh: Mesh) -> None:
    """The phone's own verdict on a static code, from what it holds: the
    rules the list brought (accepted), none yet (refused, as at an event of
    rotating codes only), or refusing ones."""
    staff = await new_fan(browser, mesh.url)
    try:
        await staff.page.goto(f"{mesh.url}/gate")
        await view(staff.page, "setup")
        event_id = 4243
        ticket_id = str(uuid.uuid4())
        code = TicketCodeSigner(lambda: KEYS, SystemClock()).sign(
            TicketClaims(ticket_id, event_id, "A", "row K, seat 7", int(time.time()))
        )
        ticket = {"void": False, "at": None, "gate": None, "secret": "", "section": "A", "seat": "row K, seat 7"}
        scan = """async ([url, a]) => {
            localStorage.setItem(`bo.gate.${a.event}.list`, JSON.stringify(a.list));
            localStorage.removeItem(`bo.gate.${a.event}.queue`);
            const m = await import(url);
            const book = new m.DoorBook({ eventId: a.event, key: 'bxd_test' });
            const verdict = await book.scanOffline(a.code, 'north-1');
            return [verdict.result, book.queue.length];
        }"""
        base = {"jwks": ticketcodes.jwks(KEYS.public()), "cursor": "c", "tickets": {ticket_id: ticket}}
        for rules, expected in (
            ({"staticCodes": True, "reentry": False}, ["ADMITTED", 1]),
            ({"staticCodes": False, "reentry": True}, ["EXPIRED_CODE", 0]),
            (None, ["EXPIRED_CODE", 0]),
        ):
            arg = {"event": event_id, "code": code, "list": {**base, "rules": rules}}
            assert await staff.page.evaluate(scan, [_asset("doorbook.js"), arg]) == expected, rules
        assert staff.troubles() == []
    finally:
        await staff.context.close()
