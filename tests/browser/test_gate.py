"""The gate page and the browser's side of ticket codes.

- The page's code module (``codes.js``, WebCrypto only) agrees with the
  door (:mod:`boxoffice.ticketcodes`): it verifies a code the door signs
  with the JWKS the door publishes, refuses one with a byte changed, one
  signed with another key and one with its header's algorithm changed, and
  makes the same rotating code the door checks.
- A gate link provisions the phone: the key leaves the address bar at once
  and stays in the phone's storage; without one the page says how to set it
  up. Both views are axe-clean in every language, with no console error.
"""

from __future__ import annotations

import base64
import json
import time
import uuid

from playwright.async_api import Browser, Page

from boxoffice import ticketcodes
from boxoffice.clock import SystemClock
from boxoffice.ticketcodes import TicketClaims, TicketCodeSigner
from edge_svc.pages import build, web_root
from tests.browser.harness import Mesh, new_fan
from tests.browser.pages import check_axe, switch_language, view

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
