"""``boxoffice admin tickets resend BOOKING_ID`` and ``tickets deliveries
BOOKING_ID``: a booking's ticket e-mails through MailAdminService (served by
PaymentService's process, at ``--payment-addr``).

Each of the booking's messages is listed with its state, attempts, the
relay's last answer and when it was sent; never the fan's address. A resend
queues what did not go out (refused by the relay, no address then, or never
sent); the mailers send it within seconds with its own Message-ID."""

from __future__ import annotations

import argparse
import uuid
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TextIO

from boxoffice_cli.admin_room import enum_name
from gen.boxoffice.mail.v1 import mail_admin_service_pb2 as mpb
from gen.boxoffice.mail.v1 import mail_admin_service_pb2_grpc as mpb_grpc

Call = Callable[[str, Any], Awaitable[Any]]

MAIL_ADMIN_STUB = mpb_grpc.MailAdminServiceStub


def _booking_id(text: str) -> str:
    try:
        return str(uuid.UUID(text))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a booking id (a UUID: the booking's hold id)") from None


def add_commands(commands: Any) -> None:
    """The ticket e-mail commands, on the admin command's subparsers."""
    tickets = commands.add_parser("tickets", help="a booking's ticket e-mails").add_subparsers(
        dest="action", required=True
    )
    resend = tickets.add_parser(
        "resend",
        help="list a booking's ticket e-mails and send again those that did not go out",
        description="Lists the booking's messages (tickets, and tickets void) as they stand, then queues a "
        "resend of each one the relay refused, that had no address, or that was never sent; a message "
        "already sent is not sent again. The mailers send what is queued within seconds, with the "
        "message's own Message-ID. The resend is audited. Served by PaymentService's process.",
    )
    resend.add_argument("booking_id", type=_booking_id, metavar="BOOKING_ID")
    listed = tickets.add_parser("deliveries", help="list a booking's ticket e-mails as they stand")
    listed.add_argument("booking_id", type=_booking_id, metavar="BOOKING_ID")


def _time(delivery: mpb.Delivery) -> str:
    if not delivery.HasField("sent_time"):
        return "-"
    return delivery.sent_time.ToDatetime().strftime("%Y-%m-%d %H:%M:%S UTC")


def _lines(deliveries: Sequence[mpb.Delivery], *, resend: bool) -> list[str]:
    header = ["message", "state", "attempts", "sent", "last answer of the relay"]
    rows = [
        [
            enum_name(mpb.MessageKind, d.kind, "MESSAGE_KIND_").lower(),
            enum_name(mpb.DeliveryState, d.state, "DELIVERY_STATE_")
            + (" -> resend queued" if resend and d.resend_queued else ""),
            str(d.attempts),
            _time(d),
            d.last_error or "-",
        ]
        for d in deliveries
    ]
    widths = [max(len(row[i]) for row in (header, *rows)) for i in range(len(header))]
    out = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip() for row in (header, *rows)]
    out.insert(1, "  ".join("-" * w for w in widths))
    return out


async def run(admin: Any, call: Call, args: argparse.Namespace, call_seconds: float, out: TextIO) -> None:
    """Runs ``tickets resend`` or ``tickets deliveries`` (``admin`` the
    MailAdminService stub, ``call`` the admin command's error handling)."""
    booking = args.booking_id
    if args.action == "resend":
        reply = await call(
            f"resending the ticket e-mails of booking {booking}",
            admin.ResendTickets(mpb.ResendTicketsRequest(booking_id=booking), timeout=call_seconds),
        )
    else:
        reply = await call(
            f"listing the ticket e-mails of booking {booking}",
            admin.ListDeliveries(mpb.ListDeliveriesRequest(booking_id=booking), timeout=call_seconds),
        )
    deliveries = list(reply.deliveries)
    out.write(f"booking {booking}: {len(deliveries)} message{'' if len(deliveries) == 1 else 's'}\n")
    if deliveries:
        out.writelines(f"{line}\n" for line in _lines(deliveries, resend=args.action == "resend"))
    if args.action == "resend":
        queued = sum(1 for d in deliveries if d.resend_queued)
        if queued:
            out.write(f"{queued} queued: the mailers send {'it' if queued == 1 else 'them'} within seconds\n")
        else:
            out.write("nothing to resend: every message went out\n")
