"""``boxoffice admin gate-device create|revoke|list``: the door's devices,
through CheckInAdminService.

A device's key is printed once, when it is made (the service keeps only
its SHA-256): it goes into the gate device (``Authorization: Device <key>``
through the edge). A revoked device's key opens nothing from then on."""

from __future__ import annotations

import argparse
import uuid
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TextIO

from boxoffice_cli.args import positive
from gen.boxoffice.checkin.v1 import checkin_service_pb2 as pb

# CheckInAdminService's bound on a device's name.
MAX_NAME = 100

Call = Callable[[str, Awaitable[Any]], Awaitable[Any]]
Table = Callable[[Sequence[str], Sequence[Sequence[str]]], str]


def _device_id(text: str) -> str:
    try:
        return str(uuid.UUID(text))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a gate device id (a UUID)") from None


def _name(text: str) -> str:
    if not text.strip() or len(text.strip()) > MAX_NAME:
        raise argparse.ArgumentTypeError(f"the name is 1 to {MAX_NAME} characters")
    return text.strip()


def add_commands(commands: Any) -> None:
    """The gate-device commands, on the admin command's subparsers."""
    devices = commands.add_parser("gate-device", help="the door's gate devices (scanners, staff phones)")
    actions = devices.add_subparsers(dest="action", required=True)
    create = actions.add_parser(
        "create",
        help="make a gate device of an event and print its key, once",
        description="The key is shown only now (the service keeps its SHA-256): put it into the device. "
        "It admits to this event only, until the device is revoked.",
    )
    create.add_argument("event_id", type=positive, metavar="EVENT_ID")
    create.add_argument(
        "--name", type=_name, required=True, help=f'what the staff call it ("North gate"; 1 to {MAX_NAME} characters)'
    )
    revoke = actions.add_parser("revoke", help="revoke a gate device: its key opens nothing from now on")
    revoke.add_argument("device_id", type=_device_id, metavar="DEVICE_ID")
    listing = actions.add_parser("list", help="an event's gate devices, revoked ones included")
    listing.add_argument("event_id", type=positive, metavar="EVENT_ID")


def _when(stamp: Any) -> str:
    return str(stamp.ToDatetime().isoformat(timespec="seconds")) + "Z"


async def run(admin: Any, call: Call, table: Table, args: argparse.Namespace, call_seconds: float, out: TextIO) -> None:
    """Runs a gate-device command through CheckInAdminService (``admin`` its
    stub, ``call`` the admin command's error handling)."""
    if args.action == "create":
        made = await call(
            f"making gate device {args.name!r} of event {args.event_id}",
            admin.CreateGateDevice(
                pb.CreateGateDeviceRequest(event_id=args.event_id, name=args.name), timeout=call_seconds
            ),
        )
        out.write(f"gate device {made.device.device_id} of event {args.event_id}: {made.device.name!r}\n")
        out.write(f"key (shown once, never stored): {made.key}\n")
        return
    if args.action == "revoke":
        revoked = await call(
            f"revoking gate device {args.device_id}",
            admin.RevokeGateDevice(pb.RevokeGateDeviceRequest(device_id=args.device_id), timeout=call_seconds),
        )
        device = revoked.device
        out.write(
            f"gate device {device.device_id} ({device.name!r}, event {device.event_id}) revoked at {_when(device.revoked_at)}\n"
        )
        return
    listed = await call(
        f"listing the gate devices of event {args.event_id}",
        admin.ListGateDevices(pb.ListGateDevicesRequest(event_id=args.event_id), timeout=call_seconds),
    )
    if not listed.devices:
        out.write(f"event {args.event_id} has no gate devices\n")
        return
    rows = [
        [d.device_id, d.name, _when(d.created_at), _when(d.revoked_at) if d.HasField("revoked_at") else "valid"]
        for d in listed.devices
    ]
    out.write(table(["device", "name", "created", "revoked"], rows))
