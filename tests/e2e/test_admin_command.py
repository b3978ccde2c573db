"""`boxoffice admin` end to end: the command runs as its own process against
real QueueService and BookingService servers (mTLS, the operator's
certificate), creates an event and its waiting room from YAML, loads seats
from CSV in chunks, pauses, resumes and opens admission, updates the
waiting room's presence grace, safety net and rate bounds, prints stats
(the admitter's target rate and why) and revokes or shadows a fan; bad
files and bad calls end with their exit codes and change nothing."""

from __future__ import annotations

import asyncio
import contextlib
import io
import os
import sys
import textwrap
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import grpc
import pytest

from booking_svc import app as booking_app
from boxoffice import access, audit
from boxoffice.runtime import Runtime
from boxoffice.tls import CertFiles
from boxoffice_cli.admin import Progress
from boxoffice_cli.admin_files import BadFile, parse_event_file, parse_inventory_file
from boxoffice_cli.admin_room import duration_text
from boxoffice_cli.pipes import STDOUT_CLOSED
from gen.boxoffice.queue.v1 import queue_admin_service_pb2 as apb
from gen.boxoffice.queue.v1 import queue_admin_service_pb2_grpc as apb_grpc
from gen.boxoffice.queue.v1 import queue_service_pb2 as qpb
from gen.boxoffice.queue.v1 import queue_service_pb2_grpc as qpb_grpc
from queue_svc.app import QueueApp
from queue_svc.rate import BookingHealth
from tests.e2e.harness import Result, run_admin
from tests.edge.asserting import edge_mesh_client
from tests.queue.harness import AlwaysLeader
from tests.support import NAMESPACE, TRUST_DOMAIN, Stores, make_runtime, running


@dataclass
class Mesh:
    stores: Stores
    rt: Runtime
    queue_addr: str
    booking_addr: str
    tmp: Path
    # The queue's app, whose admitter a test ticks by hand (it leads at epoch 1).
    queue: QueueApp

    async def admin(self, *args: str, files: CertFiles | None = None, tls: bool = True) -> Result:
        """``boxoffice admin ARGS`` in its own process, as the operator
        (or with ``files``; ``tls=False``: no TLS files at all)."""
        addresses = {"queue": self.queue_addr, "booking": self.booking_addr}
        return await run_admin(self.stores, addresses, *args, files=files, tls=tls)

    def file(self, name: str, text: str) -> str:
        path = self.tmp / name
        path.write_text(textwrap.dedent(text).lstrip())
        return str(path)


@pytest.fixture
async def mesh(stores: Stores, tmp_path: Path) -> AsyncIterator[Mesh]:
    """QueueService and BookingService, each as its own role, as `boxoffice up` composes them."""
    rt = make_runtime(stores)
    queue = QueueApp(rt, leadership=AlwaysLeader(1))
    booking = booking_app.build_server(rt)
    components = [*queue.components("server"), *booking.components]
    async with running([*rt.infrastructure(), *components]):
        yield Mesh(stores, rt, queue.server.address, booking.grpc.address, tmp_path, queue)


@contextlib.asynccontextmanager
async def edge_queue(mesh: Mesh) -> AsyncIterator[Any]:
    """QueueService as the edge, for the fans of a test."""
    async with edge_mesh_client(mesh.stores, mesh.queue_addr) as client:
        yield client.stub(qpb_grpc.QueueServiceStub, role=access.EDGE)


@contextlib.asynccontextmanager
async def operator_queue(mesh: Mesh) -> AsyncIterator[Any]:
    """QueueAdminService as the operator, to read what the command stored."""
    async with edge_mesh_client(mesh.stores, mesh.queue_addr) as client:
        yield client.stub(apb_grpc.QueueAdminServiceStub, role=access.OPERATOR)


async def stored_room(mesh: Mesh, event_id: int) -> apb.WaitingRoom:
    async with operator_queue(mesh) as admin:
        reply = await admin.GetWaitingRoom(apb.GetWaitingRoomRequest(event_id=event_id))
    room: apb.WaitingRoom = reply.config
    return room


def _iso(value: datetime) -> str:
    return value.astimezone(UTC).isoformat().replace("+00:00", "Z")


def event_yaml(event_id: int, *, opens_in: timedelta = timedelta(hours=1), room_extra: str = "") -> str:
    """An event file; ``room_extra``: more lines of its waiting room (each
    starting with a newline and indented ten spaces)."""
    now = datetime.now(UTC)
    return f"""
        event:
          id: {event_id}
          name: Night of the admin command
          kind: concert
          starts_at: {_iso(now + timedelta(days=30))}
          max_seats_per_customer: 4
          max_tickets_per_customer: 6
          refund:
            percent: 50
            until: {_iso(now + timedelta(days=20))}
        sections:
          - id: A
            name: Stalls A
            kind: seated
            price: {{currency: EUR, amount_minor: 6500}}
          - id: FLOOR
            kind: general_admission
            capacity: 200
            price: {{currency: EUR, amount_minor: 3000}}
        waiting_room:
          opens_at: {_iso(now + opens_in)}
          admission_rate_per_second: 25
          max_active_shoppers: 100
          session_length_seconds: 600{room_extra}
        """


def _new_event_id() -> int:
    return int.from_bytes(os.urandom(5), "big") + 10**9


async def test_an_operator_runs_an_on_sale_from_the_command(mesh: Mesh) -> None:
    event_id = _new_event_id()
    created = await mesh.admin("event", "create", mesh.file("event.yaml", event_yaml(event_id)))
    assert created.code == 0, created.err
    assert f"event {event_id} created" in created.out and "waiting room" in created.out

    seats = mesh.file(
        "seats.csv",
        """
        section,row,first_seat_number,seat_count
        A,1,1,10
        A,2,1,10
        A,3,101,12
        """,
    )
    loaded = await mesh.admin("inventory", "load", str(event_id), seats, "--chunk-rows", "2")
    assert loaded.code == 0, loaded.err
    assert f"event {event_id}: 32 seats loaded in 3 rows" in loaded.out
    # Not a terminal: one plain progress line per chunk.
    assert loaded.err.splitlines() == ["loaded 20/32 seats (62%)", "loaded 32/32 seats (100%)"]

    for action, state in (("pause", "paused"), ("resume", "running"), ("open", "running")):
        result = await mesh.admin("queue", action, str(event_id))
        assert result.code == 0, result.err
        assert f"admission {state}" in result.out

    async with edge_queue(mesh) as fans:
        joined = await fans.JoinQueue(qpb.JoinQueueRequest(event_id=event_id, customer_id="fan-1"))
        assert joined.position.state == qpb.QUEUE_STATE_WAITING

    stats = await mesh.admin("stats", str(event_id))
    assert stats.code == 0, stats.err
    lines = stats.out.splitlines()
    assert "per customer: 4 seats held at once, 6 tickets bought and held in all" in lines, stats.out
    assert any(
        line.split()[:4] == ["A", "seated", "65.00", "EUR"] and line.split()[-4:] == ["32", "0", "0", "32"]
        for line in lines
    ), stats.out
    assert any(line.split() == ["total", "232", "0", "0", "232"] for line in lines), stats.out
    assert any(line.split() == ["admission", "open"] for line in lines), stats.out
    assert any(line.split() == ["waiting", "1"] for line in lines), stats.out

    revoked = await mesh.admin("revoke", str(event_id), "fan-1")
    assert revoked.code == 0, revoked.err
    assert revoked.out.strip() == f"event {event_id} customer fan-1: WAITING -> LEFT (revoked)"

    # Every change is in the audit log, as the operator's certificate names them.
    rows = [
        r
        for r in reversed(await audit.entries(mesh.rt.pool(), limit=1000))
        if str(event_id) in (r.request.get("event_id"), (r.request.get("config") or {}).get("event_id"))
    ]
    assert [r.method for r in rows] == [
        "CreateEvent",
        "CreateWaitingRoom",
        "LoadInventory",
        "LoadInventory",
        "PauseWaitingRoom",
        "ResumeWaitingRoom",
        "OpenWaitingRoom",
        "RevokeCustomer",
    ]
    operator = access.spiffe_id(TRUST_DOMAIN, NAMESPACE, access.OPERATOR)
    assert {(r.caller_identity, r.caller_role, r.outcome) for r in rows} == {(operator, access.OPERATOR, "OK")}


async def test_stats_show_each_price_in_its_currencys_decimals(mesh: Mesh) -> None:
    event_id = _new_event_id()
    # The floor is priced in yen, which has no minor unit: 3000 JPY, not 30.00.
    text = event_yaml(event_id).replace("{currency: EUR, amount_minor: 3000}", "{currency: JPY, amount_minor: 3000}")
    assert (await mesh.admin("event", "create", mesh.file("event.yaml", text))).code == 0
    stats = await mesh.admin("stats", str(event_id))
    assert stats.code == 0, stats.err
    prices = {
        line.split()[0]: line.split()[2:4] for line in stats.out.splitlines() if line.startswith(("A ", "FLOOR "))
    }
    assert prices == {"A": ["65.00", "EUR"], "FLOOR": ["3000", "JPY"]}, stats.out


async def test_stats_show_the_waiting_list(mesh: Mesh) -> None:
    event_id = _new_event_id()
    assert (await mesh.admin("event", "create", mesh.file("event.yaml", event_yaml(event_id)))).code == 0

    def figures(text: str) -> dict[str, str]:
        labels = ("fans waiting", "offers open", "offers taken", "offers lapsed or declined")
        return {label: line.split()[-1] for line in text.splitlines() for label in labels if line.startswith(label)}

    stats = await mesh.admin("stats", str(event_id))
    assert stats.code == 0, stats.err
    assert any(line.split() == ["waiting", "list"] for line in stats.out.splitlines()), stats.out
    empty = {"fans waiting": "0", "offers open": "0", "offers taken": "0", "offers lapsed or declined": "0"}
    assert figures(stats.out) == empty, stats.out
    # The list's entries as booking keeps them: three waiting, an offer
    # open, two bought, one lapsed, one who left while waiting.
    planted = [
        *[("WAITING", False)] * 3,
        ("OFFERED", True),
        *[("TAKEN", True)] * 2,
        ("LAPSED", True),
        ("LEFT", False),
    ]
    async with mesh.rt.pool().connection() as conn:
        for n, (state, offered) in enumerate(planted):
            await conn.execute(
                """
                INSERT INTO waitlist_entries (event_id, customer_id, section_id, quantity, state, joined_at,
                                              offer_hold_id, offered_at)
                VALUES (%s, %s, 'A', 1, %s, now(), %s, CASE WHEN %s THEN now() END)
                """,
                (event_id, f"stats-fan-{n}", state, str(uuid.uuid4()) if offered else None, offered),
            )
    stats = await mesh.admin("stats", str(event_id))
    assert stats.code == 0, stats.err
    assert figures(stats.out) == {
        "fans waiting": "3",
        "offers open": "1",
        "offers taken": "2",
        "offers lapsed or declined": "1",
    }, stats.out


async def test_a_bad_event_file_names_its_lines_and_creates_nothing(mesh: Mesh) -> None:
    event_id = _new_event_id()
    text = event_yaml(event_id)
    text = text.replace("kind: concert", "kind: opera").replace("capacity: 200", "capacity: lots")
    text = text.replace("max_active_shoppers: 100", "max_active_shopers: 100")
    result = await mesh.admin("event", "create", mesh.file("bad.yaml", text))
    assert result.code == 2, result
    problems = result.err.splitlines()
    path = str(mesh.tmp / "bad.yaml")
    assert f"{path}:4: event.kind must be one of concert, flight, not 'opera'" in problems
    assert any(p.startswith(f"{path}:18: sections[1].capacity must be a whole number") for p in problems), problems
    assert any(p.startswith(f"{path}:23: waiting_room: unknown key 'max_active_shopers'") for p in problems), problems
    assert problems[-1] == "nothing was sent"
    missing = await mesh.admin("stats", str(event_id))
    assert missing.code == 1 and "NOT_FOUND EVENT_NOT_FOUND" in missing.err


async def test_a_bad_seat_file_names_its_line_and_loads_nothing(mesh: Mesh) -> None:
    event_id = _new_event_id()
    assert (await mesh.admin("event", "create", mesh.file("event.yaml", event_yaml(event_id)))).code == 0
    seats = mesh.file("seats.csv", "A,1,1,10\nA,2,1,10\nA,3,one,10\nA,1,20,5\n")
    result = await mesh.admin("inventory", "load", str(event_id), seats)
    assert result.code == 2
    assert result.err.splitlines() == [
        f"{seats}:3: first_seat_number 'one' must be a whole number from 1 to 1,000,000",
        f"{seats}:4: row '1' of section 'A' is already on line 1",
        "nothing was sent",
    ]
    stats = await mesh.admin("stats", str(event_id))
    assert any(
        line.split()[:1] == ["A"] and line.split()[-4:] == ["0", "0", "0", "0"] for line in stats.out.splitlines()
    )


async def test_a_failed_call_prints_code_reason_and_message_and_exits_1(mesh: Mesh) -> None:
    event_id = _new_event_id()
    result = await mesh.admin("queue", "pause", str(event_id))
    assert result.code == 1
    assert result.err.startswith(f"error: queue pause of event {event_id} failed: NOT_FOUND EVENT_NOT_FOUND: ")
    revoke = await mesh.admin("revoke", str(event_id), "")
    assert revoke.code == 1 and "INVALID_ARGUMENT" in revoke.err and "customer_id" in revoke.err


async def test_only_the_operator_certificate_administers(mesh: Mesh) -> None:
    event_id = _new_event_id()
    path = mesh.file("event.yaml", event_yaml(event_id))
    as_edge = await mesh.admin("event", "create", path, files=mesh.stores.pki.files(access.EDGE))
    assert as_edge.code == 1 and "PERMISSION_DENIED" in as_edge.err, as_edge
    plaintext = await mesh.admin("event", "create", path, tls=False)
    assert plaintext.code == 1 and "UNAVAILABLE" in plaintext.err, plaintext
    missing = await mesh.admin("stats", str(event_id))
    assert missing.code == 1 and "EVENT_NOT_FOUND" in missing.err


async def test_usage_errors_exit_2(mesh: Mesh) -> None:
    assert (await mesh.admin()).code == 2
    assert (await mesh.admin("queue", "close", "5")).code == 2
    assert (await mesh.admin("stats", "zero")).code == 2
    operator = mesh.stores.pki.files(access.OPERATOR)
    partial = await mesh.admin("--ca-file", str(operator.ca), "stats", "5", tls=False)
    assert partial.code == 2 and "all three" in partial.err
    help_ = await mesh.admin("--help", tls=False)
    assert help_.code == 0 and "INSECURE" in help_.out
    create_help = await mesh.admin("event", "create", "--help", tls=False)
    assert create_help.code == 0 and "max_tickets_per_customer: 6" in create_help.out
    assert "bought and held together, whatever their" in create_help.out


def test_the_event_file_becomes_the_requests() -> None:
    spec = parse_event_file("event.yaml", textwrap.dedent(event_yaml(77)).lstrip())
    assert spec.event.event_id == 77 and [s.section_id for s in spec.event.sections] == ["A", "FLOOR"]
    assert spec.event.sections[1].capacity == 200 and spec.event.refund_policy.refund_percent == 50
    assert (spec.event.max_seats_per_customer, spec.event.max_tickets_per_customer) == (4, 6)
    assert spec.waiting_room is not None and spec.waiting_room.config.event_id == 77
    assert spec.waiting_room.config.admission_rate_per_second == 25
    assert spec.waiting_room.config.session_length.seconds == 600


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("", "f.yaml:1: the file is empty"),
        ("event: [\n", "f.yaml:2: not valid YAML"),
        ("event:\n  id: 5\nsections: []\n", "f.yaml:1: event: 'name' is required"),
        ("event:\n  id: -5\n", "f.yaml:2: event.id must be a whole number"),
        (
            "event:\n  id: 5\n  starts_at: 2026-07-01 20:00:00\n",
            "f.yaml:3: event.starts_at must be a date and time with its zone",
        ),
        ("sections:\n  - id: A B\n", "f.yaml:2: sections[0].id 'A B' must be 1 to 32"),
        (
            "event:\n  id: 5\n  max_tickets_per_customer: -1\n",
            "f.yaml:3: event.max_tickets_per_customer must be a whole number from 1 to 10,000, not '-1'",
        ),
    ],
)
def test_a_bad_event_file_names_the_line(text: str, problem: str) -> None:
    with pytest.raises(BadFile) as bad:
        parse_event_file("f.yaml", text)
    assert any(p.startswith(problem) for p in bad.value.problems), bad.value.problems


def test_the_seat_file_skips_its_header_and_comments() -> None:
    rows = parse_inventory_file("s.csv", "section,row,first_seat_number,seat_count\n# stalls\nA,K,1,30\n\nB,1,5,2\n")
    assert [(line, r.section_id, r.row_label, r.first_seat_number, r.seat_count) for line, r in rows] == [
        (3, "A", "K", 1, 30),
        (5, "B", "1", 5, 2),
    ]
    with pytest.raises(BadFile, match=r"s\.csv:1: no seat rows"):
        parse_inventory_file("s.csv", "section,row,first_seat_number,seat_count\n")
    with pytest.raises(BadFile, match=r"s\.csv:2: expected 4 fields"):
        parse_inventory_file("s.csv", "A,1,1,1\nA,2,1\n")


def test_on_a_terminal_the_progress_is_one_bar_redrawn_in_place() -> None:
    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    out = Terminal()
    progress = Progress(out, 40)
    progress.update(10)
    progress.update(40)
    assert out.getvalue() == (f"\r[{'#' * 8:<30}] 10/40 seats (25%)" + f"\r[{'#' * 30}] 40/40 seats (100%)\n")


# The new waiting-room settings, as the event file's waiting room takes them
# (base rate 25).
NEW_SETTINGS = """
          presence_grace_seconds: 600
          safety_net: true
          admission_rate_min_per_second: 10
          admission_rate_max_per_second: 40"""


def _row(out: str, name: str) -> str:
    """The value of a row of the stats' waiting-room table."""
    for line in out.splitlines():
        if line.startswith(f"{name}  "):
            return line.removeprefix(name).strip()
    raise AssertionError(f"no row {name!r} in:\n{out}")


async def test_the_new_waiting_room_settings_round_trip_through_file_update_and_stats(mesh: Mesh) -> None:
    event_id = _new_event_id()
    path = mesh.file("event.yaml", event_yaml(event_id, room_extra=NEW_SETTINGS))
    created = await mesh.admin("event", "create", path)
    assert created.code == 0, created.err
    assert "presence grace 10m, safety net on, rate adapts from 10/s to 40/s" in created.out, created.out
    room = await stored_room(mesh, event_id)
    assert room.presence_grace.seconds == 600 and room.safety_net is True
    assert (room.admission_rate_min_per_second, room.admission_rate_max_per_second) == (10, 40)

    stats = await mesh.admin("stats", str(event_id))
    assert stats.code == 0, stats.err
    assert _row(stats.out, "presence grace") == "10m"
    assert _row(stats.out, "safety net") == "on"
    assert _row(stats.out, "rate bounds") == "10/s to 40/s"

    # Each setting alone; the others, and the rest of the room, stay as they were.
    steps = [
        (["--presence-grace", "2h"], (7200, True, 10, 40)),
        (["--safety-net", "off"], (7200, False, 10, 40)),
        (["--rate-min", "0"], (7200, False, 0, 40)),
        (["--rate-max", "25"], (7200, False, 0, 25)),
        (["--presence-grace", "90", "--safety-net", "on", "--rate-min", "5", "--rate-max", "0"], (90, True, 5, 0)),
    ]
    for flags, expected in steps:
        updated = await mesh.admin("queue", "update", str(event_id), *flags)
        assert updated.code == 0, (flags, updated.err)
        room = await stored_room(mesh, event_id)
        got = (
            room.presence_grace.seconds,
            room.safety_net,
            room.admission_rate_min_per_second,
            room.admission_rate_max_per_second,
        )
        assert got == expected, flags
        assert (room.admission_rate_per_second, room.max_active_shoppers, room.session_length.seconds) == (25, 100, 600)
        assert not room.paused
    assert "presence grace 1m 30s, safety net on, rate adapts from 5/s to the base rate" in updated.out, updated.out
    stats = await mesh.admin("stats", str(event_id))
    assert _row(stats.out, "rate bounds") == "5/s to the base rate"
    assert _row(stats.out, "presence grace") == "1m 30s"

    # A file without the settings gets the service's defaults.
    plain_id = _new_event_id()
    assert (await mesh.admin("event", "create", mesh.file("plain.yaml", event_yaml(plain_id)))).code == 0
    plain = await stored_room(mesh, plain_id)
    assert (plain.presence_grace.seconds, plain.safety_net) == (300, False)
    assert (plain.admission_rate_min_per_second, plain.admission_rate_max_per_second) == (0, 0)

    # Every update is audited as the operator's UpdateWaitingRoom.
    rows = [
        r
        for r in await audit.entries(mesh.rt.pool(), limit=1000)
        if (r.request.get("config") or {}).get("event_id") == str(event_id)
    ]
    assert sorted(r.method for r in rows) == ["CreateWaitingRoom", *["UpdateWaitingRoom"] * len(steps)]
    assert {r.outcome for r in rows} == {"OK"}


async def test_bad_new_settings_exit_2_name_their_lines_and_create_nothing(mesh: Mesh) -> None:
    event_id = _new_event_id()
    bad = """
          presence_grace_seconds: 59
          safety_net: maybe
          admission_rate_min_per_second: 26
          admission_rate_max_per_second: 24"""
    path = mesh.file("bad.yaml", event_yaml(event_id, room_extra=bad))
    result = await mesh.admin("event", "create", path)
    assert result.code == 2, result
    assert result.err.splitlines()[-1] == "nothing was sent"
    problems = set(result.err.splitlines())
    assert {
        f"{path}:25: waiting_room.presence_grace_seconds must be a whole number from 60 to 86,400, not '59'",
        f"{path}:26: waiting_room.safety_net must be true or false, not 'maybe'",
        f"{path}:27: waiting_room.admission_rate_min_per_second (26) must not be above admission_rate_per_second (25)",
        f"{path}:28: waiting_room.admission_rate_max_per_second (24) must not be below admission_rate_per_second (25)",
    } <= problems, result.err
    missing = await mesh.admin("stats", str(event_id))
    assert missing.code == 1 and "NOT_FOUND EVENT_NOT_FOUND" in missing.err
    async with operator_queue(mesh) as admin:
        with pytest.raises(grpc.aio.AioRpcError) as no_room:
            await admin.GetWaitingRoom(apb.GetWaitingRoomRequest(event_id=event_id))
    assert no_room.value.code() == grpc.StatusCode.NOT_FOUND

    # A bound out of range in the file, alone, is refused the same way.
    over = mesh.file("over.yaml", event_yaml(event_id, room_extra="\n          admission_rate_max_per_second: 100001"))
    refused = await mesh.admin("event", "create", over)
    assert refused.code == 2 and "admission_rate_max_per_second must be a whole number from 0 to 100,000" in refused.err
    assert (await mesh.admin("stats", str(event_id))).code == 1


async def test_a_bad_update_changes_nothing(mesh: Mesh) -> None:
    event_id = _new_event_id()
    assert (
        await mesh.admin("event", "create", mesh.file("e.yaml", event_yaml(event_id, room_extra=NEW_SETTINGS)))
    ).code == 0
    before = await stored_room(mesh, event_id)
    for flags in (
        [],
        ["--presence-grace", "59s"],
        ["--presence-grace", "25h"],
        ["--presence-grace", "5 minutes"],
        ["--safety-net", "yes"],
        ["--rate-min", "-1"],
        ["--rate-max", "100001"],
    ):
        result = await mesh.admin("queue", "update", str(event_id), *flags)
        assert result.code == 2, (flags, result)
    # What only the service knows (the base rate is 25): exit 1 with the field.
    for flag, value, field in (("--rate-min", "26", "min"), ("--rate-max", "24", "max")):
        result = await mesh.admin("queue", "update", str(event_id), flag, value)
        assert result.code == 1, result
        assert "INVALID_ARGUMENT" in result.err and f"field=config.admission_rate_{field}_per_second" in result.err
    assert await stored_room(mesh, event_id) == before
    unknown = await mesh.admin("queue", "update", str(_new_event_id()), "--safety-net", "on")
    assert unknown.code == 1 and "NOT_FOUND EVENT_NOT_FOUND" in unknown.err


async def _position(mesh: Mesh, event_id: int, fan: str) -> Any:
    async with edge_queue(mesh) as fans:
        reply = await fans.GetQueuePosition(qpb.GetQueuePositionRequest(event_id=event_id, customer_id=fan))
    return reply.position


async def _tick_until_admitted(mesh: Mesh, event_id: int, fan: str) -> None:
    """Admit ticks until ``fan`` is admitted (a bound for a hung test)."""
    await mesh.queue.admitter.refresh()
    async with asyncio.timeout(20):
        while (await _position(mesh, event_id, fan)).state != qpb.QUEUE_STATE_ADMITTED:
            await mesh.queue.admitter.tick_event(event_id, 1)
            await asyncio.sleep(0.05)


async def test_revoke_shadow_answers_shadowed_and_the_fan_is_passed_over_until_unshadowed(mesh: Mesh) -> None:
    event_id = _new_event_id()
    assert (await mesh.admin("event", "create", mesh.file("event.yaml", event_yaml(event_id)))).code == 0
    assert (await mesh.admin("queue", "open", str(event_id))).code == 0
    async with edge_queue(mesh) as fans:
        for fan in ("fan-1", "fan-2"):
            await fans.JoinQueue(qpb.JoinQueueRequest(event_id=event_id, customer_id=fan))

    shadowed = await mesh.admin("revoke", str(event_id), "fan-1", "--shadow")
    assert shadowed.code == 0, shadowed.err
    assert shadowed.out.strip() == f"event {event_id} customer fan-1: WAITING, shadowed (changed)"
    again = await mesh.admin("revoke", str(event_id), "fan-1", "--shadow")
    assert again.out.strip() == f"event {event_id} customer fan-1: WAITING, shadowed (unchanged)"

    # Admission passes fan-1 over: fan-2, behind them, goes in.
    await _tick_until_admitted(mesh, event_id, "fan-2")
    assert (await _position(mesh, event_id, "fan-1")).state == qpb.QUEUE_STATE_WAITING

    unshadowed = await mesh.admin("revoke", str(event_id), "fan-1", "--unshadow")
    assert unshadowed.code == 0, unshadowed.err
    assert unshadowed.out.strip() == f"event {event_id} customer fan-1: WAITING, not shadowed (changed)"
    await _tick_until_admitted(mesh, event_id, "fan-1")

    actions = [
        r.request.get("action")
        for r in reversed(await audit.entries(mesh.rt.pool(), limit=1000))
        if r.method == "RevokeCustomer" and r.request.get("event_id") == str(event_id)
    ]
    assert actions == ["REVOKE_ACTION_SHADOW", "REVOKE_ACTION_SHADOW", "REVOKE_ACTION_UNSHADOW"]


async def test_stats_show_the_admitters_target_rate_and_why(mesh: Mesh) -> None:
    event_id = _new_event_id()
    path = mesh.file("event.yaml", event_yaml(event_id, room_extra=NEW_SETTINGS))
    assert (await mesh.admin("event", "create", path)).code == 0
    assert (await mesh.admin("queue", "open", str(event_id))).code == 0
    before = await mesh.admin("stats", str(event_id))
    assert _row(before.out, "target rate") == "25.0/s (the base rate)"

    # Booking's holds take 2 s at p99 (the threshold is 1 s): the base rate
    # 25/s is halved, within the room's least rate, 10/s.
    slow = BookingHealth(holds=100, errors=0, p50_ms=200.0, p99_ms=2000.0)
    admitter = mesh.queue.admitter
    await admitter.refresh()
    await admitter.tick_event(event_id, 1, health=slow)  # decides the next tick's target
    await admitter.tick_event(event_id, 1, health=slow)  # runs at it, and publishes it
    stats = await mesh.admin("stats", str(event_id))
    assert stats.code == 0, stats.err
    assert _row(stats.out, "target rate") == "12.5/s (lowered: booking is slow)"

    # Slower still: held at the least rate.
    slower = BookingHealth(holds=100, errors=0, p50_ms=200.0, p99_ms=10_000.0)
    await admitter.tick_event(event_id, 1, health=slower)
    await admitter.tick_event(event_id, 1, health=slower)
    bounded = await mesh.admin("stats", str(event_id))
    assert _row(bounded.out, "target rate") == "10.0/s (held at the room's bound)"


async def test_new_usage_errors_exit_2(mesh: Mesh) -> None:
    assert (await mesh.admin("revoke", "5", "fan", "--shadow", "--unshadow")).code == 2
    assert (await mesh.admin("queue", "update", "5")).code == 2
    assert (await mesh.admin("queue", "update", "zero", "--safety-net", "on")).code == 2
    create_help = await mesh.admin("event", "create", "--help", tls=False)
    for key in (
        "presence_grace_seconds",
        "safety_net",
        "admission_rate_min_per_second",
        "admission_rate_max_per_second",
    ):
        assert key in create_help.out, key
    update_help = await mesh.admin("queue", "update", "--help", tls=False)
    assert update_help.code == 0
    for flag in ("--presence-grace", "--safety-net", "--rate-min", "--rate-max"):
        assert flag in update_help.out, flag


def test_durations_read_as_operators_write_them() -> None:
    assert [duration_text(s) for s in (0, 59, 60, 90, 300, 3600, 5400, 86_400)] == [
        "0s",
        "59s",
        "1m",
        "1m 30s",
        "5m",
        "1h",
        "1h 30m",
        "24h",
    ]


def test_the_new_settings_become_the_waiting_room_request() -> None:
    spec = parse_event_file("event.yaml", textwrap.dedent(event_yaml(77, room_extra=NEW_SETTINGS)).lstrip())
    assert spec.waiting_room is not None
    room = spec.waiting_room.config
    assert room.HasField("presence_grace") and room.presence_grace.seconds == 600
    assert room.safety_net is True
    assert (room.admission_rate_min_per_second, room.admission_rate_max_per_second) == (10, 40)
    unset = parse_event_file("event.yaml", textwrap.dedent(event_yaml(78)).lstrip())
    assert unset.waiting_room is not None and not unset.waiting_room.config.HasField("presence_grace")
    # Without a base rate, the bounds are checked against the service's default (50).
    text = "waiting_room:\n  opens_at: 2026-06-01T09:00:00Z\n  admission_rate_min_per_second: 51\n"
    with pytest.raises(BadFile) as bad:
        parse_event_file(
            "f.yaml",
            "event: {id: 5, name: n, kind: concert, starts_at: 2026-07-01T20:00:00Z}\n"
            "sections: [{id: A, kind: seated, price: {currency: EUR, amount_minor: 1}}]\n" + text,
        )
    assert bad.value.problems == [
        "f.yaml:5: waiting_room.admission_rate_min_per_second (51) must not be above admission_rate_per_second (50)"
    ]


async def test_a_closed_stdout_ends_the_command_quietly_after_its_work(mesh: Mesh) -> None:
    """``boxoffice admin event create FILE | head -1``: the reader is gone
    before the command prints; the event is created all the same, and the
    command ends with the shell's SIGPIPE code and no traceback."""
    event_id = _new_event_id()
    path = mesh.file("event.yaml", event_yaml(event_id))
    operator = mesh.stores.pki.files(access.OPERATOR)
    env = {
        **os.environ,
        "BOXOFFICE_ADMIN_QUEUE_ADDR": mesh.queue_addr,
        "BOXOFFICE_ADMIN_BOOKING_ADDR": mesh.booking_addr,
        "BOXOFFICE_TLS_CA_FILE": str(operator.ca),
        "BOXOFFICE_TLS_CERT_FILE": str(operator.cert),
        "BOXOFFICE_TLS_KEY_FILE": str(operator.key),
    }
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "boxoffice_cli",
            "admin",
            "event",
            "create",
            path,
            env=env,
            stdout=write_end,
            stderr=asyncio.subprocess.PIPE,
        )
    finally:
        os.close(write_end)
    _, err = await asyncio.wait_for(proc.communicate(), timeout=60)
    assert (proc.returncode, err.decode()) == (STDOUT_CLOSED, "")
    assert (await stored_room(mesh, event_id)).max_active_shoppers == 100
