"""The files ``boxoffice admin`` reads: an event (YAML, with its sections,
prices and waiting room) and an inventory of seat rows (CSV), each checked
whole before anything is sent, every problem reported as
``FILE:LINE: message``."""

from __future__ import annotations

import csv
import datetime
import re
import zoneinfo
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import yaml
from google.protobuf import duration_pb2, timestamp_pb2

from boxoffice import lanes
from gen.boxoffice.booking.v1 import booking_admin_service_pb2 as bpb
from gen.boxoffice.queue.v1 import queue_admin_service_pb2 as qpb

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

    def seconds(
        self, node: yaml.Node | None, where: str, out: duration_pb2.Duration, *, high: int, low: int = 0
    ) -> None:
        if node is not None:
            out.FromSeconds(self.integer(node, where, low=low, high=high))


@dataclass(frozen=True)
class EventFile:
    """What ``event create`` sends: the event, and its waiting room if the
    file has one."""

    event: bpb.BookingAdminServiceCreateEventRequest
    waiting_room: qpb.CreateWaitingRoomRequest | None
    # What the file says that the event does not take, ``FILE:LINE: note``.
    notes: tuple[str, ...] = ()


_EVENT_KEYS = {"event": True, "sections": True, "waiting_room": False}
_EVENT_FIELDS = {
    "id": True,
    "name": True,
    "kind": True,
    "starts_at": True,
    "hold_ttl_seconds": False,
    "max_seats_per_customer": False,
    "max_tickets_per_customer": False,
    "refund": False,
    "time_zone": False,
    "description": False,
    "published": False,
    "transfers": False,
    "checkin": False,
    "waitlist": False,
    "venue": False,
    "flight": False,
}
_VENUE_FIELDS = {"name": True, "city": True, "country_code": True}
_FLIGHT_FIELDS = {"code": True, "origin": True, "destination": True, "departs_at": True, "arrives_at": False}
_IATA = re.compile(r"^[A-Z]{3}$")
_FLIGHT_CODE = re.compile(r"^[A-Z0-9]{2}[0-9]{1,4}[A-Z]?$")
_COUNTRY = re.compile(r"^[A-Z]{2}$")
_SECTION_FIELDS = {"id": True, "name": False, "kind": True, "capacity": False, "overbook": False, "price": True}
_PRICE_FIELDS = {"currency": True, "amount_minor": True}
_REFUND_FIELDS = {"percent": True, "until": False}
_CHECKIN_FIELDS = {"static_codes": False, "reentry": False}
_WAITLIST_FIELDS = {"offer_minutes": False}
_ROOM_FIELDS = {
    "opens_at": True,
    "pre_queue_window_seconds": False,
    "admission_rate_per_second": False,
    "max_active_shoppers": False,
    "session_length_seconds": False,
    "token_ttl_seconds": False,
    "claim_grace_seconds": False,
    "paused": False,
    "presence_grace_seconds": False,
    "safety_net": False,
    "admission_rate_min_per_second": False,
    "admission_rate_max_per_second": False,
    "lanes": False,
}
_LANE_FIELDS = {
    "name": True,
    "entry": True,
    "share_percent": True,
    "opens_at": False,
    "pre_queue_window_seconds": False,
}
_LANE_ENTRIES = {
    "open": qpb.WAITING_ROOM_LANE_ENTRY_OPEN,
    "code": qpb.WAITING_ROOM_LANE_ENTRY_CODE,
    "staff": qpb.WAITING_ROOM_LANE_ENTRY_STAFF,
}
_EVENT_KINDS = {"concert": bpb.MANAGED_EVENT_KIND_CONCERT, "flight": bpb.MANAGED_EVENT_KIND_FLIGHT}
_SECTION_KINDS = {
    "seated": bpb.MANAGED_SECTION_KIND_SEATED,
    "general_admission": bpb.MANAGED_SECTION_KIND_GENERAL_ADMISSION,
}
_DAY_SECONDS = 86_400
# QueueAdminService's bounds: admissions per second, and how long a waiting
# fan may go unseen before they drop out.
MAX_RATE_PER_SECOND = 100_000
DEFAULT_RATE_PER_SECOND = 50
PRESENCE_GRACE_SECONDS = (60, _DAY_SECONDS)
# The most tickets an event may let one customer have (BookingAdminService's bound).
_MAX_TICKETS = 10_000
# The longest a waiting-list offer may last, in minutes (a day).
_MAX_OFFER_MINUTES = 1440


EVENT_FILE_HELP = """The event file (YAML). Required: the event's id, name, kind and starts_at; each
section's id, kind and price (a general_admission one's capacity); the waiting room's
opens_at. The waiting room may be left out. Times carry their zone.

  event: {id: 42, name: Summer Night, kind: concert|flight, starts_at: 2026-07-01T20:00:00Z,
          hold_ttl_seconds: 300, max_seats_per_customer: 4, max_tickets_per_customer: 6,
          refund: {percent: 50, until: 2026-06-25T00:00:00Z}}
  sections:
    - {id: A, name: Stalls A, kind: seated, price: {currency: EUR, amount_minor: 6500}}
    - {id: FLOOR, kind: general_admission, capacity: 2000, overbook: 0,
       price: {currency: EUR, amount_minor: 3000}}
  waiting_room: {opens_at: 2026-06-01T09:00:00Z, pre_queue_window_seconds: 1800,
                 admission_rate_per_second: 50, max_active_shoppers: 1000, session_length_seconds: 900,
                 token_ttl_seconds: 600, claim_grace_seconds: 120, paused: false,
                 presence_grace_seconds: 300, safety_net: false,
                 admission_rate_min_per_second: 20, admission_rate_max_per_second: 150,
                 lanes: [{name: presale, entry: code, share_percent: 30, opens_at: 2026-06-01T08:00:00Z},
                         {name: staff, entry: staff, share_percent: 5}]}

The catalogue: time_zone (an IANA name such as Asia/Ho_Chi_Minh, default UTC: the
zone the event's times are shown and its local date taken in), description, published
(default true: listed from creation), a concert's venue: {name, city, country_code} and
a flight's flight: {code: VN213, origin: SGN, destination: HAN, departs_at (= starts_at),
arrives_at}. The waiting room's opens_at is the catalogue's "on sale at".

max_seats_per_customer (1-100, default 4) is the most seats one customer may hold at
once; max_tickets_per_customer (1-10000, default max_seats_per_customer) the most
tickets one customer may have in the event, bought and held together, whatever their
orders and sessions. transfers (default true) lets fans transfer a ticket to a friend
until the event starts; false forbids it. Seated sections get their seats from `boxoffice admin inventory load`.

The door: checkin: {static_codes: true, reentry: true}. static_codes lets a static code
(printed or e-mailed, no rotation) admit; left out, the kind's default: true for a flight
(a boarding pass is printed), false for a concert (only the fan's rotating code admits).
reentry (default false) lets a ticket that was scanned out come back in.

The waiting list: waitlist: {offer_minutes: 30}. offer_minutes (1-1440, default 15) is
how long an offer holds its seats for the fan on the list before it passes to the next.

The waiting room: presence_grace_seconds (60-86400, default 300) is how long a waiting
fan may go unseen before they drop out of the queue (they may join again, at the back);
safety_net (default false) admits a joining fan at once while nobody waits and a slot is
free; the admitter adapts its rate to booking's health and to no-shows between
admission_rate_min_per_second (at most the base rate admission_rate_per_second) and
admission_rate_max_per_second (at least the base rate); 0 or left out, a bound is the
base rate itself (no adapting that way).

Lanes (at most 7) besides the general one: name (a-z, 0-9, '-'), entry (open, code:
`boxoffice admin codes create`, or staff: `boxoffice admin staff-pass`), share_percent
(1-99, all lanes together at most 99: the general lane keeps the rest) of the admission
rate and of the free slots while several lanes have fans waiting, and optionally their
own opens_at (at or before the room's) and pre_queue_window_seconds."""


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
        request.max_tickets_per_customer = doc.integer(
            fields.get("max_tickets_per_customer"), "event.max_tickets_per_customer", low=1, high=_MAX_TICKETS
        )
        if "refund" in fields:
            refund = doc.mapping(fields["refund"], "event.refund", _REFUND_FIELDS)
            request.refund_policy.refund_percent = doc.integer(
                refund.get("percent"), "event.refund.percent", low=0, high=100
            )
            doc.instant(refund.get("until"), "event.refund.until", request.refund_policy.refundable_until)
        if "transfers" in fields:
            request.transfers = doc.flag(fields["transfers"], "event.transfers")
        if "checkin" in fields:
            checkin = doc.mapping(fields["checkin"], "event.checkin", _CHECKIN_FIELDS)
            if "static_codes" in checkin:
                request.checkin.static_codes = doc.flag(checkin["static_codes"], "event.checkin.static_codes")
            request.checkin.reentry = doc.flag(checkin.get("reentry"), "event.checkin.reentry")
        if "waitlist" in fields:
            waitlist = doc.mapping(fields["waitlist"], "event.waitlist", _WAITLIST_FIELDS)
            request.waitlist.offer_minutes = doc.integer(
                waitlist.get("offer_minutes"), "event.waitlist.offer_minutes", low=1, high=_MAX_OFFER_MINUTES
            )
        _listing(doc, fields, request)
    notes: list[str] = []
    if "sections" in top:
        node = top["sections"]
        if not isinstance(node, yaml.SequenceNode) or not node.value:
            doc.problem(node, "sections must be a list of at least one section")
        else:
            seen: set[str] = set()
            for index, item in enumerate(node.value):
                request.sections.append(_section(doc, item, f"sections[{index}]", seen, notes))
    waiting_room = None
    if "waiting_room" in top:
        waiting_room = qpb.CreateWaitingRoomRequest(config=_waiting_room(doc, top["waiting_room"], request.event_id))
        # The catalogue says "on sale at" the waiting room's opening.
        request.sale_opens_at.CopyFrom(waiting_room.config.opens_at)
    if doc.problems:
        raise BadFile(doc.problems)
    return EventFile(request, waiting_room, tuple(notes))


def _listing(doc: _Doc, fields: Mapping[str, yaml.Node], request: bpb.BookingAdminServiceCreateEventRequest) -> None:
    """The catalogue's fields: time zone, description, publication, a
    concert's venue, a flight's route and times."""
    zone_node = fields.get("time_zone")
    zone = doc.text(zone_node, "event.time_zone")
    if zone_node is not None and zone:
        try:
            zoneinfo.ZoneInfo(zone)
        except (zoneinfo.ZoneInfoNotFoundError, ValueError):
            doc.problem(zone_node, f"event.time_zone {zone!r} is not an IANA time zone such as Asia/Ho_Chi_Minh")
    request.time_zone = zone
    request.description = doc.text(fields.get("description"), "event.description")
    if "published" in fields:
        request.published = doc.flag(fields["published"], "event.published")
    if "venue" in fields:
        venue = doc.mapping(fields["venue"], "event.venue", _VENUE_FIELDS)
        request.venue.display_name = doc.text(venue.get("name"), "event.venue.name")
        request.venue.city = doc.text(venue.get("city"), "event.venue.city")
        request.venue.country_code = _code(doc, venue.get("country_code"), "event.venue.country_code", _COUNTRY)
    if "flight" in fields:
        flight = doc.mapping(fields["flight"], "event.flight", _FLIGHT_FIELDS)
        request.flight.flight_code = _code(doc, flight.get("code"), "event.flight.code", _FLIGHT_CODE)
        request.flight.origin = _code(doc, flight.get("origin"), "event.flight.origin", _IATA)
        request.flight.destination = _code(doc, flight.get("destination"), "event.flight.destination", _IATA)
        doc.instant(flight.get("departs_at"), "event.flight.departs_at", request.flight.departs_at)
        doc.instant(flight.get("arrives_at"), "event.flight.arrives_at", request.flight.arrives_at)


def _code(doc: _Doc, node: yaml.Node | None, where: str, pattern: re.Pattern[str]) -> str:
    code = doc.text(node, where)
    if node is not None and code and not pattern.match(code):
        kind = {_IATA: "an IATA airport code such as SGN", _COUNTRY: "a country code such as VN"}.get(
            pattern, "a flight number such as VN213"
        )
        doc.problem(node, f"{where} {code!r} must be {kind}")
    return code


def _section(doc: _Doc, node: yaml.Node, where: str, seen: set[str], notes: list[str]) -> bpb.SectionDraft:
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
        if "capacity" in fields:
            doc.problem(fields["capacity"], f"{where}.capacity: a seated section's seats come from `inventory load`")
        if "overbook" in fields:
            # A seated section sells each of its seats once: a fare class
            # overbooks as a general_admission section.
            line = fields["overbook"].start_mark.line + 1
            notes.append(
                f"{doc.path}:{line}: note: {where}.overbook is not taken: a seated section sells each seat once "
                "(a fare class that overbooks is a general_admission section with a capacity)"
            )
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
        fields.get("admission_rate_per_second"),
        "waiting_room.admission_rate_per_second",
        low=1,
        high=MAX_RATE_PER_SECOND,
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
    low, high = PRESENCE_GRACE_SECONDS
    doc.seconds(
        fields.get("presence_grace_seconds"),
        "waiting_room.presence_grace_seconds",
        room.presence_grace,
        low=low,
        high=high,
    )
    room.safety_net = doc.flag(fields.get("safety_net"), "waiting_room.safety_net")
    _rate_bounds(doc, fields, room)
    lane_nodes = fields.get("lanes")
    if lane_nodes is not None:
        _lanes(doc, lane_nodes, room)
    return room


def _lanes(doc: _Doc, node: yaml.Node, room: qpb.WaitingRoom) -> None:
    """The lanes besides the general one; the service checks the rest
    (shares together, openings against the room's)."""
    if not isinstance(node, yaml.SequenceNode):
        doc.problem(node, "waiting_room.lanes must be a list of lanes")
        return
    for i, item in enumerate(node.value):
        where = f"waiting_room.lanes[{i}]"
        fields = doc.mapping(item, where, _LANE_FIELDS)
        lane = room.lanes.add()
        lane.name = doc.text(fields.get("name"), f"{where}.name")
        if lane.name and not lanes.is_name(lane.name):
            doc.problem(fields["name"], f"{where}.name {lane.name!r} must be 1 to 32 of a-z, 0-9 and '-' (not first)")
        lane.entry = qpb.WaitingRoomLaneEntry.ValueType(
            doc.choice(fields.get("entry"), f"{where}.entry", _LANE_ENTRIES)
        )
        lane.share_percent = doc.integer(fields.get("share_percent"), f"{where}.share_percent", low=1, high=99)
        if "opens_at" in fields:
            doc.instant(fields.get("opens_at"), f"{where}.opens_at", lane.opens_at)
        doc.seconds(
            fields.get("pre_queue_window_seconds"),
            f"{where}.pre_queue_window_seconds",
            lane.pre_queue_window,
            high=7 * _DAY_SECONDS,
        )


def _rate_bounds(doc: _Doc, fields: Mapping[str, yaml.Node], room: qpb.WaitingRoom) -> None:
    """The least and most rates the admitter may adapt to (0 or left out:
    the base rate itself); the base rate must lie between them."""
    low_node = fields.get("admission_rate_min_per_second")
    high_node = fields.get("admission_rate_max_per_second")
    low = doc.integer(low_node, "waiting_room.admission_rate_min_per_second", low=0, high=MAX_RATE_PER_SECOND)
    high = doc.integer(high_node, "waiting_room.admission_rate_max_per_second", low=0, high=MAX_RATE_PER_SECOND)
    room.admission_rate_min_per_second = low
    room.admission_rate_max_per_second = high
    if "admission_rate_per_second" in fields and not room.admission_rate_per_second:
        return  # the base rate is already reported bad
    base = room.admission_rate_per_second or DEFAULT_RATE_PER_SECOND
    if low_node is not None and low > base:
        doc.problem(
            low_node,
            f"waiting_room.admission_rate_min_per_second ({low:,}) must not be above "
            f"admission_rate_per_second ({base:,})",
        )
    if high_node is not None and high and high < base:
        doc.problem(
            high_node,
            f"waiting_room.admission_rate_max_per_second ({high:,}) must not be below "
            f"admission_rate_per_second ({base:,})",
        )


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
