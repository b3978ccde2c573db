"""A booking's e-mail, rendered from the template files of its language:
an HTML part (each ticket's QR code inline, by Content-ID) and a plain-text
part, as one MIME message."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from email.header import Header
from email.message import Message
from email.mime.image import MIMEImage
from email.mime.multipart import MIMEMultipart
from email.mime.text import MIMEText
from email.policy import compat32
from email.utils import format_datetime, formataddr, parseaddr
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import jinja2

from boxoffice.money import format_money
from mail_svc.model import DEFAULT_LANGUAGE, LANGUAGES, BookingMail, EventInfo, Kind, OfferMail, TransferMail
from mail_svc.qr import qr_png

# The standard library's classic policy, folding no header shorter than
# SMTP's line limit: a Message-ID is longer than 78 characters and must
# reach the receiver as one token (the subject is folded by its encoding).
_POLICY = compat32.clone(max_line_length=998)
# The template files of each language and kind: the subject, the text, the HTML.
_PARTS = ("subject.txt", "txt", "html")


def local_time(when: datetime, zone: str) -> str:
    """``when`` on the clock of the event's zone, with the zone named."""
    try:
        tz = ZoneInfo(zone)
    except (ZoneInfoNotFoundError, ValueError):
        tz = ZoneInfo("UTC")
        zone = "UTC"
    return f"{when.astimezone(tz):%Y-%m-%d %H:%M} ({zone})"


class Renderer:
    """Renders the templates of ``mail_svc/templates/<language>/``, every
    one compiled once, when the renderer is made (a missing or broken
    template stops the mailer at start, not at its first message)."""

    def __init__(self, *, mail_from: str, tickets_url: str, claim_url: str = "http://127.0.0.1:8080/claim") -> None:
        env = jinja2.Environment(
            loader=jinja2.PackageLoader("mail_svc", "templates"),
            autoescape=jinja2.select_autoescape(enabled_extensions=("html",), default_for_string=True),
            undefined=jinja2.StrictUndefined,
            keep_trailing_newline=True,
            # Compiled once: never looked at again on disk.
            auto_reload=False,
        )
        self._templates = {
            (language, kind, part): env.get_template(f"{language}/{kind.value}.{part}")
            for language in LANGUAGES
            for kind in Kind
            for part in _PARTS
        }
        self._from = mail_from
        self._tickets_url = tickets_url
        self._claim_url = claim_url

    def render(
        self, booking: BookingMail, kind: Kind, *, language: str, to: str, message_id: str, now: datetime
    ) -> Message:
        language = language if language in LANGUAGES else DEFAULT_LANGUAGE
        event = booking.event
        qr_ids = {ticket.code: f"qr-{ticket.unit}" for ticket in booking.tickets}
        context = {
            "tickets": booking.tickets,
            "qr_ids": qr_ids,
            "total": format_money(booking.amount_minor, booking.currency),
            "tickets_url": self._tickets_url.format(event_id=event.event_id),
            "booking": booking.hold_id,
        }
        images = (
            [(qr_ids[t.code], f"{t.code}.png", qr_png(t.code)) for t in booking.tickets] if kind is Kind.TICKETS else []
        )
        return self._compose(language, kind, event, context, to=to, message_id=message_id, now=now, images=images)

    def render_transfer(self, transfer: TransferMail, *, to: str, message_id: str, now: datetime) -> Message:
        """A transfer's message to the friend: the ticket offered and its claim
        link (the secret in the fragment, so that no server's log sees it)."""
        language = transfer.language if transfer.language in LANGUAGES else DEFAULT_LANGUAGE
        context = {
            "section_id": transfer.section_id,
            "seat_label": transfer.seat_label,
            "claim_url": f"{self._claim_url}#{transfer.transfer_id}.{transfer.secret}",
        }
        return self._compose(language, Kind.TRANSFER, transfer.event, context, to=to, message_id=message_id, now=now)

    def render_offer(self, offer: OfferMail, *, language: str, to: str, message_id: str, now: datetime) -> Message:
        """A waiting-list offer's message to its fan: the seats held for them,
        their price, until when, and the link to the event's page, where the
        offer is taken."""
        language = language if language in LANGUAGES else DEFAULT_LANGUAGE
        event = offer.event
        context = {
            "section_id": offer.section_id,
            "quantity": offer.quantity,
            "seats": ", ".join(offer.seat_labels),
            "price": format_money(offer.amount_minor, offer.currency),
            "until": local_time(offer.expires_at, event.time_zone),
            "event_url": self._tickets_url.format(event_id=event.event_id),
        }
        return self._compose(language, Kind.OFFER, event, context, to=to, message_id=message_id, now=now)

    def _compose(
        self,
        language: str,
        kind: Kind,
        event: EventInfo,
        fields: Mapping[str, object],
        *,
        to: str,
        message_id: str,
        now: datetime,
        images: Sequence[tuple[str, str, bytes]] = (),
    ) -> Message:
        """The message of ``kind`` about ``event`` in ``language``: its
        templates given ``fields`` and the event's name, local time, venue
        and route."""
        context = {
            "lang": language,
            "event_name": event.name,
            "when": local_time(event.starts_at, event.time_zone),
            "venue": event.venue,
            "route": event.route,
            **fields,
        }
        subject, text, html = (self._templates[language, kind, part].render(context) for part in _PARTS)
        return _message(
            mail_from=self._from,
            to=to,
            subject=subject.strip(),
            date=format_datetime(now),
            message_id=message_id,
            language=language,
            text=text,
            html=html,
            images=images,
        )


def _message(
    *,
    mail_from: str,
    to: str,
    subject: str,
    date: str,
    message_id: str,
    language: str,
    text: str,
    html: str,
    images: Sequence[tuple[str, str, bytes]],
) -> Message:
    """One MIME message: multipart/alternative of the text and of the HTML
    (multipart/related with its images, each inline by Content-ID, when
    there are any). Built with the standard library's ``email.mime``
    classes, whose headers are kept as they are given (the modern
    ``EmailMessage`` parses every header set and folded again, which was
    most of a message's cost once the QR codes were cheap); the subject and
    the names are encoded by ``email.header`` and ``formataddr`` here."""
    message = MIMEMultipart("alternative", policy=_POLICY)
    message["From"] = _address(mail_from)
    message["To"] = _address(to)
    message["Subject"] = Header(subject, "utf-8").encode()
    message["Date"] = date
    message["Message-ID"] = message_id
    message["Auto-Submitted"] = "auto-generated"
    message["Content-Language"] = language
    message.attach(MIMEText(text, "plain", "utf-8"))
    html_part = MIMEText(html, "html", "utf-8")
    if images:
        related = MIMEMultipart("related")
        related.attach(html_part)
        for content_id, filename, png in images:
            image = MIMEImage(png, "png")
            image["Content-ID"] = f"<{content_id}>"
            image.add_header("Content-Disposition", "inline", filename=filename)
            related.attach(image)
        message.attach(related)
    else:
        message.attach(html_part)
    return message


def _address(text: str) -> str:
    """``Name <addr>`` with the name encoded when it is not ASCII."""
    name, address = parseaddr(text)
    return formataddr((name, address), charset="utf-8")
