"""The gate page's offline judgement per code, on the device side: the page's
own code module (``edge_svc/web/codes.js``) in headless Chromium verifying
signed codes with WebCrypto's Ed25519 and the event's JWKS, and checking a
rotating code's HMAC under its ticket's secret, as a phone with no network
does. The baseline, in the same run on the same machine: the door's own
verification in Python (:class:`boxoffice.ticketcodes.TicketCodeVerifier`
and :func:`boxoffice.ticketcodes.rotation_mac`).

Run: ``python -m bench.gate_bench [--codes 2000]`` (Debian's Chromium, as the
browser tests use it)
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import time
import uuid

from playwright.async_api import Route, async_playwright

from bench.common import Row, report
from boxoffice import ticketcodes
from boxoffice.clock import SystemClock
from boxoffice.ticketcodes import TicketClaims, TicketCodeSigner, TicketCodeVerifier
from edge_svc.pages import web_root
from tests.browser.harness import CHROMIUM_FLAGS, chromium_path

KEYS = ticketcodes.parse_keys("bench:" + "be" * 32)
# Loopback is a secure context (WebCrypto); the page is served by the route below, not a server.
ORIGIN = "http://localhost"
SECRET = bytes(range(32))

_TIMED = """async ([codes, jwks, secret, step]) => {
  const m = await import('/codes.js');
  const verifier = new m.CodeVerifier(jwks);
  const key = m.fromBase64(secret);
  await verifier.verify(codes[0][0]);
  let began = performance.now();
  let valid = 0;
  for (const [code] of codes) if (await verifier.verify(code)) valid++;
  const verify = (performance.now() - began) / codes.length;
  began = performance.now();
  let matched = 0;
  for (const [, ticket, mac] of codes) if (m.sameMac(await m.rotationMac(key, ticket, step), mac)) matched++;
  const hmac = (performance.now() - began) / codes.length;
  return [verify * 1000, hmac * 1000, valid, matched];
}"""


async def _in_chromium(codes: list[tuple[str, str, str]], step: int) -> tuple[float, float, int, int]:
    source = web_root().joinpath("codes.js").read_bytes()

    async def serve(route: Route) -> None:
        if route.request.url.endswith("/codes.js"):
            await route.fulfill(body=source, content_type="text/javascript")
        else:
            await route.fulfill(body=b"<!doctype html><title>gate bench</title>", content_type="text/html")

    async with async_playwright() as playwright:
        browser = await playwright.chromium.launch(executable_path=chromium_path(), args=list(CHROMIUM_FLAGS))
        try:
            page = await browser.new_page()
            await page.route(f"{ORIGIN}/**", serve)
            await page.goto(f"{ORIGIN}/")
            jwks = ticketcodes.jwks(KEYS.public())
            secret = base64.b64encode(SECRET).decode()
            verify_us, hmac_us, valid, matched = await page.evaluate(_TIMED, [codes, jwks, secret, step])
        finally:
            await browser.close()
    return float(verify_us), float(hmac_us), int(valid), int(matched)


def main(count: int) -> None:
    clock = SystemClock()
    signer = TicketCodeSigner(lambda: KEYS, clock)
    verifier = TicketCodeVerifier(KEYS.public, clock)
    step = ticketcodes.rotation_step(time.time())
    now = signer.now()
    codes = []
    for n in range(count):
        ticket = str(uuid.uuid4())
        code = signer.sign(TicketClaims(ticket, 1, "A", f"seat {n}", now))
        codes.append((code, ticket, ticketcodes.rotation_mac(SECRET, ticket, step)))
    verify_us, hmac_us, valid, matched = asyncio.run(_in_chromium(codes, step))
    assert valid == count and matched == count, (valid, matched)
    began = time.perf_counter()
    for code, _, _ in codes:
        verifier.verify(code)
    python_verify = (time.perf_counter() - began) / count * 1e6
    began = time.perf_counter()
    for _, ticket, mac in codes:
        ticketcodes.same_mac(ticketcodes.rotation_mac(SECRET, ticket, step), mac)
    python_hmac = (time.perf_counter() - began) / count * 1e6
    rows = [
        Row(
            "gate page: verify a signed code (WebCrypto Ed25519)",
            verify_us,
            "us",
            python_verify,
            "vs the door's, Python",
            better="lower",
        ),
        Row(
            "gate page: check a rotating code's mac (WebCrypto HMAC)",
            hmac_us,
            "us",
            python_hmac,
            "vs the door's, Python",
            better="lower",
        ),
    ]
    report(f"gate page offline judgement ({count:,} codes, headless Chromium)", rows)


def run() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--codes", type=int, default=2000)
    main(parser.parse_args().codes)


if __name__ == "__main__":
    run()
