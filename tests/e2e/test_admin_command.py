"""`boxoffice admin` end to end: the command runs as its own process against
real QueueService and BookingService servers (mTLS, the operator's
certificate), creates an event and its waiting room from YAML, loads seats
from CSV in chunks, pauses, resumes and opens admission, prints stats (the
waiting list's figures too) and revokes a fan; bad files and bad calls end
with their exit codes and change nothing. The waiting room's own settings
are test_admin_room_settings.py's."""

from __future__ import annotations

import asyncio
import io
import os
import sys
import textwrap
import uuid

import pytest

from boxoffice import access, audit
from boxoffice_cli.admin import Progress
from boxoffice_cli.admin_files import BadFile, parse_event_file, parse_inventory_file
from boxoffice_cli.pipes import STDOUT_CLOSED
from gen.boxoffice.queue.v1 import queue_service_pb2 as qpb
from tests.e2e.admin_mesh import Mesh, edge_queue, event_yaml, mesh, new_event_id, stored_room
from tests.support import NAMESPACE, TRUST_DOMAIN

__all__ = ["mesh"]  # the fixture


async def test_an_operator_runs_an_on_sale_from_the_command(mesh: Mesh) -> None:
    event_id = new_event_id()
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
    event_id = new_event_id()
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
    event_id = new_event_id()
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
    try:
        stats = await mesh.admin("stats", str(event_id))
    finally:
        # Planted entries go (booking's offer pass, which other tests of this
        # database run, takes only its own).
        async with mesh.rt.pool().connection() as conn:
            await conn.execute("DELETE FROM waitlist_entries WHERE event_id = %s", (event_id,))
    assert stats.code == 0, stats.err
    assert figures(stats.out) == {
        "fans waiting": "3",
        "offers open": "1",
        "offers taken": "2",
        "offers lapsed or declined": "1",
    }, stats.out


async def test_a_bad_event_file_names_its_lines_and_creates_nothing(mesh: Mesh) -> None:
    event_id = new_event_id()
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
    event_id = new_event_id()
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
    event_id = new_event_id()
    result = await mesh.admin("queue", "pause", str(event_id))
    assert result.code == 1
    assert result.err.startswith(f"error: queue pause of event {event_id} failed: NOT_FOUND EVENT_NOT_FOUND: ")
    revoke = await mesh.admin("revoke", str(event_id), "")
    assert revoke.code == 1 and "INVALID_ARGUMENT" in revoke.err and "customer_id" in revoke.err


async def test_only_the_operator_certificate_administers(mesh: Mesh) -> None:
    event_id = new_event_id()
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


async def test_a_closed_stdout_ends_the_command_quietly_after_its_work(mesh: Mesh) -> None:
    """``boxoffice admin event create FILE | head -1``: the reader is gone
    before the command prints; the event is created all the same, and the
    command ends with the shell's SIGPIPE code and no traceback."""
    event_id = new_event_id()
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
