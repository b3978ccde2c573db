"""``boxoffice admin``: the operators' command over QueueAdminService,
BookingAdminService, CheckInAdminService and PaymentService's refunds.

    boxoffice admin event create EVENT.yaml
    boxoffice admin inventory load EVENT_ID SEATS.csv
    boxoffice admin queue open|pause|resume EVENT_ID
    boxoffice admin queue update EVENT_ID [--presence-grace D] [--safety-net on|off] [--rate-min N] [--rate-max N]
    boxoffice admin stats EVENT_ID
    boxoffice admin revoke EVENT_ID CUSTOMER_ID [--shadow | --unshadow]
    boxoffice admin refund PAYMENT_ID --reason TEXT [--request-id ID]
    boxoffice admin tickets resend|deliveries BOOKING_ID
    boxoffice admin gate-device create EVENT_ID --name NAME | revoke DEVICE_ID | list EVENT_ID

Files are checked whole before anything is sent: every problem is printed
as ``FILE:LINE: message`` and nothing is created. Exit codes: 0 done, 2 a
usage error or a bad file, 1 a call that failed (its code, reason and
message are printed).

The services are dialled with the operator's certificate when the three
TLS files are given (flags or ``BOXOFFICE_TLS_CA_FILE``,
``BOXOFFICE_TLS_CERT_FILE``, ``BOXOFFICE_TLS_KEY_FILE``), else over an
insecure (plaintext) channel.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

import grpc

from boxoffice.errors import from_rpc_error
from boxoffice.money import format_money
from boxoffice.tls import CertFiles, ClientChannel
from boxoffice_cli import admin_gates, admin_lanes, admin_mail, admin_room
from boxoffice_cli.admin_files import EVENT_FILE_HELP, BadFile, parse_event_file, parse_inventory_file
from boxoffice_cli.admin_room import enum_name, room_line, settings_line
from boxoffice_cli.args import positive
from gen.boxoffice.booking.v1 import booking_admin_service_pb2 as bpb
from gen.boxoffice.booking.v1 import booking_admin_service_pb2_grpc as bpb_grpc
from gen.boxoffice.checkin.v1 import checkin_service_pb2_grpc as cpb_grpc
from gen.boxoffice.payment.v1 import payment_service_pb2 as ppb
from gen.boxoffice.payment.v1 import payment_service_pb2_grpc as ppb_grpc
from gen.boxoffice.queue.v1 import queue_admin_service_pb2 as qpb
from gen.boxoffice.queue.v1 import queue_admin_service_pb2_grpc as qpb_grpc

OK, FAILED, USAGE = 0, 1, 2

DEFAULT_QUEUE_ADDR = "127.0.0.1:50051"
DEFAULT_BOOKING_ADDR = "127.0.0.1:50052"
DEFAULT_PAYMENT_ADDR = "127.0.0.1:50053"
DEFAULT_CHECKIN_ADDR = "127.0.0.1:50055"
# Seat rows per LoadInventory call (the service takes up to 10,000).
DEFAULT_CHUNK_ROWS = 500
CALL_SECONDS = 30.0


class Progress:
    """Seats loaded so far: a bar redrawn in place on a terminal, a plain
    line per step otherwise."""

    def __init__(self, out: TextIO, total_seats: int) -> None:
        self._out = out
        self._total = total_seats
        self._tty = out.isatty()

    def update(self, done_seats: int) -> None:
        share = done_seats / self._total if self._total else 1.0
        if self._tty:
            width = 30
            bar = "#" * round(width * share)
            self._out.write(f"\r[{bar:<{width}}] {done_seats:,}/{self._total:,} seats ({share:.0%})")
            if done_seats >= self._total:
                self._out.write("\n")
        else:
            self._out.write(f"loaded {done_seats:,}/{self._total:,} seats ({share:.0%})\n")
        self._out.flush()


# -- the command ----------------------------------------------------------------


class CallFailed(Exception):
    """A call that failed, already described for the operator."""


def _describe(err: grpc.aio.AioRpcError) -> str:
    domain = from_rpc_error(err)
    reason = "" if domain.reason == "UPSTREAM_FAILED" else f" {domain.reason}"
    details = "".join(f" {k}={v}" for k, v in sorted(domain.metadata.items()) if k != "upstream_code")
    return f"{err.code().name}{reason}: {err.details() or ''}{' (' + details.strip() + ')' if details else ''}"


async def _call(what: str, call: Any) -> Any:
    try:
        return await call
    except grpc.aio.AioRpcError as err:
        raise CallFailed(f"{what} failed: {_describe(err)}") from None


@dataclass
class _Clients:
    queue: ClientChannel
    booking: ClientChannel
    payment: ClientChannel
    checkin: ClientChannel
    timeout: float

    def queue_admin(self) -> Any:
        return self.queue.stub(qpb_grpc.QueueAdminServiceStub)

    def booking_admin(self) -> Any:
        return self.booking.stub(bpb_grpc.BookingAdminServiceStub)

    def payments(self) -> Any:
        return self.payment.stub(ppb_grpc.PaymentServiceStub)

    def mail_admin(self) -> Any:
        # MailAdminService is served by PaymentService's process.
        return self.payment.stub(admin_mail.MAIL_ADMIN_STUB)

    def checkin_admin(self) -> Any:
        return self.checkin.stub(cpb_grpc.CheckInAdminServiceStub)


async def _event_create(clients: _Clients, path: str, out: TextIO) -> None:
    spec = parse_event_file(path, _read(path))
    out.writelines(f"{note}\n" for note in spec.notes)
    event_id = spec.event.event_id
    created = await _call(
        f"creating event {event_id}", clients.booking_admin().CreateEvent(spec.event, timeout=clients.timeout)
    )
    out.write(f"event {event_id} created: {created.event.display_name!r}, {len(created.event.sections)} sections\n")
    out.write(f"  at the door: {door_line(created.event.checkin)}\n")
    out.write(f"  waiting list: {waitlist_line(created.event.waitlist)}\n")
    if spec.waiting_room is not None:
        room = await _call(
            f"event {event_id} was created, but creating its waiting room",
            clients.queue_admin().CreateWaitingRoom(spec.waiting_room, timeout=clients.timeout),
        )
        out.write(f"waiting room of event {event_id} created: {room_line(room.config)}\n")
        out.write(f"  {settings_line(room.config)}\n")


async def _inventory_load(
    clients: _Clients, event_id: int, path: str, chunk_rows: int, out: TextIO, err: TextIO
) -> None:
    rows = parse_inventory_file(path, _read(path))
    total = sum(r.seat_count for _, r in rows)
    progress = Progress(err, total)
    done = 0
    for start in range(0, len(rows), chunk_rows):
        chunk = rows[start : start + chunk_rows]
        request = bpb.BookingAdminServiceLoadInventoryRequest(event_id=event_id, rows=[r for _, r in chunk])
        await _call(
            f"loading lines {chunk[0][0]}-{chunk[-1][0]} of {path} (the {done:,} seats before them are loaded)",
            clients.booking_admin().LoadInventory(request, timeout=max(clients.timeout, 60.0)),
        )
        done += sum(r.seat_count for _, r in chunk)
        progress.update(done)
    out.write(f"event {event_id}: {done:,} seats loaded in {len(rows):,} rows\n")


def door_line(checkin: bpb.ManagedCheckInSettings) -> str:
    """An event's door rules as the operator reads them."""
    codes = "static codes admit" if checkin.static_codes else "only rotating codes admit"
    again = "re-entry allowed" if checkin.reentry else "no re-entry"
    return f"{codes}, {again}"


def waitlist_line(waitlist: bpb.ManagedWaitlistSettings) -> str:
    """An event's waiting-list settings as the operator reads them."""
    minutes = waitlist.offer_minutes
    return f"offers last {minutes:,} minute{'' if minutes == 1 else 's'}"


def _table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    widths = [max(len(str(c)) for c in column) for column in zip(header, *rows, strict=True)]
    lines = [
        "  ".join(str(c).rjust(w) if i else str(c).ljust(w) for i, (c, w) in enumerate(zip(row, widths, strict=True)))
        for row in (header, *rows)
    ]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(line.rstrip() for line in lines) + "\n"


def waitlist_figures(stats: bpb.GetEventStatsResponse) -> list[list[str]]:
    """The waiting list's rows of the stats table."""
    return [
        ["fans waiting", f"{stats.waitlist_waiting:,}"],
        ["offers open", f"{stats.waitlist_offered:,}"],
        ["offers taken", f"{stats.waitlist_taken:,}"],
        ["offers lapsed or declined", f"{stats.waitlist_lapsed:,}"],
    ]


async def _stats(clients: _Clients, event_id: int, out: TextIO) -> None:
    event = await _call(
        f"stats of event {event_id}",
        clients.booking_admin().GetEventStats(bpb.GetEventStatsRequest(event_id=event_id), timeout=clients.timeout),
    )
    out.write(f"event {event_id}: {event.event.display_name}\n")
    out.write(
        f"per customer: {event.event.max_seats_per_customer:,} seats held at once, "
        f"{event.event.max_tickets_per_customer:,} tickets bought and held in all\n"
    )
    out.write(f"at the door: {door_line(event.event.checkin)}\n")
    out.write(f"waiting list: {waitlist_line(event.event.waitlist)}\n\n")
    rows = [
        [
            s.section_id,
            "seated" if s.kind == bpb.MANAGED_SECTION_KIND_SEATED else "standing",
            format_money(s.price.amount_minor, s.price.currency_code),
            f"{s.capacity:,}",
            f"{s.sold:,}",
            f"{s.held:,}",
            f"{max(0, s.capacity + s.overbook_limit - s.sold - s.held):,}",
        ]
        for s in event.event.sections
    ]
    rows.append(["total", "", "", f"{event.capacity:,}", f"{event.sold:,}", f"{event.held:,}", f"{event.available:,}"])
    out.write(_table(["section", "kind", "price", "capacity", "sold", "held", "available"], rows))
    out.write("\n" + _table(["waiting list", ""], waitlist_figures(event)))
    try:
        room = await clients.queue_admin().GetWaitingRoomStats(
            qpb.GetWaitingRoomStatsRequest(event_id=event_id), timeout=clients.timeout
        )
    except grpc.aio.AioRpcError as err:
        if err.code() != grpc.StatusCode.NOT_FOUND:
            raise CallFailed(f"waiting-room stats of event {event_id} failed: {_describe(err)}") from None
        out.write("\nno waiting room\n")
        return
    out.write("\n" + _table(["waiting room", ""], admin_room.room_figures(room)))


async def _refund(clients: _Clients, payment_id: str, reason: str, request_id: str, out: TextIO) -> None:
    """Refund what is left of a payment (one whose refund the provider
    refused is asked again this way, with a new request id; the same one
    replays the first answer)."""
    reply = await _call(
        f"refunding payment {payment_id} (request id {request_id})",
        clients.payments().RefundPayment(
            ppb.RefundPaymentRequest(payment_id=payment_id, reason=reason, request_id=request_id),
            timeout=clients.timeout,
        ),
    )
    payment = reply.payment
    refunded = format_money(payment.refunded.amount_minor, payment.refunded.currency_code)
    paid = format_money(payment.amount.amount_minor, payment.amount.currency_code)
    state = enum_name(ppb.PaymentState, payment.state, "PAYMENT_STATE_")
    out.write(f"payment {payment.payment_id}: {state}, {refunded} refunded of {paid} (request id {request_id})\n")


def _payment_id(text: str) -> str:
    try:
        return str(uuid.UUID(text))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a payment id (a UUID)") from None


def _bounded_text(name: str, longest: int) -> Any:
    def parse(text: str) -> str:
        if not text.strip() or len(text) > longest:
            raise argparse.ArgumentTypeError(f"the {name} is 1 to {longest} characters")
        return text

    return parse


def _read(path: str) -> str:
    try:
        return Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as err:
        raise BadFile([f"{path}: cannot read: {err}"]) from None


def _parser(environ: Mapping[str, str]) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="boxoffice admin",
        description="Administer events and waiting rooms through QueueAdminService and BookingAdminService, "
        "gate devices through CheckInAdminService, refunds through PaymentService, and the ticket e-mails "
        "through MailAdminService.",
        epilog=(
            "With --ca-file, --cert-file and --key-file (or BOXOFFICE_TLS_CA_FILE, BOXOFFICE_TLS_CERT_FILE, "
            "BOXOFFICE_TLS_KEY_FILE) the services are dialled over mutual TLS with that (operator) certificate; "
            "without them, over an INSECURE plaintext channel. Exit codes: 0 done, 2 usage or bad file, "
            "1 a failed call."
        ),
    )
    env = environ.get
    parser.add_argument(
        "--queue-addr",
        default=env("BOXOFFICE_ADMIN_QUEUE_ADDR", DEFAULT_QUEUE_ADDR),
        help="QueueService's host:port (BOXOFFICE_ADMIN_QUEUE_ADDR, default %(default)s)",
    )
    parser.add_argument(
        "--booking-addr",
        default=env("BOXOFFICE_ADMIN_BOOKING_ADDR", DEFAULT_BOOKING_ADDR),
        help="BookingService's host:port (BOXOFFICE_ADMIN_BOOKING_ADDR, default %(default)s)",
    )
    parser.add_argument(
        "--payment-addr",
        default=env("BOXOFFICE_ADMIN_PAYMENT_ADDR", DEFAULT_PAYMENT_ADDR),
        help="PaymentService's host:port, which also serves the ticket e-mails' MailAdminService "
        "(BOXOFFICE_ADMIN_PAYMENT_ADDR, default %(default)s)",
    )
    parser.add_argument(
        "--checkin-addr",
        default=env("BOXOFFICE_ADMIN_CHECKIN_ADDR", DEFAULT_CHECKIN_ADDR),
        help="CheckInService's host:port (BOXOFFICE_ADMIN_CHECKIN_ADDR, default %(default)s)",
    )
    parser.add_argument("--ca-file", default=env("BOXOFFICE_TLS_CA_FILE"), help="the mesh's CA (PEM)")
    parser.add_argument("--cert-file", default=env("BOXOFFICE_TLS_CERT_FILE"), help="the operator's certificate")
    parser.add_argument("--key-file", default=env("BOXOFFICE_TLS_KEY_FILE"), help="the operator's private key")
    parser.add_argument("--timeout", type=float, default=CALL_SECONDS, help="seconds per call (default %(default)s)")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    event = commands.add_parser("event", help="events").add_subparsers(dest="action", required=True)
    create = event.add_parser(
        "create",
        help="create an event, its sections and prices, and its waiting room",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description=EVENT_FILE_HELP,
    )
    create.add_argument("file", metavar="EVENT.yaml")

    inventory = commands.add_parser("inventory", help="seats").add_subparsers(dest="action", required=True)
    load = inventory.add_parser("load", help="load seat rows from CSV: section,row,first_seat_number,seat_count")
    load.add_argument("event_id", type=positive, metavar="EVENT_ID")
    load.add_argument("file", metavar="SEATS.csv")
    load.add_argument(
        "--chunk-rows",
        type=positive,
        default=DEFAULT_CHUNK_ROWS,
        help="rows per call (default %(default)s, at most 10000)",
    )

    stats = commands.add_parser("stats", help="an event's seats and waiting room, as a table")
    stats.add_argument("event_id", type=positive, metavar="EVENT_ID")

    admin_lanes.add_commands(commands)
    admin_room.add_commands(commands)
    admin_mail.add_commands(commands)
    admin_gates.add_commands(commands)

    refund = commands.add_parser(
        "refund",
        help="refund what is left of a payment (and ask again for one the provider refused)",
        description="Refund what is left of a payment to the fan. A paid booking is cancelled first (its seats "
        "go back on sale, its tickets are voided) for what the event's refund policy grants; a payment that "
        "owes its money back (REFUND_REQUIRED) is refunded in full. A refund the provider refused is final for "
        "its request id: ask again with a new one. The same request id replays the first answer, so a command "
        "cut off halfway is run again with the request id it printed.",
    )
    refund.add_argument("payment_id", type=_payment_id, metavar="PAYMENT_ID")
    refund.add_argument("--reason", required=True, type=_bounded_text("reason", 500), help="why (kept with it)")
    refund.add_argument(
        "--request-id",
        type=_bounded_text("request id", 64),
        default=None,
        help="the refund's request id, 1 to 64 characters (default: a new one, printed)",
    )
    return parser


async def _run(args: argparse.Namespace, files: CertFiles | None, out: TextIO, err: TextIO) -> None:
    async with (
        ClientChannel(args.queue_addr, files) as queue,
        ClientChannel(args.booking_addr, files) as booking,
        ClientChannel(args.payment_addr, files) as payment,
        ClientChannel(args.checkin_addr, files) as checkin,
    ):
        clients = _Clients(queue, booking, payment, checkin, args.timeout)
        if args.command == "event":
            await _event_create(clients, args.file, out)
        elif args.command == "inventory":
            await _inventory_load(clients, args.event_id, args.file, args.chunk_rows, out, err)
        elif args.command == "stats":
            await _stats(clients, args.event_id, out)
        elif args.command in ("codes", "draw", "staff-pass"):
            await admin_lanes.run(clients.queue_admin(), _call, args, clients.timeout, out)
        elif args.command == "tickets":
            await admin_mail.run(clients.mail_admin(), _call, args, clients.timeout, out)
        elif args.command == "gate-device":
            await admin_gates.run(clients.checkin_admin(), _call, _table, args, clients.timeout, out)
        elif args.command == "refund":
            request_id = args.request_id or f"admin-{uuid.uuid4().hex[:16]}"
            await _refund(clients, args.payment_id, args.reason, request_id, out)
        else:
            await admin_room.run(clients.queue_admin(), _call, args, clients.timeout, out)


def main(argv: Sequence[str], environ: Mapping[str, str]) -> int:
    """Run ``boxoffice admin ARGV...``; the exit code."""
    parser = _parser(environ)
    try:
        args = parser.parse_args(list(argv))
    except SystemExit as exit_:
        return exit_.code if isinstance(exit_.code, int) else USAGE
    tls = (args.ca_file, args.cert_file, args.key_file)
    if any(tls) and not all(tls):
        parser.print_usage(sys.stderr)
        print("boxoffice admin: error: give all three of the CA, certificate and key files, or none", file=sys.stderr)
        return USAGE
    problem = admin_lanes.usage_problem(args) or admin_room.usage_problem(args)
    if problem is not None:
        print(f"boxoffice admin: error: {problem}", file=sys.stderr)
        return USAGE
    if args.command == "inventory" and args.chunk_rows > 10_000:
        print("boxoffice admin: error: --chunk-rows is at most 10000", file=sys.stderr)
        return USAGE
    files = CertFiles(Path(args.ca_file), Path(args.cert_file), Path(args.key_file)) if all(tls) else None
    try:
        asyncio.run(_run(args, files, sys.stdout, sys.stderr))
    except BadFile as bad:
        for problem in bad.problems:
            print(problem, file=sys.stderr)
        print("nothing was sent", file=sys.stderr)
        return USAGE
    except CallFailed as failed:
        print(f"error: {failed}", file=sys.stderr)
        return FAILED
    return OK
