"""Writes docs/screenshots/mail.png: the HTML part of a tickets e-mail as
the mailer renders it (its inline QR images put in place of their cid:
references), shown by headless Chromium.

Usage: python scripts/mail_screenshot.py [--language en|vi|pt-BR] [--chromium PATH]
"""

from __future__ import annotations

import argparse
import base64
import shutil
import subprocess
import sys
import tempfile
from datetime import UTC, datetime
from email import message_from_bytes, policy
from email.message import EmailMessage
from pathlib import Path

from mail_svc.model import BookingMail, EventInfo, Kind, TicketLine
from mail_svc.render import Renderer

ROOT = Path(__file__).resolve().parent.parent
_BOOKING = BookingMail(
    hold_id="5b0e3c4a-2f51-4c1e-9d1a-7e6b8c9d0a12",
    event=EventInfo(
        1, "Demo concert", "CONCERT", datetime(2027, 3, 1, 19, 30, tzinfo=UTC), "Europe/Lisbon", "Coliseu, Lisboa", ""
    ),
    tickets=(TicketLine(1, "TKT-9F3A6C21D4E8B705", "A", "K6"), TicketLine(2, "TKT-0B7D2E94A1C3F658", "A", "K7")),
    amount_minor=9000,
    currency="EUR",
)


def inline_html(message: EmailMessage) -> str:
    """The HTML part with each cid: image as a data: URI."""
    html = message.get_body(preferencelist=("html",))
    assert isinstance(html, EmailMessage)
    text = str(html.get_content())
    for part in message.walk():
        if part.get_content_type() == "image/png":
            cid = str(part["Content-ID"]).strip("<>")
            data = base64.b64encode(part.get_payload(decode=True)).decode()  # type: ignore[arg-type]
            text = text.replace(f"cid:{cid}", f"data:image/png;base64,{data}")
    return text


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--language", default="en", choices=("en", "vi", "pt-BR"))
    parser.add_argument("--chromium", default=shutil.which("chromium") or "chromium")
    args = parser.parse_args()
    renderer = Renderer(
        mail_from="boxoffice <tickets@boxoffice.example>", tickets_url="https://tickets.example/e/{event_id}"
    )
    rendered = renderer.render(
        _BOOKING,
        Kind.TICKETS,
        language=args.language,
        to="ana@example.test",
        message_id="<demo@boxoffice.example>",
        now=datetime.now(UTC),
    )
    # Read back as a receiver reads it.
    message = message_from_bytes(rendered.as_bytes(), policy=policy.default)
    assert isinstance(message, EmailMessage)
    target = ROOT / "docs" / "screenshots" / "mail.png"
    with tempfile.TemporaryDirectory() as folder:
        page = Path(folder) / "mail.html"
        page.write_text(inline_html(message))
        subprocess.run(
            [
                args.chromium,
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--hide-scrollbars",
                f"--user-data-dir={folder}/profile",
                "--window-size=640,1020",
                f"--screenshot={target}",
                page.as_uri(),
            ],
            check=True,
            capture_output=True,
            timeout=120,
        )
    print(target.relative_to(ROOT))
    return 0


if __name__ == "__main__":
    sys.exit(main())
