"""``boxoffice admin``: the operators' command over QueueAdminService,
BookingAdminService and PaymentService's refunds.

    boxoffice admin event create EVENT.yaml
    boxoffice admin inventory load EVENT_ID SEATS.csv
    boxoffice admin queue open|pause|resume EVENT_ID
    boxoffice admin queue update EVENT_ID [--presence-grace D] [--safety-net on|off] [--rate-min N] [--rate-max N]
    boxoffice admin stats EVENT_ID
    boxoffice admin revoke EVENT_ID CUSTOMER_ID [--shadow | --unshadow]
    boxoffice admin refund PAYMENT_ID --reason TEXT [--request-id ID]

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
import datetime
import re
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
from boxoffice_cli import admin_lanes
from boxoffice_cli.admin_files import (
    EVENT_FILE_HELP,
    MAX_RATE_PER_SECOND,
    PRESENCE_GRACE_SECONDS,
    BadFile,
    parse_event_file,
    parse_inventory_file,
)
from gen.boxoffice.booking.v1 import booking_admin_service_pb2 as bpb
from gen.boxoffice.booking.v1 import booking_admin_service_pb2_grpc as bpb_grpc
from gen.boxoffice.payment.v1 import payment_service_pb2 as ppb
from gen.boxoffice.payment.v1 import payment_service_pb2_grpc as ppb_grpc
from gen.boxoffice.queue.v1 import queue_admin_service_pb2 as qpb
from gen.boxoffice.queue.v1 import queue_admin_service_pb2_grpc as qpb_grpc

OK, FAILED, USAGE = 0, 1, 2

DEFAULT_QUEUE_ADDR = "127.0.0.1:50051"
DEFAULT_BOOKING_ADDR = "127.0.0.1:50052"
DEFAULT_PAYMENT_ADDR = "127.0.0.1:50053"
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
    timeout: float

    def queue_admin(self) -> Any:
        return self.queue.stub(qpb_grpc.QueueAdminServiceStub)

    def booking_admin(self) -> Any:
        return self.booking.stub(bpb_grpc.BookingAdminServiceStub)

    def payments(self) -> Any:
        return self.payment.stub(ppb_grpc.PaymentServiceStub)


async def _event_create(clients: _Clients, path: str, out: TextIO) -> None:
    spec = parse_event_file(path, _read(path))
    event_id = spec.event.event_id
    created = await _call(
        f"creating event {event_id}", clients.booking_admin().CreateEvent(spec.event, timeout=clients.timeout)
    )
    out.write(f"event {event_id} created: {created.event.display_name!r}, {len(created.event.sections)} sections\n")
    if spec.waiting_room is not None:
        room = await _call(
            f"event {event_id} was created, but creating its waiting room",
            clients.queue_admin().CreateWaitingRoom(spec.waiting_room, timeout=clients.timeout),
        )
        out.write(f"waiting room of event {event_id} created: {_room_line(room.config)}\n")
        out.write(f"  {_settings_line(room.config)}\n")


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


def _room_line(room: qpb.WaitingRoom) -> str:
    opens = room.opens_at.ToDatetime(tzinfo=datetime.UTC).isoformat().replace("+00:00", "Z")
    state = "paused" if room.paused else "running"
    return (
        f"opens {opens}, {room.admission_rate_per_second:,} admissions/s, "
        f"{room.max_active_shoppers:,} shoppers at most, admission {state}"
    )


def duration_text(seconds: int) -> str:
    """``300`` -> ``5m``, ``5400`` -> ``1h 30m``, ``90`` -> ``1m 30s``."""
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    parts = [f"{n}{unit}" for n, unit in ((hours, "h"), (minutes, "m"), (secs, "s")) if n]
    return " ".join(parts) or "0s"


def _rate_bound(rate: int) -> str:
    return "the base rate" if rate == 0 else f"{rate:,}/s"


def _settings_line(room: qpb.WaitingRoom) -> str:
    """The settings that shape admission beyond the base rate and the cap."""
    return (
        f"presence grace {duration_text(room.presence_grace.seconds)}, "
        f"safety net {'on' if room.safety_net else 'off'}, "
        f"rate adapts from {_rate_bound(room.admission_rate_min_per_second)} "
        f"to {_rate_bound(room.admission_rate_max_per_second)}"
    )


_QUEUE_ACTIONS: dict[str, tuple[str, Any]] = {
    "open": ("OpenWaitingRoom", qpb.OpenWaitingRoomRequest),
    "pause": ("PauseWaitingRoom", qpb.PauseWaitingRoomRequest),
    "resume": ("ResumeWaitingRoom", qpb.ResumeWaitingRoomRequest),
}


async def _queue(clients: _Clients, action: str, event_id: int, out: TextIO) -> None:
    method, request = _QUEUE_ACTIONS[action]
    call = getattr(clients.queue_admin(), method)(request(event_id=event_id), timeout=clients.timeout)
    reply = await _call(f"queue {action} of event {event_id}", call)
    out.write(f"event {event_id} waiting room: {_room_line(reply.config)}\n")


@dataclass(frozen=True)
class RoomChanges:
    """What ``queue update`` changes; None leaves a setting as it is."""

    presence_grace_seconds: int | None = None
    safety_net: bool | None = None
    rate_min: int | None = None
    rate_max: int | None = None

    def empty(self) -> bool:
        return all(v is None for v in (self.presence_grace_seconds, self.safety_net, self.rate_min, self.rate_max))

    def apply(self, room: qpb.WaitingRoom) -> None:
        if self.presence_grace_seconds is not None:
            room.presence_grace.FromSeconds(self.presence_grace_seconds)
        if self.safety_net is not None:
            room.safety_net = self.safety_net
        if self.rate_min is not None:
            room.admission_rate_min_per_second = self.rate_min
        if self.rate_max is not None:
            room.admission_rate_max_per_second = self.rate_max


async def _queue_update(clients: _Clients, event_id: int, changes: RoomChanges, out: TextIO) -> None:
    """The stored configuration with ``changes``: UpdateWaitingRoom replaces
    the whole configuration, so the rest is sent back as GetWaitingRoom
    read it."""
    admin = clients.queue_admin()
    current = await _call(
        f"reading the waiting room of event {event_id}",
        admin.GetWaitingRoom(qpb.GetWaitingRoomRequest(event_id=event_id), timeout=clients.timeout),
    )
    room = qpb.WaitingRoom()
    room.CopyFrom(current.config)
    changes.apply(room)
    reply = await _call(
        f"updating the waiting room of event {event_id}",
        admin.UpdateWaitingRoom(qpb.UpdateWaitingRoomRequest(config=room), timeout=clients.timeout),
    )
    out.write(f"event {event_id} waiting room: {_room_line(reply.config)}\n")
    out.write(f"  {_settings_line(reply.config)}\n")


def _table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    widths = [max(len(str(c)) for c in column) for column in zip(header, *rows, strict=True)]
    lines = [
        "  ".join(str(c).rjust(w) if i else str(c).ljust(w) for i, (c, w) in enumerate(zip(row, widths, strict=True)))
        for row in (header, *rows)
    ]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(line.rstrip() for line in lines) + "\n"


_ADMISSION = {
    qpb.WAITING_ROOM_ADMISSION_PRE_QUEUE: "pre-queue",
    qpb.WAITING_ROOM_ADMISSION_OPEN: "open",
    qpb.WAITING_ROOM_ADMISSION_PAUSED: "paused",
}

# Why the admitter targets its rate, as the stats table says it.
RATE_REASONS = {
    qpb.WAITING_ROOM_RATE_REASON_BASE: "the base rate",
    qpb.WAITING_ROOM_RATE_REASON_NO_SHOW_COMPENSATION: "raised: admitted fans do not show up",
    qpb.WAITING_ROOM_RATE_REASON_BOOKING_SLOW: "lowered: booking is slow",
    qpb.WAITING_ROOM_RATE_REASON_BOOKING_ERRORS: "lowered: booking is failing",
    qpb.WAITING_ROOM_RATE_REASON_BOUNDED: "held at the room's bound",
}


def _target_text(stats: qpb.WaitingRoomStats) -> str:
    if stats.target_admission_rate_per_second <= 0:
        return "none yet (the admitter has not ticked)"
    reason = RATE_REASONS.get(stats.rate_reason, "unknown")
    return f"{stats.target_admission_rate_per_second:,.1f}/s ({reason})"


async def _stats(clients: _Clients, event_id: int, out: TextIO) -> None:
    event = await _call(
        f"stats of event {event_id}",
        clients.booking_admin().GetEventStats(bpb.GetEventStatsRequest(event_id=event_id), timeout=clients.timeout),
    )
    out.write(f"event {event_id}: {event.event.display_name}\n")
    out.write(
        f"per customer: {event.event.max_seats_per_customer:,} seats held at once, "
        f"{event.event.max_tickets_per_customer:,} tickets bought and held in all\n\n"
    )
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
    try:
        room = await clients.queue_admin().GetWaitingRoomStats(
            qpb.GetWaitingRoomStatsRequest(event_id=event_id), timeout=clients.timeout
        )
    except grpc.aio.AioRpcError as err:
        if err.code() != grpc.StatusCode.NOT_FOUND:
            raise CallFailed(f"waiting-room stats of event {event_id} failed: {_describe(err)}") from None
        out.write("\nno waiting room\n")
        return
    s = room.stats
    figures = [
        ["admission", _ADMISSION.get(s.admission, "unknown")],
        ["waiting", f"{s.queue_length:,}"],
        ["shopping", f"{s.active_shoppers:,} of {room.config.max_active_shoppers:,}"],
        ["admitted", f"{s.admitted_total:,}"],
        ["joined", f"{s.joined_total:,}"],
        ["rate", f"{s.admission_rate_per_second:,.1f}/s of {room.config.admission_rate_per_second:,}/s"],
        ["target rate", _target_text(s)],
        [
            "rate bounds",
            f"{_rate_bound(room.config.admission_rate_min_per_second)} "
            f"to {_rate_bound(room.config.admission_rate_max_per_second)}",
        ],
        ["presence grace", duration_text(room.config.presence_grace.seconds)],
        ["safety net", "on" if room.config.safety_net else "off"],
    ]
    out.write("\n" + _table(["waiting room", ""], figures))


_REVOKE_ACTIONS = {
    "end": (qpb.REVOKE_ACTION_END_PLACE, "revoking"),
    "shadow": (qpb.REVOKE_ACTION_SHADOW, "shadowing"),
    "unshadow": (qpb.REVOKE_ACTION_UNSHADOW, "unshadowing"),
}


def _enum_name(enum: Any, value: int, prefix: str) -> str:
    """An enum value's name as the command prints it (CUSTOMER_STATE_ACTIVE -> ACTIVE)."""
    return str(enum.Name(value)).removeprefix(prefix)


async def _revoke(clients: _Clients, event_id: int, customer_id: str, action: str, out: TextIO) -> None:
    kind, doing = _REVOKE_ACTIONS[action]
    reply = await _call(
        f"{doing} {customer_id!r} in event {event_id}",
        clients.queue_admin().RevokeCustomer(
            qpb.RevokeCustomerRequest(event_id=event_id, customer_id=customer_id, action=kind),
            timeout=clients.timeout,
        ),
    )
    before = _enum_name(qpb.CustomerState, reply.previous_state, "CUSTOMER_STATE_")
    after = _enum_name(qpb.CustomerState, reply.state, "CUSTOMER_STATE_")
    if action == "end":
        verdict = "revoked" if reply.revoked else "nothing to revoke"
        out.write(f"event {event_id} customer {customer_id}: {before} -> {after} ({verdict})\n")
        return
    flag = "shadowed" if reply.shadowed else "not shadowed"
    change = "changed" if reply.revoked else "unchanged"
    out.write(f"event {event_id} customer {customer_id}: {after}, {flag} ({change})\n")


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
    state = _enum_name(ppb.PaymentState, payment.state, "PAYMENT_STATE_")
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


def _positive(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive whole number")
    return int(text)


def _rate(text: str) -> int:
    if not text.isdigit() or int(text) > MAX_RATE_PER_SECOND:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number from 0 to {MAX_RATE_PER_SECOND:,}")
    return int(text)


_DURATION = re.compile(r"^([0-9]+)([smh]?)$")
_UNIT_SECONDS = {"": 1, "s": 1, "m": 60, "h": 3600}


def _presence_grace(text: str) -> int:
    """``300``, ``300s``, ``5m`` or ``2h``: seconds, within the room's bounds."""
    match = _DURATION.match(text.strip())
    low, high = PRESENCE_GRACE_SECONDS
    seconds = int(match.group(1)) * _UNIT_SECONDS[match.group(2)] if match else -1
    if not low <= seconds <= high:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a duration from {duration_text(low)} to {duration_text(high)} (e.g. 300, 90s, 5m, 2h)"
        )
    return seconds


def _on_off(text: str) -> bool:
    if text.lower() not in ("on", "off"):
        raise argparse.ArgumentTypeError(f"{text!r} is not on or off")
    return text.lower() == "on"


_QUEUE_UPDATE_HELP = """Change the settings of an event's waiting room that shape admission; settings not
given stay as they are (the configuration is read, changed and sent back whole, so run
one update at a time per event). Bad values are refused before anything is sent (exit
2); a value the service refuses (a bound on the wrong side of the base rate) exits 1
with the field it names."""


def _parser(environ: Mapping[str, str]) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="boxoffice admin",
        description="Administer events and waiting rooms through QueueAdminService and BookingAdminService, "
        "and refunds through PaymentService.",
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
        help="PaymentService's host:port (BOXOFFICE_ADMIN_PAYMENT_ADDR, default %(default)s)",
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
    load.add_argument("event_id", type=_positive, metavar="EVENT_ID")
    load.add_argument("file", metavar="SEATS.csv")
    load.add_argument(
        "--chunk-rows",
        type=_positive,
        default=DEFAULT_CHUNK_ROWS,
        help="rows per call (default %(default)s, at most 10000)",
    )

    queue = commands.add_parser(
        "queue", help="open, pause or resume admission, or update the waiting room's settings"
    ).add_subparsers(dest="action", required=True, metavar="ACTION")
    for action, what in (
        ("open", "open the on-sale now (and resume admission if paused)"),
        ("pause", "pause admission; waiting fans keep their places"),
        ("resume", "resume admission after a pause"),
    ):
        queue.add_parser(action, help=what).add_argument("event_id", type=_positive, metavar="EVENT_ID")
    update = queue.add_parser(
        "update",
        help="change presence grace, safety net and the bounds of the adaptive rate",
        description=_QUEUE_UPDATE_HELP,
    )
    update.add_argument("event_id", type=_positive, metavar="EVENT_ID")
    update.add_argument(
        "--presence-grace",
        type=_presence_grace,
        metavar="DURATION",
        help="how long a waiting fan may go unseen before dropping out: seconds, or with s, m or h "
        "(e.g. 300, 5m, 2h); 1 minute to 24 hours",
    )
    update.add_argument(
        "--safety-net",
        type=_on_off,
        metavar="on|off",
        help="on: a joining fan is admitted at once while nobody waits and a slot is free",
    )
    update.add_argument(
        "--rate-min",
        type=_rate,
        metavar="N",
        help="the least admissions per second the admitter may lower the rate to when booking is slow or "
        "failing (at most the base rate; 0: the base rate, never lower)",
    )
    update.add_argument(
        "--rate-max",
        type=_rate,
        metavar="N",
        help="the most admissions per second the admitter may raise the rate to when admitted fans do not "
        f"show up (at least the base rate, at most {MAX_RATE_PER_SECOND:,}; 0: the base rate, never higher)",
    )

    stats = commands.add_parser("stats", help="an event's seats and waiting room, as a table")
    stats.add_argument("event_id", type=_positive, metavar="EVENT_ID")

    admin_lanes.add_commands(commands)

    revoke = commands.add_parser(
        "revoke",
        help="end a customer's place or shopping session (they must rejoin), or flag them for the shadow lane",
        description="Without a flag: end the customer's place in the queue, or their shopping session and "
        "token; they must join again, at the back.",
    )
    revoke.add_argument("event_id", type=_positive, metavar="EVENT_ID")
    revoke.add_argument("customer_id", metavar="CUSTOMER_ID")
    lane = revoke.add_mutually_exclusive_group()
    lane.add_argument(
        "--shadow",
        dest="revoke_action",
        action="store_const",
        const="shadow",
        default="end",
        help="instead put the customer in the shadow lane: they wait and read their place as anyone does, "
        "but are never admitted (a customer already admitted keeps their session)",
    )
    lane.add_argument(
        "--unshadow",
        dest="revoke_action",
        action="store_const",
        const="unshadow",
        help="take the customer out of the shadow lane; one whom admission passed goes back to the head",
    )
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
    ):
        clients = _Clients(queue, booking, payment, args.timeout)
        if args.command == "event":
            await _event_create(clients, args.file, out)
        elif args.command == "inventory":
            await _inventory_load(clients, args.event_id, args.file, args.chunk_rows, out, err)
        elif args.command == "queue" and args.action == "update":
            await _queue_update(clients, args.event_id, _changes(args), out)
        elif args.command == "queue":
            await _queue(clients, args.action, args.event_id, out)
        elif args.command == "stats":
            await _stats(clients, args.event_id, out)
        elif args.command in ("codes", "draw", "staff-pass"):
            await admin_lanes.run(clients.queue_admin(), _call, args, clients.timeout, out)
        elif args.command == "refund":
            request_id = args.request_id or f"admin-{uuid.uuid4().hex[:16]}"
            await _refund(clients, args.payment_id, args.reason, request_id, out)
        else:
            await _revoke(clients, args.event_id, args.customer_id, args.revoke_action, out)


def _changes(args: argparse.Namespace) -> RoomChanges:
    return RoomChanges(
        presence_grace_seconds=args.presence_grace,
        safety_net=args.safety_net,
        rate_min=args.rate_min,
        rate_max=args.rate_max,
    )


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
    problem = admin_lanes.usage_problem(args)
    if problem is not None:
        print(f"boxoffice admin: error: {problem}", file=sys.stderr)
        return USAGE
    if args.command == "inventory" and args.chunk_rows > 10_000:
        print("boxoffice admin: error: --chunk-rows is at most 10000", file=sys.stderr)
        return USAGE
    if args.command == "queue" and args.action == "update" and _changes(args).empty():
        print(
            "boxoffice admin: error: queue update needs at least one of --presence-grace, --safety-net, "
            "--rate-min and --rate-max",
            file=sys.stderr,
        )
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
