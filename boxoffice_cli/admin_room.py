"""``boxoffice admin queue open|pause|resume|update`` and ``revoke``: the
waiting room's admission, its settings and one customer's place in it, and
the waiting-room half of ``stats``, through QueueAdminService."""

from __future__ import annotations

import argparse
import datetime
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TextIO

from boxoffice_cli.admin_files import MAX_RATE_PER_SECOND, PRESENCE_GRACE_SECONDS
from boxoffice_cli.args import positive
from gen.boxoffice.queue.v1 import queue_admin_service_pb2 as qpb

Call = Callable[[str, Awaitable[Any]], Awaitable[Any]]


def enum_name(enum: Any, value: int, prefix: str) -> str:
    """An enum value's name as the command prints it (CUSTOMER_STATE_ACTIVE -> ACTIVE)."""
    return str(enum.Name(value)).removeprefix(prefix)


def room_line(room: qpb.WaitingRoom) -> str:
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


def settings_line(room: qpb.WaitingRoom) -> str:
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


async def _queue(admin: Any, call: Call, action: str, event_id: int, call_seconds: float, out: TextIO) -> None:
    method, request = _QUEUE_ACTIONS[action]
    reply = await call(
        f"queue {action} of event {event_id}", getattr(admin, method)(request(event_id=event_id), timeout=call_seconds)
    )
    out.write(f"event {event_id} waiting room: {room_line(reply.config)}\n")


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


def changes_of(args: argparse.Namespace) -> RoomChanges:
    return RoomChanges(
        presence_grace_seconds=args.presence_grace,
        safety_net=args.safety_net,
        rate_min=args.rate_min,
        rate_max=args.rate_max,
    )


async def _queue_update(
    admin: Any, call: Call, event_id: int, changes: RoomChanges, call_seconds: float, out: TextIO
) -> None:
    """The stored configuration with ``changes``: UpdateWaitingRoom replaces
    the whole configuration, so the rest is sent back as GetWaitingRoom
    read it."""
    current = await call(
        f"reading the waiting room of event {event_id}",
        admin.GetWaitingRoom(qpb.GetWaitingRoomRequest(event_id=event_id), timeout=call_seconds),
    )
    room = qpb.WaitingRoom()
    room.CopyFrom(current.config)
    changes.apply(room)
    reply = await call(
        f"updating the waiting room of event {event_id}",
        admin.UpdateWaitingRoom(qpb.UpdateWaitingRoomRequest(config=room), timeout=call_seconds),
    )
    out.write(f"event {event_id} waiting room: {room_line(reply.config)}\n")
    out.write(f"  {settings_line(reply.config)}\n")


_ADMISSION = {
    qpb.WAITING_ROOM_ADMISSION_PRE_QUEUE: "pre-queue",
    qpb.WAITING_ROOM_ADMISSION_OPEN: "open",
    qpb.WAITING_ROOM_ADMISSION_PAUSED: "paused",
    qpb.WAITING_ROOM_ADMISSION_SOLD_OUT: "sold out",
}

# Why the admitter targets its rate, as the stats table says it.
RATE_REASONS = {
    qpb.WAITING_ROOM_RATE_REASON_BASE: "the base rate",
    qpb.WAITING_ROOM_RATE_REASON_NO_SHOW_COMPENSATION: "raised: admitted fans do not show up",
    qpb.WAITING_ROOM_RATE_REASON_BOOKING_SLOW: "lowered: booking is slow",
    qpb.WAITING_ROOM_RATE_REASON_BOOKING_ERRORS: "lowered: booking is failing",
    qpb.WAITING_ROOM_RATE_REASON_BOUNDED: "held at the room's bound",
}


def room_figures(room: qpb.GetWaitingRoomStatsResponse) -> list[list[str]]:
    """The waiting room's rows of the stats table."""
    s = room.stats
    return [
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


def _target_text(stats: qpb.WaitingRoomStats) -> str:
    if stats.target_admission_rate_per_second <= 0:
        return "none yet (the admitter has not ticked)"
    reason = RATE_REASONS.get(stats.rate_reason, "unknown")
    return f"{stats.target_admission_rate_per_second:,.1f}/s ({reason})"


_REVOKE_ACTIONS = {
    "end": (qpb.REVOKE_ACTION_END_PLACE, "revoking"),
    "shadow": (qpb.REVOKE_ACTION_SHADOW, "shadowing"),
    "unshadow": (qpb.REVOKE_ACTION_UNSHADOW, "unshadowing"),
}


async def _revoke(
    admin: Any, call: Call, event_id: int, customer_id: str, action: str, call_seconds: float, out: TextIO
) -> None:
    kind, doing = _REVOKE_ACTIONS[action]
    reply = await call(
        f"{doing} {customer_id!r} in event {event_id}",
        admin.RevokeCustomer(
            qpb.RevokeCustomerRequest(event_id=event_id, customer_id=customer_id, action=kind),
            timeout=call_seconds,
        ),
    )
    before = enum_name(qpb.CustomerState, reply.previous_state, "CUSTOMER_STATE_")
    after = enum_name(qpb.CustomerState, reply.state, "CUSTOMER_STATE_")
    if action == "end":
        verdict = "revoked" if reply.revoked else "nothing to revoke"
        out.write(f"event {event_id} customer {customer_id}: {before} -> {after} ({verdict})\n")
        return
    flag = "shadowed" if reply.shadowed else "not shadowed"
    change = "changed" if reply.revoked else "unchanged"
    out.write(f"event {event_id} customer {customer_id}: {after}, {flag} ({change})\n")


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


def add_commands(commands: Any) -> None:
    """The waiting room's commands (queue, revoke), on the admin command's subparsers."""
    queue = commands.add_parser(
        "queue", help="open, pause or resume admission, or update the waiting room's settings"
    ).add_subparsers(dest="action", required=True, metavar="ACTION")
    for action, what in (
        ("open", "open the on-sale now (and resume admission if paused)"),
        ("pause", "pause admission; waiting fans keep their places"),
        ("resume", "resume admission after a pause"),
    ):
        queue.add_parser(action, help=what).add_argument("event_id", type=positive, metavar="EVENT_ID")
    update = queue.add_parser(
        "update",
        help="change presence grace, safety net and the bounds of the adaptive rate",
        description=_QUEUE_UPDATE_HELP,
    )
    update.add_argument("event_id", type=positive, metavar="EVENT_ID")
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

    revoke = commands.add_parser(
        "revoke",
        help="end a customer's place or shopping session (they must rejoin), or flag them for the shadow lane",
        description="Without a flag: end the customer's place in the queue, or their shopping session and "
        "token; they must join again, at the back.",
    )
    revoke.add_argument("event_id", type=positive, metavar="EVENT_ID")
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


def usage_problem(args: argparse.Namespace) -> str | None:
    """What is wrong with the arguments before anything is sent, or None."""
    if args.command == "queue" and args.action == "update" and changes_of(args).empty():
        return "queue update needs at least one of --presence-grace, --safety-net, --rate-min and --rate-max"
    return None


async def run(admin: Any, call: Call, args: argparse.Namespace, call_seconds: float, out: TextIO) -> None:
    """Runs ``queue ...`` or ``revoke`` through QueueAdminService (``admin``
    its stub, ``call`` the admin command's error handling)."""
    if args.command == "revoke":
        await _revoke(admin, call, args.event_id, args.customer_id, args.revoke_action, call_seconds, out)
    elif args.action == "update":
        await _queue_update(admin, call, args.event_id, changes_of(args), call_seconds, out)
    else:
        await _queue(admin, call, args.action, args.event_id, call_seconds, out)
