"""Offline devices against a real Postgres: uploaded scans apply in scan-time
order, an offline admission of a ticket someone admitted first is a recorded
conflict (once, however often uploaded), and the door list gives every
ticket, then the changes from a cursor."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import psycopg

from boxoffice import db
from boxoffice_cli import report as report_cli
from checkin_svc.model import Scan, ScanResult
from tests.checkin.harness import Door, new_event
from tests.support import Stores


async def _conflicts(door: Door, ticket_id: str) -> list[tuple[str, str]]:
    async with db.transaction(door.pool) as conn:
        cur = await conn.execute(
            "SELECT device_id, first_device_id FROM checkin_conflicts WHERE ticket_id = %s", (ticket_id,)
        )
        return [(str(a), str(b)) for a, b in await cur.fetchall()]


async def test_an_offline_and_an_online_admission_are_one_checkin_and_one_conflict(door: Door) -> None:
    event = new_event()
    ticket_id, code = await door.ticket(event)
    now = datetime.now(UTC)
    # The offline phone admitted the ticket first, but the online gate's scan reached us first.
    online = await door.handler.scan(Scan(event, code, "north-1", "online", now))
    assert online.result is ScanResult.ADMITTED
    offline = Scan(event, code, "south-1", "offline", now - timedelta(seconds=20))
    for _ in range(2):  # an upload sent twice records nothing new
        (uploaded,) = await door.handler.upload([offline])
        assert uploaded.conflict and uploaded.outcome.result is ScanResult.ALREADY_CHECKED_IN
        assert uploaded.outcome.first_checkin is not None
        assert uploaded.outcome.first_checkin.device_id == "online"
        assert await _conflicts(door, ticket_id) == [("offline", "online")]
        counted = [
            s.value
            for m in door.metrics.conflicts.collect()
            for s in m.samples
            if s.name.endswith("_total") and s.labels["event_id"] == str(event)
        ]
        assert counted == [1.0]  # the upload sent again counts nothing more
    async with db.transaction(door.pool) as conn:
        cur = await conn.execute("SELECT count(*) FROM checkins WHERE ticket_id = %s", (ticket_id,))
        assert await cur.fetchone() == (1,)


async def test_uploads_apply_in_scan_time_order_and_a_resent_scan_is_no_conflict(door: Door) -> None:
    event = new_event()
    ticket_id, code = await door.ticket(event)
    now = datetime.now(UTC)
    # Two phones admitted one ticket offline; one uploads both scans (out of order).
    late = Scan(event, code, "east-1", "phone-b", now - timedelta(seconds=5))
    early = Scan(event, code, "east-2", "phone-a", now - timedelta(seconds=50))
    answers = await door.handler.upload([late, early])
    assert [(a.outcome.result, a.conflict) for a in answers] == [
        (ScanResult.ALREADY_CHECKED_IN, True),
        (ScanResult.ADMITTED, False),
    ]
    assert answers[1].outcome.first_checkin is not None
    assert answers[1].outcome.first_checkin.checked_in_at == early.scanned_at
    assert await _conflicts(door, ticket_id) == [("phone-b", "phone-a")]
    # phone-a uploads its own scan again: its own check-in, not a conflict.
    (again,) = await door.handler.upload([early])
    assert (again.outcome.result, again.conflict) == (ScanResult.ALREADY_CHECKED_IN, False)
    assert len(await _conflicts(door, ticket_id)) == 1


async def test_the_door_list_then_its_changes_from_a_cursor(door: Door) -> None:
    event = new_event()
    kept, _ = await door.ticket(event, seat="row A, seat 1")
    voided, _ = await door.ticket(event, seat="row A, seat 2")
    entered, entered_code = await door.ticket(event, seat="row A, seat 3")
    await door.ticket(new_event())  # another event's: never listed
    full = await door.handler.door_list(event, None)
    assert sorted(e.ticket.ticket_id for e in full.entries) == sorted([kept, voided, entered])
    assert not any(e.void or e.first_checkin for e in full.entries)
    # Later: one ticket is voided, one checked in.
    async with db.transaction(door.pool) as conn:
        await conn.execute("UPDATE tickets SET voided_at = now() WHERE ticket_id = %s", (voided,))
    assert (await door.handler.scan(door.scan(event, entered_code))).result is ScanResult.ADMITTED
    # What the cursor reaches back over is listed again (as states, harmless); a
    # cursor after every change lists only those changed after it.
    changes = await door.handler.door_list(event, full.cursor)
    by_id = {e.ticket.ticket_id: e for e in changes.entries}
    first = by_id[entered].first_checkin
    assert by_id[voided].void and first is not None and first.gate_id == "north-1" and by_id[entered].inside
    # A fan fetching their rotating code's secret is a change the devices learn of.
    secret = await door.handler.ticket_secret(kept)
    fetched = await door.handler.door_list(event, changes.cursor)
    assert {e.ticket.ticket_id: e.secret for e in fetched.entries}[kept] == secret
    quiet = await door.handler.door_list(event, datetime.now(UTC) + timedelta(seconds=1))
    assert quiet.entries == ()


async def test_the_reports_door_figures_count_checkins_no_shows_and_conflicts(door: Door, stores: Stores) -> None:
    event = new_event()
    tickets = [await door.ticket(event) for _ in range(4)]
    now = datetime.now(UTC)
    await door.handler.scan(Scan(event, tickets[0][1], "north-1", "online", now))
    await door.handler.upload([Scan(event, tickets[0][1], "south-1", "offline", now - timedelta(seconds=9))])
    await door.handler.scan(Scan(event, tickets[1][1], "north-1", "online", now))
    async with db.transaction(door.pool) as conn:
        await conn.execute(
            "UPDATE tickets SET voided_at = now() WHERE ticket_id = ANY(%s::uuid[])", ([tickets[1][0], tickets[2][0]],)
        )
    with psycopg.connect(stores.database_url) as conn:
        figures = report_cli._door(conn, report_cli.Event(event, now))
    assert figures == {
        "valid_tickets": 2,
        "checked_in": 1,
        "no_shows": 1,
        "checked_in_then_voided": 1,
        "conflicts": 1,
        "checked_in_by_gate": [{"gate": "north-1", "checked_in": 1}],
    }


async def test_the_reports_door_figures_per_gate_add_up_to_the_checked_in(door: Door, stores: Stores) -> None:
    """Each valid ticket counts once, at the gate of its first check-in: an
    offline gate's later admission of it is a conflict, not a second count,
    and a ticket voided after its check-in counts at no gate."""
    event = new_event()
    tickets = [await door.ticket(event) for _ in range(5)]
    now = datetime.now(UTC)
    for ticket in (tickets[0], tickets[1], tickets[3]):
        await door.handler.scan(Scan(event, ticket[1], "north-1", "online", now))
    await door.handler.upload(
        [
            Scan(event, tickets[2][1], "south-1", "offline", now - timedelta(seconds=30)),
            Scan(event, tickets[0][1], "south-1", "offline", now + timedelta(seconds=5)),
        ]
    )
    async with db.transaction(door.pool) as conn:
        await conn.execute("UPDATE tickets SET voided_at = now() WHERE ticket_id = %s", (tickets[3][0],))
    with psycopg.connect(stores.database_url) as conn:
        figures = report_cli._door(conn, report_cli.Event(event, now))
    assert figures == {
        "valid_tickets": 4,
        "checked_in": 3,
        "no_shows": 1,
        "checked_in_then_voided": 1,
        "conflicts": 1,
        "checked_in_by_gate": [{"gate": "north-1", "checked_in": 2}, {"gate": "south-1", "checked_in": 1}],
    }
    assert sum(g["checked_in"] for g in figures["checked_in_by_gate"]) == figures["checked_in"]
