"""``boxoffice admin codes create``, ``draw create`` and ``staff-pass``: the
ways into the lanes of a waiting room that are not open to everyone.

The codes are printed once, one a line (they are stored only as hashes);
a staff pass is printed with the link that carries it to the fan's page."""

from __future__ import annotations

import argparse
from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import Any, TextIO

from google.protobuf import duration_pb2, timestamp_pb2

from boxoffice_cli.args import positive
from gen.boxoffice.queue.v1 import queue_admin_service_pb2 as qpb

# QueueAdminService's bounds.
MAX_CODES = 100_000
MAX_USES = 1_000_000
STAFF_PASS_SECONDS = (60, 7 * 86_400)
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86_400}


def _instant(text: str) -> datetime:
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an ISO 8601 time (e.g. 2026-06-01T09:00:00Z)") from None
    if moment.tzinfo is None:
        raise argparse.ArgumentTypeError(f"{text!r} needs its zone (Z or +hh:mm)")
    return moment


def _seconds(text: str) -> int:
    """``90s``, ``30m``, ``2h``, ``1d`` or plain seconds."""
    unit = _UNITS.get(text[-1:], 0)
    number = text[:-1] if unit else text
    try:
        value = int(number) * (unit or 1)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a duration (like 90s, 30m, 2h or 1d)") from None
    low, high = STAFF_PASS_SECONDS
    if not low <= value <= high:
        raise argparse.ArgumentTypeError(f"{text!r} must be 1 minute to 7 days")
    return value


def add_commands(commands: Any) -> None:
    """The lane commands, on the admin command's subparsers."""
    codes = commands.add_parser("codes", help="access codes of a lane").add_subparsers(dest="action", required=True)
    create = codes.add_parser(
        "create",
        help="make a batch of access codes for a lane whose entry is by code, printed once, one a line",
        description="The codes are shown only now (the service keeps their SHA-256): save the output. "
        "A fan types a code on the event page; each code lets up to --uses accounts into the lane "
        "between --from and --until, each account bound to it at its first use.",
    )
    create.add_argument("event_id", type=positive, metavar="EVENT_ID")
    create.add_argument("lane", metavar="LANE")
    create.add_argument("--count", type=positive, required=True, help=f"how many codes (at most {MAX_CODES:,})")
    create.add_argument("--uses", type=positive, default=1, help="accounts per code (default 1: single-use)")
    create.add_argument("--from", dest="valid_from", type=_instant, help="when the codes start to work (default now)")
    create.add_argument("--until", dest="valid_until", type=_instant, required=True, help="when they stop working")
    create.add_argument("--label", default="", help="who the batch is for (up to 200 characters)")

    fan_draw = commands.add_parser("draw", help="the verified-fan draw").add_subparsers(dest="action", required=True)
    draw_create = fan_draw.add_parser(
        "create",
        help="create the event's verified-fan draw for a lane by code, and print its commitment",
        description="Fans register on the edge (POST /v1/events/EVENT_ID/fan-draw:register) until --closes; "
        "then the first --winners in the seeded order get a single-use code of the lane. Save the commitment "
        "printed now: boxoffice verify-draw checks the published draw against it.",
    )
    draw_create.add_argument("event_id", type=positive, metavar="EVENT_ID")
    draw_create.add_argument("lane", metavar="LANE")
    draw_create.add_argument("--closes", type=_instant, required=True, help="when registration closes and it is drawn")
    draw_create.add_argument("--winners", type=positive, required=True, help="how many registered fans win")

    staff = commands.add_parser(
        "staff-pass",
        help="sign a staff pass for an event's staff lane, and print the link that carries it",
    )
    staff.add_argument("event_id", type=positive, metavar="EVENT_ID")
    staff.add_argument("staff_name", metavar="NAME", help="whom the pass is for (recorded in the audit log)")
    staff.add_argument("--ttl", type=_seconds, default=4 * 3600, help="how long it works (default 4h; 1m to 7d)")
    staff.add_argument(
        "--edge", default="http://127.0.0.1:8080", help="the edge's public URL for the link (default %(default)s)"
    )


def usage_problem(args: argparse.Namespace) -> str | None:
    """What is wrong with the arguments before anything is sent, or None."""
    if args.command != "codes":
        return None
    if args.count > MAX_CODES:
        return f"--count is at most {MAX_CODES:,}"
    if args.uses > MAX_USES:
        return f"--uses is at most {MAX_USES:,}"
    if len(args.label) > 200:
        return "--label is at most 200 characters"
    if args.valid_from is not None and args.valid_until <= args.valid_from:
        return "--until must be after --from"
    return None


Call = Callable[[str, Awaitable[Any]], Awaitable[Any]]


async def run(admin: Any, call: Call, args: argparse.Namespace, call_seconds: float, out: TextIO) -> None:
    """Runs ``codes create`` or ``staff-pass`` through QueueAdminService
    (``admin`` its stub, ``call`` the admin command's error handling)."""
    if args.command == "codes":
        request = qpb.CreateAccessCodesRequest(
            event_id=args.event_id, lane=args.lane, count=args.count, max_uses=args.uses, label=args.label
        )
        if args.valid_from is not None:
            request.valid_from.CopyFrom(_timestamp(args.valid_from))
        request.valid_until.CopyFrom(_timestamp(args.valid_until))
        made = await call(
            f"creating {args.count:,} codes for lane {args.lane!r} of event {args.event_id}",
            admin.CreateAccessCodes(request, timeout=max(call_seconds, 60.0)),
        )
        for code in made.codes:
            out.write(f"{code}\n")
        return
    if args.command == "draw":
        created = qpb.CreateFanDrawRequest(event_id=args.event_id, lane=args.lane, winners=args.winners)
        created.closes_at.CopyFrom(_timestamp(args.closes))
        made_draw = await call(
            f"creating the verified-fan draw of event {args.event_id}",
            admin.CreateFanDraw(created, timeout=call_seconds),
        )
        out.write(
            f"verified-fan draw of event {args.event_id} created for lane {args.lane!r}, closing"
            f" {args.closes.isoformat()}; commitment {made_draw.commitment}\n"
        )
        return
    request_pass = qpb.IssueStaffPassRequest(
        event_id=args.event_id, staff_name=args.staff_name, ttl=duration_pb2.Duration(seconds=args.ttl)
    )
    issued = await call(
        f"issuing a staff pass for event {args.event_id}", admin.IssueStaffPass(request_pass, timeout=call_seconds)
    )
    expires = issued.expires_at.ToDatetime().isoformat(timespec="seconds")
    out.write(f"staff pass for {args.staff_name!r}, event {args.event_id}, until {expires}Z:\n")
    out.write(f"  {args.edge.rstrip('/')}/e/{args.event_id}?staff={issued.staff_pass}\n")


def _timestamp(moment: datetime) -> timestamp_pb2.Timestamp:
    stamp = timestamp_pb2.Timestamp()
    stamp.FromDatetime(moment)
    return stamp
