"""``boxoffice admin``: the operators' command over QueueAdminService and
BookingAdminService.

    boxoffice admin event create EVENT.yaml
    boxoffice admin inventory load EVENT_ID SEATS.csv
    boxoffice admin queue open|pause|resume EVENT_ID
    boxoffice admin stats EVENT_ID
    boxoffice admin revoke EVENT_ID CUSTOMER_ID

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
import csv
import datetime
import re
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

import grpc
import yaml
from google.protobuf import duration_pb2, timestamp_pb2

from boxoffice.errors import from_rpc_error
from boxoffice.tls import CertFiles, ClientChannel
from gen.boxoffice.booking.v1 import booking_admin_service_pb2 as bpb
from gen.boxoffice.booking.v1 import booking_admin_service_pb2_grpc as bpb_grpc
from gen.boxoffice.queue.v1 import queue_admin_service_pb2 as qpb
from gen.boxoffice.queue.v1 import queue_admin_service_pb2_grpc as qpb_grpc

OK, FAILED, USAGE = 0, 1, 2

DEFAULT_QUEUE_ADDR = "127.0.0.1:50051"
DEFAULT_BOOKING_ADDR = "127.0.0.1:50052"
# Seat rows per LoadInventory call (the service takes up to 10,000).
DEFAULT_CHUNK_ROWS = 500
CALL_SECONDS = 30.0

_SECTION_ID = re.compile(r"^[A-Za-z0-9_-]{1,32}$")
_CSV_HEADER = ["section", "row", "first_seat_number", "seat_count"]


class BadFile(Exception):
    """A file that cannot be sent; ``problems`` are ``FILE:LINE: message``."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("\n".join(problems))
        self.problems = problems


# -- the event file (YAML) ----------------------------------------------------


class _Doc:
    """A YAML document walked node by node, so that every problem names
    its line; problems are collected, not raised one by one."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.problems: list[str] = []
        self._construct = yaml.constructor.SafeConstructor()
        # The key node of each mapping value seen, where a missing key is reported.
        self._keys: dict[int, yaml.Node] = {}

    def problem(self, node: yaml.Node, message: str) -> None:
        self.problems.append(f"{self.path}:{node.start_mark.line + 1}: {message}")

    def mapping(self, node: yaml.Node, where: str, keys: Mapping[str, bool]) -> dict[str, yaml.Node]:
        """The keys of a mapping node (``keys``: name -> required)."""
        if not isinstance(node, yaml.MappingNode):
            self.problem(node, f"{where} must be a mapping")
            return {}
        found: dict[str, yaml.Node] = {}
        for key_node, value_node in node.value:
            key = str(key_node.value)
            if key not in keys:
                self.problem(key_node, f"{where}: unknown key {key!r} (known: {', '.join(keys)})")
            elif key in found:
                self.problem(key_node, f"{where}: {key!r} given twice")
            else:
                found[key] = value_node
                self._keys[id(value_node)] = key_node
        for key, required in keys.items():
            if required and key not in found:
                self.problem(self._keys.get(id(node), node), f"{where}: {key!r} is required")
        return found

    def value(self, node: yaml.Node) -> Any:
        return self._construct.construct_object(node, deep=True)

    def integer(self, node: yaml.Node | None, where: str, *, low: int, high: int, default: int = 0) -> int:
        if node is None:
            return default
        value = self.value(node)
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
            self.problem(node, f"{where} must be a whole number from {low:,} to {high:,}, not {node.value!r}")
            return default
        return value

    def text(self, node: yaml.Node | None, where: str, *, pattern: re.Pattern[str] | None = None) -> str:
        if node is None:
            return ""
        value = self.value(node)
        if not isinstance(value, (str, int)) or isinstance(value, bool) or str(value) == "":
            self.problem(node, f"{where} must be a non-empty string")
            return ""
        text = str(value)
        if pattern is not None and not pattern.match(text):
            self.problem(node, f"{where} {text!r} must be 1 to 32 of letters, digits, '_' and '-'")
        return text

    def choice(self, node: yaml.Node | None, where: str, choices: Mapping[str, int]) -> int:
        if node is None:
            return 0
        value = self.value(node)
        if not isinstance(value, str) or value.lower() not in choices:
            self.problem(node, f"{where} must be one of {', '.join(choices)}, not {node.value!r}")
            return 0
        return choices[value.lower()]

    def flag(self, node: yaml.Node | None, where: str) -> bool:
        if node is None:
            return False
        value = self.value(node)
        if not isinstance(value, bool):
            self.problem(node, f"{where} must be true or false, not {node.value!r}")
            return False
        return value

    def instant(self, node: yaml.Node | None, where: str, out: timestamp_pb2.Timestamp) -> None:
        """An ISO 8601 time with its zone (``2026-07-01T20:00:00Z``) into ``out``."""
        if node is None:
            return
        value = self.value(node)
        if isinstance(value, str):
            try:
                value = datetime.datetime.fromisoformat(value)
            except ValueError:
                pass
        if not isinstance(value, datetime.datetime) or value.tzinfo is None:
            self.problem(node, f"{where} must be a date and time with its zone, e.g. 2026-07-01T20:00:00Z")
            return
        out.FromDatetime(value.astimezone(datetime.UTC))

    def seconds(self, node: yaml.Node | None, where: str, out: duration_pb2.Duration, *, high: int) -> None:
        if node is not None:
            out.FromSeconds(self.integer(node, where, low=0, high=high))


@dataclass(frozen=True)
class EventFile:
    """What ``event create`` sends: the event, and its waiting room if the
    file has one."""

    event: bpb.BookingAdminServiceCreateEventRequest
    waiting_room: qpb.CreateWaitingRoomRequest | None


_EVENT_KEYS = {"event": True, "sections": True, "waiting_room": False}
_EVENT_FIELDS = {
    "id": True,
    "name": True,
    "kind": True,
    "starts_at": True,
    "hold_ttl_seconds": False,
    "max_seats_per_customer": False,
    "refund": False,
}
_SECTION_FIELDS = {"id": True, "name": False, "kind": True, "capacity": False, "overbook": False, "price": True}
_PRICE_FIELDS = {"currency": True, "amount_minor": True}
_REFUND_FIELDS = {"percent": True, "until": False}
_ROOM_FIELDS = {
    "opens_at": True,
    "pre_queue_window_seconds": False,
    "admission_rate_per_second": False,
    "max_active_shoppers": False,
    "session_length_seconds": False,
    "token_ttl_seconds": False,
    "claim_grace_seconds": False,
    "paused": False,
}
_EVENT_KINDS = {"concert": bpb.MANAGED_EVENT_KIND_CONCERT, "flight": bpb.MANAGED_EVENT_KIND_FLIGHT}
_SECTION_KINDS = {
    "seated": bpb.MANAGED_SECTION_KIND_SEATED,
    "general_admission": bpb.MANAGED_SECTION_KIND_GENERAL_ADMISSION,
}
_DAY_SECONDS = 86_400


def parse_event_file(path: str, text: str) -> EventFile:
    """The event file's requests; :class:`BadFile` naming every problem."""
    doc = _Doc(path)
    try:
        root = yaml.compose(text)
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        line = f"{mark.line + 1}" if mark is not None else "1"
        raise BadFile([f"{path}:{line}: not valid YAML: {getattr(err, 'problem', None) or err}"]) from None
    if root is None:
        raise BadFile([f"{path}:1: the file is empty"])
    top = doc.mapping(root, "the file", _EVENT_KEYS)
    request = bpb.BookingAdminServiceCreateEventRequest()
    if "event" in top:
        fields = doc.mapping(top["event"], "event", _EVENT_FIELDS)
        request.event_id = doc.integer(fields.get("id"), "event.id", low=1, high=2**63 - 1)
        request.display_name = doc.text(fields.get("name"), "event.name")
        request.kind = bpb.ManagedEventKind.ValueType(doc.choice(fields.get("kind"), "event.kind", _EVENT_KINDS))
        doc.instant(fields.get("starts_at"), "event.starts_at", request.starts_at)
        doc.seconds(fields.get("hold_ttl_seconds"), "event.hold_ttl_seconds", request.hold_ttl, high=3600)
        request.max_seats_per_customer = doc.integer(
            fields.get("max_seats_per_customer"), "event.max_seats_per_customer", low=1, high=100
        )
        if "refund" in fields:
            refund = doc.mapping(fields["refund"], "event.refund", _REFUND_FIELDS)
            request.refund_policy.refund_percent = doc.integer(
                refund.get("percent"), "event.refund.percent", low=0, high=100
            )
            doc.instant(refund.get("until"), "event.refund.until", request.refund_policy.refundable_until)
    if "sections" in top:
        node = top["sections"]
        if not isinstance(node, yaml.SequenceNode) or not node.value:
            doc.problem(node, "sections must be a list of at least one section")
        else:
            seen: set[str] = set()
            for index, item in enumerate(node.value):
                request.sections.append(_section(doc, item, f"sections[{index}]", seen))
    waiting_room = None
    if "waiting_room" in top:
        waiting_room = qpb.CreateWaitingRoomRequest(config=_waiting_room(doc, top["waiting_room"], request.event_id))
    if doc.problems:
        raise BadFile(doc.problems)
    return EventFile(request, waiting_room)


def _section(doc: _Doc, node: yaml.Node, where: str, seen: set[str]) -> bpb.SectionDraft:
    fields = doc.mapping(node, where, _SECTION_FIELDS)
    section = bpb.SectionDraft()
    section.section_id = doc.text(fields.get("id"), f"{where}.id", pattern=_SECTION_ID)
    if section.section_id in seen:
        doc.problem(fields["id"], f"{where}.id: section {section.section_id!r} appears twice")
    seen.add(section.section_id)
    section.display_name = doc.text(fields.get("name"), f"{where}.name")
    section.kind = bpb.ManagedSectionKind.ValueType(doc.choice(fields.get("kind"), f"{where}.kind", _SECTION_KINDS))
    if section.kind == bpb.MANAGED_SECTION_KIND_GENERAL_ADMISSION:
        if "capacity" not in fields:
            doc.problem(node, f"{where}: a general_admission section needs a capacity")
        section.capacity = doc.integer(fields.get("capacity"), f"{where}.capacity", low=1, high=1_000_000)
        section.overbook_limit = doc.integer(fields.get("overbook"), f"{where}.overbook", low=0, high=100_000)
    elif section.kind == bpb.MANAGED_SECTION_KIND_SEATED:
        for key in ("capacity", "overbook"):
            if key in fields:
                doc.problem(fields[key], f"{where}.{key}: a seated section's seats come from `inventory load`")
    if "price" in fields:
        price = doc.mapping(fields["price"], f"{where}.price", _PRICE_FIELDS)
        currency = doc.text(price.get("currency"), f"{where}.price.currency")
        if currency and not re.fullmatch(r"[A-Z]{3}", currency):
            doc.problem(price["currency"], f"{where}.price.currency must be an ISO 4217 code such as EUR")
        section.price.currency_code = currency
        section.price.amount_minor = doc.integer(
            price.get("amount_minor"), f"{where}.price.amount_minor", low=0, high=10**12
        )
    return section


def _waiting_room(doc: _Doc, node: yaml.Node, event_id: int) -> qpb.WaitingRoom:
    fields = doc.mapping(node, "waiting_room", _ROOM_FIELDS)
    room = qpb.WaitingRoom(event_id=event_id)
    doc.instant(fields.get("opens_at"), "waiting_room.opens_at", room.opens_at)
    doc.seconds(
        fields.get("pre_queue_window_seconds"),
        "waiting_room.pre_queue_window_seconds",
        room.pre_queue_window,
        high=7 * _DAY_SECONDS,
    )
    room.admission_rate_per_second = doc.integer(
        fields.get("admission_rate_per_second"), "waiting_room.admission_rate_per_second", low=1, high=100_000
    )
    room.max_active_shoppers = doc.integer(
        fields.get("max_active_shoppers"), "waiting_room.max_active_shoppers", low=1, high=10_000_000
    )
    for key, out in (
        ("session_length_seconds", room.session_length),
        ("token_ttl_seconds", room.token_ttl),
        ("claim_grace_seconds", room.claim_grace),
    ):
        doc.seconds(fields.get(key), f"waiting_room.{key}", out, high=_DAY_SECONDS)
    room.paused = doc.flag(fields.get("paused"), "waiting_room.paused")
    return room


# -- the inventory file (CSV) -------------------------------------------------


def parse_inventory_file(path: str, text: str) -> list[tuple[int, bpb.InventoryRow]]:
    """(line number, row) for every seat row of the CSV file
    (``section,row,first_seat_number,seat_count``; a header line with those
    names may come first); :class:`BadFile` naming every bad line."""
    problems: list[str] = []
    rows: list[tuple[int, bpb.InventoryRow]] = []
    seen: dict[tuple[str, str], int] = {}
    for index, fields in enumerate(csv.reader(text.splitlines())):
        line = index + 1
        cells = [f.strip() for f in fields]
        if not cells or cells == [""] or cells[0].startswith("#"):
            continue
        if line == 1 and [c.lower() for c in cells] == _CSV_HEADER:
            continue
        where = f"{path}:{line}"
        if len(cells) != 4:
            problems.append(f"{where}: expected 4 fields ({','.join(_CSV_HEADER)}), got {len(cells)}")
            continue
        section, row_label, first, count = cells
        if not _SECTION_ID.match(section):
            problems.append(f"{where}: section {section!r} must be 1 to 32 of letters, digits, '_' and '-'")
            continue
        if not 1 <= len(row_label) <= 8:
            problems.append(f"{where}: row {row_label!r} must be 1 to 8 characters")
            continue
        if not first.isdigit() or int(first) < 1 or int(first) > 1_000_000:
            problems.append(f"{where}: first_seat_number {first!r} must be a whole number from 1 to 1,000,000")
            continue
        if not count.isdigit() or not 1 <= int(count) <= 1000:
            problems.append(f"{where}: seat_count {count!r} must be a whole number from 1 to 1,000")
            continue
        if (section, row_label) in seen:
            problems.append(
                f"{where}: row {row_label!r} of section {section!r} is already on line {seen[section, row_label]}"
            )
            continue
        seen[section, row_label] = line
        rows.append(
            (
                line,
                bpb.InventoryRow(
                    section_id=section, row_label=row_label, first_seat_number=int(first), seat_count=int(count)
                ),
            )
        )
    if not problems and not rows:
        problems.append(f"{path}:1: no seat rows")
    if problems:
        raise BadFile(problems)
    return rows


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
    timeout: float

    def queue_admin(self) -> Any:
        return self.queue.stub(qpb_grpc.QueueAdminServiceStub)

    def booking_admin(self) -> Any:
        return self.booking.stub(bpb_grpc.BookingAdminServiceStub)


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


async def _stats(clients: _Clients, event_id: int, out: TextIO) -> None:
    event = await _call(
        f"stats of event {event_id}",
        clients.booking_admin().GetEventStats(bpb.GetEventStatsRequest(event_id=event_id), timeout=clients.timeout),
    )
    out.write(f"event {event_id}: {event.event.display_name}\n\n")
    rows = [
        [
            s.section_id,
            "seated" if s.kind == bpb.MANAGED_SECTION_KIND_SEATED else "standing",
            f"{s.price.amount_minor / 100:,.2f} {s.price.currency_code}",
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
    ]
    out.write("\n" + _table(["waiting room", ""], figures))


async def _revoke(clients: _Clients, event_id: int, customer_id: str, out: TextIO) -> None:
    reply = await _call(
        f"revoking {customer_id!r} in event {event_id}",
        clients.queue_admin().RevokeCustomer(
            qpb.RevokeCustomerRequest(event_id=event_id, customer_id=customer_id), timeout=clients.timeout
        ),
    )
    before = qpb.CustomerState.Name(reply.previous_state).removeprefix("CUSTOMER_STATE_")
    after = qpb.CustomerState.Name(reply.state).removeprefix("CUSTOMER_STATE_")
    verdict = "revoked" if reply.revoked else "nothing to revoke"
    out.write(f"event {event_id} customer {customer_id}: {before} -> {after} ({verdict})\n")


def _read(path: str) -> str:
    try:
        return Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as err:
        raise BadFile([f"{path}: cannot read: {err}"]) from None


def _positive(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive whole number")
    return int(text)


_EVENT_FILE_HELP = """The event file (YAML). Required: the event's id, name, kind and starts_at; each
section's id, kind and price (a general_admission one's capacity); the waiting room's
opens_at. The waiting room may be left out. Times carry their zone.

  event: {id: 42, name: Summer Night, kind: concert|flight, starts_at: 2026-07-01T20:00:00Z,
          hold_ttl_seconds: 300, max_seats_per_customer: 4,
          refund: {percent: 50, until: 2026-06-25T00:00:00Z}}
  sections:
    - {id: A, name: Stalls A, kind: seated, price: {currency: EUR, amount_minor: 6500}}
    - {id: FLOOR, kind: general_admission, capacity: 2000, overbook: 0,
       price: {currency: EUR, amount_minor: 3000}}
  waiting_room: {opens_at: 2026-06-01T09:00:00Z, pre_queue_window_seconds: 1800,
                 admission_rate_per_second: 50, max_active_shoppers: 1000, session_length_seconds: 900,
                 token_ttl_seconds: 600, claim_grace_seconds: 120, paused: false}

Seated sections get their seats from `boxoffice admin inventory load`."""


def _parser(environ: Mapping[str, str]) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="boxoffice admin",
        description="Administer events and waiting rooms through QueueAdminService and BookingAdminService.",
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
        description=_EVENT_FILE_HELP,
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

    queue = commands.add_parser("queue", help="open, pause or resume admission")
    queue.add_argument("action", choices=list(_QUEUE_ACTIONS))
    queue.add_argument("event_id", type=_positive, metavar="EVENT_ID")

    stats = commands.add_parser("stats", help="an event's seats and waiting room, as a table")
    stats.add_argument("event_id", type=_positive, metavar="EVENT_ID")

    revoke = commands.add_parser("revoke", help="end a customer's place or shopping session; they must rejoin")
    revoke.add_argument("event_id", type=_positive, metavar="EVENT_ID")
    revoke.add_argument("customer_id", metavar="CUSTOMER_ID")
    return parser


async def _run(args: argparse.Namespace, files: CertFiles | None, out: TextIO, err: TextIO) -> None:
    async with ClientChannel(args.queue_addr, files) as queue, ClientChannel(args.booking_addr, files) as booking:
        clients = _Clients(queue, booking, args.timeout)
        if args.command == "event":
            await _event_create(clients, args.file, out)
        elif args.command == "inventory":
            await _inventory_load(clients, args.event_id, args.file, args.chunk_rows, out, err)
        elif args.command == "queue":
            await _queue(clients, args.action, args.event_id, out)
        elif args.command == "stats":
            await _stats(clients, args.event_id, out)
        else:
            await _revoke(clients, args.event_id, args.customer_id, out)


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
