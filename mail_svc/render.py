"""A booking's e-mail, rendered from the template files of its language:
an HTML part (each ticket's QR code inline, by Content-ID) and a plain-text
part, as one MIME message."""

from __future__ import annotations

import io
from datetime import datetime
from email.message import EmailMessage
from email.utils import format_datetime
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import jinja2
import segno

from boxoffice.money import format_money
from mail_svc.model import DEFAULT_LANGUAGE, LANGUAGES, BookingMail, Kind


def qr_png(code: str) -> bytes:
    """A ticket's code as a QR image (PNG)."""
    buffer = io.BytesIO()
    segno.make(code, error="m", micro=False).save(buffer, kind="png", scale=6, border=4)
    return buffer.getvalue()


def local_time(when: datetime, zone: str) -> str:
    """``when`` on the clock of the event's zone, with the zone named."""
    try:
        tz = ZoneInfo(zone)
    except (ZoneInfoNotFoundError, ValueError):
        tz = ZoneInfo("UTC")
        zone = "UTC"
    return f"{when.astimezone(tz):%Y-%m-%d %H:%M} ({zone})"


class Renderer:
    """Renders the templates of ``mail_svc/templates/<language>/``."""

    def __init__(self, *, mail_from: str, tickets_url: str) -> None:
        self._env = jinja2.Environment(
            loader=jinja2.PackageLoader("mail_svc", "templates"),
            autoescape=jinja2.select_autoescape(enabled_extensions=("html",), default_for_string=True),
            undefined=jinja2.StrictUndefined,
            keep_trailing_newline=True,
        )
        self._from = mail_from
        self._tickets_url = tickets_url

    def render(
        self, booking: BookingMail, kind: Kind, *, language: str, to: str, message_id: str, now: datetime
    ) -> EmailMessage:
        language = language if language in LANGUAGES else DEFAULT_LANGUAGE
        event = booking.event
        qr_ids = {ticket.code: f"qr-{ticket.unit}" for ticket in booking.tickets}
        context = {
            "lang": language,
            "event_name": event.name,
            "when": local_time(event.starts_at, event.time_zone),
            "venue": event.venue,
            "route": event.route,
            "tickets": booking.tickets,
            "qr_ids": qr_ids,
            "total": format_money(booking.amount_minor, booking.currency),
            "tickets_url": self._tickets_url.format(event_id=event.event_id),
            "booking": booking.hold_id,
        }
        folder = f"{language}/{kind.value}"
        subject = self._env.get_template(f"{folder}.subject.txt").render(context).strip()
        text = self._env.get_template(f"{folder}.txt").render(context)
        html = self._env.get_template(f"{folder}.html").render(context)
        message = EmailMessage()
        message["From"] = self._from
        message["To"] = to
        message["Subject"] = subject
        message["Date"] = format_datetime(now)
        message["Message-ID"] = message_id
        message["Auto-Submitted"] = "auto-generated"
        message.set_content(text)
        message.add_alternative(html, subtype="html")
        # After the body: setting it drops every Content-* header.
        message["Content-Language"] = language
        if kind is Kind.TICKETS:
            html_part = message.get_body(preferencelist=("html",))
            assert isinstance(html_part, EmailMessage)
            for ticket in booking.tickets:
                html_part.add_related(
                    qr_png(ticket.code),
                    maintype="image",
                    subtype="png",
                    cid=f"<{qr_ids[ticket.code]}>",
                    filename=f"{ticket.code}.png",
                    disposition="inline",
                )
        return message
